"""Environment: information boundary (the policy never sees an outcome it did not inspect), protocol order,
budgets, evaluator checkpoints that consume nothing, and the hash-chained log."""

from __future__ import annotations

import copy
import json
from dataclasses import replace


from sdl_helpers import KEYS, SMALL_ROLES

from mdbench.sdl.compiler import Budgets, CompileSpec, compile_assignments
from mdbench.sdl.environment import (ACTION_SCHEMA, END_CALL_TARGET, END_STOPPED, CampaignEnv, chain_problem, derive,
                                     permitted_action_schema, verify_chain)
from mdbench.sdl.ledger import Outcome
from mdbench.sdl.scoring import uniform_row


def prior(env, eid, state=None):
    st = state or env.visible_state()
    return {"action": "submit_forecast",
            "forecast": uniform_row(eid, st["record"]["categories"], st["record"]["validity_axis"])}


def run_script(ledger, asg, inspect_every=2):
    """A fixed script: select candidates in order, prior, inspect every other one, update; returns states seen."""
    env = CampaignEnv(ledger, asg)
    seen = []

    def look():
        st = env.visible_state()
        seen.append(st)
        return st

    env.record_checkpoint("pre", [uniform_row(i, ledger.categories, ledger.validity_axis) for i in env.heldout_ids],
                          env.checkpoint_state()[1])
    inspected = []
    for k, cand in enumerate(look()["candidates"][: asg.budgets.experiments]):
        eid = cand["experiment_id"]
        res = env.step({"action": "select_experiment", "experiment_id": eid})
        if res.closed:
            st, sha = env.checkpoint_state()
            seen.append(st)
        assert env.step(prior(env, eid, look())).ok
        if k % inspect_every == 0:
            st = look()
            assert env.step({"action": "inspect_evidence", "experiment_id": eid,
                             "tier": st["record"]["evidence_tiers"][0]}).ok
            inspected.append(eid)
            assert env.step(prior(env, eid, look())).ok
    env.step({"action": "stop"})
    seen.append(env.checkpoint_state()[0])
    return env, seen, inspected


def _strip(states):
    out = []
    for s in states:
        s = copy.deepcopy(s)
        s.pop("assignment_sha256", None)
        out.append(json.dumps(s, sort_keys=True))
    return out


def test_policy_never_sees_an_outcome_it_did_not_inspect(vapdiff, small_spec):
    """Non-interference: change the outcome (and its evidence) of every experiment the policy did not inspect;
    everything the policy is shown stays byte-identical."""
    asg = compile_assignments(vapdiff, small_spec, KEYS)[2]
    env, seen, inspected = run_script(vapdiff, asg)
    assert inspected and len(inspected) < asg.budgets.experiments
    keep = {asg.ledger_id(i) for i in inspected} | set(asg.roles["initial_context"])
    cats = vapdiff.categories
    perturbed = []
    for e in vapdiff.experiments:
        if e.experiment_id in keep:
            perturbed.append(e)
            continue
        new = cats[(cats.index(e.outcome.category) + 1) % len(cats)]
        ev = tuple(replace(x, payload={**x.payload, "crystal_score": new, "category": new}) for x in e.evidence)
        perturbed.append(replace(e, outcome=Outcome(True, new), evidence=ev))
    other = replace(vapdiff, experiments=tuple(perturbed))
    other.__dict__.pop("_sha256", None)
    other.__dict__.pop("_by_id", None)
    asg2 = compile_assignments(other, small_spec, KEYS)[2]
    assert asg2.roles == asg.roles and asg2.public_ids == asg.public_ids and asg2.sha256 != asg.sha256
    _, seen2, inspected2 = run_script(other, asg2)
    assert inspected2 == inspected
    assert _strip(seen) == _strip(seen2)
    # and the inspected outcomes *are* visible once inspected (the test can fail)
    final = seen[-1]
    revealed = {e["experiment_id"]: e["reveals"][0]["payload"]["category"] for e in final["experiments"] if e["reveals"]}
    assert revealed == {i: vapdiff.by_id()[asg.ledger_id(i)].outcome.category for i in inspected}


