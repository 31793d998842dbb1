"""The three simulation stages the study templates call: :func:`minimize`, :func:`equilibrate`, :func:`produce`.

Each stage works in ``RUN_DIR/cases/<CASE>/<em|equil|prod>/``, reads what the previous stage left,
writes its ``.mdp`` from ``params/protocols`` (lengths from the preset), registers its gate in the run
record before evaluating it, runs GROMACS through a :class:`~mdbench.engine.runner.Runner` with every MD
segment reserved against the budget, and sets its stage state (``minimization``, ``equilibration``,
``production``) with the evidence. A stage whose upstream stage is not valid does nothing but record
``invalid_upstream``. Every stage is idempotent: rerunning it resumes or skips finished work.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mdbench.engine import gates as G
from mdbench.engine.hardware import record_hardware_audit
from mdbench.engine.protocols import Protocol, Timing, load_gates, load_protocol, write_mdp
from mdbench.engine.recovery import set_aside_unfinished_minimization
from mdbench.engine.runner import EngineError, Runner, get_runner
from mdbench.engine.segments import (SegmentResult, checkpoint_step, log_last_step, recovery_note, run_segment,
                                     segment_history)
from mdbench.errors import InputError, MdbenchError
from mdbench.paths import PARAMS_DIR
from mdbench.record.atomic import atomic_write_text
from mdbench.yamlio import load_yaml

log = logging.getLogger(__name__)

#: Target temperature of the study [K].
TARGET_TEMPERATURE_K = 298.15
#: Stage-state names this room writes.
STAGE_NAMES = {"em": "minimization", "equil": "equilibration", "prod": "production"}


@dataclass
class StageReport:
    """What a stage did, for templates (``scrapbook.glue``) and the CLI.

    Attributes
    ----------
    case, stage : str
    state : str
        Stage state written to the record (``valid``, ``invalid``, ``invalid_upstream``).
    reason : str
    gate : dict or None
        The gate result (checks with values and thresholds) when a gate was evaluated.
    attempts : list of str
        Ledger attempt ids of this stage.
    ns_charged : float
        ns charged to the case by this stage's attempts [ns].
    wall_s : float
        Wall time of the stage call [s].
    files : dict
        Main output files (relative to the run directory).
    evidence : dict
    """

    case: str
    stage: str
    state: str
    reason: str
    gate: dict | None = None
    attempts: list[str] = field(default_factory=list)
    ns_charged: float = 0.0
    wall_s: float = 0.0
    files: dict[str, str] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    def raise_if_invalid(self) -> None:
        """Raise :class:`StageInvalid` (after the evidence is recorded) unless the stage is valid."""
        if self.state != "valid":
            raise StageInvalid(f"{self.case} {self.stage} is {self.state}: {self.reason}")


class StageInvalid(MdbenchError):
    """A stage ended invalid (gate failed, budget refused, upstream invalid); the record says why."""


# ----------------------------------------------------------------------------- helpers
def load_preset(preset: str | dict | None) -> dict[str, Any]:
    """Preset mapping from ``params/presets/<preset>.yaml`` (or a dict given directly; ``None`` → {})."""
    if preset is None:
        return {}
    if isinstance(preset, dict):
        return preset
    path = PARAMS_DIR / "presets" / f"{preset}.yaml"
    if not path.is_file():
        raise InputError(f"preset {preset!r} not found; choose one of "
                         f"{sorted(p.stem for p in path.parent.glob('*.yaml'))}", str(path))
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError("a preset must be a mapping", str(path))
    return data


def cutoff_overrides(preset: dict) -> dict[str, Any]:
    """mdp overrides of a preset: its ``cutoff_nm`` for rcoulomb and rvdw (none when it sets none)."""
    rc = preset.get("cutoff_nm")
    return {"rcoulomb": float(rc), "rvdw": float(rc)} if rc else {}


def preset_timing(protocol: Protocol, preset: dict, length_key: str | None, length_ps: float | None) -> Timing:
    """Protocol timing, overridden by the preset's ``protocol:`` block and an explicit length."""
    tm = Timing(**asdict(protocol.timing))
    block = preset.get("protocol") or {}
    for src, dst in (("dt_fs", "dt_fs"), ("energy_interval_ps", "energy_interval_ps"),
                     ("xtc_interval_ps", "xtc_interval_ps")):
        if src in block:
            setattr(tm, dst, float(block[src]))
    if length_key and length_key in block:
        tm.length_ps = float(block[length_key])
    if length_ps is not None:
        tm.length_ps = float(length_ps)
    # the log interval must be a whole number of steps not longer than the segment
    tm.log_interval_ps = min(tm.log_interval_ps, max(tm.energy_interval_ps, tm.length_ps or tm.log_interval_ps))
    return tm


def case_dir(run_dir: str | Path, case: str) -> Path:
    """``RUN_DIR/cases/<CASE>``."""
    return Path(run_dir) / "cases" / case


