"""The rules of mdbench.analysis.concurrency: no thread alive at a fork, a failed child never decides alone."""

from __future__ import annotations

import multiprocessing
import os
import threading

import numpy as np
import pytest

from mdbench.analysis import concurrency
from mdbench.analysis.pipeline import analyze_files
from mdbench.analysis.settings import AnalysisSettings

pytestmark = pytest.mark.skipif(not concurrency.can_fork(), reason="needs the fork start method")


def test_no_thread_is_alive_when_the_analysis_forks(water_nacl, tmp_path, monkeypatch):
    """Rule 1: the energy child and both trajectory workers are forked while this process runs one thread;
    the hashing thread starts after the last fork; nothing is left running afterwards."""
    threads_at_fork: list[list[str]] = []
    real_fork = os.fork

    def recording_fork():
        threads_at_fork.append([t.name for t in threading.enumerate()])
        return real_fork()

    monkeypatch.setattr(os, "fork", recording_fork)
    doc = analyze_files(water_nacl["tpr"], water_nacl["xtc"], water_nacl["edr"], tmp_path / "o", guard_ps=5.0,
                        settings=AnalysisSettings(structure_max_frames=50), figures=False, workers=2)
    assert doc["system"]["reduction_workers"] == 2
    assert len(threads_at_fork) >= 3, threads_at_fork          # the energy child + two workers
    assert all(len(names) == 1 for names in threads_at_fork), threads_at_fork  # only this thread at every fork
    assert multiprocessing.active_children() == []


def test_forked_ranges_share_memory_and_report_progress():
    """Rule 3: workers write rows of an anonymous shared map that the parent reads; progress is counted."""
    out = concurrency.shared_zeros((10,), np.int64)
    seen: list[int] = []

    def job(slot, a, b, progress):
        out[a:b] = np.arange(a, b) * 10
        progress[slot] += b - a
        return (slot, a, b)

    parts = concurrency.run_forked_ranges(job, 10, 3, seen.append)
    assert parts == [(0, 0, 3), (1, 3, 7), (2, 7, 10)]
    assert out.tolist() == list(range(0, 100, 10)) and seen and seen[-1] == 10


def test_hashing_runs_in_one_background_thread(tmp_path):
    from mdbench.record import sha256_file

    f = tmp_path / "x.bin"
    f.write_bytes(b"abc" * 1000)
    futures = concurrency.hash_in_background(sha256_file, {"x": f})
    assert futures["x"].result() == sha256_file(f)


def test_every_fork_and_thread_of_the_analysis_is_in_the_concurrency_module():
    from pathlib import Path

    room = Path(concurrency.__file__).parent
    words = ("ThreadPoolExecutor", "ProcessPoolExecutor", "multiprocessing", "threading", "os.fork", "Thread(")
    offenders = [f"{p.relative_to(room)}: {w}" for p in sorted(room.rglob("*.py")) if p.name != "concurrency.py"
                 for w in words if w in p.read_text(encoding="utf-8")]
    assert offenders == []


def test_ranges_in_threads_keep_order_and_join():
    parts = concurrency.ranges_in_threads(lambda a, b: list(range(a, b)), 10, 3, "mdbench-test")
    assert sum(parts, []) == list(range(10)) and len(parts) == 3
    assert not [t for t in threading.enumerate() if t.name.startswith("mdbench-test")]
    assert concurrency.ranges_in_threads(lambda a, b: (a, b), 7, 1, "x") == [(0, 7)]
