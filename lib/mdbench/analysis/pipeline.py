"""The analysis pipeline of one case: registrations, one trajectory pass, every registered estimator, states.

``analyze_files(tpr, xtc, edr, out_dir)`` analyses any GROMACS run (the audit's canonical reanalysis calls
it); ``analyze_case(run_dir, case)`` finds the production files of a run directory, registers the
definitions in its run record *before* computing, writes ``analysis/<CASE>/results.json`` and figures, and
sets each observable's state in the record; ``load_or_analyze_case`` reuses a results.json made with the
same settings (every template calls it).

Order of work (each step uses only what the previous ones produced):

1. the settings (:class:`~mdbench.analysis.settings.AnalysisSettings`, from ``params/analysis/``) →
   registrations (guard/blocks, atom selections, RDF/coordination rules, contact/cluster definitions,
   fitting and plateau rules, shell dynamics, adequacy thresholds and stopping rule) → ``registrations.jsonl``;
2. energy file → guard interval (given, or the registered pymbar rule), read in a forked process
   (:mod:`mdbench.analysis.concurrency`) while
3. one streaming trajectory pass (:mod:`mdbench.analysis.reduce`) runs here;
4. every estimator of the registry (:mod:`mdbench.analysis.observables`), in its order, each given the same
   settings object: thermodynamics, RDF, coordination, association, self-diffusion, Onsager transport,
   viscosity, residence times, contact lifetimes;
5. states by the registered rules (:mod:`mdbench.analysis.states`); results.json validated against
   ``schemas/results.schema.json``; figures.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from mdbench.analysis import observables as registry
from mdbench.analysis.concurrency import ForkedCall, hash_in_background
from mdbench.analysis.blocks import BlockWindows
from mdbench.analysis.definitions import registration_definitions
from mdbench.analysis.estimator import CaseInputs, estimator_plan
from mdbench.analysis.reduce import ReducedTrajectory
from mdbench.analysis.settings import AnalysisSettings
from mdbench.errors import InputError
from mdbench.record.store import RunRecord, run_relative, sha256_file

log = logging.getLogger(__name__)

#: Stage whose validity the analysis depends on (engine name first, short directory name as fallback).
UPSTREAM_STAGES = ("production", "prod")

__all__ = ["AnalysisSettings", "REQUIRED_OBSERVABLES", "analyze_case", "analyze_files", "find_production_files",
           "load_or_analyze_case", "register_definitions", "registration_definitions"]


def register_definitions(rec: RunRecord, case: str, settings: AnalysisSettings) -> dict[str, str]:
    """Register each definition for ``case`` unless an identical one is in force (kind → registration id).

    A changed definition is registered as a revision of the one in force, with the changed keys as evidence
    (:meth:`mdbench.record.RunRecord.register_or_revise`); the previous one stays in the record.
    """
    return {kind: rec.register_or_revise(kind, definition, case=case, reason="analysis settings changed")
            for kind, definition in registration_definitions(settings).items()}


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


def run_estimators(inputs: CaseInputs, upstream_state: str, reg_ids: dict[str, str]
                   ) -> tuple[dict[str, dict[str, Any]], dict[str, Any], list[tuple[type, Any]]]:
    """Run every registered estimator in dependency order and classify each result by the registered rules.

    Returns (observables of results.json, its detail sections, (estimator class, Estimate) of each
    estimator for its own figures)."""
    from mdbench.analysis.states import C, classify_observable

    observables: dict[str, dict[str, Any]] = {}
    sections: dict[str, Any] = {}
    drawn: list[tuple[type, Any]] = []
    for estimator_class, entries in estimator_plan():
        estimator = estimator_class(inputs, entries)
        result = estimator.run()
        undeclared = set(result.products) - {p for e in entries for p in e.products}
        if undeclared:
            raise ValueError(f"{estimator_class.__name__} shares {', '.join(sorted(undeclared))} without declaring "
                             "it in the products of its registry entries")
        inputs.products.update(result.products)
        drawn.append((estimator_class, result))
        for name, content in result.sections.items():
            if isinstance(sections.get(name), dict) and isinstance(content, dict):
                sections[name].update(content)
            else:
                sections[name] = content
        for m in result.measurements:
            st = classify_observable(upstream_state=upstream_state, **estimator.state_inputs(m.name))
            if m.note and st.state == C:
                st = dataclasses.replace(st, reason=st.reason + m.note)
            observables[m.name] = _obs(m.entry.category, m.payload, definition=m.definition,
                                       registration_id=reg_ids.get(m.entry.registration), state=st,
                                       details=m.details)
    return observables, sections, drawn


def _system_section(rd: ReducedTrajectory, rd_s: ReducedTrajectory, win: BlockWindows) -> dict[str, Any]:
    """The ``system`` section of results.json: species, counts, charges, channels, how the frames were read."""
    return {"species": rd.species, "n_molecules": {sp: int(np.sum(rd.mol_species == sp)) for sp in rd.species},
            "charges_e": dict(rd.species_charge_e),
            "centres": rd.centre_species, "channels": [c.name for c in rd.channels],
            "n_atoms": rd.source.get("n_atoms"), "n_frames": rd.n_frames,
            "input_dtype": rd.source.get("input_dtype"),
            "structure_every_n_frames": rd.structure_every, "n_structure_frames": rd_s.n_frames,
            "pair_search": rd.source.get("pair_search"),
            "reduction_workers": rd.source.get("reduction_workers", 1),
            "frame_reader": rd.source.get("frame_reader"),
            "mean_volume_nm3": float(np.mean(rd.volume_nm3[win.whole]))}


def _record_results(rec: RunRecord, out: Path, case: str, observables: dict[str, dict[str, Any]], doc: dict[str, Any]
                    ) -> None:
    """Observable states (with their JSON-pointer references) and the artifacts into the run record."""
    rel = run_relative(out / "results.json", rec.run_dir)
    for name, ob in observables.items():
        rec.set_observable_state(case, name, ob["state"], ob["reason"],
                                 results_ref=f"{rel}#/observables/{json_pointer_token(name)}",
                                 registration_id=ob["registration_id"])
    for path in [out / "results.json", *(out / f for f in doc["figures"].values())]:
        try:
            rec.add_artifact(run_relative(path, rec.run_dir))
        except Exception as exc:  # noqa: BLE001 - inventory failure must not lose results
            log.warning("could not add %s to the artifact inventory: %s", path, exc)


def _pass_and_energy(tpr: str | Path, xtc: str | Path, edr: str | Path, out: Path, settings: AnalysisSettings,
                     verbose: bool, workers: int | None, keep_centres: str | Path | None = None
                     ) -> tuple[Any, Any, tuple[Any, float, dict[str, Any]], dict[str, str], dict[str, Any]]:
    """The one trajectory pass and, overlapping it, the energy file and its guard; the provenance hashes
    started in the background. Returns (complete frames, ReducedTrajectory, (energy series, guard [ps],
    guard detection), source paths, their hash futures)."""
    from mdbench.analysis import reduce
    from mdbench.trajcheck import complete_frames  # issue 25

    for p in (tpr, xtc, edr):
        if not Path(p).is_file():
            raise InputError("file not found; pass the production tpr, xtc and edr", str(p))
    frames = complete_frames(xtc)  # issue 25: a trajectory cut mid-frame is read to its last complete frame
    # 2a. the energy file is read (and the automatic guard detected) in a forked process while this one
    #     parses the topology and makes the trajectory pass (their cost overlaps); workers=1: all here
    energy = ForkedCall.start(_energy_stage, edr, settings.guard_ps) if workers != 1 else None
    # 3. one pass over the trajectory
    try:
        rd = reduce.reduce_files(tpr, frames.path, rdf_rmax_nm=settings.rdf_rmax_nm, rdf_bin_nm=settings.rdf_bin_nm,
                                 r_store_nm=settings.r_store_nm, structure_max_frames=settings.structure_max_frames,
                                 verbose=verbose, workers=workers,
                                 neutral_charge_tolerance_e=settings.neutral_charge_tolerance_e,
                                 series_dir=out)  # the COM series in a scratch file there (issue 23)
    except BaseException:
        if energy is not None:
            energy.cancel()
        raise
    if keep_centres is not None:  # the molecular centres of mass, for a second reader (the audit's re-fits)
        from mdbench.analysis.reduce.centres import save_centres

        save_centres(rd, keep_centres)
    # provenance hashes, in a thread while the estimators run; after the pass, which forks its workers
    src = {"tpr": str(tpr), "xtc": str(xtc), "edr": str(edr)}
    hashes = hash_in_background(sha256_file, src)
    # while the energy child still works, import pymbar here too: later analyses fork children that have it
    if energy is not None and not energy.ready():
        _import_equilibration_detection()
    # 2b. energy file: guard
    series, guard, guard_info = energy.result() if energy is not None else _energy_stage(edr, settings.guard_ps)
    return frames, rd, (series, guard, guard_info), src, hashes


def _case_inputs(settings: AnalysisSettings, case: str, series: Any, guard: float, rd: ReducedTrajectory,
                 win: BlockWindows) -> CaseInputs:
    """What the estimators read: the series, the guard, the trajectory and its structure frames with their
    blocks, and how neighbour-based results treated the trajectory."""
    from mdbench.analysis.blocks import block_windows

    # structure estimators run on the frames that carry neighbour data (all frames unless strided)
    rd_s = rd.structure_view()
    win_s = win if rd_s is rd else block_windows(rd_s.time_ps, guard, settings.n_blocks)
    # how the trajectory was treated for every neighbour-based result (declared with each of them)
    treatment = {"pbc": "minimum image in each frame's own box (orthorhombic; triclinic via MDAnalysis)",
                 "whole_molecules": "partners counted as molecules (any registered site within the cutoff)",
                 "structure_every_n_frames": rd.structure_every, "n_structure_frames": rd_s.n_frames,
                 "pair_search": rd.source.get("pair_search")}
    inputs = CaseInputs(settings, case, energy=series, guard_ps=float(guard), ensemble=_ensemble(series),
                        trajectory=rd, structure_frames=rd_s, windows=win, structure_windows=win_s, treatment=treatment)
    return inputs


def analyze_files(tpr: str | Path, xtc: str | Path, edr: str | Path, out_dir: str | Path, *,
                  guard_ps: float | None = None, settings: AnalysisSettings | None = None, rec: RunRecord | None = None,
                  case: str | None = None, upstream_state: str = "valid", figures: bool = True,
                  verbose: bool = False, workers: int | None = None, keep_centres: str | Path | None = None
                  ) -> dict[str, Any]:
    """Analyse one GROMACS run and write ``results.json`` (+ figures) into ``out_dir``.

    Parameters
    ----------
    tpr, xtc, edr : path
        Run input, compressed trajectory and energy file of the production run.
    out_dir : path
        Output directory (created).
    guard_ps : float, optional
        Excluded initial interval [ps]; None → the settings' value (by default the registered automatic rule).
    settings : AnalysisSettings, optional
        Registered settings (default: ``params/analysis/default.yaml``); ``guard_ps`` overrides its field.
    rec : RunRecord, optional
        When given, definitions are registered there first and observable states are set.
    case : str, optional
        Case label (required with ``rec``).
    upstream_state : str
        State of the production stage (``valid`` unless the record says otherwise).
    figures, verbose : bool
        Write PNG figures; show progress bars.
    workers : int, optional
        Processes for the trajectory pass (see :func:`mdbench.analysis.reduce.reduce_universe`; None: one
        per core for large trajectories). The results do not depend on it (to float rounding).
    keep_centres : path, optional
        Also write the pass' molecular centres of mass there (:mod:`mdbench.analysis.reduce.centres`).

    Returns
    -------
    dict
        The results document (also written to ``out_dir/results.json``).
    """
    from mdbench.analysis.blocks import block_windows
    from mdbench.analysis.results import write_figures, write_validated_results

    settings = _effective(settings, guard_ps)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    case = case or "case"
    # 1. registrations first
    reg_ids = register_definitions(rec, case, settings) if rec is not None else {}
    frames, rd, (series, guard, guard_info), src, hashes = _pass_and_energy(tpr, xtc, edr, out, settings, verbose,
                                                                            workers, keep_centres)
    win = block_windows(rd.time_ps, guard, settings.n_blocks)
    inputs = _case_inputs(settings, case, series, guard, rd, win)
    # 4. every registered estimator, in dependency order; 5. states by the registered rules
    observables, sections, drawn = run_estimators(inputs, upstream_state, reg_ids)
    # 6. document, figures, states
    doc = {
        "schema_version": "1.0",
        "case": case,
        "source": {k: {"path": v, "sha256": hashes[k].result()} for k, v in src.items()},
        "software": _versions(),
        "settings": settings.to_dict(),
        "settings_sha256": settings.digest(),
        "guard_ps": float(guard),
        "guard_detection": guard_info,
        "ensemble": inputs.ensemble,
        "temperature_K": inputs.products.get("temperature_K"),
        "windows": win.to_dict(),
        "registrations": reg_ids,
        "definitions": registration_definitions(settings),
        "system": _system_section(rd, inputs.structure_frames, win),
        "observables": observables,
        **{name: sections.get(name) for name in _detail_sections()},
        "figures": {},
        "trajectory": frames.integrity.to_dict(),  # issue 25: complete frames used, truncation stated
    }
    doc["energy"] = inputs.products.get("energy_coverage")  # issue 35: truncation and window coverage stated
    if figures:
        doc["figures"] = write_figures(out, observables=observables, settings=settings, drawn=drawn)
    doc["superseded_results"] = _archive_superseded(out, reg_ids)
    write_validated_results(out / "results.json", doc)
    if rec is not None:
        _record_results(rec, out, case, observables, doc)
    return doc


def _detail_sections() -> tuple[str, ...]:
    """Top-level results.json sections the estimators fill (from the registry), in registry order."""
    return tuple(dict.fromkeys(e.details_section for e in registry.REGISTRY if e.details_section))


def _effective(settings: AnalysisSettings | None, guard_ps: float | None) -> AnalysisSettings:
    """The settings in force: ``settings`` (default: the default file) with ``guard_ps`` when given."""
    settings = settings if settings is not None else AnalysisSettings()
    return settings.replace(guard_ps=float(guard_ps)) if guard_ps is not None else settings.replace()


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
    settings = _effective(settings, guard_ps)
    states = rec.stage_states().get(case, {}) or {}
    stage = next((states[k] for k in UPSTREAM_STAGES if k in states), {})
    upstream = stage.get("state", "valid")
    if upstream not in ("valid",):
        reg_ids = register_definitions(rec, case, settings)
        return _record_unanalysable(rec, run_dir, case, upstream, stage.get("reason", ""), reg_ids, settings)
    try:
        files = find_production_files(run_dir, case)
    except InputError as exc:
        reg_ids = register_definitions(rec, case, settings)
        return _record_unanalysable(rec, run_dir, case, "not_reached", str(exc), reg_ids, settings)
    return analyze_files(files["tpr"], files["xtc"], files["edr"], run_dir / "analysis" / case,
                         settings=settings, rec=rec, case=case, upstream_state=upstream, verbose=verbose,
                         workers=workers)


def load_or_analyze_case(run_dir: str | Path, case: str, *, guard_ps: float | None = None,
                         settings: AnalysisSettings | None = None, preset: str | None = None,
                         force: bool = False, verbose: bool = False) -> dict[str, Any]:
    """``analysis/<CASE>/results.json`` if it is current, else :func:`analyze_case` (used by every template).

    The settings asked for are ``settings`` (default: ``params/analysis/`` for ``preset``, see
    :meth:`AnalysisSettings.for_preset`) with ``guard_ps`` when given. Current means: the file exists,
    validates, was made with settings of the same digest (:meth:`AnalysisSettings.digest`), and its
    source files still have the recorded sha256 (a new production invalidates it).
    """
    from mdbench.analysis.results import read_results

    request = _effective(settings if settings is not None else AnalysisSettings.for_preset(preset), guard_ps)
    path = Path(run_dir) / "analysis" / case / "results.json"
    if not force and path.is_file():
        try:
            doc = read_results(path)
        except InputError:
            doc = None
        if doc is not None and doc.get("settings_sha256") == request.digest() and doc.get("source") and all(
                Path(v["path"]).is_file() and sha256_file(v["path"]) == v["sha256"] for v in doc["source"].values()):
            return doc
    return analyze_case(run_dir, case, settings=request, verbose=verbose)


#: Observables every case must report (states are written for each even when nothing could be computed).
REQUIRED_OBSERVABLES = registry.unanalysable_names()


def _record_unanalysable(rec: RunRecord, run_dir: Path, case: str, upstream: str, reason: str,
                         reg_ids: dict[str, str], settings: AnalysisSettings) -> dict[str, Any]:
    """Write a results.json whose observables all carry the upstream state, and record those states."""
    from mdbench.analysis.results import write_validated_results
    from mdbench.analysis.states import classify_observable

    up = upstream if upstream in ("invalid", "invalid_upstream", "not_reached", "running") else "not_reached"
    st = classify_observable(upstream_state=up)
    out = run_dir / "analysis" / case
    out.mkdir(parents=True, exist_ok=True)
    observables = {name: {"category": registry.get(name).category, "value": None, "unit": None,
                          "uncertainty": None, "blocks": [], "block_ranges_ps": None, "window": None,
                          "diagnostics": {}, "definition": "not computed", "state": st.state,
                          "reason": f"{st.reason}{': ' + reason if reason else ''}",
                          "registration_id": reg_ids.get(registry.get(name).registration), "details": {}}
                   for name in REQUIRED_OBSERVABLES}
    doc = {"schema_version": "1.0", "case": case, "source": {}, "software": _versions(),
           "settings": settings.to_dict(), "settings_sha256": settings.digest(), "guard_ps": None,
           "guard_detection": {}, "ensemble": None, "temperature_K": None, "windows": None,
           "registrations": reg_ids, "system": {}, "observables": observables,
           **{name: {} for name in _detail_sections()}, "figures": {}}
    write_validated_results(out / "results.json", doc)
    for name, ob in observables.items():
        rec.set_observable_state(case, name, ob["state"], ob["reason"],
                                 results_ref=f"analysis/{case}/results.json#/observables/{json_pointer_token(name)}",
                                 registration_id=ob["registration_id"])
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


def _versions() -> dict[str, str]:
    """Installed versions of the packages behind the numbers (a copy of :func:`_installed_versions`)."""
    return dict(_installed_versions())


@functools.lru_cache(maxsize=1)
def _installed_versions() -> dict[str, str]:
    """Package versions from the installed metadata, looked up once per process (a lookup is slow)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("mdbench", "MDAnalysis", "numpy", "scipy", "pyedr", "pymbar", "tidynamics"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False
