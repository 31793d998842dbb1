"""One streaming pass over a trajectory: per-molecule unwrapped centres of mass and neighbour data.

Every later estimator (self-diffusion, Onsager transport, RDF, coordination, association) works from the
:class:`ReducedTrajectory` this module produces, so the atoms × frames trajectory is read exactly once and
memory grows with molecules × frames.

Per frame the pass

1. computes float64 centres of mass of whole molecules: for molecules with consecutive atoms in an
   orthorhombic box (every GROMACS topology here), one sparse mass-weight product of the wrapped positions
   plus, for each consecutive-atom vector that crosses the boundary (mdrun puts every atom in the box on
   its own), the box shift times the mass fraction of the molecule's later atoms; otherwise each atom's
   minimum-image vector to its molecule's first atom makes the molecule whole (valid for molecules shorter
   than half the box, which holds for every species of this project);
2. unwraps the centres of mass with the *displacement* scheme that is correct under NPT box changes
   (von Bülow, Bullerjahn & Hummer, J. Chem. Phys. 153, 021101 (2020), doi:10.1063/5.0008316):
   ``r_u(t) = r_u(t-1) + [r_w(t) - r_w(t-1)]_MI(h_t)`` where ``[·]_MI(h_t)`` is the minimum image in the
   box ``h_t`` of the current frame (fractional coordinates, so triclinic boxes work). A particle at rest
   in a fluctuating box has zero displacement, and no box-scaling jump is ever added to a displacement;
3. accumulates pair histograms between centre atoms (cations, e.g. Li) and every registered site channel
   (e.g. O(FSI), N(FSI), O(DMC carbonyl), O(TTE ether)) for g(r), and keeps, for every centre molecule
   and partner molecule closer than ``r_store_nm``, the minimum centre–site distance per channel; this is
   the neighbour table from which coordination numbers at any cutoff ≤ ``r_store_nm`` and the contact
   graphs of :mod:`mdbench.analysis.association` are computed without a second pass.

Frames are read in chunks and each chunk is reduced with whole-array operations. A plain MDAnalysis XTC
reader's frames are decoded by MDAnalysis' own ``XTCFile.read_direct_x`` straight into the chunk buffer
(nm, no Timestep copy or Å conversion); any other reader is iterated as usual. Step 3 can run on every
k-th frame only (``structure_max_frames``; the ``structure_view`` of the result holds those frames),
steps 1–2 always run on every frame.

On a multi-core machine the pass is split into contiguous ranges of frames, one per forked worker process
(``workers``): each opens its own reader, writes its frames' rows into arrays in shared memory and
unwraps from its range's first frame; the parent then shifts every later range by the displacement step
between the last frame of the previous range and its first frame (step 2 across the seam), so the result
equals the one-process pass to float rounding.

Units: nm, ps, amu, e (GROMACS units); MDAnalysis's Å (reader path) are converted on the way.
"""

from __future__ import annotations

import itertools
import logging
import mmap
import multiprocessing
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from mdbench.errors import InputError

log = logging.getLogger(__name__)

#: MDAnalysis length unit (Å) → nm.
A_TO_NM = 0.1

#: Site labels and their meaning (documented in the registration of atom selections).
SITE_LABELS = {
    "O_carbonyl": "oxygen with one bonded heavy atom, a carbon (C=O), e.g. DMC carbonyl O",
    "O_ether": "oxygen bonded to two carbons (C–O–C), e.g. DMC ester O, TTE ether O",
    "O": "any other oxygen (e.g. FSI sulfonyl O, water O)",
    "N": "nitrogen (e.g. FSI N)",
    "ion": "the atom of a single-atom ion",
}


@dataclass
class Channel:
    """One site channel: the sites of label ``label`` on molecules of species ``species``.

    Attributes
    ----------
    name : str
        ``"<species>:<label>"``, e.g. ``"FSI:O"``.
    species, label : str
        Residue name of the partner species and the site label (see :data:`SITE_LABELS`).
    atom_indices : numpy.ndarray
        0-based atom indices of the sites.
    """

    name: str
    species: str
    label: str
    atom_indices: np.ndarray


@dataclass
class ReducedTrajectory:
    """What the estimators need from a trajectory, in GROMACS units and float64.

    Attributes
    ----------
    time_ps : ndarray (F,)
        Frame times [ps].
    box_nm : ndarray (F, 3, 3)
        Box matrices, rows are box vectors [nm].
    volume_nm3 : ndarray (F,)
        Box volume per frame [nm³].
    com_nm : ndarray (F, M, 3)
        Unwrapped centres of mass of the M molecules [nm] (lab frame; subtract ``system_com_nm`` for the
        barycentric frame).
    system_com_nm : ndarray (F, 3)
        Total-mass-weighted centre of all atoms, from the unwrapped molecular centres [nm].
    mol_species : ndarray (M,) of str
        Species (residue name) of each molecule.
    mol_mass_amu, mol_charge_e : ndarray (M,)
        Mass [amu] and net charge [e] of each molecule (charges as in the topology, e.g. scaled ±0.72).
    species : list of str
        Species in order of first appearance.
    centre_species : list of str
        Species whose atoms are the centres of the neighbour data (cations).
    centre_mol : ndarray (C,)
        Molecule index of each centre atom.
    channels : list of Channel
        Site channels of the neighbour data.
    rdf_edges_nm : ndarray (B+1,)
        Histogram bin edges [nm].
    rdf_counts : dict[str, ndarray (F, B) int32]
        Pair counts per frame and bin for each channel name (plus ``"<centre>:<centre>"`` for the
        centre–centre channel, each unordered pair counted twice). Per frame so that any frame window
        (whole interval, blocks) can be summed without a second pass.
    rdf_n_pairs : dict[str, float]
        Number of distinct (centre, site) pairs per channel (N_A·N_B, or N_A(N_A−1) for centre–centre).
    contacts : dict[str, ndarray]
        Flat neighbour table: ``frame``, ``centre`` (index into ``centre_mol``), ``partner`` (molecule index),
        ``channel`` (index into ``channels``), ``dmin_nm`` (minimum centre–site distance), for every
        centre/partner-molecule/channel triple closer than ``r_store_nm``.
    r_store_nm : float
        Largest distance kept in ``contacts`` [nm].
    source : dict
        Provenance: file paths, atom count, frame range, float dtype of the input.
    """

    time_ps: np.ndarray
    box_nm: np.ndarray
    volume_nm3: np.ndarray
    com_nm: np.ndarray
    system_com_nm: np.ndarray
    mol_species: np.ndarray
    mol_mass_amu: np.ndarray
    mol_charge_e: np.ndarray
    species: list[str]
    centre_species: list[str]
    centre_mol: np.ndarray
    channels: list[Channel]
    rdf_edges_nm: np.ndarray
    rdf_counts: dict[str, np.ndarray]
    rdf_n_pairs: dict[str, float]
    contacts: dict[str, np.ndarray]
    r_store_nm: float
    source: dict[str, Any] = field(default_factory=dict)
    _derived: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def n_frames(self) -> int:
        """Number of frames F."""
        return int(self.time_ps.shape[0])

    def species_mask(self, species: str) -> np.ndarray:
        """Boolean mask over molecules of one species."""
        return self.mol_species == species

    def species_com_nm(self, species: str) -> np.ndarray:
        """Unwrapped COMs of one species' molecules, (F, N_s, 3) [nm].

        A view (no copy of the frames × molecules array) when the species' molecules are consecutive, as
        in every GROMACS topology built from ``[ molecules ]`` blocks; a copy otherwise.
        """
        idx = np.flatnonzero(self.species_mask(species))
        if idx.size and idx[-1] - idx[0] + 1 == idx.size:
            return self.com_nm[:, idx[0]:idx[-1] + 1]
        return self.com_nm[:, idx]

    def contact_pair_key(self) -> np.ndarray:
        """(frame, centre, partner molecule) of every contact row as one int64 key, ascending in the rows' order
        when the rows are sorted as the reduction writes them (computed once; estimators filter it by
        channel and distance)."""
        if "contact_pair_key" not in self._derived:
            ct, n_c, n_mol = self.contacts, self.centre_mol.size, self.mol_species.size
            key = ct["frame"].astype(np.int64)
            key *= n_c
            key += ct["centre"]
            key *= n_mol
            key += ct["partner"]
            self._derived["contact_pair_key"] = key
        return self._derived["contact_pair_key"]

    def channel_rows(self, code: int) -> np.ndarray:
        """Positions of the contact rows of site channel ``code`` (index into :attr:`channels`), ascending
        (computed once per channel: an estimator of one channel then reads a fifth of the table, not all)."""
        name = f"channel_rows:{int(code)}"
        if name not in self._derived:
            self._derived[name] = np.flatnonzero(self.contacts["channel"] == code)
        return self._derived[name]

    def subset(self, frames: slice | np.ndarray) -> ReducedTrajectory:
        """A new ReducedTrajectory restricted to the frames ``frames`` (a slice or index array)."""
        idx = np.arange(self.n_frames)[frames]
        keep = np.isin(self.contacts["frame"], idx)
        remap = np.full(self.n_frames, -1, dtype=np.int64)
        remap[idx] = np.arange(idx.size)
        contacts = {k: v[keep] for k, v in self.contacts.items()}
        contacts["frame"] = remap[contacts["frame"]]
        return ReducedTrajectory(
            time_ps=self.time_ps[idx], box_nm=self.box_nm[idx], volume_nm3=self.volume_nm3[idx],
            com_nm=self.com_nm[idx], system_com_nm=self.system_com_nm[idx], mol_species=self.mol_species,
            mol_mass_amu=self.mol_mass_amu, mol_charge_e=self.mol_charge_e, species=self.species,
            centre_species=self.centre_species, centre_mol=self.centre_mol, channels=self.channels,
            rdf_edges_nm=self.rdf_edges_nm, rdf_counts={k: v[idx] for k, v in self.rdf_counts.items()},
            rdf_n_pairs=self.rdf_n_pairs, contacts=contacts,
            r_store_nm=self.r_store_nm, source=dict(self.source, subset=[int(idx[0]), int(idx[-1]) + 1],
                                                    structure_every=1 if self.structure_every == 1 else -1),
        )

    @property
    def structure_every(self) -> int:
        """Stride k of the frames that carry pair histograms and contacts (1: every frame; -1: a frame subset
        of a strided reduction, whose structure frames are irregular)."""
        return int(self.source.get("structure_every", 1))

    def structure_view(self) -> ReducedTrajectory:
        """The structure frames only (every ``structure_every``-th frame); ``self`` when that is every frame.

        RDF, coordination and association estimators take this view, so their frame averages and blocks
        run over frames that carry neighbour data.
        """
        if self.structure_every == 1:
            return self
        if self.structure_every < 1:
            raise ValueError("frame subset of a strided reduction: take structure_view() before subset()")
        view = self.subset(np.arange(0, self.n_frames, self.structure_every))
        view.source["structure_every"] = 1
        view.source["structure_stride_of_parent"] = self.structure_every
        return view


