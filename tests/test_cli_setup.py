"""Setup in minutes (issue 38): `make setup` builds no Harbor environment, prints one line per step with its
time and the PATH line; `make test` builds Harbor's only in CI or when its tests are selected; ./mdbench runs
the CLI from the checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from mdbench.paths import PROJECT_ROOT

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _dry(*args: str, **env: str) -> str:
    # HARBOR_VENV names a folder that does not exist, so a .venv-harbor already built here does not hide the step
    args = (*args, "HARBOR_VENV=.venv-harbor-dry-run-absent") if "harbor-env" not in args else args
    return subprocess.run(["make", "-n", *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          env={k: v for k, v in dict(os.environ, **env).items()
                               if (k != "CI" or "CI" in env) and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}).stdout
    # (a `make test PYTEST_ARGS=…` that runs this suite passes its command-line variables down in MAKEFLAGS)


@needs_make
def test_setup_and_demo_never_build_harbor() -> None:
    assert "harbor" not in _dry("setup")
    assert "harbor" not in _dry("demo")
    assert "harbor" not in _dry("test")                         # skipped, naming `make harbor-env`
    assert ".venv-harbor" in _dry("test", CI="true")            # CI builds it
    assert ".venv-harbor" in _dry("test", PYTEST_ARGS="tests/arena/test_harbor.py")
    assert ".venv-harbor" in _dry("harbor-env", "-B")
    assert "chromium" in _dry("test")                           # the report tests render in headless Chromium


def test_setup_prints_one_timed_line_per_step_and_the_path_line() -> None:
    venv = PROJECT_ROOT / ".venv"
    stamp = venv / ".mdbench-installed"
    if not stamp.is_file() or stamp.stat().st_mtime < (PROJECT_ROOT / "pyproject.toml").stat().st_mtime:
        pytest.skip("the checkout's .venv is not ready (this test must not rebuild the running environment)")
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHON=sys.executable, VENV=".venv"), timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    steps = [ln for ln in lines if ln.startswith("setup: ") and "PATH" not in ln]
    assert len(steps) >= 4
    for ln in steps:
        assert re.search(r"(\d+\.\d s|ready)$", ln), ln
    assert 'export PATH="' in lines[-1] and "/.venv/bin:$PATH" in lines[-1] and "./mdbench" in lines[-1]


def test_launcher_runs_the_cli() -> None:
    if not (PROJECT_ROOT / ".venv" / "bin" / "mdbench").exists():
        pytest.skip("no .venv in the checkout")
    proc = subprocess.run([str(PROJECT_ROOT / "mdbench"), "--version"], capture_output=True, text=True,
                          cwd="/", timeout=300)
    assert proc.returncode == 0 and "version" in proc.stdout, proc.stderr
