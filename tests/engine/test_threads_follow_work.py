"""Threads follow the work (issue 47): demands, the fair share, re-balancing a running mdrun at a checkpoint,
and resuming a killed segment with another thread count — the last two on real GROMACS."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import mdbench.threads as threads_mod
from mdbench.engine.runner import FOLLOW_THE_WORK, CliRunner
from mdbench.engine.segments import run_segment
from mdbench.record import RunRecord
from mdbench.record.validate import validate_run
from mdbench.threads import ThreadSlots

from engine_helpers import needs_gmx, water_tpr


# ------------------------------------------------------------------------------------------- slots and demands
def test_fair_share_is_the_cap_over_the_cases_with_md_ahead(tmp_path):
    slots = ThreadSlots(cap=4, lock_dir=tmp_path)
    assert slots.active_demands() == 0 and slots.fair_share() == 4
    with slots.demand("run:DE"):
        assert slots.fair_share() == 4
        with slots.demand("run:HCE"), slots.demand("run:LHCE"):
            assert slots.active_demands() == 3 and slots.fair_share() == 1  # 4 // 3
        assert slots.fair_share() == 4
    assert slots.active_demands() == 0


def test_acquire_share_takes_the_share_only_onto_idle_cpus(tmp_path, monkeypatch):
    slots = ThreadSlots(cap=2, lock_dir=tmp_path, poll_s=0.01)
    monkeypatch.setattr(threads_mod, "idle_cpus", lambda interval_s=0.5: 2.0)
    with slots.acquire_share() as held:
        assert len(held) == 2
    monkeypatch.setattr(threads_mod, "idle_cpus", lambda interval_s=0.5: 0.1)  # another user's work on the cores
    with slots.acquire_share() as held:
        assert len(held) == 1
    monkeypatch.setattr(threads_mod, "idle_cpus", lambda interval_s=0.5: 2.0)
    with slots.acquire(1), slots.acquire_share() as held:  # one slot taken: the share is what is free
        assert len(held) == 1


def test_rebalance_grows_onto_free_idle_slots_and_shrinks_for_a_waiting_case(tmp_path):
    slots = ThreadSlots(cap=2, lock_dir=tmp_path)
    with slots.demand("run:A"), slots.acquire(1):
        assert slots.rebalance_due(1, idle=1.0) == 2  # alone now: take the second core
        assert slots.rebalance_due(1, idle=0.1) is None  # the second core is busy with someone else's work
        assert slots.rebalance_due(1, idle=None) == 2  # no /proc/stat: the slots decide
        with slots.demand("run:B"):
            assert slots.rebalance_due(1, idle=1.0) is None  # share 1 = what it holds
    with slots.demand("run:A"), slots.demand("run:B"), slots.acquire(2):
        assert slots.rebalance_due(2, idle=0.0) == 1  # B waits and nothing is free: give one back


def test_a_waiting_case_gets_the_freed_slot_before_the_one_that_freed_it(tmp_path, monkeypatch):
    """First come, first served: the case whose mdrun just ended and asks again at once (its next stage) does
    not take its slot back from a case that has been waiting (the demo's HCE waited 5 min that way)."""
    monkeypatch.setattr(threads_mod, "idle_cpus", lambda interval_s=0.5: 0.0)
    slots = ThreadSlots(cap=1, lock_dir=tmp_path, poll_s=0.05)
    order: list[str] = []

    def waiting_case():
        with slots.acquire_share():
            order.append("waiting")
            time.sleep(0.2)

    with slots.acquire_share():
        other = threading.Thread(target=waiting_case)
        other.start()
        time.sleep(0.5)  # the other case is queued now
    with slots.acquire_share():  # at once, as the next stage of the same case would
        order.append("releasing")
    other.join()
    assert order == ["waiting", "releasing"]
    assert list((tmp_path / "queue").glob("*.lock")) == []  # tickets are removed


def test_idle_cpus_reads_the_machine():
    idle = threads_mod.idle_cpus(0.2)
    if idle is None:
        pytest.skip("no /proc/stat here")
    assert -0.05 <= idle <= (os.cpu_count() or 1) + 0.05


# ------------------------------------------------------------------------------------------- on real GROMACS
def _xtc_times(xtc: Path) -> np.ndarray:
    import MDAnalysis as mda

    gro = xtc.parents[1] / "setup" / "system.gro"
    return np.array([ts.time for ts in mda.Universe(str(gro), str(xtc)).trajectory])


@needs_gmx
@pytest.mark.gromacs
def test_a_segment_takes_a_finished_cases_cores_at_its_next_checkpoint(water_run, tmp_path, monkeypatch):
    """Two cases demand threads (share 1 of 2); the other one finishes; the running mdrun is stopped at a
    checkpoint and continues with 2 threads in the same attempt. Steps charged once, trajectory whole."""
    monkeypatch.setenv("MDBENCH_MIN_SLICE_S", "0.5")
    monkeypatch.setenv("MDBENCH_REBALANCE_POLL_S", "0.2")
    monkeypatch.setattr(threads_mod, "idle_cpus", lambda interval_s=0.5: 2.0)  # the idle rule has its own test
    monkeypatch.setattr(threads_mod.IdleCpus, "sample", lambda self: 2.0)
    slots = ThreadSlots(cap=2, lock_dir=tmp_path / "locks", poll_s=0.02)
    runner = CliRunner(slots)
    tpr = water_tpr(water_run, runner, length_ps=16.0, xtc_interval_ps=0.5)
    other_done = threading.Event()

    def other_case():  # a second case with MD ahead, finishing two seconds in
        with slots.demand("elsewhere:HCE"):
            other_done.wait(2.0)

    with slots.demand(f"{water_run}:W"):
        worker = threading.Thread(target=other_case)
        worker.start()
        time.sleep(0.2)
        res = run_segment(RunRecord(water_run), runner, "W", tpr, "md", target_step=8000, dt_ps=0.002,
                          stage="test", kind="nvt", parent=None, relation=None, threads=FOLLOW_THE_WORK)
        worker.join()
    assert res.status == "completed", res.reason
    (attempt,) = RunRecord(water_run).attempts()
    slices = attempt["resources"]["slices"]
    assert [s["threads"] for s in slices][:2] == [1, 2], slices
    assert attempt["completed_steps"] == 8000 and attempt["end_step"] == 8000
    assert slices[-1]["end_step"] == 8000  # every slice says where it ended, the last one too
    assert all(a["end_step"] == b["start_step"] for a, b in zip(slices, slices[1:]))
    events = [e["payload"] for e in RunRecord(water_run).events() if e["type"] == "mdrun_finished"]
    assert [e["slice"] for e in events] == list(range(1, len(slices) + 1))
    assert events[0]["rebalance_to_threads"] == 2
    times = _xtc_times(tpr.parent / "md.xtc")
    assert np.allclose(np.diff(times), 0.5) and times[-1] == pytest.approx(16.0)  # no frame lost or doubled
    assert [str(f) for f in validate_run(water_run) if f.severity == "error"] == []


class _KillAfterCheckpoint(CliRunner):
    """SIGKILL the first mdrun once its checkpoint exists (and a little more has run)."""

    def __init__(self, slots):
        super().__init__(slots)
        self.killed = False

    def mdrun(self, tpr, deffnm, **kw):
        cpt = Path(tpr).parent / f"{deffnm}.cpt"

        def watch(proc):
            def run():
                while proc.poll() is None and not cpt.exists():
                    time.sleep(0.05)
                time.sleep(0.5)
                if proc.poll() is None:
                    self.killed = True
                    os.kill(proc.pid, signal.SIGKILL)
            threading.Thread(target=run, daemon=True).start()

        kw.pop("on_start", None)
        return super().mdrun(tpr, deffnm, on_start=watch, **{**kw, "cpt_min": 0.005})


@needs_gmx
@pytest.mark.gromacs
def test_a_segment_killed_on_one_thread_resumes_on_two(water_run, tmp_path):
    slots = ThreadSlots(cap=2, lock_dir=tmp_path / "locks", poll_s=0.02)
    killer = _KillAfterCheckpoint(slots)
    tpr = water_tpr(water_run, killer, length_ps=5.0)
    rec = RunRecord(water_run)
    first = run_segment(rec, killer, "W", tpr, "md", target_step=2500, dt_ps=0.002, stage="test", kind="nvt",
                        parent=None, relation=None, threads=1, cpt_min=0.005)
    assert killer.killed and first.status == "interrupted" and first.final_step < 2500
    second = run_segment(rec, CliRunner(slots), "W", tpr, "md", target_step=2500, dt_ps=0.002, stage="test",
                         kind="nvt", parent=None, relation=None, threads=2)
    assert second.status == "completed"
    a, b = rec.attempts()
    assert b["relation"] == "continuation" and b["resources"]["threads"] == 2 and a["resources"]["threads"] == 1
    recomputed = sum(s["steps"] for s in b["supersedes"])
    assert a["completed_steps"] + b["completed_steps"] - recomputed == 2500
    cmd = [json.loads(line) for line in (tpr.parent / "md.mdrun.cmd.json").read_text().splitlines()]
    assert [c["threads"] for c in cmd] == [1, 2]
    times = _xtc_times(tpr.parent / "md.xtc")
    assert np.allclose(np.diff(times), 0.5) and times[-1] == pytest.approx(5.0)
    assert [str(f) for f in validate_run(water_run) if f.severity == "error"] == []