def box_matrix_nm(dimensions: np.ndarray, unit_nm: float = A_TO_NM) -> np.ndarray:
    """Box matrix (rows = box vectors) [nm] from MDAnalysis ``[a, b, c, α, β, γ]`` (``unit_nm`` nm per
    length unit: Å by default; degrees)."""
    from MDAnalysis.lib.mdamath import triclinic_vectors

    return np.asarray(triclinic_vectors(np.asarray(dimensions, dtype=np.float64)), dtype=np.float64) * unit_nm


def box_dimensions(vectors: np.ndarray) -> np.ndarray:
    """MDAnalysis ``[a, b, c, α, β, γ]`` (float32, degrees) of a stack of box matrices (K, 3, 3), rows = box
    vectors: :func:`MDAnalysis.lib.mdamath.triclinic_box` for K boxes at once (it costs ≈ 30 µs a call, a
    tenth of the time to decode a 2,000-atom frame). Same rules: float64 arithmetic, and an invalid box
    (a length ≤ 0, an angle outside (0°, 180°)) gives zeros."""
    v = np.asarray(vectors, dtype=np.float64).reshape(-1, 3, 3)
    lengths = np.sqrt(np.einsum("kij,kij->ki", v, v))
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    lx, ly, lz = lengths[:, 0], lengths[:, 1], lengths[:, 2]
    with np.errstate(invalid="ignore", divide="ignore"):
        angles = np.rad2deg(np.arccos(np.stack([np.einsum("ki,ki->k", y, z) / (ly * lz),
                                                 np.einsum("ki,ki->k", x, z) / (lx * lz),
                                                 np.einsum("ki,ki->k", x, y) / (lx * ly)], axis=1)))
    dims = np.concatenate([lengths, angles], axis=1).astype(np.float32)
    with np.errstate(invalid="ignore"):
        valid = np.all(dims > 0.0, axis=1) & np.all(angles < 180.0, axis=1)
    dims[~valid] = 0.0
    return dims


def minimum_image(vectors_nm: np.ndarray, box_nm: np.ndarray) -> np.ndarray:
    """Minimum-image convention in fractional coordinates of ``box_nm`` (exact for orthorhombic boxes).

    Parameters
    ----------
    vectors_nm : ndarray (..., 3)
        Displacement vectors [nm], float64.
    box_nm : ndarray (3, 3)
        Box matrix with box vectors as rows [nm].

    Returns
    -------
    ndarray (..., 3)
        ``v - round(v h⁻¹) h``.
    """
    if np.allclose(box_nm, np.diag(np.diag(box_nm))):
        lengths = np.diag(box_nm)
        return vectors_nm - lengths * np.round(vectors_nm / lengths)
    frac = vectors_nm @ np.linalg.inv(box_nm)
    frac -= np.round(frac)
    return frac @ box_nm


def _element_of(u: Any) -> np.ndarray:
    """Element symbols (upper case) from the topology, else guessed from masses."""
    try:
        elements = u.atoms.elements
    except (AttributeError, MemoryError):  # pragma: no cover - topologies without elements
        table = {1: "H", 7: "LI", 12: "C", 14: "N", 16: "O", 19: "F", 23: "NA", 32: "S", 35: "CL"}
        return np.array([table.get(int(round(m)), "X") for m in u.atoms.masses])
    # upper-cased once per distinct symbol: 2.5 × faster than per atom for 56,000 atoms
    distinct, inverse = np.unique(np.asarray(elements).astype(str), return_inverse=True)
    return np.char.upper(distinct)[inverse.reshape(-1)]


def _bond_indices(u: Any) -> np.ndarray:
    """Bonded atom pairs (B, 2) of the topology; empty when it has no bonds.

    Reads the parsed bond list directly: building ``u.bonds`` (a TopologyGroup) costs ~0.5 s for a
    50,000-atom tpr.
    """
    try:
        values = u._topology.bonds.values  # noqa: SLF001 - parsed (i, j) tuples, no TopologyGroup
        # pairs by construction (MDAnalysis checks every bond's length when it parses them); flattened through
        # an iterator: 3× faster than np.asarray on a list of tuples
        return np.fromiter(itertools.chain.from_iterable(values), dtype=np.int64,
                           count=2 * len(values)).reshape(-1, 2)
    except (AttributeError, MemoryError, ValueError, TypeError):
        try:
            return np.asarray(u.bonds.indices, dtype=np.int64).reshape(-1, 2)
        except (AttributeError, MemoryError):
            return np.empty((0, 2), dtype=np.int64)


