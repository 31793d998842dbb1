"""Equilibration gates from the run record (Sim3, E5): production entered after a failed gate
(``production_after_failed_gate``), a recorded gate whose own numbers contradict its verdict
(``gate_record_inconsistent``), a stage state ``valid`` where the last gate failed (``stage_state_contradicts_gate``),
and the gate the run registered re-evaluated on its own NPT energy file (``registered_gate_fails``)."""

from __future__ import annotations

import logging
import math
from typing import Any

from mdbench.audit.runread import RunData, canonical_stage
from mdbench.audit.simulation import _pick, _stage_attempt_artifacts, production_attempts

log = logging.getLogger(__name__)


def _gate_events(run: RunData, case: str, stage: str) -> list[tuple[int, dict]]:
    out = []
    for _line, ev in run.events:
        p = ev.get("payload") if isinstance(ev.get("payload"), dict) else {}
        if ev.get("type") == "gate_evaluated" and p.get("case") == case and \
                canonical_stage(str(p.get("stage", p.get("gate", "")))) == stage:
            out.append((int(ev["id"]) if isinstance(ev.get("id"), int) else 0, p))
    return out


_REL = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
        "≤": lambda a, b: a <= b, "≥": lambda a, b: a >= b}


def _gate_contradictions(p: dict) -> list[str]:
    """Checks of a recorded gate whose value and threshold contradict their own ``passed`` flag or the verdict."""
    bad = []
    checks = p.get("checks") if isinstance(p.get("checks"), list) else []
    any_failed = False
    for c in checks:
        if not isinstance(c, dict):
            continue
        v, t, rel = c.get("value"), c.get("threshold"), str(c.get("relation", "")).strip()
        ok = c.get("passed")
        if isinstance(v, (int, float)) and isinstance(t, (int, float)) and not isinstance(v, bool) and \
                not isinstance(t, bool) and rel in _REL and math.isfinite(v) and math.isfinite(t):
            truth = _REL[rel](float(v), float(t))
            if isinstance(ok, bool) and ok != truth:
                bad.append(f"check {c.get('name')}: {v} {rel} {t} is {truth}, recorded passed={ok}")
            ok = truth
        if ok is False:
            any_failed = True
    if p.get("passed") is True and any_failed:
        bad.append("the gate is recorded passed while one of its own checks fails")
    return bad


def gate_findings(run: RunData, case: str) -> tuple[list[str], list[str]]:
    """(Sim3 problems, E5 problems) of one case from its recorded equilibration gates and stage states."""
    sim3, e5 = [], []
    evs = _gate_events(run, case, "equil")
    if evs:
        last_id, last = evs[-1]
        prod_entered = bool(production_attempts(run, case)) or any(
            a.get("case") == case and canonical_stage(str(a.get("stage", a.get("kind", "")))) == "prod"
            for a in run.attempts.values())
        if last.get("passed") is False and prod_entered and not any(p.get("passed") is True for _i, p in evs
                                                                     if _i > last_id):
            sim3.append(f"production entered after the recorded equilibration gate (event {last_id}) FAILED "
                        f"({str(last.get('reason', ''))[:160]}) and no later recorded gate passed")
        for eid, p in evs:
            for b in _gate_contradictions(p):
                sim3.append(f"gate event {eid}: {b}")
                e5.append(f"{case}: gate event {eid}: {b}")
    again = reevaluate_registered_gate(run, case)
    if again is not None:
        sim3.append(again)
    for stage in ("em", "equil"):
        g = _gate_events(run, case, stage)
        st = run.stage_state(case, stage)
        if g and isinstance(st, dict) and st.get("state") == "valid" and g[-1][1].get("passed") is False:
            e5.append(f"{case}: stage_states.json says {stage} valid, its last gate_evaluated event ({g[-1][0]}) "
                      "says FAILED")
    return sim3, e5


_GATE_ARGS = ("target_temperature_K", "observables", "nskip", "min_effective_samples", "max_t0_fraction",
              "temperature_tolerance_K", "max_density_drift_rel")


def reevaluate_registered_gate(run: RunData, case: str) -> str | None:
    """:func:`_reevaluate_registered_gate`, once per case and audit (the audit computes it while the reanalysis
    runs in its child process, :func:`mdbench.audit.core._case_pass`; the E/O pass reads it here)."""
    cache = run.fs.__dict__.setdefault("_gate_reevaluated", {})
    if case not in cache:
        cache[case] = _reevaluate_registered_gate(run, case)
    return cache[case]


def _reevaluate_registered_gate(run: RunData, case: str) -> str | None:
    """The run's registered equilibration gate (the definition in force; :func:`mdbench.engine.gates.
    equilibration_gate`'s parameters) re-evaluated on its last equilibration energy file; why it fails, if it
    does. None where the run registered no such gate or the file cannot be read (Sim3 reports that)."""
    reg = next((r for r in run.in_force("gate", "equilibration", case=case)
                if isinstance(r.get("definition"), dict) and r["definition"].get("gate") == "equilibration"
                and "max_density_drift_rel" in r["definition"]), None)
    if reg is None:
        return None
    d = reg["definition"]
    kw: dict[str, Any] = {}
    try:
        for k in _GATE_ARGS:
            if k in d:
                v = d[k]
                kw[k] = [str(x) for x in v][:8] if k == "observables" else (int(v) if k == "nskip" else float(v))
        if "target_temperature_K" not in kw or "observables" not in kw:
            return None
    except (TypeError, ValueError):
        return None
    edrs = _pick(run, case, "equil", ".edr", _stage_attempt_artifacts(run, case, "equil"))
    npt = [e for e in edrs if "npt" in e.rsplit("/", 1)[-1].lower()]
    rel = (npt or edrs or [None])[-1]
    if rel is None:
        return None
    try:
        from mdbench.analysis.thermo import read_energy_file  # noqa: PLC0415 - header checked before pyedr reads it
        from mdbench.engine.gates import equilibration_gate  # noqa: PLC0415

        path = run.fs.resolve(rel)
        read_energy_file(str(path))
        res = equilibration_gate(str(path), **kw)
    except Exception as exc:  # noqa: BLE001 - unreadable or too short: Sim3 reports the file itself
        log.info("registered gate not re-evaluated on %s: %s", rel, exc)
        return None
    if res.passed:
        return None
    return (f"the run's registered equilibration gate ({reg.get('id')}), re-evaluated on {rel}, fails: "
            f"{res.reason[:240]}")