def test_cheating_attempts_are_refused_and_reveal_nothing(vapdiff, small_assignments):
    asg = small_assignments[0]
    env = CampaignEnv(vapdiff, asg)
    st = env.visible_state()
    held = st["heldout_panel"][0]["experiment_id"]
    cand = st["candidates"][0]["experiment_id"]
    tier = st["record"]["evidence_tiers"][0]
    attempts = [
        {"action": "inspect_evidence", "experiment_id": held, "tier": tier},        # nothing open
        {"action": "select_experiment", "experiment_id": held},                     # not a candidate
        {"action": "select_experiment", "experiment_id": cand, "reveal_outcome": True},  # schema
        {"action": "peek", "experiment_id": cand},
        "select everything",
    ]
    for a in attempts:
        res = env.step(a)
        assert not res.ok and res.reveal is None
    assert env.step({"action": "select_experiment", "experiment_id": cand}).ok
    st = env.visible_state()
    assert st["phase"] == "prior_forecast"
    assert st["experiments"][0]["reveals"] == []                                    # selecting reveals nothing
    res = env.step({"action": "inspect_evidence", "experiment_id": cand, "tier": tier})
    assert not res.ok and "prior forecast" in res.message
    assert all(e["reveals"] == [] for e in env.visible_state()["experiments"])
    # mutating a received state does not touch the environment
    st["experiments"][0]["reveals"].append({"kind": "evidence", "status": "revealed", "payload": {"category": "x"}})
    st["budgets_remaining"]["evidence"] = 999
    fresh = env.visible_state()
    assert fresh["experiments"][0]["reveals"] == [] and fresh["budgets_remaining"]["evidence"] == 8
    # no outcome of a non-context experiment, and no ledger id, appears anywhere in what the policy was shown
    text = json.dumps([c for c in fresh["candidates"]] + fresh["heldout_panel"] + fresh["experiments"])
    assert "outcome" not in text and "crystal_score" not in text
    assert not any(lid in json.dumps(fresh) for r in ("candidates", "heldout", "future") for lid in asg.roles[r])


def test_prior_required_and_update_required_after_each_reveal(vapdiff, small_assignments):
    env = CampaignEnv(vapdiff, small_assignments[1])
    cand = env.visible_state()["candidates"][3]["experiment_id"]
    env.step({"action": "select_experiment", "experiment_id": cand})
    assert env.step(prior(env, cand)).ok
    res = env.step({"action": "inspect_evidence", "experiment_id": cand, "tier": "outcome_measurement"})
    assert res.ok and res.reveal["status"] == "revealed"
    assert res.reveal["payload"]["category"] == vapdiff.by_id()[small_assignments[1].ledger_id(cand)].outcome.category
    assert "payload_ref" not in res.reveal and "VD_" not in json.dumps(res.reveal)   # no CSV row number
    for a in ({"action": "stop"}, {"action": "inspect_evidence", "experiment_id": cand, "tier": "outcome_measurement"}):
        r = env.step(a)
        assert not r.ok and "updated forecast" in r.message
    assert env.step(prior(env, cand)).ok
    assert env.visible_state()["experiments"][0]["forecasts"][1]["kind"] == "update"
    # a second inspection of the only tier: missing stays missing (and costs an inspection)
    r = env.step({"action": "inspect_evidence", "experiment_id": cand, "tier": "outcome_measurement"})
    assert r.ok and r.reveal["status"] == "missing" and env.remaining["evidence"] == 6


def test_budgets_stop_actions(vapdiff):
    spec = CompileSpec(horizons=(2,), block_size=8, role_blocks=dict(SMALL_ROLES), budgets=Budgets(2, 1, 3), seed=0)
    asg = compile_assignments(vapdiff, spec, KEYS)[0]
    assert asg.budgets.reviews == 0
    env = CampaignEnv(vapdiff, asg)
    c = [x["experiment_id"] for x in env.visible_state()["candidates"]]
    env.step({"action": "select_experiment", "experiment_id": c[0]})
    env.step(prior(env, c[0]))
    assert env.step({"action": "inspect_evidence", "experiment_id": c[0], "tier": "outcome_measurement"}).ok
    env.step(prior(env, c[0]))
    r = env.step({"action": "request_review", "experiment_id": c[0], "forecast_changes_conclusion": 0.2,
                  "forecast_quality_tier": "unknown"})
    assert not r.ok and "review budget" in r.message
    assert env.step({"action": "select_experiment", "experiment_id": c[1]}).ok
    env.step(prior(env, c[1]))
    r = env.step({"action": "inspect_evidence", "experiment_id": c[1], "tier": "outcome_measurement"})
    assert not r.ok and "evidence budget exhausted" in r.message
    r = env.step({"action": "select_experiment", "experiment_id": c[2]})
    assert not r.ok and "experiment budget exhausted" in r.message
    assert env.remaining == {"experiments": 0, "evidence": 0, "reviews": 0}
    assert len(env.traces) == 2


def test_invalid_streak_and_call_limit_end_the_campaign(vapdiff, small_assignments):
    env = CampaignEnv(vapdiff, small_assignments[0], max_consecutive_invalid=3)
    for _ in range(3):
        res = env.step({"action": "nonsense"})
    assert res.done and env.done and "invalid" in env.end_reason
    env = CampaignEnv(vapdiff, small_assignments[0], max_calls=2)
    c = env.visible_state()["candidates"][0]["experiment_id"]
    env.step({"action": "select_experiment", "experiment_id": c})
    res = env.step(prior(env, c))
    assert res.done and res.closed == c and env.end_reason == "call limit reached"


