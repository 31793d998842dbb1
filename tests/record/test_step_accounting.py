"""Step accounting of MD segments in the ledger: charged = computed, kept = nsteps, none lost, none twice.

Crafted ledgers of one production segment (target 20,000 steps) killed at step 13,000 with its last
checkpoint at 12,200: the honest one validates; one that loses steps, counts the recomputed steps twice in
the trajectory or charges other than it computed is an error of ``mdbench record validate``.
"""

from __future__ import annotations

import json

import pytest

from mdbench.record import RecordError, RunRecord
from mdbench.record.steps import segment_accounts, superseded_by
from mdbench.record.validate import validate_run

SEG = "cases/DE/prod/prod"
DT = 0.002
TARGET = 20_000


def _reserve(rec, start, supersedes=None, relation=None, parent=None, target=TARGET):
    return rec.reserve("DE", planned_steps=target - start, dt_ps=DT, kind="production", stage="study/40_production",
                       parent=parent, relation=relation, segment=SEG, start_step=start, target_step=target,
                       supersedes=supersedes)


def _killed(rec, end=13_000):
    a = _reserve(rec, 0)
    rec.complete(a, completed_steps=end, end_step=end, status="interrupted",
                 end_step_evidence={"checkpoint": 12_200, "log": end, "edr": end})
    return a


def _errors(run):
    return [str(f) for f in validate_run(run) if f.severity == "error"]


def _resumed_errors(run, start, supersedes=None) -> list[str]:
    """Errors of a ledger where production killed at 13,000 is resumed from ``start`` and completed."""
    rec = RunRecord(run)
    a = _killed(rec)
    b = _reserve(rec, start, [dict(s, attempt_id=a) for s in supersedes or []], "continuation", a)
    rec.complete(b, completed_steps=TARGET - start, end_step=TARGET, status="completed")
    return _errors(run)


def test_continuation_from_an_older_checkpoint_charges_both_and_keeps_each_step_once(tmp_path):
    rec = RunRecord(tmp_path)
    a = _killed(rec)
    prior = [dict(r) for r in rec.attempts()]
    sup = superseded_by(prior, 12_200)
    assert sup == [{"attempt_id": a, "from_step": 12_200, "to_step": 13_000, "steps": 800}]
    b = _reserve(rec, 12_200, sup, "continuation", a)
    rec.complete(b, completed_steps=7_800, end_step=TARGET, status="completed")
    assert _errors(tmp_path) == []
    acc = segment_accounts(rec.attempts())[SEG]
    # charged = computed (the budget counts compute), kept = nsteps (the trajectory holds each step once)
    assert (acc.charged_steps, acc.computed_steps, acc.superseded_steps, acc.kept_steps) == (20_800, 20_800, 800, TARGET)
    assert sum(r["ns_charged"] for r in rec.attempts()) == pytest.approx(20_800 * DT / 1000)
    lines = (tmp_path / "run_record/attempts.jsonl").read_text().splitlines()
    assert len(lines) == 4  # append-only: reserved, closed, reserved, closed; no line rewritten


def test_continuation_without_its_superseded_steps_counts_them_twice(tmp_path):
    errors = _resumed_errors(tmp_path, 12_200)
    assert any("counts steps twice" in e for e in errors), errors
    assert any("kept twice" in e for e in errors) and any("20800 distinct step(s) kept" in e for e in errors), errors


def test_continuation_past_the_killed_attempt_loses_steps(tmp_path):
    errors = _resumed_errors(tmp_path, 14_000)
    assert any("steps 13000→14000 lost" in e for e in errors), errors
    assert any("19000 distinct step(s) kept" in e for e in errors), errors


def test_superseding_kept_steps_is_an_error(tmp_path):
    errors = _resumed_errors(tmp_path, 12_200, [{"from_step": 11_000, "to_step": 13_000, "steps": 2_000}])
    assert any("marks kept steps as superseded" in e for e in errors) and any("lost" in e for e in errors), errors


def test_charge_other_than_computed_is_refused_and_an_error(tmp_path):
    rec = RunRecord(tmp_path)
    a = _killed(rec)
    sup = superseded_by(rec.attempts(), 12_200)
    b = _reserve(rec, 12_200, sup, "continuation", a)
    with pytest.raises(RecordError, match="charge what it computed"):
        rec.complete(b, completed_steps=7_000, end_step=TARGET, status="completed")
    # a writer that does not check: the row charges 7,000 of the 7,800 steps it ran
    row = dict(rec.attempts()[-1], status="completed", completed_steps=7_000, ns_charged=7_000 * DT / 1000,
               end_step=TARGET)
    with open(tmp_path / "run_record/attempts.jsonl", "a") as handle:
        handle.write(json.dumps(row) + "\n")
    errors = _errors(tmp_path)
    assert any("charged 7000 step(s) but ran steps 12200→20000 (7800 computed)" in e for e in errors), errors


def test_restart_supersedes_everything_and_an_extension_nothing(tmp_path):
    rec = RunRecord(tmp_path)
    a = _killed(rec, end=5_000)
    sup = superseded_by(rec.attempts(), 0)
    assert sup == [{"attempt_id": a, "from_step": 0, "to_step": 5_000, "steps": 5_000}]
    b = _reserve(rec, 0, sup, "restart", a)
    rec.complete(b, completed_steps=TARGET, end_step=TARGET, status="completed")
    assert superseded_by(rec.attempts(), TARGET) == []
    c = _reserve(rec, TARGET, [], "extension", b, target=25_000)
    rec.complete(c, completed_steps=5_000, end_step=25_000, status="completed")
    assert _errors(tmp_path) == []
    acc = segment_accounts(rec.attempts())[SEG]
    assert (acc.charged_steps, acc.superseded_steps, acc.kept_steps, acc.target_step) == (30_000, 5_000, 25_000, 25_000)


def test_ledgers_without_the_step_fields_are_read_as_before(tmp_path):
    rec = RunRecord(tmp_path)
    a = rec.reserve("DE", planned_steps=TARGET, dt_ps=DT, kind="production", stage="40_production")
    rec.complete(a, completed_steps=13_000, status="interrupted")
    b = rec.reserve("DE", planned_steps=7_800, dt_ps=DT, kind="production", stage="40_production", parent=a,
                    relation="continuation")
    rec.complete(b, completed_steps=7_800, status="completed")
    assert _errors(tmp_path) == [] and segment_accounts(rec.attempts()) == {}
