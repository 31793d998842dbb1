"""The analysis pipeline of one case: registrations, one trajectory pass, every estimator, states, outputs.

``analyze_files(tpr, xtc, edr, out_dir)`` analyses any GROMACS run (the audit's canonical reanalysis calls
it); ``analyze_case(run_dir, case)`` finds the production files of a run directory, registers the
definitions in its run record *before* computing, writes ``analysis/<CASE>/results.json`` and figures, and
sets each observable's state in the record.

Order of work (each step uses only what the previous ones produced):

1. registrations (guard/blocks, atom selections, RDF/coordination rules, contact/cluster definitions,
   fitting and plateau rules, adequacy thresholds and stopping rule) → ``registrations.jsonl``;
2. energy file → guard interval (given, or the registered pymbar rule) and thermodynamics;
3. one streaming trajectory pass (:mod:`mdbench.analysis.reduce`);
4. RDF, coordination, shell abundance, association; self-diffusion of every species; Onsager L_ij, σ,
   σ_NE, ionicity, t+ (barycentric and solvent frame); Green–Kubo viscosity;
5. states by the registered rules (:mod:`mdbench.analysis.states`); results.json validated against
   ``schemas/results.schema.json``; figures.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mdbench.errors import InputError, MdbenchError
from mdbench.record.store import sha256_file

log = logging.getLogger(__name__)

#: Stage whose validity the analysis depends on (engine name first, short directory name as fallback).
UPSTREAM_STAGES = ("production", "prod")


@dataclass
class AnalysisSettings:
    """Registered analysis settings (every field is part of a registration).

    Attributes
    ----------
    guard_ps : float or None
        Excluded initial interval [ps]; None → the registered automatic rule (pymbar detection).
    n_blocks : int
        Number of consecutive equal blocks (4).
    rdf_rmax_nm, rdf_bin_nm : float
        RDF range and bin width [nm].
    r_store_nm : float
        Neighbour-table range, also the first-minimum search limit [nm].
    structure_max_frames : int or None
        At most this many frames carry RDF/coordination/association data: every k-th frame,
        k = ceil(F / structure_max_frames); transport uses every frame. None: every frame.
    fixed_cn_cutoff_nm : float
        Fixed coordination-integral cutoff reported for every channel (LHCE rule, 0.40 nm).
    contact_cutoffs_nm : dict
        Registered cation–anion contact cutoffs per site channel (FSI:O 0.30 nm).
    contact_channels : dict
        Anion species → site labels used for contacts (FSI: O only).
    diffusion_beta_range, diffusion_min_decades, diffusion_max_lag_fraction : fitting rule of D.
    onsager_fit_window_fraction, onsager_beta_range : fitting rule of the collective MSDs.
    solvent_reference : str or None
        Reference species of the solvent frame (None → the most numerous neutral species).
    temperature_K : float or None
        Temperature for transport; None → mean of the energy file's temperature over the window.
    """

    guard_ps: float | None = None
    n_blocks: int = 4
    rdf_rmax_nm: float = 1.0
    rdf_bin_nm: float = 0.005
    r_store_nm: float = 0.6
    structure_max_frames: int | None = 2500
    fixed_cn_cutoff_nm: float = 0.40
    contact_cutoffs_nm: dict[str, float] = field(default_factory=lambda: {"FSI:O": 0.30})
    contact_channels: dict[str, list[str]] = field(default_factory=lambda: {"FSI": ["O"]})
    diffusion_beta_range: tuple[float, float] = (0.9, 1.1)
    diffusion_min_decades: float = 0.9
    diffusion_max_lag_fraction: float = 0.5
    onsager_fit_window_fraction: tuple[float, float] = (0.05, 0.25)
    onsager_beta_range: tuple[float, float] = (0.8, 1.2)
    solvent_reference: str | None = None
    temperature_K: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return json.loads(json.dumps(dataclasses.asdict(self)))


def registration_definitions(settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
    """The definitions registered before any result, keyed by registration kind."""
    from mdbench.analysis import association, coordination, rdf, reduce
    from mdbench.analysis.blocks import BLOCK_DEFINITION
    from mdbench.analysis.states import STATE_RULES

    s = settings
    return {
        "analysis_guard_and_blocks": {
            "guard_ps": s.guard_ps,
            "guard_rule": ("given guard_ps" if s.guard_ps is not None else
                           "latest pymbar detect_equilibration t0 (coarse origin grid) over Potential and, "
                           "when present, Density of the energy file; one guard for every analysis"),
            "n_blocks": s.n_blocks, "uncertainty": BLOCK_DEFINITION,
        },
        "analysis_atom_selections": {
            "molecule": "GROMACS molecule (tpr molnums), species = residue name of its first atom",
            "centres": "atoms of species with positive net molecular charge (cations, e.g. LI)",
            "site_labels": reduce.SITE_LABELS,
            "site_rule": "labels from elements and bonds of the tpr, not from atom names",
            "com": "centre of mass of the whole molecule (atoms minimum-imaged to the first atom), float64",
            "unwrapping": "displacement scheme with minimum image in the current box (NPT-safe)",
        },
        "analysis_rdf_coordination": {
            "rdf_rmax_nm": s.rdf_rmax_nm, "rdf_bin_nm": s.rdf_bin_nm, "first_minimum_rule": rdf.FIRST_MIN_RULE,
            "cn_definition": "distinct partner molecules with any site of the channel within r_c",
            "cn_cutoffs": "first minimum of each channel's g(r) (registered rule); fixed "
                          f"{s.fixed_cn_cutoff_nm} nm reported for every channel as well",
            "cross_check": "rho * integral 4 pi r^2 g(r) dr (site count) at the same r_c",
            "abundance": "mean distinct molecules of each species in the first shell / shell total",
            "structure_frames": ("every frame" if not s.structure_max_frames else
                                 f"every k-th frame, k = ceil(frames / {s.structure_max_frames}) (at most "
                                 f"{s.structure_max_frames} frames; consecutive frames 1 ps apart are strongly "
                                 "correlated for first-shell contacts); blocks and guard as for every analysis"),
        },
        "analysis_contacts_clusters": {
            "contact_cutoffs_nm": s.contact_cutoffs_nm, "contact_sites": s.contact_channels,
            "other_anions": "all sites of the anion; cutoff = first minimum of the cation-site g(r), else "
                            f"{s.fixed_cn_cutoff_nm} nm",
            "classes": "per anion, distinct cations in contact: 0 free_or_SSIP, 1 CIP, >=2 AGG",
            "clusters": "connected components of the cation-anion contact graph; size in ions",
        },
        "analysis_fitting_rules": {
            "diffusion": {"beta_range": list(s.diffusion_beta_range), "min_window_decades": s.diffusion_min_decades,
                          "max_lag_fraction_of_block": s.diffusion_max_lag_fraction, "frame": "barycentric"},
            "onsager": {"fit_window_fraction_of_block": list(s.onsager_fit_window_fraction),
                        "beta_range": list(s.onsager_beta_range), "fit": "linear in time (cross terms may be <0)",
                        "frames": "barycentric and solvent (reference species named)"},
            "viscosity": {"method": "Green-Kubo, 5 traceless pressure components, plateau rule of "
                                    "mdbench.analysis.viscosity.PlateauRule (defaults)",
                          "requires": "pressure output <= 0.5 ps and constant volume (no barostat)"},
        },
        "analysis_adequacy_and_stopping": {
            "state_rules": STATE_RULES,
            "thresholds": {"cn_max_rel_half_width": coordination.CN_MAX_REL_HALF_WIDTH,
                           "cn_abs_half_width_ok": coordination.CN_ABS_HALF_WIDTH_OK,
                           "rdf_block_first_min_tolerance_nm": 0.05,
                           "association_fraction_max_half_width": association.FRACTION_MAX_HALF_WIDTH,
                           "diffusion_max_rel_half_width": 0.5, "sigma_t_plus_max_rel_half_width": 0.5,
                           "viscosity_max_rel_half_width": 0.5, "viscosity_max_component_spread": 0.5},
            "stopping_rule": "the analysis never extends sampling; an observable failing a sampling check "
                             "is reported SI with the check named; extension is decided by the study "
                             "within the remaining budget",
        },
    }


def register_definitions(rec: Any, case: str, settings: AnalysisSettings) -> dict[str, str]:
    """Register each definition for ``case`` unless an identical one is already registered.

    A changed definition is registered as a revision (``revises`` = the previous id) with the changed keys as
    evidence; the previous one stays in the record. Returns kind → registration id in force.
    """
    ids: dict[str, str] = {}
    existing = [r for r in rec.registrations() if r.get("case") == case]
    for kind, definition in registration_definitions(settings).items():
        prior = [r for r in existing if r.get("kind") == kind]
        clean = json.loads(json.dumps(definition))
        if prior and prior[-1].get("definition") == clean:
            ids[kind] = prior[-1]["id"]
            continue
        if prior:
            old = prior[-1]["definition"] or {}
            changed = sorted(k for k in set(old) | set(clean) if old.get(k) != clean.get(k))
            ids[kind] = rec.register(kind, clean, case=case, revises=prior[-1]["id"],
                                     evidence={"reason": "analysis settings changed", "changed_keys": changed})
        else:
            ids[kind] = rec.register(kind, clean, case=case)
    return ids


def find_production_files(run_dir: str | Path, case: str) -> dict[str, Path]:
    """The tpr, xtc and edr of ``cases/<CASE>/prod`` (one of each, or names starting with ``prod``/``md``)."""
    prod = Path(run_dir) / "cases" / case / "prod"
    if not prod.is_dir():
        raise InputError(f"no production directory for case {case}; expected cases/{case}/prod/ with "
                         "tpr, xtc and edr", str(prod))
    out = {}
    for ext in ("tpr", "xtc", "edr"):
        cands = sorted(p for p in prod.glob(f"*.{ext}") if not p.name.startswith("#"))
        if len(cands) > 1:
            pref = [p for p in cands if p.stem.split(".")[0] in ("prod", "md")]
            cands = pref if len(pref) == 1 else cands
        if len(cands) != 1:
            raise InputError(f"expected exactly one .{ext} in the production directory, found "
                             f"{[p.name for p in cands]}; name the canonical one prod.{ext}", str(prod))
        out[ext] = cands[0]
    return out


def _energy_stage(edr: str | Path, guard_ps: float | None) -> tuple[Any, float, dict[str, Any]]:
    """Energy series of ``edr`` and the guard: ``guard_ps`` when given, else the registered automatic rule."""
    from mdbench.analysis.thermo import read_energy_file

    series = read_energy_file(edr)
    if guard_ps is None:
        guard, info = _guard_from_energy(series)
        return series, guard, info
    return series, float(guard_ps), {}


class _ForkedCall:
    """``fn(*args)`` in a forked child process (arguments inherited, result pickled back through a pipe).

    No thread is started in this process, so later forks (the trajectory workers) stay safe. When the child
    fails or dies, :meth:`result` computes ``fn(*args)`` here instead, so any error surfaces with its own
    message from this process.
    """

    def __init__(self, fn: Any, args: tuple[Any, ...], process: Any, conn: Any) -> None:
        self.fn, self.args, self.process, self.conn = fn, args, process, conn

    @classmethod
    def start(cls, fn: Any, *args: Any) -> _ForkedCall | None:
        """Fork the child; None where the platform cannot fork (the caller then runs ``fn`` itself)."""
        import multiprocessing

        if "fork" not in multiprocessing.get_all_start_methods():
            return None
        ctx = multiprocessing.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_forked_call_body, args=(send, fn, args), daemon=True)
        proc.start()
        send.close()
        return cls(fn, args, proc, recv)

    def cancel(self) -> None:
        """Stop the child and forget its answer (the caller is failing anyway)."""
        self.process.terminate()
        self.process.join()
        self.conn.close()

    def ready(self) -> bool:
        """True when the child's answer (or its death) can be received without waiting."""
        try:
            return bool(self.conn.poll(0))
        except (EOFError, OSError):
            return True

    def result(self) -> Any:
        """The child's result, or ``fn(*args)`` computed here when the child failed or died."""
        try:
            ok, value = self.conn.recv()
        except (EOFError, OSError):  # the child died without an answer
            ok, value = False, "no answer"
        finally:
            self.conn.close()
            self.process.join()
        if ok:
            return value
        log.info("forked %s did not deliver (%s); running it in this process", self.fn.__name__, value)
        return self.fn(*self.args)


