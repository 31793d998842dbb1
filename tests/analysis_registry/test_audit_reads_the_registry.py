"""The audit reads the registry: unknown observables become findings; the registration in force is used."""

from __future__ import annotations

import json
from pathlib import Path

from mdbench.audit import audit_run
from mdbench.audit.core import _guard_ps
from mdbench.audit.runread import group_entries, load_run
from mdbench.audit.safeio import RunFS
from mdbench.record import RunRecord


def _entry(category: str, value: float = 1.0) -> dict:
    return {"category": category, "value": value, "unit": "1", "uncertainty": {"half_width_95": 0.1,
            "definition": "blocks"}, "blocks": [value] * 4, "window": None, "diagnostics": {}, "definition": "x",
            "state": "C", "reason": "ok", "registration_id": None}


def _run(tmp_path: Path, observables: dict) -> Path:
    run = tmp_path / "run"
    rec = RunRecord(run)
    rec.set_stage_state("W", "production", "valid", "fixture")
    out = run / "analysis" / "W"
    out.mkdir(parents=True)
    (out / "results.json").write_text(json.dumps({"case": "W", "observables": observables}))
    return run


def test_an_observable_unknown_to_the_registry_is_a_finding(tmp_path):
    run = _run(tmp_path, {"thermo/density": _entry("thermodynamics", 1000.0),
                          "hydrogen_bonds/SOL": _entry("hydrogen_bonds", 3.4)})
    data = load_run(RunFS(run))
    codes = [(f.code, f.path, f.case) for f in data.fs.findings]
    assert ("unknown_observable", "analysis/W/results.json", "W") in codes
    msg = next(f.message for f in data.fs.findings if f.code == "unknown_observable")
    assert "hydrogen_bonds/SOL" in msg
    # the known one is grouped, the unknown one is in no group
    groups = group_entries(data.results["W"])
    assert list(groups["thermodynamics"]) == ["observables.thermo/density"]
    assert not any("hydrogen" in k for g in groups.values() for k in g)
    # and the audit's own outputs list it
    audit_run(run, None, tmp_path / "audit", reanalysis=False)
    saeo = json.loads((tmp_path / "audit" / "saeo.json").read_text())
    assert any(f["code"] == "unknown_observable" and "hydrogen_bonds" in f["message"] for f in saeo["findings"])
    assert "unknown_observable" in (tmp_path / "audit" / "findings.md").read_text()


def test_an_agent_result_under_observables_that_no_group_matches_is_a_finding(tmp_path):
    run = _run(tmp_path, {"thermodynamics": {"density": {"value": 1000.0, "blocks": [1000.0] * 4}},
                          "dielectric_constant": {"value": 2.9, "blocks": [2.9] * 4}})
    data = load_run(RunFS(run))
    assert [f.message.split(":")[0] for f in data.fs.findings if f.code == "unknown_observable"] == [
        "observables.dielectric_constant"]


def test_nothing_known_is_reported_as_unknown(tmp_path):
    """Every category the pipeline writes is known (no finding for our own results)."""
    from mdbench.analysis import observables as registry

    run = _run(tmp_path, {e.key("X"): _entry(e.category) for e in registry.REGISTRY})
    data = load_run(RunFS(run))
    assert [f for f in data.fs.findings if f.code == "unknown_observable"] == []


def test_the_audit_uses_the_registration_in_force(tmp_path):
    run = _run(tmp_path, {"thermo/density": _entry("thermodynamics", 1000.0)})
    rec = RunRecord(run)
    first = rec.register_or_revise("analysis_guard_and_blocks", {"guard_ps": 5.0}, case="W")
    assert rec.register_or_revise("analysis_guard_and_blocks", {"guard_ps": 5.0}, case="W") == first  # unchanged
    second = rec.register_or_revise("analysis_guard_and_blocks", {"guard_ps": 8.0}, case="W", reason="longer guard")
    rows = rec.registrations()
    assert rows[-1]["revises"] == first and rows[-1]["evidence"] == {"reason": "longer guard",
                                                                     "changed_keys": ["guard_ps"]}
    data = load_run(RunFS(run))
    assert [r["id"] for r in data.in_force("guard", case="W")] == [second]
    assert _guard_ps(data, "W") == 8.0
    # a run that registers again without naming the revision: the latest is in force
    rec.register("analysis_guard_and_blocks", {"guard_ps": 3.0}, case="W")
    assert _guard_ps(load_run(RunFS(run)), "W") == 3.0
