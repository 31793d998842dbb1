"""One streaming pass over a trajectory: per-molecule unwrapped centres of mass and neighbour data.

Every later estimator (self-diffusion, Onsager transport, RDF, coordination, association) works from the
:class:`ReducedTrajectory` this module produces, so the atoms × frames trajectory is read exactly once and
memory grows with molecules × frames.

Per frame the pass

1. makes every molecule whole by taking each atom's minimum-image vector to the molecule's first atom
   (valid for molecules shorter than half the box, which holds for every species of this project), and
   computes float64 centres of mass;
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

Units: nm, ps, amu, e (GROMACS units); MDAnalysis's Å are converted on read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

    @property
    def n_frames(self) -> int:
        """Number of frames F."""
        return int(self.time_ps.shape[0])

    def species_mask(self, species: str) -> np.ndarray:
        """Boolean mask over molecules of one species."""
        return self.mol_species == species

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
            r_store_nm=self.r_store_nm, source=dict(self.source, subset=[int(idx[0]), int(idx[-1]) + 1]),
        )


def box_matrix_nm(dimensions: np.ndarray) -> np.ndarray:
    """Box matrix (rows = box vectors) [nm] from MDAnalysis ``[a, b, c, α, β, γ]`` (Å, degrees)."""
    from MDAnalysis.lib.mdamath import triclinic_vectors

    return np.asarray(triclinic_vectors(np.asarray(dimensions, dtype=np.float64)), dtype=np.float64) * A_TO_NM


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
        return np.array([str(e).upper() for e in u.atoms.elements])
    except (AttributeError, MemoryError):  # pragma: no cover - topologies without elements
        masses = u.atoms.masses
        table = {1: "H", 7: "LI", 12: "C", 14: "N", 16: "O", 19: "F", 23: "NA", 32: "S", 35: "CL"}
        return np.array([table.get(int(round(m)), "X") for m in masses])


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
    neighbours: dict[int, list[int]] = {}
    try:
        bonds = np.asarray(u.bonds.indices)
    except (AttributeError, MemoryError):
        bonds = np.empty((0, 2), dtype=int)
    oxygen = elements == "O"
    for a, b in bonds[oxygen[bonds[:, 0]] | oxygen[bonds[:, 1]]] if bonds.size else []:
        neighbours.setdefault(int(a), []).append(int(b))
        neighbours.setdefault(int(b), []).append(int(a))
    mol_size = np.bincount(mol_of_atom)
    atom_species = np.asarray(mol_species)[mol_of_atom]
    is_centre = np.isin(atom_species, centre_species)
    labels = np.full(n_atoms, "", dtype=object)
    labels[(mol_size[mol_of_atom] == 1) & ~is_centre] = "ion"
    labels[(elements == "N") & (labels == "") & ~is_centre] = "N"
    for i in np.flatnonzero((elements == "O") & (labels == "") & ~is_centre):
        nb = neighbours.get(int(i), [])
        heavy = [j for j in nb if elements[j] != "H"]
        if len(heavy) == 1 and elements[heavy[0]] == "C" and len(nb) == 1:
            labels[i] = "O_carbonyl"
        elif len(heavy) == 2 and all(elements[j] == "C" for j in heavy):
            labels[i] = "O_ether"
        else:
            labels[i] = "O"
    by_channel: dict[tuple[str, str], list[int]] = {}
    for i in np.flatnonzero(labels != ""):
        by_channel.setdefault((str(atom_species[i]), str(labels[i])), []).append(int(i))
    return [Channel(f"{sp}:{lab}", sp, lab, np.asarray(idx, dtype=np.int64))
            for (sp, lab), idx in by_channel.items()]


#: Centre × site pair count up to which distances are computed densely with numpy (orthorhombic boxes);
#: above it MDAnalysis ``capped_distance`` (grid search) is used.
BRUTE_FORCE_MAX_PAIRS = 4_000_000


def _pairs_within_ortho(centres: np.ndarray, sites: np.ndarray, lengths: np.ndarray,
                        rmax: float) -> tuple[np.ndarray, np.ndarray]:
    """All (centre, site) pairs closer than ``rmax`` under the minimum image of an orthorhombic box.

    Dense per-axis computation in the dtype of the input (the trajectory's float32 Å: 3× faster than
    float64, and as precise as the stored coordinates); faster than a grid search for few centres.
    Returns (pairs (P, 2), r) in the input length unit.
    """
    r2 = np.zeros((centres.shape[0], sites.shape[0]), dtype=centres.dtype)
    for k in range(3):
        dk = sites[None, :, k] - centres[:, None, k]
        dk -= lengths[k] * np.rint(dk * (1.0 / lengths[k])).astype(dk.dtype)
        r2 += dk * dk
    i, j = np.nonzero(r2 < rmax * rmax)
    return np.stack([i, j], axis=1), np.sqrt(r2[i, j])


def reduce_universe(u: Any, *, centre_species: list[str] | None = None, rdf_rmax_nm: float = 1.0,
                    rdf_bin_nm: float = 0.005, r_store_nm: float = 0.6, start: int | None = None,
                    stop: int | None = None, step: int | None = None, verbose: bool = False,
                    source: dict[str, Any] | None = None) -> ReducedTrajectory:
    """Reduce an MDAnalysis Universe in one pass (see the module docstring for the algorithm).

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
    verbose : bool
        Show a tqdm progress bar.
    source : dict, optional
        Provenance stored in the result.

    Returns
    -------
    ReducedTrajectory
    """
    from MDAnalysis.lib.distances import capped_distance, self_capped_distance
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

    time_ps = np.empty(n_frames)
    box_nm = np.empty((n_frames, 3, 3))
    volume = np.empty(n_frames)
    com = np.empty((n_frames, n_mol, 3))
    hist = np.zeros((n_frames, n_ch * nbins), dtype=np.int32)
    hist_cc = np.zeros((n_frames, nbins), dtype=np.int32)
    n_centre = centre_atoms.size
    site_counts = np.array([c.atom_indices.size for c in channels], dtype=np.float64)
    cont: dict[str, list[np.ndarray]] = {k: [] for k in ("frame", "centre", "partner", "channel", "dmin_nm")}
    multi = np.bincount(mol_of_atom, minlength=n_mol)[mol_of_atom] > 1
    ref_atom = first_atom[mol_of_atom]
    multi_idx = np.flatnonzero(multi)
    ref_multi = ref_atom[multi_idx]
    masses_multi = masses[multi]
    mol_multi = mol_of_atom[multi]
    # GROMACS molecules are contiguous runs of atoms: one reduceat sums each molecule
    contiguous = bool(np.all(np.diff(mol_of_atom) >= 0))
    multi_mols, multi_starts = np.unique(mol_multi, return_index=True)
    lengths = np.ones(3)
    input_dtype = None
    prev_w = None
    for f, ts in enumerate(tqdm(traj[frames.start:frames.stop:frames.step], total=n_frames,
                                disable=not verbose, desc="reduce")):
        pos_raw = ts.positions
        input_dtype = input_dtype or str(pos_raw.dtype)
        pos = pos_raw.astype(np.float64) * A_TO_NM
        dims = ts.dimensions
        ortho = bool(np.all(dims[3:] == 90.0))
        if ortho:
            lengths = dims[:3].astype(np.float64) * A_TO_NM
            h = np.diag(lengths)
            vol = float(lengths[0] * lengths[1] * lengths[2])
        else:
            h = box_matrix_nm(dims)
            vol = abs(float(np.linalg.det(h)))
        box_nm[f] = h
        volume[f] = vol
        time_ps[f] = ts.time
        # 1. whole molecules → centres of mass (wrapped)
        d = pos[multi_idx] - pos[ref_multi]
        d = d - lengths * np.round(d / lengths) if ortho else minimum_image(d, h)
        md = masses_multi[:, None] * d
        if contiguous:
            wsum = np.zeros((n_mol, 3))
            wsum[multi_mols] = np.add.reduceat(md, multi_starts, axis=0)
        else:
            wsum = np.stack([np.bincount(mol_multi, weights=md[:, k], minlength=n_mol) for k in range(3)], axis=1)
        com_w = pos[first_atom] + wsum / mol_mass[:, None]
        # 2. displacement unwrapping, minimum image in the current box
        if prev_w is None:
            com[f] = com_w
        else:
            step_nm = com_w - prev_w
            step_nm = step_nm - lengths * np.round(step_nm / lengths) if ortho else minimum_image(step_nm, h)
            com[f] = com[f - 1] + step_nm
        prev_w = com_w
        # 3. neighbour data (MDAnalysis works in Å)
        if n_centre and n_ch:
            if ortho and n_centre * site_atoms.size <= BRUTE_FORCE_MAX_PAIRS:
                pairs, dist = _pairs_within_ortho(pos_raw[centre_atoms], pos_raw[site_atoms],
                                                  dims[:3].astype(pos_raw.dtype), rmax / A_TO_NM)
                dist = dist.astype(np.float64) * A_TO_NM
            else:
                pairs, dist = capped_distance(pos_raw[centre_atoms], pos_raw[site_atoms], rmax / A_TO_NM, box=dims)
                dist = dist * A_TO_NM
            ch = site_channel[pairs[:, 1]]
            b = np.minimum((dist / rdf_bin_nm).astype(np.int64), nbins - 1)
            inside = dist < rmax
            hist[f] = np.bincount(ch[inside] * nbins + b[inside], minlength=n_ch * nbins)
            near = dist < r_store
            if np.any(near):
                c_i = pairs[near, 0].astype(np.int64)
                p_m = site_mol[pairs[near, 1]]
                c_h = ch[near]
                dd = dist[near]
                key = (c_i * n_mol + p_m) * n_ch + c_h
                o = np.argsort(dd, kind="stable")
                ukey, idx = np.unique(key[o], return_index=True)
                dmin = dd[o][idx]
                cont["frame"].append(np.full(ukey.size, f, dtype=np.int32))
                cont["channel"].append((ukey % n_ch).astype(np.int16))
                cont["partner"].append(((ukey // n_ch) % n_mol).astype(np.int32))
                cont["centre"].append((ukey // n_ch // n_mol).astype(np.int32))
                cont["dmin_nm"].append(dmin.astype(np.float32))
        if n_centre > 1:
            pairs, dist = self_capped_distance(pos_raw[centre_atoms], rmax / A_TO_NM, box=ts.dimensions)
            dist = dist * A_TO_NM
            dist = dist[dist < rmax]
            hist_cc[f] = 2 * np.bincount(np.minimum((dist / rdf_bin_nm).astype(np.int64), nbins - 1),
                                         minlength=nbins)

    time_ps, regularised = regularise_time(time_ps)
    total_mass = mol_mass.sum()
    system_com = np.einsum("fmk,m->fk", com, mol_mass) / total_mass
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
               input_dtype=input_dtype, rdf_rmax_nm=rmax, rdf_bin_nm=rdf_bin_nm, time_regularised=regularised)
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
