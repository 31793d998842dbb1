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
from kill_helpers import STUDY_SEED  # noqa: E402


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


@pytest.fixture(scope="session")
def micro_de_snapshots(tmp_path_factory) -> dict[str, Path]:
    """The micro DE case after its setup and after its equilibration, run by the jobs ``mdbench study run``
    makes (papermill templates, same parameters), so the CLI resumes a copy without rerunning them.

    ``{"setup": run dir, "equilibration": run dir}``; tests copy them, never modify them.
    """
    if GMX is None:
        pytest.skip("GROMACS (gmx) not on PATH")
    os.environ.setdefault("MDBENCH_LOCK_DIR", str(tmp_path_factory.getbasetemp() / "thread-locks"))
    from mdbench.engine.commands import build_jobs
    from mdbench.execute import run_jobs

    base = tmp_path_factory.mktemp("micro")
    run = base / "run"
    jobs = build_jobs(run, ["DE"], "micro", "cli", 1, STUDY_SEED)
    snapshots = {}
    for name, part in (("setup", jobs[:1]), ("equilibration", jobs[1:3])):
        for res in run_jobs(part, workers=1, verbose=False):
            assert res.status == "finished", f"{res.stage}: {res.error} (notebook {res.notebook_path})"
        snapshots[name] = base / name
        shutil.copytree(run, snapshots[name], symlinks=True)
    return snapshots


@pytest.fixture(scope="session")
def micro_de_equilibrated(micro_de_snapshots) -> Path:
    """The micro DE case built, minimised and equilibrated through the study templates (papermill).

    Tests copy this run directory before running production in it.
    """
    return micro_de_snapshots["equilibration"]