def find_setup(run_dir: str | Path, case: str) -> tuple[Path, Path]:
    """(coordinates, topology) the setup stage left in ``cases/<CASE>/setup``.

    Prefers ``system.gro`` / ``topol.top`` (or ``<CASE>.gro`` / ``<CASE>.top``); otherwise the only
    ``.gro`` and ``.top`` in the folder.
    """
    setup = case_dir(run_dir, case) / "setup"
    if not setup.is_dir():
        raise InputError(f"no setup folder for case {case}: run the setup stage (study/10_setup) first",
                         str(setup))
    build_json = setup / "build.json"
    if build_json.is_file():  # written by mdbench.build.build_system
        import json  # noqa: PLC0415

        info = json.loads(build_json.read_text())
        gro, top = setup / Path(info["gro_path"]).name, setup / Path(info["top_path"]).name
        if gro.is_file() and top.is_file():
            return gro, top
    for gro, top in (("system.gro", "topol.top"), (f"{case}.gro", f"{case}.top"), ("conf.gro", "topol.top")):
        if (setup / gro).is_file() and (setup / top).is_file():
            return setup / gro, setup / top
    gros, tops = sorted(setup.glob("*.gro")), sorted(setup.glob("*.top"))
    if len(gros) == 1 and len(tops) == 1:
        return gros[0], tops[0]
    raise InputError(f"cannot tell the setup coordinates/topology apart (found {[p.name for p in gros]} and "
                     f"{[p.name for p in tops]}); expected system.gro + topol.top", str(setup))


def _rel(run_dir: Path, path: str | Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path)


def _add_artifacts(rec, run_dir: Path, paths: list[str | Path], producer: int | None = None) -> dict[str, str]:
    out = {}
    for p in paths:
        if Path(p).is_file():
            out[_rel(run_dir, p)] = rec.add_artifact(Path(p).resolve(), producer)
    return out


def _register_gate(rec, case: str, definition: dict) -> str:
    """Register a gate once per case (the same definition is reused, a changed one revises it)."""
    return rec.register_once("gate", definition, case=case, key="gate")


def _upstream_ok(rec, case: str, upstream: str, stage: str) -> tuple[bool, str]:
    states = rec.stage_states().get(case, {})
    up = states.get(upstream)
    if up is None:
        if upstream == "setup":
            return True, "no setup state recorded; proceeding on the setup files"
        return False, f"upstream stage {upstream} has not run"
    if up["state"] != "valid":
        return False, f"upstream stage {upstream} is {up['state']}: {up['reason']}"
    return True, f"upstream {upstream} valid"


def _prepare(run_dir: str | Path, engine: str | Runner) -> tuple[Any, Runner, Path]:
    from mdbench.record import RunRecord  # noqa: PLC0415

    run_dir = Path(run_dir).resolve()
    rec = RunRecord(run_dir)
    runner = engine if isinstance(engine, Runner) else get_runner(engine)
    record_hardware_audit(rec, run_dir, runner.gmx, runner.slots.cap)
    return rec, runner, run_dir


def _stage_attempts(rec, case: str, stage: str) -> list[dict]:
    return [a for a in rec.attempts() if a.get("case") == case and a.get("stage") == stage]


def _finish(rec, report: StageReport, evidence: dict | None = None) -> StageReport:
    rec.set_stage_state(report.case, report.stage, report.state, report.reason, evidence or report.evidence)
    return report