def classify_sites(u: Any, mol_of_atom: np.ndarray, mol_species: np.ndarray,
                   mol_charge_e: np.ndarray, centre_species: list[str]) -> list[Channel]:
    """Site channels for the neighbour data, from elements and bonds (not atom names).

    Rules (registered as the atom-selection definition): a single-atom molecule that is not a centre is an
    ``ion`` site; otherwise oxygens are ``O_carbonyl`` (one bonded heavy atom, a carbon), ``O_ether``
    (two bonded carbons) or ``O``; nitrogens are ``N``. Centre species are excluded (centre–centre pairs
    are handled separately). Without bond information every oxygen is ``O``.
    """
    elements = _element_of(u)
    n_atoms = len(elements)
    bonds = _bond_indices(u)
    mol_size = np.bincount(mol_of_atom)
    atom_species = np.asarray(mol_species)[mol_of_atom]
    is_centre = np.isin(atom_species, centre_species)
    labels = np.full(n_atoms, "", dtype=object)
    labels[(mol_size[mol_of_atom] == 1) & ~is_centre] = "ion"
    labels[(elements == "N") & (labels == "") & ~is_centre] = "N"
    # per oxygen: number of bonded atoms, of bonded heavy atoms and of bonded carbons
    i, j = np.concatenate([bonds[:, 0], bonds[:, 1]]), np.concatenate([bonds[:, 1], bonds[:, 0]])
    n_nb = np.bincount(i, minlength=n_atoms)
    n_heavy = np.bincount(i, weights=elements[j] != "H", minlength=n_atoms)
    n_carbon = np.bincount(i, weights=elements[j] == "C", minlength=n_atoms)
    oxygen = (elements == "O") & (labels == "") & ~is_centre
    labels[oxygen] = "O"
    labels[oxygen & (n_heavy == 1) & (n_carbon == 1) & (n_nb == 1)] = "O_carbonyl"
    labels[oxygen & (n_heavy == 2) & (n_carbon == 2)] = "O_ether"
    # channels in order of their first atom; atoms of a channel ascending
    sites = np.flatnonzero(labels != "")
    if sites.size == 0:
        return []
    _, first, inverse = np.unique(_pair_codes(atom_species[sites], labels[sites]), return_index=True,
                                  return_inverse=True)
    out = []
    for c in np.argsort(first):  # a handful of channels: one comparison over the sites each
        idx = sites[inverse.reshape(-1) == c].astype(np.int64)
        sp, lab = str(atom_species[idx[0]]), str(labels[idx[0]])
        out.append(Channel(f"{sp}:{lab}", sp, lab, idx))
    return out


