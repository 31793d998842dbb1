"""Fixtures of the sdl room's tests: the shipped vapdiff record, small compiled assignments, the PG fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from mdbench.sdl.compiler import Budgets, CompileSpec, compile_assignments
from mdbench.sdl.precursor_genome import load_precursor_genome
from mdbench.sdl.vapdiff import load_vapdiff

DATA = Path(__file__).parent / "data"
PG_FIXTURE = DATA / "ledger_precursor_genome.json"
SMALL_ROLES = {"initial_context": 1, "candidates": 1, "heldout": 2, "future": 2}


@pytest.fixture(scope="session")
def vapdiff():
    return load_vapdiff()


@pytest.fixture(scope="session")
def small_spec():
    """6 blocks of 8 experiments, budgets 4 experiments / 8 evidence / 2 reviews."""
    return CompileSpec(n_assignments=6, block_size=8, role_blocks=dict(SMALL_ROLES),
                       budgets=Budgets(4, 8, 2), seed=3)


@pytest.fixture(scope="session")
def small_assignments(vapdiff, small_spec):
    return compile_assignments(vapdiff, small_spec)


@pytest.fixture(scope="session")
def pg_ledger():
    return load_precursor_genome(PG_FIXTURE)


@pytest.fixture(scope="session")
def pg_assignments(pg_ledger):
    spec = CompileSpec(n_assignments=6, block_size=2, role_blocks=dict(SMALL_ROLES), budgets=Budgets(2, 4, 2),
                       seed=1)
    return compile_assignments(pg_ledger, spec)