# ----------------------------------------------------------------------------- minimisation
def minimize(run_dir: str | Path, case: str, *, preset: str | dict | None = "micro", engine: str | Runner = "auto",
             threads: int = 1, protocol: str = "em", protocols_dir: str | Path | None = None,
             force: bool = False) -> StageReport:
    """Steepest-descent minimisation of the setup box, then the minimisation gate.

    The gate (registered before use) requires the final maximum force below the protocol's declared
    ``emtol`` [kJ mol⁻¹ nm⁻¹], a finite potential energy, GROMACS' convergence message and no
    intermolecular atom pair closer than ``catastrophic_contact_nm``. Minimisation steps are not MD
    time: they are recorded in a ``minimization_run`` event (steps, wall time), not charged as ns.
    """
    t_start = time.monotonic()
    rec, runner, run_dir = _prepare(run_dir, engine)
    stage = STAGE_NAMES["em"]
    ok, why = _upstream_ok(rec, case, "setup", stage)
    if not ok:
        return _finish(rec, StageReport(case, stage, "invalid_upstream", why))
    gro, top = find_setup(run_dir, case)
    pre = load_preset(preset)
    prot = load_protocol(protocol, protocols_dir)
    gcfg = load_gates(protocols_dir)["minimization"]
    wd = case_dir(run_dir, case) / "em"
    existing = rec.stage_states().get(case, {}).get(stage)
    if not force and existing and existing["state"] == "valid" and (wd / "em.gro").is_file():
        return StageReport(case, stage, "valid", "already minimised: " + existing["reason"],
                           gate=(existing.get("evidence") or {}).get("gate"),
                           files={"gro": _rel(run_dir, wd / "em.gro")})
    wd.mkdir(parents=True, exist_ok=True)
    set_aside_unfinished_minimization(rec, wd, case, existing)
    rec.set_stage_state(case, stage, "running", "steepest descent started")
    opts = write_mdp(prot, wd / "em.mdp", cutoff_overrides(pre))
    emtol = float(opts["emtol"])
    definition = {"gate": "minimization", "stage": stage, "emtol_kJ_mol_nm": emtol,
                  "catastrophic_contact_nm": float(gcfg["catastrophic_contact_nm"]),
                  "require_converged": bool(gcfg.get("require_converged", True)),
                  "rule": "pass iff Fmax < emtol and Epot finite and GROMACS reports convergence and the "
                          "minimum intermolecular atom distance >= catastrophic_contact_nm"}
    reg = _register_gate(rec, case, definition)
    try:
        runner.grompp(wd / "em.mdp", gro.resolve(), top.resolve(), wd / "em.tpr")
        res = runner.mdrun(wd / "em.tpr", "em", threads=threads)
    except MdbenchError as exc:
        _finish(rec, StageReport(case, stage, "invalid", f"minimisation could not run: {exc}"))
        raise
    em = G.parse_em_log(wd / "em.log") if (wd / "em.log").is_file() else {}
    ev = rec.append_event("minimization_run", {"case": case, "argv": res.argv, "returncode": res.returncode,
                                               "wall_s": res.wall_s, "threads": res.threads, "steps": em.get("steps"),
                                               "resources": res.extra.get("resources"),
                                               "ns_charged": 0.0, "note": "energy minimisation is not MD time"})
    arts = _add_artifacts(rec, run_dir, [wd / "em.mdp", wd / "em.tpr", wd / "em.log", wd / "em.edr",
                                         wd / "em.gro", wd / "em.grompp.console.log"], ev["id"])
    if not res.ok or not (wd / "em.gro").is_file():
        report = StageReport(case, stage, "invalid", f"mdrun (minimisation) exited with {res.returncode}; "
                             f"see {_rel(run_dir, res.console_path)}", wall_s=time.monotonic() - t_start)
        return _finish(rec, report)
    gate = G.minimization_gate(wd / "em.log", wd / "em.tpr", wd / "em.gro", emtol_kJ_mol_nm=emtol,
                               catastrophic_contact_nm=definition["catastrophic_contact_nm"],
                               require_converged=definition["require_converged"],
                               figure=wd / "em_gate.png", edr=wd / "em.edr")
    gev = rec.append_event("gate_evaluated", {"case": case, "stage": stage, "registration_id": reg,
                                              **gate.as_dict()})
    arts.update(_add_artifacts(rec, run_dir, [wd / "em_gate.png"], gev["id"]))
    state = "valid" if gate.passed else "invalid"
    report = StageReport(case, stage, state, f"minimization gate {'passed' if gate.passed else 'FAILED'}: "
                         f"{gate.reason}", gate=gate.as_dict(), wall_s=time.monotonic() - t_start,
                         files={"gro": _rel(run_dir, wd / "em.gro"), "figure": _rel(run_dir, wd / "em_gate.png")},
                         evidence={"registration_id": reg, "gate_event": gev["id"], "artifacts": arts})
    return _finish(rec, report, {"gate": gate.as_dict(), "registration_id": reg, "gate_event": gev["id"]})


