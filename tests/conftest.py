"""Suite-wide test configuration: simulation seeds from ``MDBENCH_TEST_SEED`` (see ``tests/_testseed.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # _testseed, for every room's fixtures

import _testseed  # noqa: E402


def pytest_report_header(config: pytest.Config) -> str:
    """Name the seed in the header so a failure can be rerun with the same trajectories."""
    return (f"simulation seeds: {_testseed.ENV_VAR}={_testseed.base_seed()} "
            f"(default {_testseed.DEFAULT_TEST_SEED}; every gen-seed/ld-seed/genion/packmol seed derives from it)")

