"""Controls: the schedule-matched random branch reproduces the adaptive schedule with other experiments; the
no-evidence branch gets exactly the adaptive branch's calls and acquires nothing; all branches share the
pre-campaign forecast; every held-out and future forecast comes from a fresh evaluator session."""

from __future__ import annotations

import itertools

from mdbench.sdl.campaign import FUTURE_FINAL, FUTURE_PRE, StateStore, run_campaign
from mdbench.sdl.metrics import campaign_metrics
from mdbench.sdl.policies import KernelPolicy, make_policy


def _action_kinds(trace):
    return [(e["action"]["action"], e["action"].get("tier")) for e in trace["log"]
            if e["kind"] == "action" and e["ok"] and e.get("effect") != "deferred_stop"]


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
    assert ad["future"][0]["rows"] == rnd["future"][0]["rows"]                  # the shared pre-campaign future
    again = run_campaign(vapdiff, asg, lambda: make_policy("kernel", 0), seed=0)
    assert [e["experiment_id"] for e in again.traces["random_control"]["experiments"]] == chosen_r
    other = run_campaign(vapdiff, asg, lambda: make_policy("kernel", 0), seed=5)
    assert [e["experiment_id"] for e in other.traces["random_control"]["experiments"]] != chosen_r


def test_random_control_follows_an_early_stop(vapdiff, small_assignments):
    class EarlyStop(KernelPolicy):
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
    # an in-process policy object that is not a shipped baseline is recorded as untrusted
    assert m["branches"]["adaptive"]["isolation"] == {
        "method": "in_process", "trusted": False, "builtin": None}


def test_no_evidence_control_is_exactly_call_matched_and_blind(vapdiff, small_assignments):
    """Per assignment: the no-evidence control gets exactly as many policy-action calls as the adaptive branch."""
    counts = []
    for asg in small_assignments:
        run = run_campaign(vapdiff, asg, lambda: make_policy("kernel", 0), seed=0)
        ad, ne = run.traces["adaptive"], run.traces["no_evidence"]
        counts.append((ad["n_calls"], ne["n_calls"]))
        assert ne["call_target"] == ad["n_calls"] == ne["n_calls"]
        # the control does not announce itself: the same budgets, every request answered "missing" and counted
        assert ne["budgets"] == ad["budgets"] and ne["evidence_enabled"] is False
        reveals = [r for e in ne["experiments"] for r in e["reveals"]]
        assert reveals and all(r["status"] == "missing" for r in reveals)
        m = campaign_metrics(run.traces, vapdiff, asg)
        assert m["finished"], m["dnf_reasons"]
        assert m["branches"]["no_evidence"]["n_withheld"] == len(reveals) == m["branches"]["no_evidence"]["evidence_used"]
        assert m["branches"]["adaptive"]["evidence_used"] == asg.budgets.experiments
        # the blind branch learns nothing from its experiments: its curve stays at the shared pre-campaign score
        assert set(m["branches"]["no_evidence"]["curve_nats"]) == {m["branches"]["adaptive"]["curve_nats"][0]}
        expected = (m["branches"]["adaptive"]["curve_nats"][-1] - m["branches"]["adaptive"]["curve_nats"][0])
        assert m["evidence_lift_nats"] == expected
    print("\n(adaptive calls, no-evidence calls) per assignment:", counts)


def test_evaluator_calls_are_fresh_sessions_from_saved_states(vapdiff, small_assignments, tmp_path):
    """Every held-out / future forecast is the only call of a new session, made from a state saved to disk whose
    sha256 is in the chain; the campaign sessions never answer one."""
    calls: list[tuple[int, str, str]] = []
    ids = itertools.count()

    class Recording(KernelPolicy):
        def reset(self, seed):
            self.sid = next(ids)
            super().reset(seed)

        def act(self, state):
            calls.append((self.sid, "act", state["phase"]))
            return super().act(state)

        def forecast(self, state, experiment_ids):
            calls.append((self.sid, "forecast", state["phase"]))
            return super().forecast(state, experiment_ids)

    store = StateStore(tmp_path / "states")
    run = run_campaign(vapdiff, small_assignments[0], lambda: Recording(0), seed=0, states=store)
    by_session: dict[int, list[tuple[str, str]]] = {}
    for sid, kind, phase in calls:
        by_session.setdefault(sid, []).append((kind, phase))
    evaluator = [v for v in by_session.values() if v[0][1] in ("heldout_forecast", "future_forecast")]
    campaign = [v for v in by_session.values() if v not in evaluator]
    assert all(len(v) == 1 for v in evaluator)
    assert not any(p in ("heldout_forecast", "future_forecast") for v in campaign for _, p in v)
    n_checkpoints = sum(len(t["checkpoints"]) for t in run.traces.values()) - 2   # pre is shared
    assert len(evaluator) == n_checkpoints + 1 + 3                                 # + future_pre + 3 future_final
    for branch, tr in run.traces.items():
        for cp in tr["checkpoints"] + tr["future"]:
            if cp["session"].get("shared_from"):
                continue
            assert store.load(branch, cp["label"], cp["state_sha256"])["phase"] in ("heldout_forecast",
                                                                                   "future_forecast")
        assert [f["label"] for f in tr["future"]] == [FUTURE_PRE, FUTURE_FINAL]
    future_state = store.load("adaptive", FUTURE_FINAL, run.traces["adaptive"]["future"][1]["state_sha256"])
    assert {e["experiment_id"] for e in future_state["future_panel"]} == set(small_assignments[0].public("future"))


def test_random_control_draws_are_seeded_and_give_a_mean_lift_with_spread(vapdiff, small_assignments):
    asg = small_assignments[2]
    run = run_campaign(vapdiff, asg, lambda: make_policy("kernel", 0), seed=0)
    draws = ["random_control", "random_control_1", "random_control_2"]
    assert [b for b in run.traces if b.startswith("random_control")] == draws
    picks = [tuple(e["experiment_id"] for e in run.traces[b]["experiments"]) for b in draws]
    assert len(set(picks)) == 3                                    # different draws
    m = campaign_metrics(run.traces, vapdiff, asg)
    assert m["random_draws"] == draws and len(m["selection_lift_draws_nats"]) == 3
    assert m["selection_lift_nats"] == sum(m["selection_lift_draws_nats"]) / 3
    assert m["selection_lift_sd_nats"] is not None and m["selection_lift_sd_nats"] >= 0
    again = run_campaign(vapdiff, asg, lambda: make_policy("kernel", 0), seed=0)
    assert [tuple(e["experiment_id"] for e in again.traces[b]["experiments"]) for b in draws] == picks


def test_a_spent_campaign_wall_budget_ends_the_campaign_as_did_not_finish(vapdiff, small_assignments):
    asg = small_assignments[3]
    run = run_campaign(vapdiff, asg, lambda: make_policy("kernel", 0), seed=0, wall_budget_s=0.0, random_draws=1)
    ad = run.traces["adaptive"]
    assert ad["wall_budget_s"] == 0.0 and "wall budget" in ad["end_reason"]
    assert "wall budget spent" in ad["checkpoints"][0]["error"]
    m = campaign_metrics(run.traces, vapdiff, asg)
    assert not m["finished"] and "wall budget" in m["dnf_reasons"][0]