# ----------------------------------------------------------------------------- equilibration
def equilibrate(run_dir: str | Path, case: str, *, preset: str | dict | None = "micro",
                engine: str | Runner = "auto", threads: int = 1, seed: int = 2026,
                nvt_ps: float | None = None, npt_ps: float | None = None, max_extensions: int | None = None,
                cpt_min: float | None = None, protocols_dir: str | Path | None = None) -> StageReport:
    """NVT then NPT equilibration, the equilibration gate, and bounded extensions when it fails.

    The NVT segment (velocities drawn with ``seed`` at 298.15 K) starts from the minimised box; NPT
    (C-rescale, 1 bar) continues from the NVT checkpoint. The gate (registered before use, see
    :func:`mdbench.engine.gates.equilibration_gate`) is evaluated on the whole NPT energy file; if it
    fails and extensions remain, NPT is extended by ``extension_fraction`` of its length (a new ledger
    attempt with relation ``extension``, reserved first) and the gate is evaluated again. When no
    extension remains, or the budget refuses one, the stage ends ``invalid`` with the failed checks.
    """
    from mdbench.record import BudgetExceeded  # noqa: PLC0415

    t_start = time.monotonic()
    rec, runner, run_dir = _prepare(run_dir, engine)
    stage = STAGE_NAMES["equil"]
    ok, why = _upstream_ok(rec, case, STAGE_NAMES["em"], stage)
    if not ok:
        return _finish(rec, StageReport(case, stage, "invalid_upstream", why))
    existing = rec.stage_states().get(case, {}).get(stage)
    wd = case_dir(run_dir, case) / "equil"
    if existing and existing["state"] == "valid" and (wd / "npt.gro").is_file():
        return StageReport(case, stage, "valid", "already equilibrated: " + existing["reason"],
                           gate=(existing.get("evidence") or {}).get("gate"),
                           files={"gro": _rel(run_dir, wd / "npt.gro")})
    _, top = find_setup(run_dir, case)
    em_gro = case_dir(run_dir, case) / "em" / "em.gro"
    pre = load_preset(preset)
    nvt, npt = load_protocol("nvt", protocols_dir), load_protocol("npt", protocols_dir)
    t_nvt = preset_timing(nvt, pre, "equilibration_nvt_ps", nvt_ps)
    t_npt = preset_timing(npt, pre, "equilibration_npt_ps", npt_ps)
    cpt = dict(cpt_min=cpt_min, cadence=npt.checkpoint_cadence)  # explicit interval, else the registered cadence
    wd.mkdir(parents=True, exist_ok=True)
    rec.set_stage_state(case, stage, "running", "NVT/NPT equilibration started")
    definition = _equil_definition(protocols_dir, max_extensions, stage)
    reg = _register_gate(rec, case, definition)
    attempts: list[str] = []
    try:
        if not (wd / "nvt.tpr").is_file():
            _grompp_segment(rec, runner, run_dir, wd, "nvt", nvt, pre, t_nvt, seed, em_gro, top)
        r_nvt = _run_nvt(rec, runner, run_dir, wd, case, stage, t_nvt, attempts, threads=threads, **cpt)
        # NPT
        if not (wd / "npt.tpr").is_file():
            _grompp_segment(rec, runner, run_dir, wd, "npt", npt, pre, t_npt, seed, wd / "nvt.gro", top,
                            checkpoint=wd / "nvt.cpt")
        tpr, target, n_ext = _npt_progress(wd, t_npt.nsteps)
        while True:
            r = run_segment(rec, runner, case, tpr, "npt", target_step=target, dt_ps=t_npt.dt_ps, stage=stage,
                            kind="npt", parent=r_nvt.attempt_id, relation="branch", threads=threads, **cpt)
            attempts.append(r.attempt_id)
            if not r.ok:
                raise EngineError(f"NPT segment {r.status}: {r.reason}")
            gate, gev = _evaluate_equil_gate(rec, run_dir, wd, case, stage, reg, definition, n_ext, r.attempt_id)
            if gate.passed:
                break
            if n_ext >= definition["max_extensions"]:
                reason = (f"equilibration gate FAILED after {n_ext} extension(s) (limit "
                          f"{definition['max_extensions']}): {gate.reason}")
                return _equil_done(rec, run_dir, wd, case, stage, "invalid", reason, gate, reg, gev["id"],
                                   attempts, t_start)
            n_ext += 1  # extend NPT within budget
            tpr, target = _extend_npt(rec, runner, run_dir, wd, case, tpr, target,
                                      max(1, int(round(t_npt.nsteps * definition["extension_fraction"]))), n_ext,
                                      f"gate failed: {gate.reason}", gev["id"])
    except BudgetExceeded as exc:
        reason = f"budget refused the next equilibration segment before it ran: {exc}"
        return _equil_done(rec, run_dir, wd, case, stage, "invalid", reason, None, reg, None, attempts, t_start)
    except EngineError as exc:
        report = StageReport(case, stage, "invalid", f"{exc} (rerun the stage to resume from the checkpoint)",
                             attempts=attempts, wall_s=time.monotonic() - t_start)
        _finish(rec, report)
        raise
    reason = f"equilibration gate passed after {n_ext} extension(s): {gate.reason}"
    return _equil_done(rec, run_dir, wd, case, stage, "valid", reason, gate, reg, gev["id"], attempts, t_start)


def _run_nvt(rec, runner: Runner, run_dir: Path, wd: Path, case: str, stage: str, t_nvt: Timing, attempts: list[str],
             **kw) -> SegmentResult:
    """Run (or resume) the NVT segment; its attempt id is appended to ``attempts`` and its outputs recorded.

    Raises
    ------
    EngineError
        The segment did not complete.
    """
    r_nvt = run_segment(rec, runner, case, wd / "nvt.tpr", "nvt", target_step=t_nvt.nsteps, dt_ps=t_nvt.dt_ps,
                        stage=stage, kind="nvt", parent=None, relation=None, **kw)
    attempts.append(r_nvt.attempt_id)
    if not r_nvt.ok:
        raise EngineError(f"NVT segment {r_nvt.status}: {r_nvt.reason}")
    _add_artifacts(rec, run_dir, [wd / f"nvt.{e}" for e in ("log", "edr", "gro", "cpt", "xtc")])
    return r_nvt


def _npt_progress(wd: Path, nsteps: int) -> tuple[Path, int, int]:
    """(NPT tpr, its final step, extensions so far) saved by earlier runs of the stage (the first NPT input
    of ``nsteps`` steps when none)."""
    state = _equil_state(wd)
    return (wd / state.get("tpr", "npt.tpr"), int(state.get("target_step", nsteps)),
            int(state.get("extensions", 0)))


