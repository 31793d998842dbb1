"""Fixtures of the sdl red-team tests: a small compile on disk (horizon 2), the cheat program's command line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SDL_TESTS = HERE.parents[1] / "sdl"
sys.path.insert(0, str(SDL_TESTS))   # sdl_helpers (KEYS, SMALL_ROLES)
sys.path.insert(0, str(HERE))        # sdl_redteam_helpers (cheat_cmd)

from sdl_helpers import KEYS, SMALL_ROLES  # noqa: E402

from mdbench.sdl.bundle import load_compiled, write_compiled  # noqa: E402
from mdbench.sdl.compiler import Budgets, CompileSpec, compile_assignments  # noqa: E402


@pytest.fixture(scope="session")
def vapdiff():
    from mdbench.sdl.vapdiff import load_vapdiff

    return load_vapdiff()


@pytest.fixture(scope="session")
def compiled(tmp_path_factory, vapdiff):
    """6 rotations of 8-experiment blocks at horizon 2 (budgets 2 / 4 / 0), written like `mdbench sdl compile`."""
    spec = CompileSpec(rotations=6, horizons=(2,), block_size=8, role_blocks=dict(SMALL_ROLES),
                       budgets=Budgets(2, 4, 1), seed=5)
    root = tmp_path_factory.mktemp("rt") / "asg"
    return load_compiled(write_compiled(root, vapdiff, compile_assignments(vapdiff, spec, KEYS), KEYS))
