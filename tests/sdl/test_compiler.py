"""Compiler: roles never overlap, counterbalanced rotation, 36 assignments with the full-length panel, salted
public ids, frozen sha256 stable across runs and processes, agent/evaluator trees."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections import Counter

import pytest

from mdbench.errors import InputError
from mdbench.sdl.bundle import load_compiled, write_compiled
from mdbench.sdl.compiler import (ROLES, Budgets, CompileSpec, EvaluatorKeys, compile_assignments, load_assignment,
                                  select_panel)

from sdl_helpers import KEYS, SMALL_ROLES


def test_defaults_compile_36_assignments_with_the_full_length_panel(vapdiff):
    asgs = compile_assignments(vapdiff, keys=KEYS)
    assert len(asgs) == 36
    full = select_panel(asgs, "full")
    assert [a.assignment_id for a in full] == [f"vapdiff_crystal-s0-a{i}" for i in range(6)]
    for a in full:
        assert len(a.roles["candidates"]) == 32 and a.horizon == 12
        assert a.budgets == Budgets(12, 36, 0)           # vapdiff has no expert reviews
        assert sum(len(a.roles[r]) for r in ROLES) == 192
        assert a.compile_params["counterbalanced"] is True
    horizons = Counter(a.horizon for a in asgs)
    assert horizons == {h: 6 for h in (12, 10, 8, 6, 4, 2)}
    # shorter horizons scale evidence with the horizon and keep the same rotations (same roles)
    short = [a for a in asgs if a.horizon == 6]
    assert all(a.budgets == Budgets(6, 18, 0) for a in short)
    assert [a.roles for a in short] == [a.roles for a in full]
    assert len({a.sha256 for a in asgs}) == 36


def test_reviews_budget_kept_when_the_record_has_reviews(pg_assignments):
    assert pg_assignments[0].budgets.reviews == 2
    assert Budgets(12, 36, 3).at_horizon(2) == Budgets(2, 6, 1)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_roles_never_overlap_and_rotate_through_every_slot(vapdiff, seed):
    spec = CompileSpec(horizons=(4,), block_size=8, role_blocks=dict(SMALL_ROLES), budgets=Budgets(4, 8, 2),
                       seed=seed)
    asgs = compile_assignments(vapdiff, spec, KEYS)
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


def test_public_ids_are_salted_per_compile(vapdiff, small_spec):
    a = compile_assignments(vapdiff, small_spec, EvaluatorKeys.generate())[0]
    b = compile_assignments(vapdiff, small_spec, EvaluatorKeys.generate())[0]
    assert a.roles == b.roles                                   # the same experiments …
    assert set(a.public_ids.values()).isdisjoint(b.public_ids.values())   # … under unrelated ids
    for ledger_id, pub in a.public_ids.items():
        # no CSV row number in the public id: a leak shows in both compiles; one random hex id holds a 4-digit row
        # number by chance about once in 10^4 ids ('0831' in 'Xd4e58a0831' failed CI once)
        row = ledger_id.split("_")[-1]
        assert not (row in pub and row in b.public_ids[ledger_id])
        assert a.ledger_id(pub) == ledger_id
    assert a.sha256 != b.sha256                                # a different compile is a different assignment


def test_hashes_stable_across_runs_and_sensitive_to_content(vapdiff, small_spec):
    a1 = compile_assignments(vapdiff, small_spec, KEYS)
    a2 = compile_assignments(vapdiff, small_spec, KEYS)
    assert [a.sha256 for a in a1] == [a.sha256 for a in a2]
    assert all(a.compute_sha256() == a.sha256 for a in a1)
    assert len({a.sha256 for a in a1}) == 6
    other = compile_assignments(vapdiff, CompileSpec(**{**small_spec.__dict__, "seed": small_spec.seed + 1}), KEYS)
    assert {a.sha256 for a in other}.isdisjoint({a.sha256 for a in a1})


def test_hashes_stable_across_processes(vapdiff, small_spec):
    code = ("from mdbench.sdl.vapdiff import load_vapdiff; from mdbench.sdl.compiler import *;"
            "s=CompileSpec(horizons=(4,), block_size=8, role_blocks={'initial_context':1,'candidates':1,'heldout':2,"
            "'future':2}, budgets=Budgets(4,8,2), seed=3);"
            "print(' '.join(a.sha256 for a in compile_assignments(load_vapdiff(), s, EvaluatorKeys.for_tests('sdl'))))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == [a.sha256 for a in compile_assignments(vapdiff, small_spec, KEYS)]


def test_agent_tree_holds_no_outcome_ledger_id_or_key(tmp_path, vapdiff, small_assignments):
    root = write_compiled(tmp_path / "c", vapdiff, small_assignments, KEYS)
    ev = root / "evaluator"
    assert stat.S_IMODE(ev.stat().st_mode) == 0o700
    assert stat.S_IMODE((ev / "keys.json").stat().st_mode) == 0o600
    by_id = vapdiff.by_id()
    text = "".join(p.read_text() for p in (root / "agent").iterdir())
    for a in small_assignments:
        for role in ("candidates", "heldout", "future"):
            for lid in a.roles[role]:
                assert lid not in text                       # no ledger id (= CSV row number)
        view_text = (root / "agent" / f"{a.assignment_id}.json").read_text()
        for lid in a.roles["future"]:
            assert a.public_ids[lid] not in view_text        # future decisions are not shown before the end
        view = json.loads(view_text)
        assert {c["experiment_id"] for c in view["candidates"]} == set(a.public("candidates"))
        assert all("outcome" not in c for c in view["candidates"] + view["heldout_panel"])
        ctx = {c["experiment_id"]: c["outcome"]["category"] for c in view["initial_context"]}
        assert ctx == {a.public_ids[i]: by_id[i].outcome.category for i in a.roles["initial_context"]}
    assert KEYS.chain_key not in text and KEYS.salt not in text
    loaded = load_compiled(root)
    assert [a.sha256 for a in loaded.assignments] == [a.sha256 for a in small_assignments]


def test_frozen_file_refuses_tampering_and_other_ledgers_and_keys(tmp_path, vapdiff, small_assignments, pg_ledger):
    root = write_compiled(tmp_path / "c", vapdiff, small_assignments, KEYS)
    p0 = root / "evaluator" / "assignments" / f"{small_assignments[0].assignment_id}.json"
    p1 = root / "evaluator" / "assignments" / f"{small_assignments[1].assignment_id}.json"
    assert load_assignment(p0, vapdiff).sha256 == small_assignments[0].sha256
    with pytest.raises(InputError, match="compiled from ledger"):
        load_assignment(p1, pg_ledger)
    d = json.loads(p0.read_text())
    d["budgets"]["experiments"] = 5
    p0.write_text(json.dumps(d))
    with pytest.raises(InputError, match="does not match its sha256"):
        load_assignment(p0)
    root2 = write_compiled(tmp_path / "d", vapdiff, small_assignments, KEYS)
    (root2 / "evaluator" / "keys.json").write_text(json.dumps(EvaluatorKeys.generate().to_dict()))
    with pytest.raises(InputError, match="another evaluator key"):
        load_compiled(root2)


def test_impossible_specs_are_clear_errors(vapdiff, pg_ledger):
    with pytest.raises(InputError, match="panel of"):
        compile_assignments(pg_ledger, CompileSpec())
    with pytest.raises(InputError, match="exceeds"):
        compile_assignments(vapdiff, CompileSpec(budgets=Budgets(40, 36, 3)))
    with pytest.raises(InputError, match="include the full length"):
        compile_assignments(vapdiff, CompileSpec(horizons=(10, 8)))
    with pytest.raises(InputError, match="invalid_forecast"):
        compile_assignments(vapdiff, CompileSpec(invalid_forecast="uniform"))
    with pytest.raises(InputError, match="unknown keys"):
        CompileSpec.from_dict({"n_candidates": 32}, "params/sdl/x.yaml")
