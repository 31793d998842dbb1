"""The study's time estimate (issue 47): the schedule simulation against hand-computed cases, the history of
this machine's speeds, the dry run, and the ETA that follows the plan."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mdbench.engine import estimate as E
from mdbench.engine.estimate import CaseCost, simulate
from mdbench.engine.progress import SystemProgress, plan_eta_s

from engine_helpers import needs_gmx

TINY = {"nvt": 25000, "npt": 100000, "production": 200000}


def _cost(case: str, s1: float = 400.0, s2: float | None = 740.0, steps=None, setup_s=15.0, minimize_s=15.0,
          analysis_s=60.0, speeds: dict | None = None) -> CaseCost:
    speeds = speeds or ({"1": s1} if s2 is None else {"1": s1, "2": s2})
    return CaseCost(case, 2000, dict(steps or TINY), 0.002, speeds, setup_s, minimize_s, analysis_s, "benchmark")


def test_one_case_alone_takes_the_sum_of_its_parts_at_the_full_cap():
    cost = _cost("DE")
    sched = simulate([cost], 2, policy="follow")
    # the minimisation (15 s on one thread) is an mdrun too: it runs on both cores
    expected = 15 + 15 * 400.0 / 740.0 + sum(E.STAGE_OVERHEAD_S.values()) + sum(TINY.values()) / 740.0 + 60
    assert sched.total_s == pytest.approx(expected, rel=1e-9)  # one case: no comparison stage
    assert sched.threads_used == {"DE": [2]}


def test_threads_follow_the_work_beats_fixed_threads_and_leaves_no_core_idle():
    costs = [_cost(c) for c in ("DE", "HCE", "LHCE")]
    follow = simulate(costs, 2, policy="follow")
    fixed = simulate(costs, 2, policy="fixed", threads=1)
    assert follow.busy_fraction_during_md > 0.99
    assert fixed.busy_fraction_during_md < 0.85  # the third case runs alone on one of two cores
    assert follow.total_s < 0.85 * fixed.total_s
    # all the MD's core-seconds over 2 cores bound the follow schedule from below
    md_core_s = 3 * sum(TINY.values()) / 400.0
    assert follow.md_end_s >= md_core_s / 2


def test_the_md_time_scales_with_the_speed():
    slow = simulate([_cost(c, setup_s=0, minimize_s=0, analysis_s=0) for c in ("A", "B")], 2, analysis=False)
    fast = simulate([_cost(c, 800.0, 1480.0, setup_s=0, minimize_s=0, analysis_s=0) for c in ("A", "B")], 2,
                    analysis=False)
    overhead = sum(E.STAGE_OVERHEAD_S.values())
    assert (fast.total_s - overhead) == pytest.approx((slow.total_s - overhead) / 2, rel=1e-6)


def test_four_paper_cases_on_sixteen_cores_keep_every_core_busy():
    paper = {"nvt": 50000, "npt": 500000, "production": 5000000}
    costs = [_cost(c, steps=paper, setup_s=120, minimize_s=300, analysis_s=900, speeds={"1": 20.0, "16": 250.0})
             for c in ("DE", "HCE", "LHCE", "X")]
    sched = simulate(costs, 16, policy="follow")
    assert sched.busy_fraction_during_md > 0.98
    assert all(used == [4] for used in sched.threads_used.values())


def test_a_multi_thread_speed_slower_than_one_thread_is_not_used():
    cost = _cost("DE", 400.0, 50.0)  # measured beside other load
    assert cost.speed(2) == pytest.approx(400.0 * 2 * E.DEFAULT_EFFICIENCY)
    assert _cost("DE", 400.0, 740.0).speed(2) == 740.0


def test_the_one_thread_benchmark_never_measures_a_case_alone():
    """Three cases on two cores: the third is measured beside a partner run, not alone (alone it has the
    caches to itself and ran 5-10 % faster than in the study)."""
    order = E.side_by_side_order(["DE", "HCE", "LHCE"], 2)
    assert [c for c, measured in order if measured] == ["DE", "HCE", "LHCE"]
    assert len(order) % 2 == 0 and order[-1] == ("DE", False)
    assert E.side_by_side_order(["DE", "HCE"], 2) == [("DE", True), ("HCE", True)]
    assert E.side_by_side_order(["DE"], 16) == [("DE", True)]  # one case: nothing to pair with
    assert len(E.side_by_side_order(["A", "B", "C", "D", "E"], 4)) == 8


def test_history_merges_per_case_and_skips_garbage(tmp_path, monkeypatch):
    monkeypatch.setenv("MDBENCH_CACHE_DIR", str(tmp_path))
    machine = {"cpu_model": "x", "logical_cpus": 2, "gromacs": "2022", "simd": "SSE4.1"}
    E._append_history([{"machine": machine, "preset": "tiny", "bundle": "", "case": "DE", "natoms": 2000,
                        "setup_s": 10, "minimize_s": 9, "steps_per_s": {"1": 400.0, "2": 700.0}}])
    with open(E.history_path(), "a") as fh:
        fh.write("not json\n[1, 2]\n")
    E._append_history([{"machine": machine, "preset": "tiny", "bundle": "", "case": "DE",
                        "steps_per_s": {"2": 760.0}, "source": "run"},
                       {"machine": dict(machine, cpu_model="other"), "preset": "tiny", "bundle": "", "case": "DE",
                        "steps_per_s": {"1": 1.0}}])
    merged = E.read_history(machine, "tiny")["DE"]
    assert merged["steps_per_s"] == {"1": 400.0, "2": 760.0} and merged["natoms"] == 2000
    assert merged["source"] == "run"


def test_the_eta_follows_the_plan_and_is_zero_when_done():
    costs = [_cost(c) for c in ("DE", "HCE", "LHCE")]
    plan = E.StudyPlan("tiny", 2, "follow", costs, simulate(costs, 2), simulate(costs, 2, policy="fixed"))
    planned = costs[0].md_ns
    fresh = {c: SystemProgress(c, 0.0, planned, "setup", "not_reached", "queued") for c in ("DE", "HCE", "LHCE")}
    assert plan_eta_s(plan, fresh, None) == pytest.approx(plan.schedule.total_s, rel=1e-6)
    # a rate measured over the setup alone (almost no MD yet) does not stretch the ETA
    assert plan_eta_s(plan, fresh, 1.0) == pytest.approx(plan.schedule.total_s, rel=1e-6)
    half = {c: SystemProgress(c, planned / 2, planned, "equilibration", "valid", "running production")
            for c in ("DE", "HCE", "LHCE")}
    assert plan_eta_s(plan, half, None) < 0.6 * plan.schedule.total_s
    # half done at half the planned speed: the rest takes longer than planned
    planned_rate = sum(c.md_ns for c in costs) / plan.schedule.md_end_s * 86400.0
    assert plan_eta_s(plan, half, planned_rate / 2) > 1.5 * plan_eta_s(plan, half, planned_rate)
    # one case done: the others' remaining MD runs on more threads, so the ETA is below a fixed-rate guess
    two_left = dict(half, DE=SystemProgress("DE", planned, planned, "production", "valid", "done"))
    assert plan_eta_s(plan, two_left, None) < plan_eta_s(plan, half, None)
    done = {c: SystemProgress(c, planned, planned, "production", "valid", "done") for c in ("DE", "HCE", "LHCE")}
    assert plan_eta_s(plan, done, None) == 0.0


def _mdbench(*args, env=None):
    return subprocess.run([sys.executable, "-m", "mdbench.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def test_threads_option_says_what_it_accepts(tmp_path):
    res = _mdbench("study", "run", "--out", str(tmp_path / "r"), "--threads", "0")
    assert res.returncode == 2 and "give at least 1, or auto" in res.stderr and "Traceback" not in res.stderr
    res = _mdbench("study", "run", "--out", str(tmp_path / "r"), "--threads", "two")
    assert res.returncode == 2 and "neither auto nor a whole number" in res.stderr


@needs_gmx
@pytest.mark.gromacs
def test_dry_run_measures_once_then_plans_from_the_history_and_writes_nothing(tmp_path, monkeypatch):
    import os

    env = dict(os.environ, MDBENCH_CACHE_DIR=str(tmp_path / "cache"))
    out = tmp_path / "run"
    first = _mdbench("study", "run", "--preset", "micro", "--systems", "DE", "--out", str(out), "--dry-run",
                     env=env)
    assert first.returncode == 0, first.stderr
    assert "measuring each case" in first.stdout and "expected wall time" in first.stdout
    assert not out.exists()
    lines = [json.loads(line) for line in (tmp_path / "cache" / "md_speed.jsonl").read_text().splitlines()]
    (entry,) = lines
    assert entry["case"] == "DE" and entry["natoms"] > 0 and entry["steps_per_s"]["1"] > 0
    second = _mdbench("study", "run", "--preset", "micro", "--systems", "DE", "--out", str(out), "--dry-run",
                      env=env)
    assert second.returncode == 0 and "measuring" not in second.stdout
    row = next(line for line in second.stdout.splitlines() if line.strip().startswith("DE"))
    assert "benchmark" in row and " 0.090 " in row  # micro plans 10 + 40 + 40 ps


def test_a_denser_study_box_runs_slower_than_the_packed_benchmark_box():
    assert E.density_speed_factor(1.00, 1.15) == pytest.approx(1.15 ** -E.PAIR_COST_EXPONENT, abs=1e-4)
    assert E.density_speed_factor(1.00, 1.15) < 1.0 < E.density_speed_factor(1.2, 1.0)
    assert E.density_speed_factor(0.0, 1.15) == 1.0 == E.density_speed_factor(1.0, float("nan"))
