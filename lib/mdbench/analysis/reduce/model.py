"""The data model of the one-pass reduction: site channels and the reduced trajectory.

Units: nm, ps, amu, e (GROMACS units), float64.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


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


def species_charges_e(mol_species: np.ndarray, mol_charge_e: np.ndarray, species: list[str],
                      neutral_tolerance_e: float) -> dict[str, float]:
    """Net charge per molecule of each species [e]; a species whose |q| is below ``neutral_tolerance_e``
    is neutral (exactly 0).

    The one place species charges are formed: a neutral solvent whose partial charges were rounded to a
    few decimals (float32 in the tpr) sums to ±1e-8 e, and a sign test on that noise would make DMC a
    second cation. Every estimator reads the charges from here (:attr:`ReducedTrajectory.species_charge_e`).
    """
    out: dict[str, float] = {}
    for sp in species:
        q = float(np.mean(mol_charge_e[mol_species == sp]))
        out[sp] = 0.0 if abs(q) < neutral_tolerance_e else q
    return out


class StructureRows:
    """Per-frame pair counts ``(F, B)`` of a strided reduction, stored for its structure frames only.

    Frame ``f`` has the counts of row ``f // every`` when ``f % every == 0`` and zeros otherwise (no
    neighbour data there); only those rows are kept, so the counts do not grow with the frames between
    structure frames. Indexing by frames (an int, a slice or an index array, then optionally the bins)
    returns an ndarray, as for the per-frame array of an unstrided reduction.
    """

    ndim = 2

    def __init__(self, rows: np.ndarray, every: int, n_frames: int):
        self.rows, self.every, self.n_frames = rows, int(every), int(n_frames)
        self.dtype = rows.dtype

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_frames, int(self.rows.shape[1]))

    def __len__(self) -> int:
        return self.n_frames

    def __getitem__(self, key: Any) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        frames = np.arange(self.n_frames)[key[0]]
        one = np.ndim(frames) == 0
        frames = np.atleast_1d(frames)
        out = np.zeros((frames.size, self.rows.shape[1]), dtype=self.dtype)
        hit = frames % self.every == 0
        out[hit] = self.rows[frames[hit] // self.every]
        out = out[0] if one else out
        return out[(Ellipsis, *key[1:])] if len(key) > 1 else out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype, copy=False)

    def astype(self, dtype: Any, **kwargs: Any) -> np.ndarray:
        return np.asarray(self).astype(dtype, **kwargs)

    def sum(self, axis: int | None = None, **kwargs: Any) -> Any:
        """Sums (zero rows add nothing: axis None or 0 sum the stored rows)."""
        if axis in (None, 0):
            return self.rows.sum(axis=axis, **kwargs)
        return np.asarray(self).sum(axis=axis, **kwargs)


class SpeciesFrames:
    """Frames and species of a reduced trajectory (``time_ps``, ``species``, ``species_charge_e`` and
    ``mol_species`` are the subclass' fields): :class:`ReducedTrajectory` and the centres kept for a second
    reader (:class:`mdbench.analysis.reduce.centres.Centres`)."""

    time_ps: np.ndarray
    species: list[str]
    species_charge_e: dict[str, float]
    mol_species: np.ndarray

    @property
    def n_frames(self) -> int:
        """Number of frames F."""
        return int(self.time_ps.shape[0])

    def ions(self) -> list[str]:
        """Charged species (cations and anions), in order of first appearance."""
        return [sp for sp in self.species if self.species_charge_e[sp] != 0.0]

    def anions(self) -> list[str]:
        """Species with a negative net charge."""
        return [sp for sp in self.species if self.species_charge_e[sp] < 0.0]

    def neutral_species(self) -> list[str]:
        """Species whose net charge is zero within the registered tolerance."""
        return [sp for sp in self.species if self.species_charge_e[sp] == 0.0]

    def species_mask(self, species: str) -> np.ndarray:
        """Boolean mask over molecules of one species."""
        return self.mol_species == species


@dataclass
class ReducedTrajectory(SpeciesFrames):
    """What the estimators need from a trajectory, in GROMACS units and float64.

    Attributes
    ----------
    time_ps : ndarray (F,)
        Frame times [ps].
    box_nm : ndarray (F, 3, 3)
        Box matrices, rows are box vectors [nm].
    volume_nm3 : ndarray (F,)
        Box volume per frame [nm³].
    com_nm : ndarray (F, M, 3) or ComSeries
        Unwrapped centres of mass of the M molecules [nm] (lab frame; subtract ``system_com_nm`` for the
        barycentric frame): a float64 array, or for long trajectories a file-backed
        :class:`~mdbench.analysis.reduce.series.ComSeries` that reads float64 blocks on indexing.
    system_com_nm : ndarray (F, 3)
        Total-mass-weighted centre of all atoms, from the unwrapped molecular centres [nm].
    mol_species : ndarray (M,) of str
        Species (residue name) of each molecule.
    mol_mass_amu, mol_charge_e : ndarray (M,)
        Mass [amu] and net charge [e] of each molecule (charges as in the topology, e.g. scaled ±0.72).
    species : list of str
        Species in order of first appearance.
    species_charge_e : dict[str, float]
        Net charge per molecule of each species [e], |q| below the registered neutral tolerance set to 0
        (:func:`species_charges_e`; the charges every estimator uses).
    centre_species : list of str
        Species whose atoms are the centres of the neighbour data (cations).
    centre_mol : ndarray (C,)
        Molecule index of each centre atom.
    channels : list of Channel
        Site channels of the neighbour data.
    rdf_edges_nm : ndarray (B+1,)
        Histogram bin edges [nm].
    rdf_counts : dict[str, ndarray (F, B) int32 or StructureRows]
        Pair counts per frame and bin for each channel name (plus ``"<centre>:<centre>"`` for the
        centre–centre channel, each unordered pair counted twice). Per frame so that any frame window
        (whole interval, blocks) can be summed without a second pass; a strided reduction keeps the rows
        of its structure frames only (:class:`StructureRows`, an ndarray again in :meth:`structure_view`).
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
    species_charge_e: dict[str, float]
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

    def species_com_nm(self, species: str) -> np.ndarray:
        """Unwrapped COMs of one species' molecules, (F, N_s, 3) [nm].

        A view (no copy of the frames × molecules array) when the species' molecules are consecutive, as
        in every GROMACS topology built from ``[ molecules ]`` blocks; a copy otherwise. A file-backed
        series gives a lazy view of that species (:meth:`ComSeries.species`).
        """
        from mdbench.analysis.reduce.series import ComSeries

        if isinstance(self.com_nm, ComSeries):
            return self.com_nm.species(species)
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
            com_nm=self._com_frames(idx), system_com_nm=self.system_com_nm[idx], mol_species=self.mol_species,
            mol_mass_amu=self.mol_mass_amu, mol_charge_e=self.mol_charge_e, species=self.species,
            species_charge_e=self.species_charge_e, centre_species=self.centre_species, centre_mol=self.centre_mol, channels=self.channels,
            rdf_edges_nm=self.rdf_edges_nm, rdf_counts={k: v[idx] for k, v in self.rdf_counts.items()},
            rdf_n_pairs=self.rdf_n_pairs, contacts=contacts,
            r_store_nm=self.r_store_nm, source=dict(self.source, subset=[int(idx[0]), int(idx[-1]) + 1],
                                                    structure_every=1 if self.structure_every == 1 else -1),
        )

    def _com_frames(self, idx: np.ndarray) -> Any:
        """The COMs of frames ``idx`` (a lazy view of a file-backed series; a copy of an array)."""
        from mdbench.analysis.reduce.series import ComSeries

        return self.com_nm.take_frames(idx) if isinstance(self.com_nm, ComSeries) else self.com_nm[idx]

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
