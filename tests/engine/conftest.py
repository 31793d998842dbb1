"""Fixtures of the engine room: a tiny SPC water box made with GROMACS' own files, and the micro DE case.

Everything runs real GROMACS on one thread. The water box (~1,000 atoms, 2.2 nm, cut-off 0.8 nm) is the
quickest system that exercises every code path; the micro DE case (built by ``mdbench.build``) is the
study's own smallest system.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from mdbench.paths import PARAMS_DIR

sys.path.insert(0, str(Path(__file__).parent))  # engine_helpers, for tests and spawned workers

from _testseed import seed_for  # noqa: E402
from engine_helpers import GMX, make_water_case  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread_and_private_locks(tmp_path_factory, monkeypatch):
    """One thread per mdrun, and a thread-cap lock directory private to the test session."""
    lock_dir = tmp_path_factory.getbasetemp() / "thread-locks"
    monkeypatch.setenv("MDBENCH_LOCK_DIR", str(lock_dir))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture
def water_run(tmp_path) -> Path:
    """A run directory with one water case ``W`` set up."""
    run = tmp_path / "run"
    make_water_case(run)
    return run


@pytest.fixture
def relaxed_protocols(tmp_path) -> Path:
    """A copy of params/protocols whose equilibration gate accepts short water runs.

    Used only by tests about recovery and ledgers, where the gate is not what is tested.
    """
    dest = tmp_path / "protocols"
    shutil.copytree(PARAMS_DIR / "protocols", dest)
    text = (dest / "gates.yaml").read_text()
    text = text.replace("min_effective_samples: 10", "min_effective_samples: 2")
    text = text.replace("temperature_tolerance_K: 1.0", "temperature_tolerance_K: 10.0")
    text = text.replace("max_density_drift_rel: 0.02", "max_density_drift_rel: 0.2")
    text = text.replace("max_t0_fraction: 0.75", "max_t0_fraction: 0.95")
    (dest / "gates.yaml").write_text(text)
    return dest


@pytest.fixture(scope="module")
def micro_de_equilibrated(tmp_path_factory) -> Path:
    """The micro DE case built, minimised and equilibrated through the study templates (papermill).

    Tests copy this run directory before running production in it.
    """
    if GMX is None:
        pytest.skip("GROMACS (gmx) not on PATH")
    os.environ.setdefault("MDBENCH_LOCK_DIR", str(tmp_path_factory.getbasetemp() / "thread-locks"))
    from mdbench.build import build_system
    from mdbench.execute import run_stage

    run = tmp_path_factory.mktemp("micro") / "run"
    result = build_system("DE", "micro", run / "cases" / "DE" / "setup", seed=seed_for("engine/micro-DE/packmol"))
    assert result.passed, [a for a in result.audits if not a.passed]
    for stage, seeded in (("study/20_minimize", {}), ("study/30_equilibrate", {"seed": seed_for("engine/md")})):
        res = run_stage(run, "DE", stage, {"preset": "micro", "engine": "cli", "threads": 1, **seeded})
        assert res.status == "finished", f"{stage}: {res.error} (notebook {res.notebook_path})"
    return run
