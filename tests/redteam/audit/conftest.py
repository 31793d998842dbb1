"""Fixtures of the audit red team: the audit tests' tiny REAL run (built once per session), to corrupt."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "audit"))
import _runbuilder as rb  # noqa: E402


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("gmx") is None:
        pytest.skip("needs gmx on PATH")
    return rb.shared_run(tmp_path_factory)


@pytest.fixture
def run_copy(built: tuple[Path, Path], tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(built[0], dst, symlinks=True)
    return dst
