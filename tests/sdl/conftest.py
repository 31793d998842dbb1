"""Fixtures of the sdl room's tests: the shipped vapdiff record, small compiled assignments, the PG fixture."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: make sdl_helpers importable

from sdl_helpers import KEYS, PG_FIXTURE, SMALL_ROLES  # noqa: E402

from mdbench.sdl.compiler import Budgets, CompileSpec, compile_assignments  # noqa: E402
from mdbench.sdl.precursor_genome import load_precursor_genome  # noqa: E402
from mdbench.sdl.synthetic import synthetic_record  # noqa: E402
from mdbench.sdl.vapdiff import load_vapdiff  # noqa: E402


@pytest.fixture(scope="session")
def vapdiff():
    return load_vapdiff()


@pytest.fixture(scope="session")
def synthetic():
    return synthetic_record()


@pytest.fixture(scope="session")
def small_spec():
    """6 full-length blocks of 8 experiments, budgets 4 experiments / 8 evidence / 2 reviews."""
    return CompileSpec(rotations=6, horizons=(4,), block_size=8, role_blocks=dict(SMALL_ROLES),
                       budgets=Budgets(4, 8, 2), seed=3)


@pytest.fixture(scope="session")
def small_assignments(vapdiff, small_spec):
    return compile_assignments(vapdiff, small_spec, KEYS)


@pytest.fixture(scope="session")
def tiny_assignments(vapdiff):
    """Horizon-2 campaigns (6 rotations of 8-experiment blocks; budgets 2 / 4 / 0): cheap confined runs."""
    spec = CompileSpec(rotations=6, horizons=(2,), block_size=8, role_blocks=dict(SMALL_ROLES),
                       budgets=Budgets(2, 4, 1), seed=5)
    return compile_assignments(vapdiff, spec, KEYS)


@pytest.fixture(scope="session")
def pg_ledger():
    return load_precursor_genome(PG_FIXTURE)


@pytest.fixture(scope="session")
def pg_assignments(pg_ledger):
    spec = CompileSpec(rotations=6, horizons=(2,), block_size=2, role_blocks=dict(SMALL_ROLES),
                       budgets=Budgets(2, 4, 2), seed=1)
    return compile_assignments(pg_ledger, spec, KEYS)


@pytest.fixture(scope="session")
def synthetic_assignments(synthetic):
    spec = CompileSpec(rotations=2, horizons=(12,), block_size=32, role_blocks=dict(SMALL_ROLES),
                       budgets=Budgets(12, 36, 3), seed=0)
    return compile_assignments(synthetic, spec, KEYS)
