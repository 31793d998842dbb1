"""Comparable leaderboards: one table per identical assignment sha256 set (mixed budgets never share a table),
a crashing coordinator is did-not-finish, an untrusted in-process coordinator is not ranked, a tampered
system is refused."""

from __future__ import annotations

import json

import pytest
from sdl_helpers import KEYS, POLICY_DIR, SMALL_ROLES, policy_cmd

from mdbench.sandbox import capabilities
from mdbench.sdl.bundle import load_compiled, write_compiled
from mdbench.sdl.compiler import Budgets, CompileSpec, EvaluatorKeys, compile_assignments
from mdbench.sdl.confine import CoordinatorSandbox
from mdbench.sdl.external import ExternalPolicy
from mdbench.sdl.leaderboard import build_leaderboards, isolation_rankable, score_results
from mdbench.sdl.policies import KernelPolicy, make_policy
from mdbench.sdl.runner import run_system


def _compile(ledger, tmp, name, budget, keys):
    spec = CompileSpec(rotations=2, horizons=(budget,), block_size=8, role_blocks=dict(SMALL_ROLES),
                       budgets=Budgets(budget, 2 * budget, 0), seed=4)
    return load_compiled(write_compiled(tmp / name, ledger, compile_assignments(ledger, spec, keys), keys))


class Tinkered(KernelPolicy):
    """An in-process policy object that is not a shipped baseline."""


@pytest.fixture(scope="module")
def results(tmp_path_factory, vapdiff):
    tmp = tmp_path_factory.mktemp("lb")
    b4 = _compile(vapdiff, tmp, "b4", 4, KEYS)
    b2 = _compile(vapdiff, tmp, "b2", 2, EvaluatorKeys.for_tests("other"))
    res = tmp / "res"
    for name in ("kernel", "class_prior"):
        run_system(b4, b4.assignments, lambda n=name: make_policy(n, 0), name, res, random_draws=1)
    run_system(b2, b2.assignments, lambda: make_policy("kernel", 0), "kernel-budget2", res, random_draws=1)
    run_system(b4, b4.assignments[:1], lambda: make_policy("uniform", 0), "uniform-partial", res, random_draws=1)
    run_system(b4, b4.assignments, lambda: Tinkered(0), "tinkered", res, random_draws=1)
    if capabilities().get("namespaces"):
        box = CoordinatorSandbox(agent_dir=b4.agent_dir, hide=(b4.evaluator_dir, res), policy_dir=POLICY_DIR)
        run_system(b4, b4.assignments, lambda: ExternalPolicy(policy_cmd("scripted_policy.py", "--crash-on-act"),
                                                              timeout_s=30, sandbox=box), "crasher", res,
                   random_draws=1)
    return res, b4, b2


def test_mixed_budgets_and_partial_runs_get_separate_tables(results):
    res, b4, b2 = results
    lbs = build_leaderboards(score_results(res, [b4.root, b2.root]))
    assert not lbs.refused
    tables = {frozenset(t.assignments.values()): t for t in lbs.tables}
    full4 = tables[frozenset(a.sha256 for a in b4.assignments)]
    only2 = tables[frozenset(a.sha256 for a in b2.assignments)]
    partial = tables[frozenset([b4.assignments[0].sha256])]
    assert [r.system for r in full4.rows] == sorted([r.system for r in full4.rows],
                                                    key=lambda s: [r.rank for r in full4.rows if r.system == s][0])
    assert {r.system for r in full4.rows} == {"kernel", "class_prior"}
    assert [r.system for r in only2.rows] == ["kernel-budget2"] and only2.horizons == [2]
    assert [r.system for r in partial.rows] == ["uniform-partial"]
    assert full4.horizons == [4] and len(lbs.tables) == 3
    assert full4.not_ranked == {"tinkered": full4.not_ranked["tinkered"]}
    assert "not a shipped baseline" in full4.not_ranked["tinkered"]
    assert all(len(r.selection_lift_signs) == 2 for r in full4.rows)


@pytest.mark.skipif(not capabilities().get("namespaces"), reason="namespaces unavailable on this machine")
def test_a_crashing_coordinator_is_did_not_finish_never_ranked(results):
    res, b4, b2 = results
    lbs = build_leaderboards(score_results(res, [b4.root, b2.root]))
    full4 = next(t for t in lbs.tables if len(t.assignments) == 2 and t.horizons == [4])
    assert "crasher" not in {r.system for r in full4.rows}
    why = full4.did_not_finish["crasher"]
    assert "policy error" in why and "crashing on purpose" in why
    m = json.loads((res / "crasher" / b4.assignments[0].assignment_id / "metrics.json").read_text())
    assert not m["finished"] and not m["branches"]["adaptive"]["finished"]
    assert not m["branches"]["no_evidence"]["finished"]          # it crashes there too


def test_a_tampered_system_is_refused_and_the_others_still_ranked(results, tmp_path):
    import shutil

    res, b4, b2 = results
    copy = tmp_path / "res"
    shutil.copytree(res, copy)
    p = copy / "kernel" / b4.assignments[1].assignment_id / "random_control.trace.json"
    d = json.loads(p.read_text())
    d["end_reason"] = "policy stopped!"
    p.write_text(json.dumps(d))
    lbs = build_leaderboards(score_results(copy, [b4.root, b2.root]))
    assert "kernel" in lbs.refused and "end_reason" in lbs.refused["kernel"] and str(p) in lbs.refused["kernel"]
    assert any(r.system == "class_prior" for t in lbs.tables for r in t.rows)


def test_isolation_rankable_rules():
    assert isolation_rankable({"method": "in_process", "trusted": True})[0]
    assert not isolation_rankable({"method": "in_process", "trusted": False})[0]
    assert isolation_rankable({"method": "confined_process", "isolation": "namespaces"})[0]
    assert not isolation_rankable({"method": "confined_process", "isolation": "none"})[0]
    assert not isolation_rankable({"method": "unconfined_process", "isolation": "none"})[0]
    assert isolation_rankable({"method": "llm_endpoint"})[0]
    assert not isolation_rankable({})[0]
