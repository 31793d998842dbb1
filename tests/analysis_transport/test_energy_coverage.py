"""Issue 35: a truncated energy file is read to its last complete frame and says so; an energy series that does
not cover the trajectory's analysis window is a warning and keeps the energy-based states out of C."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest

from mdbench.analysis.thermo import (COVERAGE_CHECK, EnergySeries, coverage_check, energy_coverage,
                                     read_energy_file)


def test_a_torn_energy_file_is_read_to_its_last_complete_frame(tmp_path, water_nvt_run, caplog):
    full = read_energy_file(water_nvt_run / "md.edr")
    assert full.torn_bytes == 0
    size = (water_nvt_run / "md.edr").stat().st_size
    frame_bytes = size // full.time_ps.size  # frames of one layout: cut inside the last one
    cut = tmp_path / "cut.edr"
    shutil.copy(water_nvt_run / "md.edr", cut)
    with cut.open("r+b") as fh:
        fh.truncate(size - frame_bytes // 2)
    with caplog.at_level(logging.WARNING):
        torn = read_energy_file(cut)
    assert 0 < torn.torn_bytes < frame_bytes
    assert torn.time_ps.size == full.time_ps.size - 1
    np.testing.assert_array_equal(torn.time_ps, full.time_ps[:-1])
    assert any("truncated" in r.getMessage() for r in caplog.records)
    cov = energy_coverage(torn, full.time_ps)
    assert cov["truncated"] is True and cov["covers"]  # one frame short: within one output interval
    assert any("truncated" in w for w in cov["warnings"])


def _series(t_end_ps: float, dt_ps: float = 0.02, torn: int | None = 0) -> EnergySeries:
    t = np.arange(0.0, t_end_ps + dt_ps / 2, dt_ps)
    return EnergySeries(time_ps=t, terms={"Temperature": np.full(t.size, 300.0)}, path="prod.edr", torn_bytes=torn)


def test_a_shorter_energy_file_does_not_cover_the_trajectory(caplog):
    traj = np.arange(0.0, 3000.0, 1.0)
    with caplog.at_level(logging.WARNING):
        cov = energy_coverage(_series(40.0), traj)
    assert cov["covers"] is False and cov["energy_window_ps"][1] == pytest.approx(40.0, abs=0.1)
    assert cov["trajectory_window_ps"][1] == pytest.approx(2999.0, abs=4)
    assert any("do not cover" in r.getMessage() for r in caplog.records)
    checks, details = coverage_check(cov)
    assert checks == {COVERAGE_CHECK: False} and "0-40 ps" in details[COVERAGE_CHECK]


@pytest.mark.parametrize("energy_end,covers", [(2999.0, True), (2998.0, True), (2990.0, False)])
def test_coverage_tolerates_one_output_interval(energy_end, covers):
    cov = energy_coverage(_series(energy_end, dt_ps=0.5), np.arange(0.0, 3000.0, 1.0))
    assert cov["covers"] is covers, cov["detail"]
    assert cov["truncated"] is False


def test_an_unknown_truncation_is_not_claimed():
    cov = energy_coverage(_series(10.0, torn=None), np.arange(0.0, 10.5, 0.5))
    assert cov["truncated"] is None and cov["covers"]