def _pair_codes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One integer per distinct (a, b) pair of two equally long arrays of labels."""
    code_a = np.unique(np.asarray(a).astype(str), return_inverse=True)[1].reshape(-1).astype(np.int64)
    code_b = np.unique(np.asarray(b).astype(str), return_inverse=True)[1].reshape(-1).astype(np.int64)
    return code_a * (int(code_b.max()) + 1 if code_b.size else 1) + code_b


#: Atom-frames read into one chunk. Frames are processed a chunk at a time, so numpy's per-call overhead
#: is paid per chunk, not per frame, and memory is bounded by the chunk whatever the trajectory length.
#: The float32 position buffer is 12 bytes × this (1.2 MB, cache-sized; 2 M atom-frames were slower and
#: needed 105 MiB for 401 tiny-preset frames).
CHUNK_ATOM_FRAMES = 100_000
#: ... but at least this many frames per chunk (per-chunk call overhead on large systems).
CHUNK_MIN_FRAMES = 4

#: Centre × site pairs per frame up to which distances are computed densely with numpy for orthorhombic
#: boxes (measured faster than a tree for few centres: 40 Li × 480 sites 0.27 ms vs 0.56 ms per frame);
#: above it, and for triclinic boxes, a periodic k-d tree (:func:`_tree_pairs_within`) runs frame by frame.
BRUTE_FORCE_MAX_PAIRS = 400_000

#: Elements of one dense r² work array: frames are done a few at a time so the arrays stay in cache
#: (measured 1.7× faster per frame than one array for a 96-frame chunk, 40 Li × 480 sites).
DENSE_BLOCK_ELEMENTS = 32_768


def _dense_pairs_within(centres: np.ndarray, sites: np.ndarray, lengths: np.ndarray, rmax: float,
                        *, same: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All (frame, centre, site) triples closer than ``rmax`` under the minimum image, for a chunk of frames.

    Parameters
    ----------
    centres : ndarray (K, C, 3), sites : ndarray (K, S, 3)
        Positions in the trajectory's unit and dtype (float32 Å: as precise as the stored coordinates and
        3× faster than float64).
    lengths : ndarray (K, 3)
        Orthorhombic box lengths per frame, same unit.
    rmax : float
        Cutoff, same unit.
    same : bool
        ``sites is centres``: keep each unordered pair once (i < j) and never i = j.

    Returns
    -------
    (frame, i, j, r) : four ndarrays (P,), r in the input unit and dtype.
    """
    dtype = centres.dtype
    k_frames, n_c, n_s = centres.shape[0], centres.shape[1], sites.shape[1]
    per_frame = max(n_c * n_s, 1)
    kb = max(1, min(k_frames, DENSE_BLOCK_ELEMENTS // per_frame))
    # one coordinate axis at a time from contiguous rows: (3, K, C) and (3, K, S) copies make the broadcast
    # differences 2× faster than strided reads of the (K, ·, 3) inputs
    cen_t = np.ascontiguousarray(centres.transpose(2, 0, 1))
    sit_t = cen_t if same else np.ascontiguousarray(sites.transpose(2, 0, 1))
    r2 = np.empty((kb, n_c, n_s), dtype=dtype)
    dk = np.empty_like(r2)
    tmp = np.empty_like(r2)
    within = np.empty((kb, n_c, n_s), dtype=bool)
    upper = np.triu(np.ones((n_c, n_s), dtype=bool), k=1)[None] if same else None
    rmax2 = dtype.type(rmax * rmax)
    lengths = np.asarray(lengths, dtype=dtype)
    inv = (dtype.type(1.0) / lengths).astype(dtype)
    out_flat, out_r = [], []
    for f0 in range(0, k_frames, kb):
        n = min(kb, k_frames - f0)
        r2_, dk_, tmp_, within_ = r2[:n], dk[:n], tmp[:n], within[:n]
        for k in range(3):
            lk = lengths[f0:f0 + n, k, None, None]
            # site minus centre; the two broadcast copies and one contiguous subtraction take ≈ 0.5–0.7 × the
            # time of one broadcast subtraction (whose inner loop has a zero-stride operand); same numbers
            np.copyto(dk_, sit_t[k, f0:f0 + n, None, :])
            np.copyto(tmp_, cen_t[k, f0:f0 + n, :, None])
            dk_ -= tmp_
            np.multiply(dk_, inv[f0:f0 + n, k, None, None], out=tmp_)
            np.rint(tmp_, out=tmp_)
            tmp_ *= lk
            dk_ -= tmp_
            if k == 0:
                np.multiply(dk_, dk_, out=r2_)
            else:
                np.multiply(dk_, dk_, out=tmp_)
                r2_ += tmp_
        np.less(r2_, rmax2, out=within_)
        if upper is not None:
            within_ &= upper
        flat = np.flatnonzero(within_)
        out_r.append(r2_.ravel()[flat])
        flat += f0 * per_frame
        out_flat.append(flat)
    flat = np.concatenate(out_flat)  # (frame, centre, site) decoded once for the whole chunk
    f, rest = divmod_by_scalar(flat, per_frame)
    i, j = divmod_by_scalar(rest, n_s)
    r = np.concatenate(out_r)
    return f, i, j, np.sqrt(r, out=r)


def divmod_by_scalar(x: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.divmod(x, d)`` for non-negative integers and a scalar divisor, ≈ 1.5× faster: numpy's ``//`` by a
    scalar uses a multiply-shift division, its ``%`` and ``divmod`` divide element by element."""
    q = x // d
    r = q * d
    np.subtract(x, r, out=r)
    return q, r


def _tree_pairs_within(centres: np.ndarray, sites: np.ndarray, dims: np.ndarray, rmax: float,
                       *, same: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """As :func:`_dense_pairs_within`, frame by frame with a periodic k-d tree (many centres).

    Orthorhombic boxes use ``scipy.spatial.cKDTree`` with ``boxsize`` (measured 5× faster than MDAnalysis
    ``capped_distance`` for 1,080 Li × 12,960 sites, 1 nm); triclinic boxes use ``capped_distance``.
    """
    from MDAnalysis.lib.distances import capped_distance, self_capped_distance
    from scipy.spatial import cKDTree

    out_f, out_i, out_j, out_r = [], [], [], []
    for k in range(centres.shape[0]):
        if np.all(dims[k, 3:] == 90.0):
            lengths = dims[k, :3].astype(np.float64)

            def wrapped(x: np.ndarray) -> np.ndarray:
                w = x.astype(np.float64)
                w -= lengths * np.floor(w / lengths)
                w[w >= lengths] = 0.0  # a coordinate at exactly L after rounding is the image at 0
                return w

            # sliding-midpoint trees (balanced_tree=False) build 2× faster here and search as fast
            tc = cKDTree(wrapped(centres[k]), boxsize=lengths, balanced_tree=False)
            if same:
                pairs = tc.query_pairs(rmax, output_type="ndarray")
                i, j = pairs[:, 0], pairs[:, 1]
                d = centres[k, j].astype(np.float64) - centres[k, i]
                d -= lengths * np.rint(d / lengths)
                r = np.sqrt(np.einsum("pk,pk->p", d, d))
            else:
                ts = cKDTree(wrapped(sites[k]), boxsize=lengths, balanced_tree=False)
                m = tc.sparse_distance_matrix(ts, rmax, output_type="ndarray")
                i, j, r = m["i"], m["j"], m["v"]
        else:
            if same:
                pairs, r = self_capped_distance(centres[k], rmax, box=dims[k])
            else:
                pairs, r = capped_distance(centres[k], sites[k], rmax, box=dims[k])
            i, j = pairs[:, 0], pairs[:, 1]
        keep = r < rmax
        out_f.append(np.full(int(keep.sum()), k, dtype=np.int64))
        out_i.append(i[keep].astype(np.int64))
        out_j.append(j[keep].astype(np.int64))
        out_r.append(r[keep])
    return (np.concatenate(out_f), np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_r))


@dataclass
class _Topology:
    """Per-atom and per-molecule arrays the reduction needs (built once)."""

    n_atoms: int
    n_mol: int
    first_atom: np.ndarray
    ref_atom: np.ndarray          # first atom of each atom's molecule
    weights: Any                  # scipy CSR (M × N) float32: m_a / M_mol for atom a of molecule mol
    contiguous: bool = False      # every molecule's atoms are consecutive (as in GROMACS topologies)
    mol_of_atom: np.ndarray | None = None
    # for atom a (0..N-2) of a contiguous topology: mass fraction of its molecule in the atoms after a
    tail_fraction: np.ndarray | None = None
    _stacked: dict = field(default_factory=dict)

    @classmethod
    def build(cls, mol_of_atom: np.ndarray, masses: np.ndarray) -> _Topology:
        """From each atom's molecule (numbered 0..M-1 in order of first appearance) and mass [amu]."""
        from scipy.sparse import csr_matrix

        n_atoms = mol_of_atom.size
        first_atom = np.unique(mol_of_atom, return_index=True)[1]
        mol_mass = np.bincount(mol_of_atom, weights=masses)
        weights = csr_matrix(((masses / mol_mass[mol_of_atom]).astype(np.float32), (mol_of_atom, np.arange(n_atoms))),
                             shape=(first_atom.size, n_atoms))
        contiguous = bool(np.all(np.diff(mol_of_atom) >= 0))
        tail = None
        if contiguous:
            cum = np.cumsum(masses, dtype=np.float64)
            last = np.append(first_atom[1:] - 1, n_atoms - 1)  # last atom of each molecule
            tail = ((cum[last][mol_of_atom] - cum) / mol_mass[mol_of_atom])[:-1]
        return cls(n_atoms=n_atoms, n_mol=first_atom.size, first_atom=first_atom, ref_atom=first_atom[mol_of_atom],
                   weights=weights, contiguous=contiguous, mol_of_atom=np.asarray(mol_of_atom, dtype=np.int64),
                   tail_fraction=tail)

    def junctions(self, k: int) -> np.ndarray:
        """Flat indices, in a (k, N-1, 3) array of consecutive-atom vectors, of the vectors that join the last
        atom of a molecule to the first atom of the next one (a flat index list: 3× faster to assign than rows)."""
        key = ("junctions", k)
        if key not in self._stacked:
            rows = (np.arange(k)[:, None] * (self.n_atoms - 1) + (self.first_atom[1:] - 1)[None]).ravel()
            self._stacked[key] = (rows[:, None] * 3 + np.arange(3)).ravel()
        return self._stacked[key]

    def stacked_weights(self, k: int) -> Any:
        """Block-diagonal weights for k frames stacked as (k·N, 3): one sparse product per chunk."""
        if k not in self._stacked:
            from scipy.sparse import csr_matrix

            # frame f's block: the same rows shifted by f·M, columns by f·N (built from the CSR arrays
            # directly; scipy's block_diag takes ≈ 2 ms per chunk size through COO)
            w = self.weights
            nnz = w.indptr[-1]
            indices = (w.indices[None, :] + (np.arange(k) * self.n_atoms)[:, None]).ravel()
            indptr = np.append((w.indptr[None, :-1] + (np.arange(k) * nnz)[:, None]).ravel(), k * nnz)
            self._stacked[k] = csr_matrix((np.tile(w.data, k), indices, indptr),
                                          shape=(k * self.n_mol, k * self.n_atoms))
        return self._stacked[k]


def _chain_steps(pos: np.ndarray, top: _Topology) -> np.ndarray:
    """Wrapped vectors between consecutive atoms, (K, N-1, 3), with the vectors that join one molecule to the
    next set to zero (contiguous topologies)."""
    step = np.subtract(pos[:, 1:], pos[:, :-1])
    step.reshape(-1)[top.junctions(pos.shape[0])] = 0.0
    return step


def _chain_whole_coms(pos: np.ndarray, lengths: np.ndarray, top: _Topology, weights: Any) -> np.ndarray:
    """Centres of mass of the molecules made whole along their atom chain, orthorhombic boxes, contiguous
    topology; (K, M, 3) float64 in the unit of ``pos``.

    One sparse mass-weight product of the wrapped positions, plus a correction for each consecutive-atom
    vector that crosses the boundary: the true vector is the wrapped one shifted by a box length, which moves
    every later atom of the molecule by that shift, and so its centre of mass by the shift times the mass
    fraction of those atoms (:attr:`_Topology.tail_fraction`). Exact for any molecule whose consecutive atoms
    are closer than half the box; costs ≈ 1.5 × the product for a chunk with split molecules (the general
    per-atom minimum-image path costs ≈ 4 ×).
    """
    k_frames, n_atoms = pos.shape[0], pos.shape[1]
    com = (weights @ pos.reshape(k_frames * n_atoms, 3)).reshape(k_frames, top.n_mol, 3).astype(np.float64)
    if n_atoms < 2:
        return com
    step = _chain_steps(pos, top)
    half_min = 0.5 * float(lengths.min())
    if step.max() < half_min and step.min() > -half_min:  # nothing split in this chunk
        return com
    flat = step.reshape(-1)
    np.abs(flat, out=flat)
    idx = np.flatnonzero(flat > half_min)  # candidates; the exact test is each frame's own box length
    frame, rest = divmod_by_scalar(idx, (n_atoms - 1) * 3)
    atom, axis = divmod_by_scalar(rest, 3)
    lk = lengths[frame, axis].astype(np.float64)
    wrapped_step = pos[frame, atom + 1, axis].astype(np.float64) - pos[frame, atom, axis]
    shift = -lk * np.rint(wrapped_step / lk)  # true step − wrapped step
    key = (frame * top.n_mol + top.mol_of_atom[atom]) * 3 + axis
    com.reshape(-1)[:] += np.bincount(key, weights=shift * top.tail_fraction[atom], minlength=com.size)
    return com


def _whole_molecule_coms(pos: np.ndarray, dims: np.ndarray, top: _Topology, unit_nm: float = A_TO_NM) -> np.ndarray:
    """Wrapped centres of mass of whole molecules for a chunk of frames.

    Orthorhombic boxes and molecules with consecutive atoms (every GROMACS topology): one sparse mass-weight
    product of the positions, corrected for the consecutive-atom vectors that cross the boundary
    (:func:`_chain_whole_coms`). Otherwise each atom's minimum-image vector to its molecule's first atom
    makes the molecule whole (valid for molecules shorter than half the box) and the mass-weighted mean of
    those vectors is added to the first atom; only the few components longer than half the box are wrapped.
    Arithmetic in the input's float32 (≈ 1e-6 nm, three orders below the xtc precision); the result is
    float64 nm.

    Parameters
    ----------
    pos : ndarray (K, N, 3)  [unit]
    dims : ndarray (K, 6)  MDAnalysis-style box [unit, degrees]
    unit_nm : float
        Length of the input unit in nm (0.1 for MDAnalysis Å, 1 for positions read straight from an xtc).

    Returns
    -------
    ndarray (K, M, 3)  [nm], float64
    """
    k_frames, n_atoms = pos.shape[0], pos.shape[1]
    ortho = bool(np.all(dims[:, 3:] == 90.0))
    weights = top.weights if k_frames == 1 else top.stacked_weights(k_frames)
    if ortho:
        lengths = dims[:, :3].astype(pos.dtype)
        half_min = 0.5 * lengths.min()
        if top.contiguous:
            com = _chain_whole_coms(pos, lengths, top, weights)
            com *= unit_nm
            return com
    d = np.take(pos, top.ref_atom, axis=1)  # 4× faster than pos[:, ref] for (K, N, 3) float32
    np.subtract(pos, d, out=d)
    if ortho:
        # two cheap reductions decide whether any molecule of the chunk can be broken; only then locate the
        # components longer than half their box length
        idx = (np.flatnonzero(np.abs(d) > 0.5 * lengths[:, None, :])
               if d.max() > half_min or d.min() < -half_min else np.empty(0, np.int64))
        if idx.size:  # broken molecules: wrap those components only
            flat = d.reshape(-1)
            frame, axis = idx // (n_atoms * 3), idx % 3
            lk = lengths[frame, axis]
            flat[idx] -= lk * np.rint(flat[idx] / lk)
    else:
        for k in range(k_frames):
            d[k] = minimum_image(d[k].astype(np.float64), box_matrix_nm(dims[k], 1.0))  # box in the read unit
    offset = weights @ d.reshape(k_frames * n_atoms, 3)
    com = np.take(pos, top.first_atom, axis=1).astype(np.float64)
    com += offset.reshape(k_frames, top.n_mol, 3)
    com *= unit_nm
    return com


def _unwrap(com_w: np.ndarray, lengths_or_boxes: np.ndarray, ortho: bool, prev_w: np.ndarray | None,
            prev_u: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
    """Displacement unwrapping of a chunk of wrapped COMs (minimum image in each *current* frame's box).

    ``prev_w``/``prev_u`` are the wrapped and unwrapped COMs of the frame before the chunk (None for the
    first chunk, whose first frame is its own reference). ``out`` (same shape as ``com_w``) receives the
    result when given.
    """
    steps = np.empty_like(com_w) if out is None else out
    if prev_w is None:
        steps[0] = com_w[0]
    else:
        np.subtract(com_w[0], prev_w, out=steps[0])
    np.subtract(com_w[1:], com_w[:-1], out=steps[1:])
    lo = 0 if prev_w is not None else 1
    if ortho:
        lengths = np.asarray(lengths_or_boxes[lo:, None, :], dtype=np.float64)
        shift = steps[lo:] * (1.0 / lengths)
        np.rint(shift, out=shift)
        shift *= lengths
        steps[lo:] -= shift
    else:
        for k in range(lo, com_w.shape[0]):
            steps[k] = minimum_image(steps[k], lengths_or_boxes[k])
    if prev_u is not None:
        steps[0] += prev_u
    for k in range(1, steps.shape[0]):  # running sum frame by frame: faster than np.cumsum over axis 0
        steps[k] += steps[k - 1]
    return steps


#: Atom-frames from which :func:`reduce_universe` uses several processes by default (``workers=None``).
#: Measured on 2 cores: no gain at 0.65–0.8 M atom-frames (water + NaCl 0.15 s vs 0.23 s, tiny LHCE
#: 0.33 s either way: forking and reopening the trajectory cost as much as they save), 1.6× at 22 M
#: (paper-size LHCE, 401 frames).
PARALLEL_MIN_ATOM_FRAMES = 4_000_000
#: Most worker processes used by default (one per available core up to this).
MAX_DEFAULT_WORKERS = 8


def _default_workers() -> int:
    """The project's CPU thread cap (usable cores or ``$MDBENCH_THREAD_CAP``), at most
    :data:`MAX_DEFAULT_WORKERS`."""
    from mdbench.engine.threads import default_thread_cap

    return max(1, min(default_thread_cap(), MAX_DEFAULT_WORKERS))


def _direct_xtc(traj: Any, first: int) -> tuple[str, np.ndarray] | None:
    """(file name, frame offsets) when the frames of ``traj`` can be read straight into the pass's buffers.

    MDAnalysis' own xtc decoder (``XTCFile.read_direct_x``, nm) then fills the chunk buffer directly; the
    Timestep copy and the Å conversion of the reader are skipped (measured ≈ 15–20 % of the reading time
    for 56,160 atoms). Only for a plain ``XTCReader``: an atom subset, a transformation, unit conversion
    switched off or a dt / time-offset override keep the reader's path, and the frame ``first`` read both
    ways must give the same time and positions. None otherwise.
    """
    try:
        from MDAnalysis.coordinates.XTC import XTCReader
        from MDAnalysis.lib.formats.libmdaxdr import XTCFile
    except ImportError:
        return None
    if type(traj) is not XTCReader or not hasattr(XTCFile, "read_direct_x"):
        return None
    overrides = {**(getattr(traj, "_kwargs", None) or {}), **(getattr(traj, "_ts_kwargs", None) or {})}
    if (getattr(traj, "_sub", None) is not None or traj.transformations or not traj.convert_units
            or overrides.get("dt") is not None or overrides.get("time_offset")):
        return None
    try:
        fname, offsets = str(traj.filename), np.asarray(traj._xdr.offsets)
        x = np.empty((traj.n_atoms, 3), dtype=np.float32)
        with XTCFile(fname) as xdr:
            xdr.set_offsets(offsets)
            xdr.seek(first)
            frame = xdr.read_direct_x(x)
        ts = traj[first]
        same = (float(frame.time) == float(ts.time)
                and np.allclose(x / A_TO_NM, ts.positions, rtol=0, atol=1e-4)
                and np.allclose(np.asarray(ts.dimensions[:3]) * A_TO_NM,
                                np.linalg.norm(np.asarray(frame.box, dtype=np.float64), axis=1), rtol=1e-6))
    except Exception as exc:  # any surprise in a private corner of the reader: keep the reader's path
        log.debug("direct xtc reading not used: %s", exc)
        return None
    return (fname, offsets) if same else None


def _shared_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Zeroed array in anonymous shared memory: what a forked worker writes, the parent sees."""
    count = int(np.prod(shape))
    buf = mmap.mmap(-1, max(1, count * np.dtype(dtype).itemsize))
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


@dataclass
class _FramePass:
    """One pass over frames: the per-frame reduction, its inputs and the per-frame arrays it fills.

    :meth:`run` reduces a contiguous range of the frame slice; several ranges can run in forked worker
    processes, writing into the same (shared-memory) arrays, because every output row belongs to one frame.
    Centres of mass are unwrapped from the range's first frame; :func:`reduce_universe` stitches ranges.
    """

    reader: Any
    frames: range
    top: _Topology
    centre_atoms: np.ndarray
    site_atoms: np.ndarray
    site_channel: np.ndarray
    site_mol: np.ndarray
    n_ch: int
    nbins: int
    rdf_bin_nm: float
    rmax: float
    r_store: float
    dense_ok: bool
    every: int
    chunk: int
    time_ps: np.ndarray
    box_nm: np.ndarray
    volume: np.ndarray
    com: np.ndarray
    hist: np.ndarray
    hist_cc: np.ndarray
    unit_nm: float = A_TO_NM                  # length unit of positions and boxes as read, in nm
    xtc: tuple[str, np.ndarray] | None = None  # (xtc file, frame offsets): read frames straight from it

    def run(self, a: int, b: int, on_chunk: Any = None, reader: Any = None) -> dict[str, Any]:
        """Reduce frames ``a``..``b-1`` of the slice (positions in ``frames``) with ``reader`` (default own).

        Returns the range, its contact rows, the wrapped COMs of its last frame and the input dtype.
        """
        reader = self.reader if reader is None else reader
        n_atoms = self.top.n_atoms
        pos_buf = np.empty((self.chunk, n_atoms, 3), dtype=np.float32)
        dims_buf = np.empty((self.chunk, 6), dtype=np.float64)
        # the direct xtc path keeps each frame's box matrix and converts a chunk of them at once
        vec_buf = np.empty((self.chunk, 3, 3), dtype=np.float32) if self.xtc is not None else None
        cont: dict[str, list[np.ndarray]] = {k: [] for k in ("frame", "centre", "partner", "channel", "dmin_nm")}
        state: dict[str, Any] = {"prev_w": None, "prev_u": None, "input_dtype": None}
        sub = self.frames[a:b]
        filled, f0 = 0, a
        for f, time_ps in enumerate(self._read(reader, sub, pos_buf, dims_buf, vec_buf, state), start=a):
            self.time_ps[f] = time_ps
            filled += 1
            if filled == self.chunk or f == b - 1:
                if vec_buf is not None:
                    dims_buf[:filled] = box_dimensions(vec_buf[:filled])
                self._process(f0, pos_buf[:filled], dims_buf[:filled], state, cont)
                if on_chunk is not None:
                    on_chunk(filled)
                f0, filled = f0 + filled, 0
        return {"range": (a, b), "contacts": cont, "last_wrapped": state["prev_w"],
                "input_dtype": state["input_dtype"]}

    def _read(self, reader: Any, sub: range, pos_buf: np.ndarray, dims_buf: np.ndarray,
              vec_buf: np.ndarray | None, state: dict[str, Any]) -> Iterator[float]:
        """Yield the time [ps] of each frame of ``sub`` once its positions and box are in row ``i % chunk``
        of the buffers (``i``: the frame's place in ``sub``), read by ``reader`` (box dimensions into
        ``dims_buf``) or straight from the xtc (box matrix into ``vec_buf``, converted by the caller)."""
        chunk = self.chunk
        if self.xtc is None:
            for i, ts in enumerate(reader[sub.start:sub.stop:sub.step]):
                if state["input_dtype"] is None:
                    state["input_dtype"] = str(ts.positions.dtype)
                pos_buf[i % chunk] = ts.positions
                dims_buf[i % chunk] = ts.dimensions
                yield ts.time
            return
        from MDAnalysis.lib.formats.libmdaxdr import XTCFile

        state["input_dtype"] = "float32"
        fname, offsets = self.xtc
        xdr = XTCFile(fname)
        try:
            xdr.set_offsets(offsets)
            for i, f in enumerate(sub):
                if i == 0 or sub.step != 1:
                    xdr.seek(f)
                frame = xdr.read_direct_x(pos_buf[i % chunk])
                vec_buf[i % chunk] = frame.box
                yield float(frame.time)
        finally:
            xdr.close()

    def _process(self, f0: int, pos: np.ndarray, dims: np.ndarray, state: dict[str, Any],
                 cont: dict[str, list[np.ndarray]]) -> None:
        """Reduce the k frames f0..f0+k-1 held in ``pos`` / ``dims`` (MDAnalysis-style box; lengths in the
        read unit, :attr:`unit_nm` nm)."""
        k = pos.shape[0]
        box_nm, volume, com, hist, hist_cc = self.box_nm, self.volume, self.com, self.hist, self.hist_cc
        n_ch, nbins, n_mol, every = self.n_ch, self.nbins, self.top.n_mol, self.every
        n_centre = self.centre_atoms.size
        unit_nm = self.unit_nm
        rmax, rmax_u, r_store, rdf_bin_nm = self.rmax, self.rmax / unit_nm, self.r_store, self.rdf_bin_nm
        ortho = bool(np.all(dims[:, 3:] == 90.0))
        if ortho:
            lengths_nm = dims[:, :3] * unit_nm
            box_nm[f0:f0 + k] = lengths_nm[:, :, None] * np.eye(3)[None]
            volume[f0:f0 + k] = np.prod(lengths_nm, axis=1)
        else:
            for i in range(k):
                box_nm[f0 + i] = box_matrix_nm(dims[i], unit_nm)
            volume[f0:f0 + k] = np.abs(np.linalg.det(box_nm[f0:f0 + k]))
        # 1.–2. whole molecules → wrapped COMs → displacement unwrapping in each current box
        com_w = _whole_molecule_coms(pos, dims, self.top, unit_nm)
        _unwrap(com_w, lengths_nm if ortho else box_nm[f0:f0 + k], ortho, state["prev_w"], state["prev_u"],
                out=com[f0:f0 + k])
        state["prev_w"], state["prev_u"] = com_w[-1], com[f0 + k - 1]
        # 3. neighbour data (in the trajectory's unit until the distances are known) on structure frames
        dense = ortho and self.dense_ok
        sf = np.flatnonzero((np.arange(f0, f0 + k) % every) == 0)  # structure frames of the chunk
        if sf.size == 0:
            return
        if n_centre and n_ch:
            cen, sit = pos[np.ix_(sf, self.centre_atoms)], pos[np.ix_(sf, self.site_atoms)]
            ff, ii, jj, rr = (_dense_pairs_within(cen, sit, dims[sf, :3], rmax_u) if dense
                              else _tree_pairs_within(cen, sit, dims[sf].astype(np.float32), rmax_u))
            ff = sf[ff]
            dist = rr.astype(np.float64)
            dist *= unit_nm
            inside = dist < rmax
            if not inside.all():  # float32 distances just below the cutoff in the read unit
                ff, ii, jj, dist = ff[inside], ii[inside], jj[inside], dist[inside]
            ch = self.site_channel[jj]
            b = (dist / rdf_bin_nm).astype(np.int64)
            np.minimum(b, nbins - 1, out=b)
            b += (ff * n_ch + ch) * nbins
            hist[f0:f0 + k] = np.bincount(b, minlength=k * n_ch * nbins).reshape(k, n_ch * nbins)
            near = np.flatnonzero(dist < r_store)  # one index list, taken from each array (faster than masks)
            if near.size:
                key = ff.take(near)
                key += f0
                key *= n_centre
                key += ii.take(near)
                key *= n_mol
                key += self.site_mol.take(jj.take(near))
                key *= n_ch
                key += ch.take(near)
                o = np.argsort(key, kind="stable")
                ks = key[o]
                first = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
                ukey = ks[first]
                dmin = np.minimum.reduceat(dist.take(near)[o], first)
                rest, channel = divmod_by_scalar(ukey, n_ch)
                rest, partner = divmod_by_scalar(rest, n_mol)
                frame, centre = divmod_by_scalar(rest, n_centre)
                cont["frame"].append(frame.astype(np.int32))
                cont["channel"].append(channel.astype(np.int16))
                cont["partner"].append(partner.astype(np.int32))
                cont["centre"].append(centre.astype(np.int32))
                cont["dmin_nm"].append(dmin.astype(np.float32))
        if n_centre > 1:
            cen = pos[np.ix_(sf, self.centre_atoms)]
            ff, _, _, rr = (_dense_pairs_within(cen, cen, dims[sf, :3], rmax_u, same=True) if dense
                            else _tree_pairs_within(cen, cen, dims[sf].astype(np.float32), rmax_u, same=True))
            ff = sf[ff]
            dist = rr.astype(np.float64) * unit_nm
            inside = dist < rmax
            b = np.minimum((dist[inside] / rdf_bin_nm).astype(np.int64), nbins - 1)
            hist_cc[f0:f0 + k] = 2 * np.bincount(ff[inside] * nbins + b, minlength=k * nbins).reshape(k, nbins)


#: The pass the forked workers run (set by the parent just before it forks them; never pickled), and the
#: lock that keeps two threads of one process from forking workers for different passes at once.
_FORKED_PASS: dict[str, Any] = {}
_FORK_LOCK = threading.Lock()


def _run_range_in_worker(slot: int, a: int, b: int) -> dict[str, Any]:
    """Worker process body: reduce frames a..b-1 with an own reader (own file handle) of the trajectory."""
    job: _FramePass = _FORKED_PASS["job"]
    progress: np.ndarray = _FORKED_PASS["progress"]
    reader = job.reader.copy() if job.xtc is None else None  # the direct xtc path opens its own file

    def tick(n: int) -> None:
        progress[slot] += n

    try:
        return job.run(a, b, on_chunk=tick, reader=reader)
    finally:
        if reader is not None:
            reader.close()


def _run_parallel(job: _FramePass, n_workers: int, bar: Any) -> list[dict[str, Any]] | None:
    """Reduce ``job.frames`` in ``n_workers`` forked processes, one contiguous range each.

    Returns the ranges' results in frame order, or None when the pool broke (a worker killed, e.g. for
    memory): the caller then redoes the pass in one process. Errors raised inside a worker propagate.
    """
    import concurrent.futures as cf
    from concurrent.futures.process import BrokenProcessPool

    n = len(job.frames)
    cuts = [round(i * n / n_workers) for i in range(n_workers + 1)]
    progress = _shared_empty((n_workers,), np.int64)
    try:
        with _FORK_LOCK:  # the workers fork at the first submit and inherit _FORKED_PASS
            _FORKED_PASS.update(job=job, progress=progress)
            try:
                ex = cf.ProcessPoolExecutor(max_workers=n_workers, mp_context=multiprocessing.get_context("fork"))
                futures = [ex.submit(_run_range_in_worker, j, cuts[j], cuts[j + 1]) for j in range(n_workers)]
            finally:
                _FORKED_PASS.clear()
        with ex:
            pending = set(futures)
            while pending:
                _, pending = cf.wait(pending, timeout=0.25)
                bar.update(int(progress.sum()) - bar.n)
            return [f.result() for f in futures]
    except BrokenProcessPool as exc:
        log.warning("the reduction's worker pool broke (%s); reducing again in one process", exc)
        return None


def reduce_universe(u: Any, *, centre_species: list[str] | None = None, rdf_rmax_nm: float = 1.0,
                    rdf_bin_nm: float = 0.005, r_store_nm: float = 0.6, start: int | None = None,
                    stop: int | None = None, step: int | None = None, structure_max_frames: int | None = None,
                    verbose: bool = False, source: dict[str, Any] | None = None,
                    workers: int | None = None) -> ReducedTrajectory:
    """Reduce an MDAnalysis Universe in one pass (see the module docstring for the algorithm).

    Frames are read in chunks of at most :data:`CHUNK_ATOM_FRAMES` atom-frames and each chunk is reduced
    with whole-array operations, so memory is bounded by one chunk plus the molecules × frames result.

    Parameters
    ----------
    u : MDAnalysis.Universe
        Topology with masses, charges and (ideally) bonds and molecule numbers, plus a trajectory with box.
    centre_species : list of str, optional
        Species whose atoms are centres of the RDF/contact data. Default: every species whose molecules
        carry a positive net charge (the cations, e.g. ``LI``).
    rdf_rmax_nm : float
        Upper edge of the RDF histograms [nm]; clipped to half the smallest box width of the first frame.
    rdf_bin_nm : float
        RDF bin width [nm].
    r_store_nm : float
        Largest centre–partner distance kept in the neighbour table [nm] (the first-minimum search range).
    start, stop, step : int, optional
        Frame slice.
    structure_max_frames : int, optional
        Pair histograms and the neighbour table are computed on every k-th frame of the slice,
        ``k = ceil(F / structure_max_frames)`` (``structure_every`` in ``source``; see
        :meth:`ReducedTrajectory.structure_view`); centres of mass on every frame. None: k = 1.
    verbose : bool
        Show a tqdm progress bar (frames).
    source : dict, optional
        Provenance stored in the result.
    workers : int, optional
        Processes that read and reduce contiguous ranges of frames in parallel (forked; each opens its own
        reader of the trajectory; ranges are stitched so that the result equals one pass to rounding).
        None: one per usable core (the project's thread cap, at most :data:`MAX_DEFAULT_WORKERS`) when the
        slice has at least :data:`PARALLEL_MIN_ATOM_FRAMES` atom-frames, else 1. Recorded as
        ``reduction_workers``.

    Returns
    -------
    ReducedTrajectory
    """
    from tqdm.auto import tqdm

    atoms = u.atoms
    n_atoms = atoms.n_atoms
    if n_atoms == 0:
        raise InputError("the topology has no atoms")
    try:
        mol_of_atom = np.asarray(atoms.molnums, dtype=np.int64)
    except (AttributeError, MemoryError):
        mol_of_atom = np.asarray(atoms.resindices, dtype=np.int64)
    # renumber molecules 0..M-1 in order of appearance
    _, first_atom, mol_of_atom = np.unique(mol_of_atom, return_index=True, return_inverse=True)
    order = np.argsort(first_atom)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    mol_of_atom = rank[mol_of_atom]
    first_atom = first_atom[order]
    n_mol = first_atom.size
    masses = np.asarray(atoms.masses, dtype=np.float64)
    try:
        charges = np.asarray(atoms.charges, dtype=np.float64)
    except (AttributeError, MemoryError) as exc:
        raise InputError("the topology has no charges; give a .tpr file") from exc
    if np.any(masses <= 0):
        raise InputError("the topology has atoms without mass (virtual sites?); mass-less atoms are not "
                         "supported by the centre-of-mass reduction")
    mol_mass = np.bincount(mol_of_atom, weights=masses, minlength=n_mol)
    mol_charge = np.bincount(mol_of_atom, weights=charges, minlength=n_mol)
    resnames = np.asarray(atoms.resnames)
    mol_species = resnames[first_atom].astype(str)
    species = list(dict.fromkeys(mol_species.tolist()))
    if centre_species is None:
        centre_species = [sp for sp in species if np.mean(mol_charge[mol_species == sp]) > 0.05]
    centre_atoms = np.flatnonzero(np.isin(mol_species[mol_of_atom], centre_species))
    centre_mol = mol_of_atom[centre_atoms]
    channels = classify_sites(u, mol_of_atom, mol_species, mol_charge, centre_species)
    site_atoms = np.concatenate([c.atom_indices for c in channels]) if channels else np.empty(0, np.int64)
    site_channel = (np.concatenate([np.full(c.atom_indices.size, k) for k, c in enumerate(channels)])
                    if channels else np.empty(0, np.int64))
    site_mol = mol_of_atom[site_atoms]
    n_ch = len(channels)
    n_centre = centre_atoms.size
    site_counts = np.array([c.atom_indices.size for c in channels], dtype=np.float64)

    top = _Topology.build(mol_of_atom, masses)

    traj = u.trajectory
    frames = range(*slice(start, stop, step).indices(len(traj)))
    n_frames = len(frames)
    if n_frames < 1:
        raise InputError("the trajectory slice selects no frames")
    if traj.ts.dimensions is None:
        raise InputError("the trajectory has no box; periodic analysis needs one")
    box0 = box_matrix_nm(traj[frames[0]].dimensions)
    widths = np.abs(np.linalg.det(box0)) / np.linalg.norm(np.cross(box0[[1, 2, 0]], box0[[2, 0, 1]]), axis=1)
    rmax = float(min(rdf_rmax_nm, 0.5 * widths.min()))
    r_store = float(min(r_store_nm, rmax))
    nbins = max(1, int(round(rmax / rdf_bin_nm)))
    edges = np.linspace(0.0, nbins * rdf_bin_nm, nbins + 1)
    rmax = float(edges[-1])

    xtc = _direct_xtc(traj, frames[0])
    pairs_per_frame = n_centre * max(site_atoms.size, n_centre)
    dense_ok = pairs_per_frame <= BRUTE_FORCE_MAX_PAIRS
    chunk = max(1, min(n_frames, max(CHUNK_ATOM_FRAMES // n_atoms, CHUNK_MIN_FRAMES)))
    every = 1 if not structure_max_frames else max(1, -(-n_frames // int(structure_max_frames)))

    if workers is None:
        n_workers = _default_workers() if n_frames * n_atoms >= PARALLEL_MIN_ATOM_FRAMES else 1
    else:
        n_workers = int(workers)
        if n_workers < 1:
            raise InputError(f"workers must be a positive integer, got {workers}")
    n_workers = max(1, min(n_workers, n_frames // CHUNK_MIN_FRAMES))  # a few frames per worker at least
    if n_workers > 1 and "fork" not in multiprocessing.get_all_start_methods():
        log.info("no 'fork' start method on this platform: reducing in one process")
        n_workers = 1
    empty = _shared_empty if n_workers > 1 else (lambda shape, dtype: np.zeros(shape, dtype=dtype))
    job = _FramePass(
        reader=u.trajectory, frames=frames, top=top, centre_atoms=centre_atoms, site_atoms=site_atoms,
        site_channel=site_channel, site_mol=site_mol, n_ch=n_ch, nbins=nbins, rdf_bin_nm=rdf_bin_nm, rmax=rmax,
        r_store=r_store, dense_ok=dense_ok, every=every, chunk=chunk,
        time_ps=empty((n_frames,), np.float64), box_nm=empty((n_frames, 3, 3), np.float64),
        volume=empty((n_frames,), np.float64), com=empty((n_frames, n_mol, 3), np.float64),
        hist=empty((n_frames, n_ch * nbins), np.int32), hist_cc=empty((n_frames, nbins), np.int32),
        unit_nm=1.0 if xtc is not None else A_TO_NM, xtc=xtc)
    with tqdm(total=n_frames, disable=not verbose, desc="reduce", unit="frame") as bar:
        parts = _run_parallel(job, n_workers, bar) if n_workers > 1 else None
        if parts is None:  # one process (or the worker pool broke: redone here, nothing half-written kept)
            n_workers = 1
            job.hist.fill(0)
            job.hist_cc.fill(0)
            parts = [job.run(0, n_frames, on_chunk=bar.update)]
    time_ps, box_nm, volume, com, hist, hist_cc = (job.time_ps, job.box_nm, job.volume, job.com, job.hist,
                                                   job.hist_cc)
    # stitch the ranges: each worker unwrapped from its own first frame; shift every later range so that
    # its first frame continues the displacement chain of the previous one (what one pass would give)
    for part, prev in zip(parts[1:], parts[:-1]):
        a, b = part["range"]
        box_a = box_nm[a:a + 1]
        ortho_a = bool(np.all(box_a[0] == np.diag(np.diag(box_a[0]))))
        u_a = _unwrap(com[a:a + 1].copy(), np.diagonal(box_a, axis1=1, axis2=2) if ortho_a else box_a, ortho_a,
                      prev["last_wrapped"], com[a - 1])
        com[a:b] += u_a[0] - com[a]
    cont = {k: [arr for part in parts for arr in part["contacts"][k]] for k in parts[0]["contacts"]}
    input_dtype = parts[0]["input_dtype"]
    time_ps, regularised = regularise_time(time_ps)
    total_mass = mol_mass.sum()
    system_com = (mol_mass @ com) / total_mass  # (M) @ (F, M, 3): BLAS, 2-3 × faster than einsum here
    contacts = {k: (np.concatenate(v) if v else np.empty(0, dtype=np.float32 if k == "dmin_nm" else np.int32))
                for k, v in cont.items()}
    rdf_counts = {c.name: hist[:, k * nbins:(k + 1) * nbins].copy() for k, c in enumerate(channels)}
    rdf_npairs = {c.name: float(n_centre * site_counts[k]) for k, c in enumerate(channels)}
    if n_centre > 1:
        cc = "+".join(centre_species)
        rdf_counts[f"{cc}:{cc}"] = hist_cc
        rdf_npairs[f"{cc}:{cc}"] = float(n_centre * (n_centre - 1))
    src = dict(source or {})
    src.update(n_atoms=int(n_atoms), n_molecules=int(n_mol), frames=[frames.start, frames.stop, frames.step],
               input_dtype=input_dtype, rdf_rmax_nm=rmax, rdf_bin_nm=rdf_bin_nm,
               time_regularised=regularised, chunk_frames=int(chunk), structure_every=int(every),
               reduction_workers=int(n_workers),
               frame_reader="MDAnalysis XTCFile.read_direct_x (nm)" if xtc is not None
               else f"MDAnalysis {type(traj).__name__}",
               pair_search="dense numpy (orthorhombic)" if dense_ok else "periodic k-d tree (scipy cKDTree; "
                                                                         "triclinic: MDAnalysis capped_distance)")
    log.info("reduced %d frames of %d atoms to %d molecules", n_frames, n_atoms, n_mol)
    return ReducedTrajectory(
        time_ps=time_ps, box_nm=box_nm, volume_nm3=volume, com_nm=com, system_com_nm=system_com,
        mol_species=mol_species, mol_mass_amu=mol_mass, mol_charge_e=mol_charge, species=species,
        centre_species=list(centre_species), centre_mol=centre_mol, channels=channels, rdf_edges_nm=edges,
        rdf_counts=rdf_counts, rdf_n_pairs=rdf_npairs, contacts=contacts, r_store_nm=r_store,
        source=src,
    )


def regularise_time(time_ps: np.ndarray, rel_tol: float = 1e-3) -> tuple[np.ndarray, bool]:
    """Replace float32-rounded frame times by an exact uniform grid when they are uniform within ``rel_tol``.

    xtc files store times in float32 (0.1 ps steps are not representable), which breaks the exact-spacing
    test of FFT estimators. When every spacing is within ``rel_tol`` × dt of the mean spacing, the times are
    replaced by ``t0 + k·dt`` (float64); otherwise they are returned unchanged.

    Returns
    -------
    (time_ps, regularised) : (ndarray, bool)
    """
    t = np.asarray(time_ps, dtype=np.float64)
    if t.size < 3:
        return t, False
    dt = (t[-1] - t[0]) / (t.size - 1)
    if dt <= 0 or np.max(np.abs(np.diff(t) - dt)) > rel_tol * dt:
        return t, False
    # round dt to 1e-9 ps of its own precision: 0.0999999 → 0.1 exactly representable in float64
    dt = float(np.round(dt, 9))
    return t[0] + dt * np.arange(t.size), True


def reduce_files(tpr: str | Path, xtc: str | Path, **kwargs: Any) -> ReducedTrajectory:
    """Open ``tpr`` + ``xtc`` with MDAnalysis and :func:`reduce_universe` them (keyword arguments pass on).

    Raises
    ------
    InputError
        A file is missing or unreadable, naming the file.
    """
    import MDAnalysis as mda

    for p in (tpr, xtc):
        if not Path(p).is_file():
            raise InputError("file not found; give an existing GROMACS file", str(p))
    try:
        u = mda.Universe(str(tpr), str(xtc))
    except Exception as exc:  # MDAnalysis raises many types for unreadable files
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"MDAnalysis cannot read the topology/trajectory pair ({first_line}); give the .tpr "
                         "and the .xtc written from it", str(xtc)) from exc
    return reduce_universe(u, source={"tpr": str(tpr), "xtc": str(xtc)}, **kwargs)
