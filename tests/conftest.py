"""Suite-wide test configuration: simulation seeds from ``MDBENCH_TEST_SEED`` (see ``tests/_testseed.py``), and
the MD speed history of the suite's runs kept out of the user's own (``MDBENCH_CACHE_DIR``)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # _testseed, for every room's fixtures

import _testseed  # noqa: E402

# every `study run` records its MD speeds for the next estimate (mdbench.engine.estimate): the suite's go to a
# folder of their own, set before any test spawns the CLI
os.environ.setdefault("MDBENCH_CACHE_DIR", tempfile.mkdtemp(prefix="mdbench-test-cache-"))


def pytest_report_header(config: pytest.Config) -> str:
    """Name the seed in the header so a failure can be rerun with the same trajectories."""
    return (f"simulation seeds: {_testseed.ENV_VAR}={_testseed.base_seed()} "
            f"(default {_testseed.DEFAULT_TEST_SEED}; every gen-seed/ld-seed/genion/packmol seed derives from it)")