def _evaluate_equil_gate(rec, run_dir: Path, wd: Path, case: str, stage: str, reg: str, definition: dict,
                         n_ext: int, attempt_id: str) -> tuple:
    """The equilibration gate on the whole NPT energy file, its ``gate_evaluated`` event and its figure;
    returns (gate, event)."""
    gate = G.equilibration_gate(
        wd / "npt.edr", target_temperature_K=TARGET_TEMPERATURE_K, observables=definition["observables"],
        nskip=definition["nskip"], min_effective_samples=definition["min_effective_samples"],
        max_t0_fraction=definition["max_t0_fraction"],
        temperature_tolerance_K=definition["temperature_tolerance_K"],
        max_density_drift_rel=definition["max_density_drift_rel"],
        figure=wd / f"equil_gate_{n_ext}.png")
    gev = rec.append_event("gate_evaluated", {"case": case, "stage": stage, "registration_id": reg,
                                              "extension": n_ext, "attempt_id": attempt_id, **gate.as_dict()})
    _add_artifacts(rec, run_dir, [wd / f"equil_gate_{n_ext}.png"], gev["id"])
    return gate, gev


def _equil_definition(protocols_dir: str | Path | None, max_extensions: int | None, stage: str) -> dict:
    """The registered definition of the equilibration gate from the ``equilibration`` gate settings
    (``max_extensions``, when given, replaces the registered limit)."""
    gcfg = dict(load_gates(protocols_dir)["equilibration"])
    if max_extensions is not None:
        gcfg["max_extensions"] = int(max_extensions)
    return {"gate": "equilibration", "stage": stage, "target_temperature_K": TARGET_TEMPERATURE_K,
            "observables": list(gcfg["observables"]), "nskip": int(gcfg["detect_equilibration_nskip"]),
            "min_effective_samples": float(gcfg["min_effective_samples"]),
            "max_t0_fraction": float(gcfg["max_t0_fraction"]),
            "temperature_tolerance_K": float(gcfg["temperature_tolerance_K"]),
            "max_density_drift_rel": float(gcfg["max_density_drift_rel"]),
            "max_extensions": int(gcfg["max_extensions"]),
            "extension_fraction": float(gcfg["extension_fraction"]),
            "method": "pymbar.timeseries.detect_equilibration on each observable of the NPT energy file; "
                      "stationary tail = latest t0; T mean and linear density drift over the tail"}


def _grompp_segment(rec, runner: Runner, run_dir: Path, wd: Path, name: str, protocol, pre, timing, seed: int,
                    gro: Path, top: Path, checkpoint: Path | None = None) -> None:
    """Write ``<name>.mdp`` from ``protocol`` and grompp it into ``<name>.tpr`` in ``wd`` (both recorded)."""
    write_mdp(protocol, wd / f"{name}.mdp", cutoff_overrides(pre), timing=timing, seed=seed)
    kw = {"checkpoint": checkpoint.resolve()} if checkpoint is not None else {}
    runner.grompp(wd / f"{name}.mdp", gro.resolve(), top.resolve(), wd / f"{name}.tpr", **kw)
    _add_artifacts(rec, run_dir, [wd / f"{name}.mdp", wd / f"{name}.tpr"])


def _extend_npt(rec, runner: Runner, run_dir: Path, wd: Path, case: str, tpr: Path, target: int, ext_steps: int,
                n_ext: int, reason: str, gate_event: str) -> tuple[Path, int]:
    """``gmx convert-tpr`` the NPT input ``tpr`` (final step ``target``) ``ext_steps`` further as
    ``npt_ext<n_ext>.tpr``, record the ``equilibration_extension`` event and save the progress; returns the new
    tpr and its final step."""
    new_tpr = _extend_tpr(rec, runner, run_dir, wd, tpr, "npt", target + ext_steps, n_ext, "equilibration_extension",
                          {"case": case, "extension": n_ext, "added_steps": ext_steps, "reason": reason,
                           "gate_event": gate_event})
    _equil_save(wd, {"tpr": new_tpr.name, "target_step": target + ext_steps, "extensions": n_ext})
    return new_tpr, target + ext_steps


def _extend_tpr(rec, runner: Runner, run_dir: Path, wd: Path, tpr: Path, deffnm: str, new_target: int, n_ext: int,
                event: str, payload: dict) -> Path:
    """``gmx convert-tpr`` ``tpr`` to end at step ``new_target`` as ``<deffnm>_ext<n_ext>.tpr`` and record the
    ``event`` (with ``payload``, the new final step and the tpr); returns the new tpr. The one extension path
    of NPT equilibration and production: rerunning the segment with the larger target continues it from its
    checkpoint as a ledger ``extension``, no step charged twice."""
    new_tpr = wd / f"{deffnm}_ext{n_ext}.tpr"
    res = runner.tool(["convert-tpr", "-s", tpr.name, "-nsteps", str(new_target), "-o", new_tpr.name], cwd=wd,
                      name=f"{deffnm}_ext{n_ext}.convert")
    if not res.ok:
        raise EngineError("gmx convert-tpr failed", res.argv, res.returncode, res.console_path)
    rec.append_event(event, {**payload, "new_target_step": new_target, "tpr": _rel(run_dir, new_tpr)})
    return new_tpr


