"""Budget guard: 100 ns per case, 300 ns per study, refused before anything runs; charges never deducted."""

from __future__ import annotations

import pytest

from mdbench.record import BudgetExceeded, RecordError, RunRecord
from mdbench.record.validate import validate_run

DT_PS = 0.002  # 2 fs


def steps(ns: float) -> int:
    return int(round(ns * 1000 / DT_PS))


def test_60_plus_50_refused_60_plus_40_accepted(tmp_path):
    rec = RunRecord(tmp_path)
    first = rec.reserve("DE", planned_steps=steps(60), dt_ps=DT_PS, kind="production", stage="40_production")
    n_events = len(rec.events())
    with pytest.raises(BudgetExceeded, match="case budget of 100 ns"):
        rec.reserve("DE", planned_steps=steps(50), dt_ps=DT_PS, kind="extension", stage="40_production")
    assert len(rec.attempts()) == 1  # nothing reserved
    assert rec.events()[-1]["type"] == "budget_refused" and len(rec.events()) == n_events + 1
    second = rec.reserve("DE", planned_steps=steps(40), dt_ps=DT_PS, kind="extension", stage="40_production",
                         parent=first, relation="extension")
    assert rec.committed_ns("DE") == pytest.approx(100.0)
    assert second != first


def test_failed_attempts_stay_charged(tmp_path):
    rec = RunRecord(tmp_path)
    a = rec.reserve("HCE", planned_steps=steps(60), dt_ps=DT_PS, kind="equilibration", stage="30_equilibrate")
    rec.complete(a, completed_steps=steps(30), status="failed", reason="LINCS warning")
    assert rec.charged_ns("HCE") == pytest.approx(30.0)
    b = rec.reserve("HCE", planned_steps=steps(70), dt_ps=DT_PS, kind="equilibration", stage="30_equilibrate",
                    parent=a, relation="restart")
    rec.complete(b, completed_steps=steps(10), status="interrupted")
    assert rec.charged_ns("HCE") == pytest.approx(40.0)
    with pytest.raises(BudgetExceeded):
        rec.reserve("HCE", planned_steps=steps(60.5), dt_ps=DT_PS, kind="production", stage="40_production")
    rec.reserve("HCE", planned_steps=steps(60), dt_ps=DT_PS, kind="production", stage="40_production")
    statuses = [row["status"] for row in rec.attempt_rows()]
    assert statuses == ["reserved", "failed", "reserved", "interrupted", "reserved"]
    with pytest.raises(RecordError, match="already closed"):
        rec.complete(a, completed_steps=1, status="completed")
    assert validate_run(tmp_path) == []


def test_study_budget_300_ns(tmp_path):
    rec = RunRecord(tmp_path)
    for case in ("DE", "HCE", "LHCE"):
        rec.reserve(case, planned_steps=steps(100), dt_ps=DT_PS, kind="production", stage="40_production")
    with pytest.raises(BudgetExceeded, match="study budget of 300 ns"):
        rec.reserve("EXTRA", planned_steps=1, dt_ps=DT_PS, kind="production", stage="40_production")


def test_bad_reservations(tmp_path):
    rec = RunRecord(tmp_path)
    with pytest.raises(RecordError, match="parent attempt"):
        rec.reserve("DE", planned_steps=10, dt_ps=DT_PS, kind="x", stage="s", parent="DE-0099")
    with pytest.raises(RecordError, match="dt_ps"):
        rec.reserve("DE", planned_steps=10, dt_ps=0.0, kind="x", stage="s")
