"""Truncated and garbage xtc files (what a killed mdrun, or a hostile run directory, leaves), on a real GROMACS
trajectory cut by the test; ``gmx check`` is the oracle for how many frames are complete."""

from __future__ import annotations

import gc
import re
import subprocess

import pytest

from mdbench.engine.runner import CliRunner
from mdbench.engine.threads import ThreadSlots
from mdbench.trajcheck import TrajectoryError, complete_frames, scan_xtc

from engine_helpers import GMX, make_water_case, needs_gmx, water_tpr

pytestmark = [needs_gmx, pytest.mark.gromacs]


@pytest.fixture(scope="module")
def water_xtc(tmp_path_factory):
    """A 2 ps water trajectory with a frame every 0.1 ps (21 frames), written by GROMACS."""
    run = tmp_path_factory.mktemp("xtc") / "run"
    make_water_case(run)
    runner = CliRunner(ThreadSlots(cap=1))
    tpr = water_tpr(run, runner, length_ps=2.0, xtc_interval_ps=0.1)
    res = runner.mdrun(tpr, "md", threads=1)
    assert res.ok, res.console_path
    return tpr.parent / "md.xtc"


def _gmx_frames(xtc) -> int:
    res = subprocess.run([GMX, "-quiet", "check", "-f", str(xtc)], capture_output=True, text=True)
    out = res.stdout + res.stderr
    m = re.search(r"^Coords\s+(\d+)", out, re.M)
    return int(m.group(1)) if m else 0


def test_whole_trajectory(water_xtc):
    info = scan_xtc(water_xtc)
    assert not info.truncated and info.problem is None and info.complete_bytes == water_xtc.stat().st_size
    assert info.n_frames == _gmx_frames(water_xtc) == 21
    assert (info.first_time_ps, info.last_time_ps, info.last_step) == (0.0, pytest.approx(2.0), 1000)
    assert "whole, 21 complete frame(s)" in info.summary()


@pytest.mark.parametrize("where", ["mid-header", "mid-coordinates", "one byte short", "frame boundary"])
def test_cut_trajectory_keeps_its_complete_frames(water_xtc, tmp_path, where):
    """Cut at several kinds of place; the complete frames agree with gmx check's count and are readable."""
    import MDAnalysis as mda

    whole = scan_xtc(water_xtc)
    data = water_xtc.read_bytes()
    frame = len(data) // whole.n_frames  # about one frame
    cut = {"mid-header": 12 * frame + 40, "mid-coordinates": 15 * frame + frame // 2,
           "one byte short": len(data) - 1, "frame boundary": None}[where]
    if cut is None:  # exactly after frame 7: no bytes dropped
        head = scan_xtc(_write(tmp_path / "h.xtc", data[: 8 * frame + frame // 2]))
        cut = head.complete_bytes
    path = _write(tmp_path / "cut.xtc", data[:cut])
    info = scan_xtc(path)
    assert info.n_frames == _gmx_frames(path) and 0 < info.n_frames <= whole.n_frames
    assert info.complete_bytes <= cut and info.truncated == (where != "frame boundary")
    if info.truncated:
        assert info.dropped_bytes == cut - info.complete_bytes and "cut after" in info.problem
        assert f"{info.n_frames} complete frame(s)" in info.summary() and "truncated" in info.summary()
    with complete_frames(path) as frames:
        u = mda.Universe(str(water_xtc.with_suffix(".tpr")), str(frames.path))
        times = [ts.time for ts in u.trajectory]
        assert len(times) == info.n_frames and times[-1] == pytest.approx(info.last_time_ps)
        copy = frames.path
    assert not copy.exists() or copy == path  # the temporary copy is removed on leaving the block


def test_garbage_after_whole_frames_is_a_truncation(water_xtc, tmp_path):
    path = _write(tmp_path / "g.xtc", water_xtc.read_bytes() + b"\x00garbage" * 20)
    info = scan_xtc(path)
    assert info.truncated and info.n_frames == 21 and "not an xtc frame header" in info.problem


def test_copy_is_removed_when_the_handle_is_collected(water_xtc, tmp_path):
    path = _write(tmp_path / "c.xtc", water_xtc.read_bytes()[:-10])
    frames = complete_frames(path)
    copy = frames.path
    assert copy != path and copy.is_file() and copy.stat().st_size == frames.integrity.complete_bytes
    del frames
    gc.collect()
    assert not copy.exists()


@pytest.mark.parametrize("content, message", [
    (b"", "shorter than one frame header"),
    (bytes(range(256)) * 8, "does not begin with an xtc frame header"),
])
def test_not_a_trajectory_is_one_clear_error(tmp_path, content, message):
    path = _write(tmp_path / "bad.xtc", content)
    with pytest.raises(TrajectoryError, match=message) as err:
        scan_xtc(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_first_frame_cut_has_no_complete_frame(water_xtc, tmp_path):
    path = _write(tmp_path / "one.xtc", water_xtc.read_bytes()[:200])
    with pytest.raises(TrajectoryError, match="without a complete frame"):
        scan_xtc(path)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path