def _equil_state(wd: Path) -> dict:
    import json  # noqa: PLC0415

    p = wd / "equil.state.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def _equil_save(wd: Path, state: dict) -> None:
    import json  # noqa: PLC0415

    atomic_write_text(wd / "equil.state.json", json.dumps(state, indent=2))


def _equil_done(rec, run_dir: Path, wd: Path, case: str, stage: str, state: str, reason: str, gate, reg: str,
                gate_event: int | None, attempts: list[str], t_start: float) -> StageReport:
    arts = _add_artifacts(rec, run_dir, [wd / f"npt.{e}" for e in ("log", "edr", "gro", "cpt", "xtc")])
    histories = {d: segment_history(rec, wd, d) for d in ("nvt", "npt")}
    attempts = sorted(set(attempts) | {h["attempt_id"] for hist in histories.values() for h in hist})
    ns = sum(a["ns_charged"] for a in rec.attempts() if a["id"] in set(attempts))
    notes = {d: recovery_note(h) for d, h in histories.items() if recovery_note(h)}
    recovery = {"notes": notes, "attempts": histories} if notes else None
    reason += "".join(f"; {d.upper()} {note}" for d, note in notes.items())
    report = StageReport(case, stage, state, reason, gate=gate.as_dict() if gate else None,
                         attempts=attempts, ns_charged=ns, wall_s=time.monotonic() - t_start,
                         files={"gro": _rel(run_dir, wd / "npt.gro"), "edr": _rel(run_dir, wd / "npt.edr")},
                         evidence={"registration_id": reg, "gate_event": gate_event, "artifacts": arts,
                                   "recovery": recovery})
    return _finish(rec, report, {"gate": gate.as_dict() if gate else None, "registration_id": reg,
                                 "gate_event": gate_event, "attempts": attempts, "recovery": recovery})


# ----------------------------------------------------------------------------- production
def produce(run_dir: str | Path, case: str, *, preset: str | dict | None = "micro", engine: str | Runner = "auto",
            threads: int = 1, seed: int = 2026, ensemble: str | None = None, production_ps: float | None = None,
            cpt_min: float | None = None, protocols_dir: str | Path | None = None) -> StageReport:
    """Production from the equilibrated state; NVT at the NPT mean volume (default) or NPT.

    For NVT the last NPT frame is scaled isotropically (``gmx editconf -scale``) by
    :math:`s = (\\bar V / V_\\mathrm{last})^{1/3}`, where :math:`\\bar V` is the mean volume over the
    stationary tail found by the equilibration gate. The segment is reserved before it runs, resumes
    from its checkpoint when rerun after an interruption, and is checked for consistency at the end:
    checkpoint step = log step = ``nsteps``, xtc frames = ``nsteps / nstxout-compressed + 1`` with
    uniform spacing, energy frames = ``nsteps / nstenergy + 1``.
    """
    import json  # noqa: PLC0415

    t_start = time.monotonic()
    rec, runner, run_dir = _prepare(run_dir, engine)
    stage = STAGE_NAMES["prod"]
    ok, why = _upstream_ok(rec, case, STAGE_NAMES["equil"], stage)
    if not ok:
        return _finish(rec, StageReport(case, stage, "invalid_upstream", why))
    _, top = find_setup(run_dir, case)
    pre = load_preset(preset)
    prot = load_protocol("production", protocols_dir)
    ens = (ensemble or prot.raw.get("ensemble", "NVT")).upper()
    if ens not in ("NVT", "NPT"):
        raise InputError(f"production ensemble {ens!r} must be NVT or NPT", str(prot.sources and next(iter(prot.sources))))
    tm = preset_timing(prot, pre, "production_ps", production_ps)
    # dense energies for Green-Kubo unless the preset asks for its own interval
    cpt = dict(cpt_min=cpt_min, cadence=prot.checkpoint_cadence)  # explicit interval, else the registered cadence
    eq = case_dir(run_dir, case) / "equil"
    wd = case_dir(run_dir, case) / "prod"
    wd.mkdir(parents=True, exist_ok=True)
    seg_state = wd / "prod.segment.json"
    npt_attempts = [a for a in _stage_attempts(rec, case, STAGE_NAMES["equil"]) if a["kind"] == "npt"]
    parent = npt_attempts[-1]["id"] if npt_attempts else None
    rec.set_stage_state(case, stage, "running", f"{ens} production started")
    try:
        setup_ev = _production_input(runner, rec, run_dir, case, wd, eq, top, prot, pre, tm, ens, seed)
    except MdbenchError as exc:
        _finish(rec, StageReport(case, stage, "invalid", f"production input could not be prepared: {exc}"))
        raise
    try:
        tpr, tm = _production_target(rec, runner, run_dir, wd, case, tm)
        r = run_segment(rec, runner, case, tpr, "prod", target_step=tm.nsteps, dt_ps=tm.dt_ps,
                        stage=stage, kind="production", parent=parent, relation="branch", threads=threads, **cpt)
    except MdbenchError as exc:
        from mdbench.record import BudgetExceeded  # noqa: PLC0415

        if isinstance(exc, BudgetExceeded):
            return _finish(rec, StageReport(case, stage, "invalid", f"budget refused production before it ran: "
                                            f"{exc}", wall_s=time.monotonic() - t_start))
        raise
    attempts = [a["id"] for a in json.loads(seg_state.read_text())["attempts"]]
    if not r.ok:
        report = StageReport(case, stage, "invalid", f"production {r.status}: {r.reason}", attempts=attempts,
                             wall_s=time.monotonic() - t_start)
        _finish(rec, report)
        raise EngineError(f"production of {case} {r.status}: {r.reason}")
    cons = production_consistency(runner, wd, "prod", tm, rec=rec)
    cev = rec.append_event("production_consistency", {"case": case, "attempt_id": r.attempt_id, **cons})
    arts = _add_artifacts(rec, run_dir, [wd / f"prod.{e}" for e in ("tpr", "xtc", "edr", "cpt", "log", "gro")],
                          cev["id"])
    ledger = {a["id"]: a for a in rec.attempts()}
    ns = sum(ledger[a]["ns_charged"] for a in attempts if a in ledger)
    state = "valid" if cons["consistent"] else "invalid"
    history = segment_history(rec, wd, "prod")
    note = recovery_note(history)
    reason = (f"canonical production branch {r.attempt_id}: {tm.length_ps:g} ps {setup_ev.get('ensemble', ens)}; "
              + ("tpr/xtc/edr/cpt/log consistent" if cons["consistent"] else
                 "INCONSISTENT outputs: " + "; ".join(cons["problems"])) + (f"; {note}" if note else ""))
    recovery = {"note": note, "attempts": history} if note else None
    report = StageReport(case, stage, state, reason, attempts=attempts, ns_charged=ns,
                         wall_s=time.monotonic() - t_start,
                         files={k: _rel(run_dir, wd / f"prod.{k}") for k in ("tpr", "xtc", "edr", "cpt", "log")},
                         evidence={"canonical_attempt": r.attempt_id, "consistency": cons, "artifacts": arts,
                                   "attempt_wall_s": r.wall_s, "recovery": recovery})
    return _finish(rec, report, {"canonical_attempt": r.attempt_id, "consistency_event": cev["id"],
                                 "attempts": attempts, "recovery": recovery,
                                 **{k: v for k, v in cons.items() if k != "xtc_times_ps"}})