def _forked_call_body(conn: Any, fn: Any, args: tuple[Any, ...]) -> None:
    """Child side of :class:`_ForkedCall`: send (True, result) or (False, error text)."""
    try:
        conn.send((True, fn(*args)))
    except BaseException as exc:  # noqa: BLE001 — reported to the parent, which recomputes
        conn.send((False, f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _import_equilibration_detection() -> None:
    """Import pymbar's timeseries module in this process (no-op when already imported)."""
    from mdbench.analysis.blocks import _pymbar_timeseries

    _pymbar_timeseries()


def _guard_from_energy(series: Any) -> tuple[float, dict[str, Any]]:
    """Registered automatic guard: latest pymbar t0 over Potential and Density (when present)."""
    from mdbench.analysis.thermo import common_guard_ps, detect_equilibration

    ests, used = [], {}
    for term in ("Potential", "Density"):
        if term in series.terms:
            e = detect_equilibration(series.terms[term], series.time_ps)
            ests.append(e)
            used[term] = e.to_dict()
    guard = common_guard_ps(ests, float(series.time_ps[0]))
    # never leave fewer than half of the run for analysis
    span = float(series.time_ps[-1] - series.time_ps[0])
    if guard > 0.5 * span:
        used["capped"] = f"detected guard {guard} ps > half the run; capped at {0.5 * span} ps"
        guard = 0.5 * span
    return guard, used


def _ensemble(series: Any) -> str:
    vol = series.terms.get("Volume")
    if vol is not None and np.ptp(vol) > 1e-6 * np.mean(vol):
        return "NPT"
    return "NVT"


def _obs(category: str, payload: dict[str, Any], *, definition: str, registration_id: str | None,
         state: Any, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """One entry of results.json ``observables`` in the schema's common shape."""
    return {
        "category": category,
        "value": payload.get("value"),
        "unit": payload.get("unit"),
        "uncertainty": payload.get("uncertainty"),
        "blocks": payload.get("blocks", []),
        "block_ranges_ps": payload.get("block_ranges_ps"),
        "window": payload.get("window"),
        "diagnostics": payload.get("diagnostics", {}),
        "definition": definition,
        "state": state.state,
        "reason": state.reason,
        "registration_id": registration_id,
        "details": details or {},
    }


def analyze_files(tpr: str | Path, xtc: str | Path, edr: str | Path, out_dir: str | Path, *,
                  guard_ps: float | None = None, settings: AnalysisSettings | None = None, rec: Any = None,
                  case: str | None = None, upstream_state: str = "valid", figures: bool = True,
                  verbose: bool = False, workers: int | None = None) -> dict[str, Any]:
    """Analyse one GROMACS run and write ``results.json`` (+ figures) into ``out_dir``.

    Parameters
    ----------
    tpr, xtc, edr : path
        Run input, compressed trajectory and energy file of the production run.
    out_dir : path
        Output directory (created).
    guard_ps : float, optional
        Excluded initial interval [ps]; None → registered automatic rule.
    settings : AnalysisSettings, optional
        Registered settings (``guard_ps`` overrides its field).
    rec : RunRecord, optional
        When given, definitions are registered there first and observable states are set.
    case : str, optional
        Case label (required with ``rec``).
    upstream_state : str
        State of the production stage (``valid`` unless the record says otherwise).
    figures : bool
        Write PNG figures.
    verbose : bool
        Progress bars.
    workers : int, optional
        Processes for the trajectory pass (see :func:`mdbench.analysis.reduce.reduce_universe`; None: one
        per core for large trajectories). The results do not depend on it (to float rounding).

    Returns
    -------
    dict
        The results document (also written to ``out_dir/results.json``).
    """
    from mdbench.analysis import association as asn
    from mdbench.analysis import coordination as coo
    from mdbench.analysis import rdf as rdfm
    from mdbench.analysis.blocks import block_windows
    from mdbench.analysis.onsager import onsager_transport
    from mdbench.analysis.reduce import reduce_files
    from mdbench.analysis.results import write_figures, write_validated_results
    from mdbench.analysis.states import classify_observable, classify_result
    from mdbench.analysis.thermo import thermo_analysis, thermo_observable
    from mdbench.analysis.units import AMU_PER_NM3_TO_KG_PER_M3
    from mdbench.analysis.viscosity import green_kubo_viscosity
    from mdbench.trajcheck import complete_frames  # issue 25

    settings = dataclasses.replace(settings or AnalysisSettings())
    if guard_ps is not None:
        settings.guard_ps = float(guard_ps)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    case = case or "case"
    # 1. registrations first
    reg_ids = register_definitions(rec, case, settings) if rec is not None else {}
    rg = reg_ids.get
    for p in (tpr, xtc, edr):
        if not Path(p).is_file():
            raise InputError("file not found; pass the production tpr, xtc and edr", str(p))

    frames = complete_frames(xtc)  # issue 25: a trajectory cut mid-frame is read to its last complete frame
    # 2a. the energy file is read (and the automatic guard detected) in a forked process while this one
    #     parses the topology and makes the trajectory pass (their cost overlaps); workers=1: all here
    energy = _ForkedCall.start(_energy_stage, edr, settings.guard_ps) if workers != 1 else None
    # 3. one pass over the trajectory
    try:
        rd = reduce_files(tpr, frames.path, rdf_rmax_nm=settings.rdf_rmax_nm, rdf_bin_nm=settings.rdf_bin_nm,
                          r_store_nm=settings.r_store_nm, structure_max_frames=settings.structure_max_frames,
                          verbose=verbose, workers=workers)
    except BaseException:
        if energy is not None:
            energy.cancel()
        raise
    # provenance hashes of the inputs, computed in a thread while the estimators run (hashlib releases the
    # GIL); started after the trajectory pass so that no thread is alive when that pass forks its workers
    src = {"tpr": str(tpr), "xtc": str(xtc), "edr": str(edr)}
    hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mdbench-sha256")
    hashes = {k: hasher.submit(sha256_file, v) for k, v in src.items()}
    hasher.shutdown(wait=False)
    # pymbar (≈ 0.5 s of imports, scipy.stats) is imported by the energy child; when this process would only
    # wait for the child, it imports pymbar too, so that later analyses in this process fork children that
    # have it (measured: 0.8 → 0.4 s for a tiny-preset case analysed again in the same process)
    if energy is not None and not energy.ready():
        _import_equilibration_detection()
    # 2b. energy file: guard and thermodynamics
    series, guard, guard_info = energy.result() if energy is not None else _energy_stage(edr, settings.guard_ps)
    ensemble = _ensemble(series)
    thermo = thermo_analysis(series, guard_ps=guard, n_blocks=settings.n_blocks, ensemble=ensemble)
    observables: dict[str, dict[str, Any]] = {}
    for name, ob in thermo.observables.items():
        st = classify_result(ob, upstream_state=upstream_state)
        observables[f"thermo/{name}"] = _obs("thermodynamics", ob.to_dict(), definition=f"mean of edr term "
                                             f"{ob.edr_term} over the window", registration_id=rg(
                                                 "analysis_guard_and_blocks"), state=st)
    if settings.temperature_K is not None:
        temperature = float(settings.temperature_K)
    elif "temperature" in thermo.observables:
        temperature = float(thermo.observables["temperature"].estimate.whole)
    else:
        raise InputError("the energy file has no Temperature term; give settings.temperature_K", str(edr))

    win = block_windows(rd.time_ps, guard, settings.n_blocks)
    # structure estimators run on the frames that carry neighbour data (all frames unless strided)
    rd_s = rd.structure_view()
    win_s = win if rd_s is rd else block_windows(rd_s.time_ps, guard, settings.n_blocks)
    # how the trajectory was treated for every neighbour-based result (declared with each of them)
    treatment = {"pbc": "minimum image in each frame's own box (orthorhombic; triclinic via MDAnalysis)",
                 "whole_molecules": "partners counted as molecules (any registered site within the cutoff)",
                 "structure_every_n_frames": rd.structure_every, "n_structure_frames": rd_s.n_frames,
                 "pair_search": rd.source.get("pair_search")}
    for name in thermo.missing:
        if name == "volume":  # fixed box: the edr has no Volume term; the trajectory's box gives it
            ob = thermo_observable(rd.volume_nm3, rd.time_ps, name="volume", unit="nm^3",
                                   edr_term="(trajectory box)", guard_ps=guard, n_blocks=settings.n_blocks)
            observables["thermo/volume"] = _obs("thermodynamics", ob.to_dict(), definition="mean box volume "
                                                "of the trajectory frames (no Volume term in the edr)",
                                                registration_id=rg("analysis_guard_and_blocks"),
                                                state=classify_result(ob, upstream_state=upstream_state))
            continue
        if name == "density":  # no Density term (fixed box): total mass / box volume per frame
            rho = rd.mol_mass_amu.sum() / rd.volume_nm3 * AMU_PER_NM3_TO_KG_PER_M3
            ob = thermo_observable(rho, rd.time_ps, name="density", unit="kg/m^3",
                                   edr_term="(trajectory: total mass / box volume)", guard_ps=guard,
                                   n_blocks=settings.n_blocks)
            observables["thermo/density"] = _obs("thermodynamics", ob.to_dict(), definition="total mass of the "
                                                 "topology / box volume of each frame (no Density term in the "
                                                 "edr)", registration_id=rg("analysis_guard_and_blocks"),
                                                 state=classify_result(ob, upstream_state=upstream_state))
            continue
        st = classify_observable(upstream_state=upstream_state, delivered=False)
        observables[f"thermo/{name}"] = _obs("thermodynamics", {}, definition="energy term absent from edr",
                                             registration_id=rg("analysis_guard_and_blocks"), state=st)

    # 4a. structure
    rdfs = rdfm.rdf_analysis(rd_s, win_s) if rd_s.rdf_counts else {}
    cutoffs: dict[str, float] = {}
    cut_rule: dict[str, str] = {}
    structure_details: dict[str, Any] = {"rdf": {}, "abundance": {}}
    for ch, res in rdfs.items():
        st = classify_result(res, upstream_state=upstream_state)
        d = res.to_dict()
        if d["first_min_nm"] is None and st.state == "C":
            st = dataclasses.replace(st, reason=st.reason + "; no first minimum within 0.60 nm by the registered "
                                     "rule (no first-shell structure): coordination uses the fixed cutoff")
        structure_details["rdf"][ch] = d
        observables[f"rdf/{ch}"] = _obs("rdf", {"value": d["first_min_nm"], "unit": "nm",
                                                      "blocks": d["block_first_min_nm"],
                                                      "window": win_s.to_dict(),
                                                      "diagnostics": {"first_peak_nm": d["first_peak_nm"],
                                                                      "sampling_checks": res.sampling_checks()}},
                                        definition="first minimum of g(r) by the registered rule "
                                                   f"(centres {'+'.join(rd_s.centre_species)}, sites {ch})",
                                        registration_id=rg("analysis_rdf_coordination"), state=st,
                                        details={"curve": {"r_nm": d["r_nm"], "g": d["g"]}})
        m = res.whole.first_min_nm
        if ch in {c.name for c in rd_s.channels}:
            cutoffs[ch] = float(m) if np.isfinite(m) else settings.fixed_cn_cutoff_nm
            cut_rule[ch] = "first minimum" if np.isfinite(m) else f"fixed {settings.fixed_cn_cutoff_nm} nm (no minimum)"
    for c in rd_s.channels:
        res = rdfs[c.name]
        for tag, rc, rule in (("first_min", cutoffs[c.name], cut_rule[c.name]),
                              (f"{settings.fixed_cn_cutoff_nm:.2f}nm", settings.fixed_cn_cutoff_nm, "fixed")):
            cr = coo.coordination(rd_s, win_s, c.species, [c.name], rc, rule, res.whole.n_sites_within(rc),
                                  res.whole.n_sites_upper_bound(rc))
            st = classify_result(cr, upstream_state=upstream_state)
            cd = cr.to_dict()
            observables[f"coordination/{c.name}@{tag}"] = _obs(
                "structure", dict(cd, diagnostics=dict(cd.get("diagnostics", {}), **treatment)),
                definition=cd["definition"],
                registration_id=rg("analysis_rdf_coordination"), state=st,
                details={"cutoff_nm": rc, "cutoff_rule": rule, "n_sites_integral": cr.n_sites_integral})
    if cutoffs:
        structure_details["abundance"] = coo.shell_abundance(rd_s, win_s, cutoffs)

    # 4b. association
    anions = [sp for sp in rd_s.species if np.mean(rd_s.mol_charge_e[rd_s.mol_species == sp]) < -0.05]
    assoc_details: dict[str, Any] = {}
    for an in anions:
        labels = settings.contact_channels.get(an)
        chans = [c.name for c in rd_s.channels if c.species == an and (labels is None or c.label in labels)]
        if not chans:
            continue
        reg_cut = [settings.contact_cutoffs_nm[c] for c in chans if c in settings.contact_cutoffs_nm]
        if reg_cut:
            rc, rule = float(min(reg_cut)), "registered contact cutoff"
        else:
            rc = float(min(cutoffs.get(c, settings.fixed_cn_cutoff_nm) for c in chans))
            rule = "first minimum of the cation-site g(r)"
        ar = asn.association(rd_s, win_s, an, chans, rc, rule)
        st = classify_result(ar, upstream_state=upstream_state)
        assoc_details[an] = ar.to_dict()
        for cls, est in ar.fractions.items():
            cst = classify_observable(upstream_state=upstream_state, values=[est.whole, *est.blocks],
                                      failures=st.failed_checks if st.state == "F" else (),
                                      sampling_checks={k: v for k, v in ar.sampling_checks().items()
                                                       if k.startswith(cls)})
            observables[f"association/{an}/{cls}"] = _obs(
                "association", dict(est.to_dict(), diagnostics=dict(treatment)),
                definition=ar.to_dict()["class_definition"] + f"; contact = {'/'.join(chans)} within {rc} nm "
                "of a cation", registration_id=rg("analysis_contacts_clusters"), state=cst)
        lc = ar.largest_cluster_fraction
        observables[f"association/{an}/largest_cluster_fraction"] = _obs(
            "association", dict(lc.to_dict(), diagnostics=dict(treatment)),
            definition="ions in the largest connected component / all ions",
            registration_id=rg("analysis_contacts_clusters"),
            state=classify_observable(upstream_state=upstream_state, values=[lc.whole, *lc.blocks]),
            details={"cluster_size_fraction_of_ions": ar.to_dict()["cluster_size_fraction_of_ions"]})

    # 4c. self-diffusion of every species
    diff_results = _diffusion_results(rd, guard, settings)
    for sp, dr in diff_results.items():
        observables[f"self_diffusion/{sp}"] = _obs(
            "self_diffusion", dr.to_dict(), definition="D = slope(MSD)/6 over the diffusive window, molecular "
            "COMs, barycentric frame", registration_id=rg("analysis_fitting_rules"),
            state=classify_result(dr, upstream_state=upstream_state))

    # 4d. collective transport
    onsager = None
    ions = [sp for sp in rd.species if abs(float(np.mean(rd.mol_charge_e[rd.mol_species == sp]))) > 0.05]
    if ions:
        charges = {sp: float(np.mean(rd.mol_charge_e[rd.mol_species == sp])) for sp in rd.species}
        neutral = [sp for sp in rd.species if sp not in ions]
        ref = settings.solvent_reference
        if ref is None and neutral:
            ref = max(neutral, key=lambda sp: int(np.sum(rd.mol_species == sp)))
        onsager = onsager_transport({sp: rd.species_com_nm(sp) for sp in rd.species}, charges,
                                    rd.time_ps, rd.volume_nm3, temperature, system_com_nm=rd.system_com_nm,
                                    reference_species=ref, guard_ps=guard, n_blocks=settings.n_blocks,
                                    fit_window_fraction=settings.onsager_fit_window_fraction,
                                    beta_range=settings.onsager_beta_range,
                                    self_msd_nm2={sp: [dr.msd_nm2, *dr.msd_blocks_nm2]
                                                  for sp, dr in diff_results.items() if not dr.failures})
        od = onsager.to_dict()
        # trajectory treatment behind every collective-transport number (declared with each of them)
        transport_diag = dict(od["diagnostics"], frame=od["frame"], reference_species=od["reference_species"],
                              com="molecular centres of mass, unwrapped by the displacement scheme (NPT-safe)",
                              volume_nm3=od["volume_nm3"], temperature_K=od["temperature_K"])
        for key, payload, definition in (
                ("sigma", od["sigma"], od["sigma"]["definition"]),
                ("sigma_NE", od["sigma_NE"], od["sigma_NE"]["label"]),
                ("ionicity", od["ionicity"], "sigma / sigma_NE")):
            st = classify_observable(upstream_state=upstream_state, **onsager.state_inputs(key))
            payload = dict(payload, window=od["window"], diagnostics=transport_diag)
            observables[f"conductivity/{key}"] = _obs("conductivity", payload, definition=definition,
                                                      registration_id=rg("analysis_fitting_rules"), state=st,
                                                      details={"L": od["L"], "L_solvent": od["L_solvent"],
                                                               "sigma_ij_S_m": od["sigma_ij_S_m"],
                                                               "charges_e": od["charges_e"],
                                                               "charges_note": od["charges_note"]}
                                                      if key == "sigma" else {})
        st_t = classify_observable(upstream_state=upstream_state, **onsager.state_inputs("t_plus"))
        for tkey, te in od["transference"].items():
            observables[f"transference/{tkey}"] = _obs(
                "transference", dict(te, window=od["window"], diagnostics=transport_diag),
                definition=f"{te['formula']} ({te['frame']} frame"
                           f"{', reference ' + te['reference_species'] if te['reference_species'] else ''})",
                registration_id=rg("analysis_fitting_rules"), state=st_t)

    # 4e. viscosity (Green–Kubo from the energy file)
    visc = None
    ptens = series.pressure_tensor_bar()
    if len(ptens) >= 6:
        t_e = series.time_ps
        dt_e = float(np.median(np.diff(t_e)))
        vol_e = series.terms.get("Volume", float(np.mean(rd.volume_nm3)))
        visc = green_kubo_viscosity(ptens, dt_e, vol_e, temperature, guard_ps=guard, n_blocks=settings.n_blocks)
        st = classify_result(visc, upstream_state=upstream_state)
    else:
        st = classify_observable(upstream_state=upstream_state, delivered=False)
    observables["viscosity"] = _obs(
        "viscosity", visc.to_dict() if visc is not None else {},
        definition="eta = V/(kB T) int_0^inf <P_ab(t) P_ab(0)> dt (Green-Kubo), plateau by the registered rule",
        registration_id=rg("analysis_fitting_rules"), state=st)

    # 5. document, figures, states
    doc = {
        "schema_version": "1.0",
        "case": case,
        "source": {k: {"path": v, "sha256": hashes[k].result()} for k, v in src.items()},
        "software": _versions(),
        "settings": settings.to_dict(),
        "guard_ps": float(guard),
        "guard_detection": guard_info,
        "ensemble": ensemble,
        "temperature_K": temperature,
        "windows": win.to_dict(),
        "registrations": reg_ids,
        "definitions": registration_definitions(settings),
        "system": {"species": rd.species, "n_molecules": {sp: int(np.sum(rd.mol_species == sp)) for sp in rd.species},
                   "charges_e": {sp: float(np.mean(rd.mol_charge_e[rd.mol_species == sp])) for sp in rd.species},
                   "centres": rd.centre_species, "channels": [c.name for c in rd.channels],
                   "n_atoms": rd.source.get("n_atoms"), "n_frames": rd.n_frames,
                   "input_dtype": rd.source.get("input_dtype"),
                   "structure_every_n_frames": rd.structure_every, "n_structure_frames": rd_s.n_frames,
                   "pair_search": rd.source.get("pair_search"),
                   "reduction_workers": rd.source.get("reduction_workers", 1),
                   "frame_reader": rd.source.get("frame_reader"),
                   "mean_volume_nm3": float(np.mean(rd.volume_nm3[win.whole]))},
        "observables": observables,
        "structure": structure_details,
        "association": assoc_details,
        "onsager": onsager.to_dict() if onsager is not None else None,
        "figures": {},
    }
    doc["trajectory"] = frames.integrity.to_dict()  # issue 25: complete frames used, truncation stated
    if figures:
        doc["figures"] = write_figures(out, rdfs=rdfs, cutoffs=cutoffs, diffusion=diff_results, viscosity=visc,
                                       association=assoc_details, observables=observables)
    doc["superseded_results"] = _archive_superseded(out, reg_ids)
    write_validated_results(out / "results.json", doc)
    if rec is not None:
        rel = _relpath(out / "results.json", Path(rec.run_dir))
        for name, ob in observables.items():
            rec.set_observable_state(case, name, ob["state"], ob["reason"],
                                     results_ref=f"{rel}#/observables/{json_pointer_token(name)}",
                                     registration_id=ob["registration_id"])
        for path in [out / "results.json", *(out / f for f in doc["figures"].values())]:
            try:
                rec.add_artifact(_relpath(path, Path(rec.run_dir)))
            except Exception as exc:  # noqa: BLE001 - inventory failure must not lose results
                log.warning("could not add %s to the artifact inventory: %s", path, exc)
    return doc


def analyze_case(run_dir: str | Path, case: str, *, guard_ps: float | None = None,
                 settings: AnalysisSettings | None = None, verbose: bool = False,
                 workers: int | None = None) -> dict[str, Any]:
    """Analyse case ``case`` of a run directory into ``analysis/<CASE>/`` and record its states.

    The production stage state in the run record decides the upstream state: ``invalid`` → every observable
    ``invalid_upstream``; ``not_reached``/``running`` or missing files → ``not_reached``. Definitions are
    registered in the record before any computation.
    """
    from mdbench.record import RunRecord

    run_dir = Path(run_dir)
    rec = RunRecord(run_dir)
    states = rec.stage_states().get(case, {}) or {}
    stage = next((states[k] for k in UPSTREAM_STAGES if k in states), {})
    upstream = stage.get("state", "valid")
    if upstream not in ("valid",):
        reg_ids = register_definitions(rec, case, dataclasses.replace(settings or AnalysisSettings(),
                                                                       guard_ps=guard_ps))
        return _record_unanalysable(rec, run_dir, case, upstream, stage.get("reason", ""), reg_ids)
    try:
        files = find_production_files(run_dir, case)
    except InputError as exc:
        reg_ids = register_definitions(rec, case, dataclasses.replace(settings or AnalysisSettings(),
                                                                       guard_ps=guard_ps))
        return _record_unanalysable(rec, run_dir, case, "not_reached", str(exc), reg_ids)
    return analyze_files(files["tpr"], files["xtc"], files["edr"], run_dir / "analysis" / case, guard_ps=guard_ps,
                         settings=settings, rec=rec, case=case, upstream_state=upstream, verbose=verbose,
                         workers=workers)


def load_or_analyze_case(run_dir: str | Path, case: str, *, guard_ps: float | None = None,
                         force: bool = False, verbose: bool = False) -> dict[str, Any]:
    """``analysis/<CASE>/results.json`` if it is current, else :func:`analyze_case` (used by every template).

    Current means: it exists, validates, was made with the same ``guard_ps`` request, and its source files
    still have the recorded sha256 (a new production invalidates it).
    """
    from mdbench.analysis.results import read_results

    path = Path(run_dir) / "analysis" / case / "results.json"
    if not force and path.is_file():
        try:
            doc = read_results(path)
        except InputError:
            doc = None
        if doc is not None and doc.get("settings", {}).get("guard_ps") == guard_ps and doc.get("source") and all(
                Path(v["path"]).is_file() and sha256_file(v["path"]) == v["sha256"] for v in doc["source"].values()):
            return doc
    return analyze_case(run_dir, case, guard_ps=guard_ps, verbose=verbose)


#: Observables every case must report (states are written for each even when nothing could be computed).
REQUIRED_OBSERVABLES = ("thermo/density", "thermo/temperature", "thermo/pressure", "thermo/potential_energy",
                        "thermo/total_energy", "thermo/volume", "rdf", "coordination", "association",
                        "self_diffusion", "viscosity", "conductivity/sigma", "transference")


def _record_unanalysable(rec: Any, run_dir: Path, case: str, upstream: str, reason: str,
                         reg_ids: dict[str, str]) -> dict[str, Any]:
    """Write a results.json whose observables all carry the upstream state, and record those states."""
    from mdbench.analysis.results import write_validated_results
    from mdbench.analysis.states import classify_observable

    up = upstream if upstream in ("invalid", "invalid_upstream", "not_reached", "running") else "not_reached"
    st = classify_observable(upstream_state=up)
    out = run_dir / "analysis" / case
    out.mkdir(parents=True, exist_ok=True)
    observables = {name: {"category": name.split("/")[0], "value": None, "unit": None, "uncertainty": None,
                          "blocks": [], "block_ranges_ps": None, "window": None, "diagnostics": {},
                          "definition": "not computed", "state": st.state,
                          "reason": f"{st.reason}{': ' + reason if reason else ''}",
                          "registration_id": None, "details": {}} for name in REQUIRED_OBSERVABLES}
    doc = {"schema_version": "1.0", "case": case, "source": {}, "software": _versions(), "settings": {},
           "guard_ps": None, "guard_detection": {}, "ensemble": None, "temperature_K": None, "windows": None,
           "registrations": reg_ids, "system": {}, "observables": observables, "structure": {},
           "association": {}, "onsager": None, "figures": {}}
    write_validated_results(out / "results.json", doc)
    for name, ob in observables.items():
        rec.set_observable_state(case, name, ob["state"], ob["reason"],
                                 results_ref=f"analysis/{case}/results.json#/observables/{json_pointer_token(name)}")
    return doc


def _archive_superseded(out: Path, reg_ids: dict[str, str]) -> list[str]:
    """Keep results made under other registrations: nothing is overwritten.

    When ``out/results.json`` exists and was produced under different registration ids (a revised
    definition), it is moved to ``out/superseded/results_<ids>.json`` so that results remain reported under
    both the original and the revised definitions. Returns every archived file (relative to ``out``).
    """
    current = out / "results.json"
    archive = out / "superseded"
    if current.is_file():
        try:
            old = json.loads(current.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            old = None
        old_ids = (old or {}).get("registrations") or {}
        if old is not None and old_ids != reg_ids:
            tag = "-".join(sorted(set(old_ids.values()))) or "unregistered"
            archive.mkdir(exist_ok=True)
            target = archive / f"results_{tag}.json"
            k = 1
            while target.exists():
                k += 1
                target = archive / f"results_{tag}_{k}.json"
            current.replace(target)
            for fig in (old.get("figures") or {}).values():
                if (out / fig).is_file():
                    (out / fig).replace(archive / f"{target.stem}_{fig}")
    return sorted(str(p.relative_to(out)) for p in archive.glob("results_*.json")) if archive.is_dir() else []


def json_pointer_token(name: str) -> str:
    """Escape an observable name (which contains ``/``) as one RFC 6901 JSON-pointer token."""
    return name.replace("~", "~0").replace("/", "~1")


def _relpath(path: Path, root: Path | None) -> str:
    if root is None:
        return str(path)
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _diffusion_results(rd: Any, guard_ps: float, settings: AnalysisSettings) -> dict[str, Any]:
    """Self-diffusion of every species of ``rd`` under the registered rules (species → DiffusionResult)."""
    from mdbench.analysis.diffusion import self_diffusion

    return {sp: self_diffusion(rd.species_com_nm(sp), rd.time_ps, system_com_nm=rd.system_com_nm, species=sp,
                               guard_ps=guard_ps, n_blocks=settings.n_blocks,
                               beta_range=settings.diffusion_beta_range,
                               min_window_decades=settings.diffusion_min_decades,
                               max_lag_fraction=settings.diffusion_max_lag_fraction)
            for sp in rd.species}


def _versions() -> dict[str, str]:
    """Installed versions of the packages behind the numbers (a copy of :func:`_installed_versions`)."""
    return dict(_installed_versions())


@functools.lru_cache(maxsize=1)
def _installed_versions() -> dict[str, str]:
    """Package versions from the installed metadata, looked up once per process (≈ 25 ms a lookup)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("mdbench", "MDAnalysis", "numpy", "scipy", "pyedr", "pymbar", "tidynamics"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


class AnalysisError(MdbenchError):
    """The analysis of a case could not be carried out (message says why and what to fix)."""


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False
