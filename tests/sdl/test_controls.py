"""Controls: the schedule-matched random branch reproduces the adaptive schedule with other experiments; the
no-evidence branch is call-matched and acquires nothing; all branches share the pre-campaign forecast."""

from __future__ import annotations

from mdbench.sdl.campaign import run_campaign
from mdbench.sdl.metrics import campaign_metrics
from mdbench.sdl.policies import make_policy


def _action_kinds(trace):
    return [(e["action"]["action"], e["action"].get("tier")) for e in trace["log"]
            if e["kind"] == "action" and e["ok"]]


def _schedule(trace):
    return [[(r["kind"], r.get("tier")) for r in e["reveals"]] for e in trace["experiments"]]


def test_random_control_reproduces_the_adaptive_schedule(vapdiff, small_assignments):
    asg = small_assignments[0]
    run = run_campaign(vapdiff, asg, lambda: make_policy("kernel", 0), seed=0)
    ad, rnd = run.traces["adaptive"], run.traces["random_control"]
    assert len(ad["experiments"]) == len(rnd["experiments"]) == asg.budgets.experiments
    assert _schedule(ad) == _schedule(rnd)
    assert _action_kinds(ad) == _action_kinds(rnd)
    chosen_a = [e["experiment_id"] for e in ad["experiments"]]
    chosen_r = [e["experiment_id"] for e in rnd["experiments"]]
    assert chosen_a != chosen_r
    assert ad["checkpoints"][0]["rows"] == rnd["checkpoints"][0]["rows"] == run.traces["no_evidence"]["checkpoints"][0]["rows"]
    again = run_campaign(vapdiff, asg, lambda: make_policy("kernel", 0), seed=0)
    assert [e["experiment_id"] for e in again.traces["random_control"]["experiments"]] == chosen_r
    other = run_campaign(vapdiff, asg, lambda: make_policy("kernel", 0), seed=5)
    assert [e["experiment_id"] for e in other.traces["random_control"]["experiments"]] != chosen_r


def test_random_control_follows_an_early_stop(vapdiff, small_assignments):
    class EarlyStop(type(make_policy("kernel"))):
        def act(self, state):
            opened = state["experiments"][-1] if state["experiments"] else None
            if state["phase"] == "investigate" and len(state["experiments"]) >= 2 and opened["reveals"]:
                return {"action": "stop"}
            return super().act(state)

    run = run_campaign(vapdiff, small_assignments[1], lambda: EarlyStop(0), seed=0)
    assert len(run.traces["adaptive"]["experiments"]) == len(run.traces["random_control"]["experiments"]) == 2
    m = campaign_metrics(run.traces, vapdiff, small_assignments[1])
    curve = m["branches"]["adaptive"]["curve_nats"]
    assert len(curve) == small_assignments[1].budgets.experiments + 1 and curve[-1] == curve[2]   # carried forward


def test_no_evidence_control_is_call_matched_and_blind(vapdiff, small_assignments):
    run = run_campaign(vapdiff, small_assignments[2], lambda: make_policy("kernel", 0), seed=0)
    ad, ne = run.traces["adaptive"], run.traces["no_evidence"]
    assert ne["max_calls"] == ad["n_calls"]
    assert ne["n_calls"] <= ad["n_calls"]
    assert ne["budgets"]["evidence"] == ne["budgets"]["reviews"] == 0
    assert all(e["reveals"] == [] for e in ne["experiments"])
    m = campaign_metrics(run.traces, vapdiff, small_assignments[2])
    assert m["branches"]["no_evidence"]["evidence_used"] == 0
    assert m["branches"]["adaptive"]["evidence_used"] == small_assignments[2].budgets.experiments
    # the blind branch learns nothing from its experiments: its curve stays at the shared pre-campaign score
    assert set(m["branches"]["no_evidence"]["curve_nats"]) == {m["branches"]["adaptive"]["curve_nats"][0]}
    expected = (m["branches"]["adaptive"]["curve_nats"][-1] - m["branches"]["adaptive"]["curve_nats"][0])
    assert m["evidence_lift_nats"] == expected