def _production_target(rec, runner: Runner, run_dir: Path, wd: Path, case: str, tm: Timing) -> tuple[Path, Timing]:
    """(tpr, timing) of the production to run: ``prod.tpr`` for the first length; a production asked to run
    longer than its tpr's end is extended (:func:`_extend_tpr`, state in ``prod.extension.json``); one asked
    for less than it already runs to continues to its recorded end (an interrupted extension resumes)."""
    import json  # noqa: PLC0415

    path = wd / "prod.extension.json"
    state = json.loads(path.read_text()) if path.is_file() else {"tpr": "prod.tpr", "target_step": None,
                                                                  "extensions": 0}
    seg = wd / "prod.segment.json"
    first = json.loads(seg.read_text()).get("target_step") if seg.is_file() else None
    current = state["target_step"] or first
    if current is None or current == tm.nsteps:
        return wd / state["tpr"], tm
    if current > tm.nsteps:  # never shorter than what is recorded: finish (or keep) the longer production
        return wd / state["tpr"], replace(tm, length_ps=current * tm.dt_ps)
    # end on a step where every output is written (an energy frame at an odd last step would stay extra)
    every = math.lcm(tm.steps(tm.xtc_interval_ps), tm.steps(tm.energy_interval_ps))
    tm = replace(tm, length_ps=math.ceil(tm.nsteps / every) * every * tm.dt_ps)
    n_ext = int(state["extensions"]) + 1
    new_tpr = _extend_tpr(rec, runner, run_dir, wd, wd / state["tpr"], "prod", tm.nsteps, n_ext,
                          "production_extension", {"case": case, "extension": n_ext, "from_step": current,
                                                   "added_steps": tm.nsteps - current})
    atomic_write_text(path, json.dumps({"tpr": new_tpr.name, "target_step": tm.nsteps, "extensions": n_ext}))
    return new_tpr, tm


