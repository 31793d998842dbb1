"""The synthetic evidence record (generated truth, labelled as not experimental) exercises what vapdiff cannot:
a binding evidence budget, claim calibration that can be non-zero, validity from the execution record,
missing evidence that stays missing, and reviews that support the category without stating it."""

from __future__ import annotations

import json

import numpy as np
from mdbench.sdl.campaign import run_campaign
from mdbench.sdl.environment import agent_view
from mdbench.sdl.metrics import campaign_metrics
from mdbench.sdl.policies import KernelPolicy, make_policy
from mdbench.sdl.synthetic import CATEGORIES, synthetic_record


class InspectAll(KernelPolicy):
    """Inspects every recorded item of every tier, then buys a review, before moving on."""

    def act(self, state):
        if state["phase"] == "investigate" and state["budgets_remaining"]["evidence"] > 0:
            eid = state["open_experiment"]
            tr = next(e for e in state["experiments"] if e["experiment_id"] == eid)
            used = [r["tier"] for r in tr["reveals"] if r["kind"] == "evidence"]
            for tier, n in (("execution_log", 1), ("screening_signal", 2), ("phase_analysis", 1)):
                if used.count(tier) < n:
                    return {"action": "inspect_evidence", "experiment_id": eid, "tier": tier}
        return super().act(state)


class Overconfident(KernelPolicy):
    """Jumps to 0.9 on the screening signal's argmax — a claim the evidence contract does not support."""

    def forecast(self, state, experiment_ids):
        rows = super().forecast(state, experiment_ids)
        opened = {e["experiment_id"]: e for e in state["experiments"]}
        for row in rows:
            sig = [r["payload"]["signal"] for r in opened.get(row["experiment_id"], {}).get("reveals", [])
                   if r.get("tier") == "screening_signal" and r["status"] == "revealed"]
            if sig:
                top = max(sig[-1], key=sig[-1].get)
                row["p_category"] = {c: (0.9 if c == top else 0.1 / 3) for c in CATEGORIES}
        return rows


def test_record_is_generated_deterministic_and_labelled_synthetic(synthetic, synthetic_assignments):
    again = synthetic_record()
    assert again.sha256() == synthetic.sha256()
    assert synthetic.provenance["experimental"] is False and "not experimental" in synthetic.provenance["source"]
    assert agent_view(synthetic, synthetic_assignments[0])["record"]["synthetic"] is True
    valid = np.mean([e.outcome.valid for e in synthetic.experiments])
    assert 0.6 < valid < 0.95
    cats = [e.outcome.category for e in synthetic.experiments if e.outcome.valid]
    assert set(cats) == set(CATEGORIES)
    for e in synthetic.experiments:
        for r in e.reviews:                          # reviews never state the scored category
            assert not set(map(str, r.payload.values())) & set(CATEGORIES)
        if not e.outcome.valid:
            assert all(x.payload is None for x in e.evidence if x.tier != "execution_log")


def test_evidence_budget_binds_and_missing_stays_missing(synthetic, synthetic_assignments):
    asg = synthetic_assignments[0]
    run = run_campaign(synthetic, asg, lambda: InspectAll(0), seed=0, controls=False)
    m = campaign_metrics(run.traces, synthetic, asg)["branches"]["adaptive"]
    assert m["evidence_used"] == m["evidence_budget"] == 36
    n_ev = [e["n_evidence"] for e in m["experiments"]]
    assert n_ev[0] == 4 and sum(n_ev) == 36 and min(n_ev) < 4            # later experiments went short
    reveals = [r for e in run.traces["adaptive"]["experiments"] for r in e["reveals"]]
    assert any(r["status"] == "missing" and r["missing_reason"] for r in reveals)


def test_claim_calibration_can_be_nonzero(synthetic, synthetic_assignments):
    asg = synthetic_assignments[1]
    honest = campaign_metrics(run_campaign(synthetic, asg, lambda: make_policy("kernel", 0), seed=0,
                                           controls=False).traces, synthetic, asg)["branches"]["adaptive"]
    bold = campaign_metrics(run_campaign(synthetic, asg, lambda: Overconfident(0), seed=0,
                                         controls=False).traces, synthetic, asg)["branches"]["adaptive"]
    assert honest["claim_calibration"]["fraction_unsupported"] == 0.0
    assert bold["claim_calibration"]["n_unsupported_crossing"] >= 3
    print(f"\nclaim calibration (unsupported 0.5 crossings): kernel {honest['claim_calibration']}, "
          f"overconfident {bold['claim_calibration']}")


def test_validity_is_learned_from_the_execution_log(synthetic, synthetic_assignments):
    """The kernel baseline inspects the execution log first; its local validity forecast then matches the record."""
    asg = synthetic_assignments[0]
    run = run_campaign(synthetic, asg, lambda: make_policy("kernel", 0), seed=0, controls=False)
    by_id = synthetic.by_id()
    for e in run.traces["adaptive"]["experiments"]:
        log_reveal = next(r for r in e["reveals"] if r.get("tier") == "execution_log")
        truth = by_id[asg.ledger_id(e["experiment_id"])].outcome.valid
        assert log_reveal["payload"]["valid"] is truth
        last = e["forecasts"][-1]["row"]
        assert (last["p_valid"] > 0.5) is truth
    reviews = [r for e in run.traces["adaptive"]["experiments"] for r in e["reveals"] if r["kind"] == "review"]
    assert reviews and "category" not in json.dumps([r.get("payload") for r in reviews])
