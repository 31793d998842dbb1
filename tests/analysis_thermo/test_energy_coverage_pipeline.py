"""Issue 35, must show: analyze-files on a truncated, shorter .edr warns and keeps thermo and eta out of C.

The micro DE production (``tests/peers/conftest.py``, real GROMACS, 40 ps, pressure tensor every 0.02 ps): its
energy file cut inside a frame after the first quarter of the run, analysed with the full trajectory.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from mdbench.analysis.thermo import COVERAGE_CHECK, read_energy_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def test_a_truncated_shorter_energy_file_is_stated_and_kept_out_of_c(micro_de_energy_files, tmp_path, caplog):
    from mdbench.analysis.pipeline import AnalysisSettings, analyze_files

    md = Path(micro_de_energy_files["prod"]).parent
    full = read_energy_file(md / "prod.edr")
    size = (md / "prod.edr").stat().st_size
    per_frame = size // full.time_ps.size
    cut = tmp_path / "prod.edr"
    shutil.copy(md / "prod.edr", cut)
    with cut.open("r+b") as fh:  # a quarter of the frames, the last one torn
        fh.truncate(full.time_ps.size // 4 * per_frame + per_frame // 3)
    settings = AnalysisSettings(diffusion_beta_range=(0.5, 1.5), diffusion_min_decades=0.5)
    with caplog.at_level(logging.WARNING):
        doc = analyze_files(md / "prod.tpr", md / "prod.xtc", cut, tmp_path / "analysis", guard_ps=0.0, case="DE",
                            figures=False, workers=1, settings=settings)
    energy = doc["energy"]
    assert energy["truncated"] is True and energy["torn_bytes"] > 0
    assert energy["covers"] is False
    assert energy["energy_window_ps"][1] < 0.3 * energy["trajectory_window_ps"][1]
    assert any("truncated" in r.getMessage() for r in caplog.records)
    assert any("do not cover" in r.getMessage() for r in caplog.records)
    obs = doc["observables"]
    energy_based = [k for k in obs
                    if k.startswith("thermo/") and (obs[k].get("window") or {}).get("source") == "energy file"]
    energy_based += ["viscosity", "conductivity/sigma"]
    assert len(energy_based) >= 4
    for k in energy_based:
        assert obs[k]["state"] != "C", (k, obs[k]["reason"])
        assert obs[k]["state"] != "SI" or COVERAGE_CHECK in obs[k]["reason"] or "not C" in obs[k]["reason"], k
    thermo = [k for k in energy_based if k.startswith("thermo/")]
    for k in thermo:
        assert obs[k]["window"]["computed_on_ps"][1] == pytest.approx(energy["energy_window_ps"][1])
