"""Fixtures of the audit tests: one tiny REAL GROMACS run (built once per session) and its bundle."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _runbuilder as rb  # noqa: E402

needs_gmx = pytest.mark.skipif(shutil.which("gmx") is None, reason="needs gmx on PATH")


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run_dir, bundle_dir) of the honest reference run; do not modify — copy with ``run_copy``."""
    if shutil.which("gmx") is None:
        pytest.skip("needs gmx on PATH")
    return rb.shared_run(tmp_path_factory)  # one build per session, shared with the report and CLI tests


@pytest.fixture
def run_copy(built: tuple[Path, Path], tmp_path: Path) -> Path:
    """A private copy of the honest run that a test may corrupt."""
    dst = tmp_path / "run"
    shutil.copytree(built[0], dst, symlinks=True)
    return dst


@pytest.fixture
def bundle(built: tuple[Path, Path]) -> Path:
    return built[1]
