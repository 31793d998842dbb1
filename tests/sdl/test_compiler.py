"""Compiler: roles never overlap, counterbalanced rotation, frozen sha256 stable across runs and processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from mdbench.errors import InputError
from mdbench.sdl.compiler import (ROLES, Budgets, CompileSpec, compile_assignments, load_assignment,
                                  save_assignments)

SMALL_ROLES = {"initial_context": 1, "candidates": 1, "heldout": 2, "future": 2}


def test_defaults_follow_the_seed(vapdiff):
    asgs = compile_assignments(vapdiff)
    assert len(asgs) == 6
    for a in asgs:
        assert len(a.roles["candidates"]) == 32
        assert a.budgets == Budgets(12, 36, 0)           # vapdiff has no expert reviews
        assert sum(len(a.roles[r]) for r in ROLES) == 192
        assert a.compile_params["counterbalanced"] is True


def test_reviews_budget_kept_when_the_record_has_reviews(pg_assignments):
    assert pg_assignments[0].budgets.reviews == 2


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_roles_never_overlap_and_rotate_through_every_slot(vapdiff, seed):
    spec = CompileSpec(block_size=8, role_blocks=dict(SMALL_ROLES), budgets=Budgets(4, 8, 2), seed=seed)
    asgs = compile_assignments(vapdiff, spec)
    panel = set()
    counts: dict[str, Counter] = {r: Counter() for r in ROLES}
    for a in asgs:
        sets = [set(a.roles[r]) for r in ROLES]
        assert sum(len(s) for s in sets) == len(set().union(*sets)), "roles overlap"
        for r, s in zip(ROLES, sets):
            counts[r].update(s)
        panel |= set().union(*sets)
    assert len(panel) == 48
    for e in panel:   # complete counterbalancing: each experiment visits each role slot exactly once
        assert [counts[r][e] for r in ROLES] == [SMALL_ROLES[r] for r in ROLES]


def test_hashes_stable_across_runs_and_sensitive_to_content(vapdiff, small_spec):
    a1 = compile_assignments(vapdiff, small_spec)
    a2 = compile_assignments(vapdiff, small_spec)
    assert [a.sha256 for a in a1] == [a.sha256 for a in a2]
    assert all(a.compute_sha256() == a.sha256 for a in a1)
    assert len({a.sha256 for a in a1}) == 6
    other = compile_assignments(vapdiff, CompileSpec(**{**small_spec.__dict__, "seed": small_spec.seed + 1}))
    assert {a.sha256 for a in other}.isdisjoint({a.sha256 for a in a1})


def test_hashes_stable_across_processes(vapdiff, small_spec):
    code = ("from mdbench.sdl.vapdiff import load_vapdiff; from mdbench.sdl.compiler import *;"
            "s=CompileSpec(block_size=8, role_blocks={'initial_context':1,'candidates':1,'heldout':2,'future':2},"
            "budgets=Budgets(4,8,2), seed=3);"
            "print(' '.join(a.sha256 for a in compile_assignments(load_vapdiff(), s)))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == [a.sha256 for a in compile_assignments(vapdiff, small_spec)]


def test_frozen_file_refuses_tampering_and_other_ledgers(tmp_path, vapdiff, small_assignments, pg_ledger):
    paths = save_assignments(small_assignments, tmp_path)
    assert load_assignment(paths[0], vapdiff).sha256 == small_assignments[0].sha256
    d = json.loads(paths[0].read_text())
    d["budgets"]["experiments"] = 5
    paths[0].write_text(json.dumps(d))
    with pytest.raises(InputError, match="does not match its sha256"):
        load_assignment(paths[0])
    with pytest.raises(InputError, match="compiled from ledger"):
        load_assignment(paths[1], pg_ledger)


def test_impossible_specs_are_clear_errors(vapdiff, pg_ledger):
    with pytest.raises(InputError, match="panel of"):
        compile_assignments(pg_ledger, CompileSpec())
    with pytest.raises(InputError, match="exceeds"):
        compile_assignments(vapdiff, CompileSpec(budgets=Budgets(40, 36, 3)))
    with pytest.raises(InputError, match="unknown keys"):
        CompileSpec.from_dict({"n_candidates": 32}, "params/sdl/x.yaml")
