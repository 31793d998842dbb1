"""``mdbench study run``: clear refusals (fast) and all three micro systems end to end (slow, opt-in)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mdbench.engine.runner import gmxapi_unavailable_reason
from mdbench.engine.stages import load_preset
from mdbench.record import RunRecord

from engine_helpers import needs_gmx


def _study(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mdbench.cli", "study", "run", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_unknown_system_is_refused_with_the_choices(tmp_path):
    res = _study("--preset", "micro", "--systems", "XX", "--out", str(tmp_path / "r"), "--quiet")
    assert res.returncode == 1 and "unknown system(s) ['XX']; choose from DE HCE LHCE" in res.stderr
    assert not (tmp_path / "r").exists()


@needs_gmx
def test_unusable_gmxapi_engine_is_refused_before_anything_runs(tmp_path):
    if gmxapi_unavailable_reason() is None:
        pytest.skip("gmxapi is usable here")
    res = _study("--preset", "micro", "--systems", "DE", "--out", str(tmp_path / "r"), "--engine", "gmxapi")
    assert res.returncode == 1 and "--engine gmxapi is not usable here" in res.stderr
    assert not (tmp_path / "r").exists()


@needs_gmx
@pytest.mark.slow
@pytest.mark.gromacs
def test_three_micro_systems_through_production(tmp_path):
    """setup → minimisation → equilibration → production for DE, HCE and LHCE via the CLI and the executor."""
    run = tmp_path / "run"
    from _testseed import seed_for

    res = _study("--preset", "micro", "--systems", "DE", "HCE", "LHCE", "--out", str(run), "--engine", "cli",
                 "--seed", str(seed_for("engine/study")), "--quiet", timeout=3600)
    assert res.returncode == 0, res.stdout + res.stderr
    rec = RunRecord(run)
    states = rec.stage_states()
    proto = load_preset("micro")["protocol"]
    for case in ("DE", "HCE", "LHCE"):
        assert {s: states[case][s]["state"] for s in ("setup", "minimization", "equilibration", "production")} == {
            "setup": "valid", "minimization": "valid", "equilibration": "valid", "production": "valid"}, states[case]
        prod = [a for a in rec.attempts() if a["case"] == case and a["stage"] == "production"]
        assert len(prod) == 1 and prod[0]["status"] == "completed"
        assert prod[0]["completed_steps"] == prod[0]["planned_steps"] == round(
            proto["production_ps"] / (proto["dt_fs"] / 1000))
        assert states[case]["production"]["evidence"]["consistent"]
        assert (run / "notebooks" / case / "40_production.ipynb").is_file()
        assert f"{case} " in res.stdout and "ns charged/planned" in res.stdout
    assert rec.charged_ns() <= 300.0
