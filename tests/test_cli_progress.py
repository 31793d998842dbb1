"""Honest progress (issue 38): one overall bar in ns of MD (plan + extensions) with an ETA from the measured
ns/day, each system queued / running <stage> / done, never a bar past its total (no tqdm clamping)."""

from __future__ import annotations

import warnings
from pathlib import Path

from mdbench.engine.progress import ProgressWatcher, Rate, all_progress, overall_line
from mdbench.record import RunRecord

PLANNED_NS = 0.05  # per system


def _record(run: Path) -> None:
    rec = RunRecord(run)
    # DE: everything done, its production extended once by 0.02 ns
    rec.append_event("stage_started", {"system": "DE", "stage": "study/10_setup"})
    rec.append_event("stage_finished", {"system": "DE", "stage": "study/10_setup"})
    a = rec.reserve("DE", planned_steps=25000, dt_ps=0.002, kind="production", stage="40_production")
    rec.complete(a, completed_steps=25000, status="completed")
    b = rec.reserve("DE", planned_steps=10000, dt_ps=0.002, kind="production", stage="40_production",
                    parent=a, relation="extension")
    rec.complete(b, completed_steps=10000, status="completed")
    rec.append_event("stage_started", {"system": "DE", "stage": "study/40_production"})
    rec.append_event("stage_finished", {"system": "DE", "stage": "study/40_production"})
    # HCE: running its equilibration
    rec.append_event("stage_started", {"system": "HCE", "stage": "study/30_equilibrate"})
    # LHCE: waiting for a worker (no event at all)


def test_statuses_totals_and_extensions(tmp_path: Path) -> None:
    _record(tmp_path)
    p = all_progress(tmp_path, ["DE", "HCE", "LHCE"], PLANNED_NS, last_stage="study/40_production")
    assert p["DE"].status == "done"
    assert p["HCE"].status == "running equilibrate"
    assert p["LHCE"].status == "queued"
    assert abs(p["DE"].done_ns - 0.07) < 1e-9
    assert abs(p["DE"].planned_ns - (PLANNED_NS + 0.02)) < 1e-9  # the extension is part of the plan
    for q in p.values():
        assert q.done_ns <= q.planned_ns
    done, total, postfix = overall_line(p, None)
    assert abs(total - (3 * PLANNED_NS + 0.02)) < 1e-9 and done <= total
    assert "ETA —" in postfix


def test_eta_from_measured_rate() -> None:
    t = [0.0]
    rate = Rate(min_elapsed_s=10, clock=lambda: t[0])
    assert rate.update(1.0) is None            # first call only sets the origin
    t[0] = 5.0
    assert rate.update(1.1) is None            # too early to measure
    t[0] = 86400.0 / 10                        # a tenth of a day later, 2 ns more
    ns_day = rate.update(3.0)
    assert abs(ns_day - 20.0) < 1e-9
    assert abs(Rate.eta_s(10.0, ns_day) - 0.5 * 86400) < 1e-6


def test_watcher_never_clamps(tmp_path: Path, capsys) -> None:
    _record(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tqdm's "clamping frac to range [0, 1]" is a TqdmWarning
        with ProgressWatcher(tmp_path, ["DE", "HCE", "LHCE"], PLANNED_NS, interval_s=0.05,
                             last_stage="study/40_production"):
            pass
    err = capsys.readouterr().err
    assert "clamping" not in err
    assert "all MD" in err and "queued" in err and "running equilibrate" in err and "done" in err