def test_reviews_need_forecasts_first_and_are_recorded_before_the_reveal(pg_ledger, pg_assignments):
    asg = next(a for a in pg_assignments if any(pg_ledger.by_id()[c].reviews for c in a.roles["candidates"]))
    cand = asg.public_ids[next(c for c in asg.roles["candidates"] if pg_ledger.by_id()[c].reviews)]
    env = CampaignEnv(pg_ledger, asg)
    env.step({"action": "select_experiment", "experiment_id": cand})
    env.step(prior(env, cand))
    r = env.step({"action": "request_review", "experiment_id": cand})
    assert not r.ok and "schema" in r.message
    r = env.step({"action": "request_review", "experiment_id": cand, "forecast_changes_conclusion": 0.3,
                  "forecast_quality_tier": "excellent"})
    assert not r.ok and "forecast_quality_tier must be one of" in r.message
    r = env.step({"action": "request_review", "experiment_id": cand, "forecast_changes_conclusion": 0.3,
                  "forecast_quality_tier": "3"})
    assert r.ok and r.reveal["kind"] == "review" and env.remaining["reviews"] == 1
    exp = env.visible_state()["experiments"][0]
    assert exp["review_forecasts"] == [{"forecast_changes_conclusion": 0.3, "forecast_quality_tier": "3",
                                        "before_reveal": 0, "prior_forecast_index": 0}]
    assert "reaction_category" not in json.dumps(exp["reveals"])          # a review is not a label oracle
    log_kinds = [(e["kind"], (e.get("action") or {}).get("action")) for e in env.log]
    assert ("action", "request_review") in log_kinds


def test_checkpoint_consumes_nothing_and_log_is_hash_chained(vapdiff, small_assignments):
    env, _, _ = run_script(vapdiff, small_assignments[0])
    assert verify_chain(env.log)
    assert [e["seq"] for e in env.log] == list(range(len(env.log)))
    # a checkpoint changes neither budgets nor calls nor the visible state (apart from the phase label)
    env2 = CampaignEnv(vapdiff, small_assignments[0])
    before = (dict(env2.remaining), env2.n_calls, env2.visible_state())
    st, sha = env2.checkpoint_state()
    env2.record_checkpoint("pre", [uniform_row(i, vapdiff.categories, False) for i in env2.heldout_ids], sha)
    assert (dict(env2.remaining), env2.n_calls, env2.visible_state()) == before
    assert st["phase"] == "heldout_forecast" and env2.state.checkpoints[0]["valid"]
    # the checkpoint rows themselves are in the chain, and everything reported is derived from it
    assert env2.log[-1]["kind"] == "checkpoint" and len(env2.log[-1]["rows"]) == len(env2.heldout_ids)
    assert {k: v for k, v in env.trace().items() if k not in ("log", "chain_head", "format")} == derive(env.log)
    # tampering with any logged action breaks the chain, and the broken entry is named
    tampered = copy.deepcopy(env.log)
    tampered[3]["ok"] = not tampered[3]["ok"]
    assert not verify_chain(tampered) and chain_problem(tampered).startswith("log[3] (seq 3, action)")
    dropped = env.log[:2] + env.log[3:]
    assert not verify_chain(dropped) and chain_problem(dropped).startswith("log[2]")


def test_invalid_checkpoint_forecast_is_flagged_not_fatal(vapdiff, small_assignments):
    env = CampaignEnv(vapdiff, small_assignments[0])
    cp = env.record_checkpoint("pre", [{"experiment_id": "nope"}], env.checkpoint_state()[1])
    assert cp["valid"] is False and "p_category" in cp["error"]


def test_call_matched_branch_gets_exactly_its_call_target(vapdiff, small_assignments):
    """A stop before the target is deferred (logged, no effect); the branch ends at exactly N calls."""
    env = CampaignEnv(vapdiff, small_assignments[0], branch="no_evidence", evidence_enabled=False, call_target=9)
    c = env.visible_state()["candidates"][0]["experiment_id"]
    adaptive = CampaignEnv(vapdiff, small_assignments[0])
    # nothing in the state says "control": the same keys, budgets and call limit as the adaptive branch
    assert env.visible_state() == adaptive.visible_state()
    assert "calls_target" not in env.visible_state()
    env.step({"action": "select_experiment", "experiment_id": c})
    env.step(prior(env, c))
    for _ in range(3):
        res = env.step({"action": "stop"})
        assert res.ok and not res.done and "not accepted yet" in res.message and "control" not in res.message
    env.step({"action": "nonsense"})                 # an invalid action is a call too
    env.step(prior(env, c))                          # a revision
    env.step({"action": "stop"})
    res = env.step({"action": "stop"})
    assert res.done and env.n_calls == 9 and env.end_reason == END_STOPPED   # the 9th call may stop
    # and a policy that never stops is cut at exactly the target
    env = CampaignEnv(vapdiff, small_assignments[0], branch="no_evidence", evidence_enabled=False, call_target=3)
    c = env.visible_state()["candidates"][0]["experiment_id"]
    env.step({"action": "select_experiment", "experiment_id": c})
    env.step(prior(env, c))
    res = env.step(prior(env, c))
    assert res.done and env.n_calls == 3 and env.end_reason == END_CALL_TARGET


def test_permitted_action_schema_per_phase():
    assert [s["properties"]["action"]["const"] for s in permitted_action_schema("prior_forecast")["oneOf"]] == \
        ["submit_forecast"]
    assert len(permitted_action_schema("investigate")["oneOf"]) == len(ACTION_SCHEMA["oneOf"])
    assert permitted_action_schema("done")["oneOf"] == []
