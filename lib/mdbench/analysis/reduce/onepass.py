"""The one pass: topology → site channels → frames (in worker processes) → the stitched reduction."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mdbench.analysis.concurrency import can_fork, run_forked_ranges, shared_zeros
from mdbench.analysis.reduce.boxes import A_TO_NM, box_matrix_nm
from mdbench.analysis.reduce.frames import CHUNK_ATOM_FRAMES, CHUNK_MIN_FRAMES, FramePass
from mdbench.analysis.reduce.model import ReducedTrajectory, StructureRows, species_charges_e
from mdbench.analysis.reduce.molecules import Topology
from mdbench.analysis.reduce.pairs import BRUTE_FORCE_MAX_PAIRS
from mdbench.analysis.reduce.series import BLOCK_FRAMES, ComSeries, ComSeriesFile
from mdbench.analysis.reduce.sites import classify_sites
from mdbench.analysis.reduce.unwrap import regularise_time, unwrap
from mdbench.analysis.reduce.xtc import direct_xtc
from mdbench.analysis.settings import registered
from mdbench.errors import InputError

log = logging.getLogger(__name__)

#: Atom-frames from which :func:`reduce_universe` uses several processes by default (``workers=None``):
#: below it, forking and reopening the trajectory cost as much as they save.
PARALLEL_MIN_ATOM_FRAMES = 4_000_000
#: Most worker processes used by default (one per available core up to this).
MAX_DEFAULT_WORKERS = 8


def default_workers() -> int:
    """The project's CPU thread cap (usable cores or ``$MDBENCH_THREAD_CAP``), at most
    :data:`MAX_DEFAULT_WORKERS`."""
    from mdbench.threads import default_thread_cap

    return max(1, min(default_thread_cap(), MAX_DEFAULT_WORKERS))


def reduce_universe(u: Any, *, centre_species: list[str] | None = None, rdf_rmax_nm: float | None = None,
                    rdf_bin_nm: float | None = None, r_store_nm: float | None = None, start: int | None = None,
                    stop: int | None = None, step: int | None = None, structure_max_frames: int | None = None,
                    verbose: bool = False, source: dict[str, Any] | None = None,
                    workers: int | None = None, neutral_charge_tolerance_e: float | None = None,
                    series_dir: str | Path | None = None) -> ReducedTrajectory:
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
    neutral_charge_tolerance_e : float, optional
        A species whose net molecular charge is below this in magnitude is neutral (see
        :func:`~mdbench.analysis.reduce.model.species_charges_e`). None: the registered setting.
    rdf_rmax_nm : float, optional
        Upper edge of the RDF histograms [nm]; clipped to half the smallest box width of the first frame.
    rdf_bin_nm : float, optional
        RDF bin width [nm].
    r_store_nm : float, optional
        Largest centre–partner distance kept in the neighbour table [nm] (the first-minimum search range).
        None (each of the three): the registered setting of the same name (``params/analysis/default.yaml``).
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
    series_dir : path, optional
        Keep the unwrapped COMs out of memory: float32 displacements in an anonymous scratch file in this
        folder, read back lazily (``com_nm`` is then a :class:`~mdbench.analysis.reduce.series.ComSeries`;
        precision and layout in :mod:`mdbench.analysis.reduce.series`). None: an in-memory float64 array.

    Returns
    -------
    ReducedTrajectory
    """
    mols = _molecules(u.atoms, neutral_charge_tolerance_e)
    if centre_species is None:
        centre_species = [sp for sp in mols.species if mols.species_charge[sp] > 0.0]
    sites = _sites(u, mols, centre_species)
    traj = u.trajectory
    frames = range(*slice(start, stop, step).indices(len(traj)))
    n_frames = len(frames)
    if n_frames < 1:
        raise InputError("the trajectory slice selects no frames")
    if traj.ts.dimensions is None:
        raise InputError("the trajectory has no box; periodic analysis needs one")
    rdf_bin_nm = registered(rdf_bin_nm, "rdf_bin_nm")
    rmax, r_store, nbins, edges = _radii(box_matrix_nm(traj[frames[0]].dimensions),
                                         registered(rdf_rmax_nm, "rdf_rmax_nm"), rdf_bin_nm,
                                         registered(r_store_nm, "r_store_nm"))
    every = 1 if not structure_max_frames else max(1, -(-n_frames // int(structure_max_frames)))
    unit = BLOCK_FRAMES if series_dir is not None else 1  # pass ranges start on the store's time blocks
    n_units = -(-n_frames // unit)
    n_workers = _worker_count(workers, n_frames, mols.n_atoms, n_units)
    store = ComSeriesFile(series_dir, n_frames, mols.n_mol) if series_dir is not None else None
    job = _frame_pass(u, mols, sites, frames, n_workers=n_workers, nbins=nbins, rdf_bin_nm=rdf_bin_nm, rmax=rmax,
                      r_store=r_store, every=every, store=store, unit=unit)
    parts, n_workers = _run_pass(job, n_units, n_workers, verbose)
    log.info("reduced %d frames of %d atoms to %d molecules", n_frames, mols.n_atoms, mols.n_mol)
    return _result(job, parts, mols, sites, centre_species, store, edges=edges, r_store=r_store,
                   source=dict(source or {}), n_workers=n_workers)


def _run_pass(job: FramePass, n_units: int, n_workers: int, verbose: bool) -> tuple[list[dict[str, Any]], int]:
    """(the parts of the pass, one per range, and the processes that made them): in ``n_workers`` forked
    processes, or in this one (also when the worker pool broke: redone here, nothing half-written kept)."""
    from tqdm.auto import tqdm

    n_frames = len(job.frames)
    with tqdm(total=n_frames, disable=not verbose, desc="reduce", unit="frame") as bar:
        parts = (run_forked_ranges(job.run_forked, n_units, n_workers, lambda done: bar.update(done - bar.n))
                 if n_workers > 1 else None)
        if parts is None:
            n_workers = 1
            job.hist.fill(0)
            job.hist_cc.fill(0)
            job.bad.fill(0)
            parts = [job.run(0, n_frames, on_chunk=bar.update)]
    return parts, n_workers


def _result(job: FramePass, parts: list[dict[str, Any]], mols: _Molecules, sites: _Sites,
            centre_species: list[str], store: ComSeriesFile | None, *, edges: np.ndarray, r_store: float,
            source: dict[str, Any], n_workers: int) -> ReducedTrajectory:
    """The :class:`ReducedTrajectory` of the stitched parts, ``source`` updated with how it was made."""
    base = _stitch(parts, job)
    time_ps, regularised = regularise_time(job.time_ps)
    frames = job.frames
    source.update(n_atoms=int(mols.n_atoms), n_molecules=int(mols.n_mol),
                  frames=[frames.start, frames.stop, frames.step], input_dtype=parts[0]["input_dtype"],
                  rdf_rmax_nm=float(edges[-1]), rdf_bin_nm=job.rdf_bin_nm, time_regularised=regularised,
                  chunk_frames=int(job.chunk), structure_every=int(job.every), reduction_workers=int(n_workers),
                  **_method(job, store))
    com = job.com
    if store is not None:
        com = ComSeries(store, np.array([p["range"][0] for p in parts]), np.stack(base),
                        {sp: job.sums[:, k].copy() for k, sp in enumerate(mols.species)}, mols.mol_species,
                        non_finite=int(job.bad.sum()))
    cont = {k: [arr for part in parts for arr in part["contacts"][k]] for k in parts[0]["contacts"]}
    contacts = {k: (np.concatenate(v) if v else np.empty(0, dtype=np.float32 if k == "dmin_nm" else np.int32))
                for k, v in cont.items()}
    rdf_counts, rdf_npairs = _rdf_tables(job, sites, centre_species, len(job.frames))
    return ReducedTrajectory(
        time_ps=time_ps, box_nm=job.box_nm, volume_nm3=job.volume, com_nm=com,
        system_com_nm=job.sums[:, -1] / mols.mol_mass.sum(),  # Σ m_i r_i summed by the pass in float64
        mol_species=mols.mol_species, mol_mass_amu=mols.mol_mass, mol_charge_e=mols.mol_charge,
        species=mols.species, species_charge_e=mols.species_charge, centre_species=list(centre_species),
        centre_mol=sites.centre_mol, channels=sites.channels, rdf_edges_nm=edges, rdf_counts=rdf_counts,
        rdf_n_pairs=rdf_npairs, contacts=contacts, r_store_nm=r_store, source=source,
    )


@dataclass(frozen=True)
class _Molecules:
    """The molecules of a topology: molecule of each atom (renumbered 0..M-1 in order of appearance), masses
    [u], net charges [e] and species."""

    n_atoms: int
    n_mol: int
    mol_of_atom: np.ndarray
    masses: np.ndarray
    mol_mass: np.ndarray
    mol_charge: np.ndarray
    mol_species: np.ndarray
    species: list[str]
    species_charge: dict[str, float]


def _molecules(atoms: Any, neutral_charge_tolerance_e: float | None) -> _Molecules:
    """:class:`_Molecules` of an MDAnalysis AtomGroup (molecule numbers, else residues; masses and charges
    required)."""
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
    mol_species = np.asarray(atoms.resnames)[first_atom].astype(str)
    species = list(dict.fromkeys(mol_species.tolist()))
    if neutral_charge_tolerance_e is None:
        from mdbench.analysis.settings import AnalysisSettings

        neutral_charge_tolerance_e = AnalysisSettings().neutral_charge_tolerance_e
    species_charge = species_charges_e(mol_species, mol_charge, species, float(neutral_charge_tolerance_e))
    return _Molecules(n_atoms, n_mol, mol_of_atom, masses, mol_mass, mol_charge, mol_species, species,
                      species_charge)


@dataclass(frozen=True)
class _Sites:
    """The centres (atoms of the centre species) and the partner site channels of the pair data."""

    centre_atoms: np.ndarray
    centre_mol: np.ndarray
    channels: list[Any]
    site_atoms: np.ndarray
    site_channel: np.ndarray
    site_mol: np.ndarray
    site_counts: np.ndarray


def _sites(u: Any, mols: _Molecules, centre_species: list[str]) -> _Sites:
    """Centre atoms of ``centre_species`` and the site channels of :func:`classify_sites`."""
    mol_of_atom = mols.mol_of_atom
    centre_atoms = np.flatnonzero(np.isin(mols.mol_species[mol_of_atom], centre_species))
    channels = classify_sites(u, mol_of_atom, mols.mol_species, mols.mol_charge, centre_species)
    site_atoms = np.concatenate([c.atom_indices for c in channels]) if channels else np.empty(0, np.int64)
    site_channel = (np.concatenate([np.full(c.atom_indices.size, k) for k, c in enumerate(channels)])
                    if channels else np.empty(0, np.int64))
    return _Sites(centre_atoms, mol_of_atom[centre_atoms], channels, site_atoms, site_channel,
                  mol_of_atom[site_atoms], np.array([c.atom_indices.size for c in channels], dtype=np.float64))


def _radii(box0: np.ndarray, rdf_rmax_nm: float, rdf_bin_nm: float,
           r_store_nm: float) -> tuple[float, float, int, np.ndarray]:
    """(histogram upper edge [nm], neighbour-table range [nm], bins, bin edges [nm]): ``rdf_rmax_nm`` clipped to
    half the smallest width of the first box ``box0`` [nm] and rounded to whole bins."""
    widths = np.abs(np.linalg.det(box0)) / np.linalg.norm(np.cross(box0[[1, 2, 0]], box0[[2, 0, 1]]), axis=1)
    rmax = float(min(rdf_rmax_nm, 0.5 * widths.min()))
    r_store = float(min(r_store_nm, rmax))
    nbins = max(1, int(round(rmax / rdf_bin_nm)))
    edges = np.linspace(0.0, nbins * rdf_bin_nm, nbins + 1)
    return float(edges[-1]), r_store, nbins, edges


def _worker_count(workers: int | None, n_frames: int, n_atoms: int, n_units: int) -> int:
    """Processes of the pass (see :func:`reduce_universe`'s ``workers``): a few frames and one range unit each
    at least; 1 where the platform cannot fork."""
    if workers is None:
        n_workers = default_workers() if n_frames * n_atoms >= PARALLEL_MIN_ATOM_FRAMES else 1
    else:
        n_workers = int(workers)
        if n_workers < 1:
            raise InputError(f"workers must be a positive integer, got {workers}")
    n_workers = max(1, min(n_workers, n_frames // CHUNK_MIN_FRAMES))  # a few frames per worker at least
    n_workers = max(1, min(n_workers, n_units))
    if n_workers > 1 and not can_fork():
        log.info("no 'fork' start method on this platform: reducing in one process")
        n_workers = 1
    return n_workers


def _frame_pass(u: Any, mols: _Molecules, sites: _Sites, frames: range, *, n_workers: int, nbins: int,
                rdf_bin_nm: float, rmax: float, r_store: float, every: int, store: ComSeriesFile | None,
                unit: int) -> FramePass:
    """The :class:`FramePass` of the reduction, its result arrays shared with the workers when there are
    several."""
    n_frames, n_mol, n_ch = len(frames), mols.n_mol, len(sites.channels)
    traj = u.trajectory
    xtc = direct_xtc(traj, frames[0])
    pairs_per_frame = sites.centre_atoms.size * max(sites.site_atoms.size, sites.centre_atoms.size)
    chunk = max(1, min(n_frames, max(CHUNK_ATOM_FRAMES // mols.n_atoms, CHUNK_MIN_FRAMES)))
    n_struct = -(-n_frames // every)  # histogram rows: structure frames only
    empty = shared_zeros if n_workers > 1 else (lambda shape, dtype: np.zeros(shape, dtype=dtype))
    code = {sp: k for k, sp in enumerate(mols.species)}
    weights = np.zeros((len(mols.species) + 1, n_mol))  # rows: each species' indicator, then the masses
    weights[[code[sp] for sp in mols.mol_species.tolist()], np.arange(n_mol)] = 1.0
    weights[-1] = mols.mol_mass
    return FramePass(
        reader=traj, frames=frames, top=Topology.build(mols.mol_of_atom, mols.masses),
        centre_atoms=sites.centre_atoms, site_atoms=sites.site_atoms, site_channel=sites.site_channel,
        site_mol=sites.site_mol, n_ch=n_ch, nbins=nbins, rdf_bin_nm=rdf_bin_nm, rmax=rmax,
        r_store=r_store, dense_ok=pairs_per_frame <= BRUTE_FORCE_MAX_PAIRS, every=every, chunk=chunk,
        time_ps=empty((n_frames,), np.float64), box_nm=empty((n_frames, 3, 3), np.float64),
        volume=empty((n_frames,), np.float64),
        com=empty((n_frames, n_mol, 3), np.float64) if store is None else None,
        hist=empty((n_struct, n_ch * nbins), np.int32), hist_cc=empty((n_struct, nbins), np.int32),
        weights=weights, sums=empty((n_frames, len(mols.species) + 1, 3), np.float64),
        bad=empty((n_frames,), np.int64), store=store, range_unit=unit,
        unit_nm=1.0 if xtc is not None else A_TO_NM, xtc=xtc)


def _stitch(parts: list[dict[str, Any]], job: FramePass) -> list[np.ndarray]:
    """Stitch the ranges: each worker unwrapped from its own first frame; shift every later range (the COMs and
    species sums of ``job``) so that its first frame continues the displacement chain of the previous one (what
    one pass would give). Returns the unwrapped first-frame COMs [nm] of each range."""
    box_nm, com, sums, weights = job.box_nm, job.com, job.sums, job.weights
    shift = np.zeros((weights.shape[1], 3))  # (M, 3) float64
    base = [parts[0]["first_u"]]
    for part, prev in zip(parts[1:], parts[:-1]):
        a, b = part["range"]
        box_a = box_nm[a:a + 1]
        ortho_a = bool(np.all(box_a[0] == np.diag(np.diag(box_a[0]))))
        prev_last_u = prev["last_u"] + shift
        u_a = unwrap(part["first_u"][None].copy(), np.diagonal(box_a, axis1=1, axis2=2) if ortho_a else box_a,
                     ortho_a, prev["last_wrapped"], prev_last_u)
        shift = u_a[0] - part["first_u"]
        base.append(u_a[0])
        if com is not None:
            com[a:b] += shift
        sums[a:b] += weights @ shift
    return base


def _rdf_tables(job: FramePass, sites: _Sites, centre_species: list[str],
                n_frames: int) -> tuple[dict[str, Any], dict[str, float]]:
    """(pair histogram rows by channel name, pair counts by channel name), the centre–centre channel included
    when there are two centres or more."""
    every, nbins, n_centre = job.every, job.nbins, sites.centre_atoms.size
    per_frame = (lambda rows: rows) if every == 1 else (lambda rows: StructureRows(rows, every, n_frames))
    rdf_counts = {c.name: per_frame(job.hist[:, k * nbins:(k + 1) * nbins]) for k, c in enumerate(sites.channels)}
    rdf_npairs = {c.name: float(n_centre * sites.site_counts[k]) for k, c in enumerate(sites.channels)}
    if n_centre > 1:
        cc = "+".join(centre_species)
        rdf_counts[f"{cc}:{cc}"] = per_frame(job.hist_cc)
        rdf_npairs[f"{cc}:{cc}"] = float(n_centre * (n_centre - 1))
    return rdf_counts, rdf_npairs


def _method(job: FramePass, store: ComSeriesFile | None) -> dict[str, Any]:
    """How the pass read the frames and searched the pairs (provenance fields of the result's ``source``)."""
    return dict(com_series="file-backed float32 displacements (reduce.series)" if store is not None
                else "in memory, float64",
                frame_reader="MDAnalysis XTCFile.read_direct_x (nm)" if job.xtc is not None
                else f"MDAnalysis {type(job.reader).__name__}",
                pair_search="dense numpy (orthorhombic)" if job.dense_ok
                else "periodic k-d tree (scipy cKDTree; triclinic: MDAnalysis capped_distance)")


def reduce_files(tpr: str | Path, xtc: str | Path, **kwargs: Any) -> ReducedTrajectory:
    """Open ``tpr`` + ``xtc`` with MDAnalysis and :func:`reduce_universe` them (keyword arguments pass on).

    Raises
    ------
    InputError
        A file is missing or unreadable, naming the file.
    """
    from mdbench.analysis.reduce.topology import tpr_universe

    for p in (tpr, xtc):
        if not Path(p).is_file():
            raise InputError("file not found; give an existing GROMACS file", str(p))
    from mdbench.analysis.reduce.topology import read_tpr_topology
    from mdbench.trajcheck import scan_xtc

    try:  # the run input alone first, so an unreadable .tpr is named as such (not the .xtc)
        n_top = read_tpr_topology(tpr).n_atoms
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"not a readable GROMACS run input .tpr ({first_line}); give the production's .tpr",
                         str(tpr)) from exc
    n_traj = scan_xtc(xtc).n_atoms
    if n_traj and n_traj != n_top:
        raise InputError(f"{n_traj} atoms per frame, but the run input {tpr} has {n_top}; give the .tpr and "
                         "the .xtc written from it", str(xtc))
    import os
    import tempfile

    # MDAnalysis caches frame offsets (.<name>_offsets.npz, .lock) beside the trajectory it opens: open it
    # through a link in a private folder, so nothing is ever written next to the inputs (a run directory).
    with tempfile.TemporaryDirectory(prefix="mdbench-offsets-") as private:
        link = Path(private) / Path(xtc).name
        os.symlink(os.path.realpath(xtc), link)
        try:
            u = tpr_universe(tpr, link)
        except Exception as exc:  # MDAnalysis raises many types for unreadable files
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"MDAnalysis cannot read the topology/trajectory pair ({first_line}); give the .tpr "
                             "and the .xtc written from it", str(xtc)) from exc
        return reduce_universe(u, source={"tpr": str(tpr), "xtc": str(xtc)}, **kwargs)