def _production_input(runner: Runner, rec, run_dir: Path, case: str, wd: Path, eq: Path, top: Path, prot: Protocol,
                      pre: dict, tm: Timing, ens: str, seed: int) -> dict[str, Any]:
    """Write prod.mdp and prod.tpr (once: a resumed production keeps its tpr); NVT rescales the box."""
    setup_ev: dict[str, Any] = {}
    if not (wd / "prod.segment.json").is_file() or not (wd / "prod.tpr").is_file():
        overrides = cutoff_overrides(pre)
        start_gro = eq / "npt.gro"
        checkpoint = None
        if ens == "NVT":
            an = G.analyse_equilibration(eq / "npt.edr", ["Density", "Potential", "Volume"])
            v_mean = an.volume_mean_nm3
            v_last = float(G.read_edr(eq / "npt.edr")["Volume"][-1])
            box_last = _gro_box(eq / "npt.gro")
            v_gro = box_last[0] * box_last[1] * box_last[2]
            s = (v_mean / v_gro) ** (1.0 / 3.0)
            res = runner.tool(["editconf", "-f", str((eq / "npt.gro").resolve()), "-o", "prod_start.gro",
                               "-scale", f"{s:.8f}", f"{s:.8f}", f"{s:.8f}"], cwd=wd, name="prod_start.editconf")
            if not res.ok:
                raise EngineError("gmx editconf -scale failed", res.argv, res.returncode, res.console_path)
            box_new = _gro_box(wd / "prod_start.gro")
            setup_ev = {"ensemble": "NVT", "mean_volume_nm3": v_mean, "tail_start_ps": an.tail_start_ps,
                        "last_frame_volume_nm3": v_gro, "last_edr_volume_nm3": v_last, "scale": s,
                        "box_nm": box_new, "box_volume_nm3": box_new[0] * box_new[1] * box_new[2]}
            start_gro = wd / "prod_start.gro"
        else:
            overrides.update(prot.raw.get("npt_mdp") or {})
            checkpoint = (eq / "npt.cpt").resolve()
            setup_ev = {"ensemble": "NPT"}
        write_mdp(prot, wd / "prod.mdp", overrides, timing=tm, seed=seed)
        runner.grompp(wd / "prod.mdp", start_gro.resolve(), top.resolve(), wd / "prod.tpr", checkpoint=checkpoint)
        pev = rec.append_event("production_setup", {"case": case, **setup_ev, "nsteps": tm.nsteps,
                                                    "dt_ps": tm.dt_ps, "length_ps": tm.length_ps})
        _add_artifacts(rec, run_dir, [wd / "prod.mdp", wd / "prod.tpr", wd / "prod_start.gro"], pev["id"])
    return setup_ev


def _gro_box(gro: Path) -> list[float]:
    last = Path(gro).read_text().rstrip("\n").splitlines()[-1].split()
    return [float(x) for x in last[:3]]


def production_consistency(runner: Runner, wd: Path, deffnm: str, tm: Timing, rec=None) -> dict[str, Any]:
    """Check that a production segment's files agree with each other and with its ``nsteps``.

    Returns
    -------
    dict
        ``consistent`` (bool), ``problems`` (list of str) and the counts compared: ``nsteps``,
        ``checkpoint_step``, ``log_last_step``, ``xtc_frames`` vs ``xtc_frames_expected``, ``xtc_dt_ps``,
        ``edr_frames`` vs ``edr_frames_expected``.
    """
    import warnings  # noqa: PLC0415

    import MDAnalysis as mda  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    nsteps = tm.nsteps
    nx = tm.steps(tm.xtc_interval_ps)
    ne = tm.steps(tm.energy_interval_ps)
    problems: list[str] = []
    cstep = checkpoint_step(runner, wd / f"{deffnm}.cpt")
    lstep = log_last_step(wd / f"{deffnm}.log")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(str(wd / f"{deffnm}.tpr"), str(wd / f"{deffnm}.xtc"))
        times = np.array([ts.time for ts in u.trajectory])
    edr = G.read_edr(wd / f"{deffnm}.edr")
    exp_x = nsteps // nx + 1
    exp_e = nsteps // ne + 1
    dts = np.diff(times)
    uniform = bool(times.size > 1 and np.allclose(dts, tm.xtc_interval_ps, atol=1e-3))
    if cstep != nsteps:
        problems.append(f"checkpoint step {cstep} != nsteps {nsteps}")
    if lstep != nsteps:
        problems.append(f"log last step {lstep} != nsteps {nsteps}")
    if times.size != exp_x:
        problems.append(f"xtc frames {times.size} != {exp_x} expected")
    if not uniform:
        problems.append("xtc frame times are not uniformly spaced (gap or duplicate)")
    if edr["Time"].size != exp_e:
        problems.append(f"edr frames {edr['Time'].size} != {exp_e} expected")
    return {"consistent": not problems, "problems": problems, "nsteps": nsteps, "checkpoint_step": cstep,
            "log_last_step": lstep, "xtc_frames": int(times.size), "xtc_frames_expected": exp_x,
            "xtc_dt_ps": float(np.median(dts)) if dts.size else None, "xtc_uniform": uniform,
            "xtc_first_last_ps": [float(times[0]), float(times[-1])] if times.size else [],
            "edr_frames": int(edr["Time"].size), "edr_frames_expected": exp_e,
            "pressure_tensor_in_edr": all(k in edr for k in ("Pres-XY", "Pres-XZ", "Pres-YZ"))}
