"""Plumbing of the pure-liquid density validation (the real validation is a command, see docs/forcefield.md)."""

import math
import shutil

import pytest

from mdbench.inputs.validate_ff import run_density


@pytest.mark.slow
@pytest.mark.gromacs
@pytest.mark.skipif(shutil.which("gmx") is None or shutil.which("packmol") is None, reason="needs gmx and packmol")
def test_short_dmc_density_run(tmp_path):
    from _testseed import seed_for

    res = run_density("DMC", tmp_path, n_molecules=40, nvt_ps=1.0, npt_ps=4.0, threads=1, cutoff_nm=0.8,
                      seed=seed_for("inputs/dmc-density"))
    assert math.isfinite(res.density_g_cm3) and 0.7 < res.density_g_cm3 < 1.5
    assert res.average_window_ps == (pytest.approx(2.0, abs=0.11), pytest.approx(4.0))
    assert (tmp_path / "DMC" / "density.json").is_file()
