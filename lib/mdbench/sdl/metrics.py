"""Campaign metrics from branch traces (evaluator side).

Definitions (scores in nats; score = negative mean joint log loss on the held-out panel, higher is better):

* learning curve ``s_k``, k = 0..B (pre-campaign point, one point per closed experiment, carried forward to the
  experiment budget B; an invalid checkpoint forecast carries the last valid score forward and is counted);
* adaptive AUC = trapezoid area of the curve / B;
* selection lift = AUC(adaptive) − AUC(schedule-matched random);
* enhancement at budget = s_B(adaptive) − s_B(random);
* acceleration factor at target ratio r (target ``s_0 + ln r``), first-passage and sustained, censored unless
  both branches reach it;
* evidence lift = (s_B − s_0)(adaptive) − (s_B − s_0)(no-evidence);
* local gain of an acquired experiment = L(prior) − L(last forecast) when there was an evidence-conditioned
  update (else missing); held-out gain of a closure = s_k − s_{k−1}; their sign agreement;
* claim calibration = share of acquisitions with an update that crosses 0.5 on a claim axis the acquired
  evidence does not support (:func:`mdbench.sdl.scoring.unsupported_crossings`);
* review forecasts: Brier score of the forecast that a review changes the conclusion (argmax of the joint
  distribution before vs after the review's update) and the hit rate of the forecast quality tier.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mdbench.sdl.compiler import Assignment
from mdbench.sdl.ledger import Ledger
from mdbench.sdl.scoring import (acceleration_factor, adaptive_auc, joint_log_loss, learning_curve, sign,
                                 sign_agreement, unsupported_crossings, validate_row)

#: Forecast-quality targets (× geometric-mean likelihood on recorded outcomes) for acceleration factors.
TARGET_RATIOS = (1.01, 1.025, 1.05, 1.10, 1.20, 1.50, 2.00, 3.00)


def _row(d: dict[str, Any], ledger: Ledger):
    return validate_row(d, ledger.categories, ledger.validity_axis)


def checkpoint_scores(trace: dict[str, Any], ledger: Ledger, floor: float) -> tuple[list[float], int]:
    """Held-out scores of a branch's checkpoints (pre first) and the number of invalid checkpoints."""
    by_id = ledger.by_id()
    scores: list[float] = []
    n_invalid = 0
    for cp in trace["checkpoints"]:
        if cp["valid"]:
            losses = [joint_log_loss(_row(r, ledger), by_id[i].outcome, ledger.categories, ledger.validity_axis,
                                     floor) for i, r in cp["rows"].items()]
            scores.append(-float(np.mean(losses)))
        else:
            n_invalid += 1
            scores.append(scores[-1] if scores else -math.log(ledger.n_outcomes))
    return scores, n_invalid


def _joint_argmax(row, ledger: Ledger) -> int:
    joint = [row.p_valid * p for p in row.p_category]
    if ledger.validity_axis:
        joint.append(1.0 - row.p_valid)
    return int(np.argmax(joint))


def local_analysis(trace: dict[str, Any], ledger: Ledger, floor: float) -> dict[str, Any]:
    """Per-experiment local gains, claim-calibration crossings and review-forecast scores of a branch."""
    by_id = ledger.by_id()
    axes = ["validity", "category"] if ledger.validity_axis else ["category"]
    per_exp = []
    reviews = []
    for e in trace["experiments"]:
        out = by_id[e["experiment_id"]].outcome
        fc = e["forecasts"]
        rows = [_row(f["row"], ledger) for f in fc]
        losses = [joint_log_loss(r, out, ledger.categories, ledger.validity_axis, floor) for r in rows]
        has_update = any(f["kind"] == "update" for f in fc)
        gain = (losses[0] - losses[-1]) if rows and has_update else None
        crossed: list[str] = []
        if rows:
            for f, r in zip(fc[1:], rows[1:]):
                sup = {a for rv in e["reveals"][: f["after_reveal"]] if rv.get("status") == "revealed"
                       for a in rv.get("supports", [])}
                crossed += unsupported_crossings(rows[0], r, sup, axes)
        n_ev = sum(1 for rv in e["reveals"] if rv["kind"] == "evidence")
        per_exp.append({"experiment_id": e["experiment_id"], "order": e["order"],
                        "loss_prior": losses[0] if losses else None, "loss_final": losses[-1] if losses else None,
                        "local_gain": gain, "n_evidence": n_ev,
                        "n_reviews": sum(1 for rv in e["reveals"] if rv["kind"] == "review"),
                        "unsupported_crossings": sorted(set(crossed)), "eligible_for_claims": has_update})
        for rf in e["review_forecasts"]:
            before = rows[rf["prior_forecast_index"]] if rows else None
            after_idx = next((k for k, f in enumerate(fc) if f["after_reveal"] > rf["before_reveal"]), None)
            if before is None or after_idx is None:
                continue
            changed = _joint_argmax(before, ledger) != _joint_argmax(rows[after_idx], ledger)
            rv = e["reveals"][rf["before_reveal"]]
            reviews.append({"experiment_id": e["experiment_id"], "p_changes": rf["forecast_changes_conclusion"],
                            "changed": changed, "brier": (rf["forecast_changes_conclusion"] - changed) ** 2,
                            "forecast_tier": rf["forecast_quality_tier"], "revealed_tier": rv.get("quality_tier"),
                            "tier_hit": (rv.get("quality_tier") == rf["forecast_quality_tier"])
                            if rv.get("status") == "revealed" else None,
                            "local_gain": losses[0] - losses[after_idx]})
    elig = [p for p in per_exp if p["eligible_for_claims"]]
    n_cross = sum(1 for p in elig if p["unsupported_crossings"])
    return {"experiments": per_exp, "reviews": reviews,
            "claim_calibration": {"n_eligible": len(elig), "n_unsupported_crossing": n_cross,
                                  "fraction_unsupported": (n_cross / len(elig)) if elig else None},
            "review_brier": float(np.mean([r["brier"] for r in reviews])) if reviews else None}


def campaign_metrics(traces: dict[str, dict[str, Any]], ledger: Ledger, asg: Assignment) -> dict[str, Any]:
    """All metrics of one campaign (see module docstring) as a JSON-ready dict."""
    B, floor = asg.budgets.experiments, asg.floor
    out: dict[str, Any] = {"assignment_id": asg.assignment_id, "assignment_sha256": asg.sha256,
                           "experiment_budget": B, "floor": floor, "branches": {}}
    curves = {}
    for name, tr in traces.items():
        scores, n_bad = checkpoint_scores(tr, ledger, floor)
        curve = learning_curve(scores, B)
        curves[name] = curve
        loc = local_analysis(tr, ledger, floor)
        held_gains = [float(scores[k] - scores[k - 1]) for k in range(1, len(scores))]
        local_gains = [p["local_gain"] for p in loc["experiments"]]
        out["branches"][name] = {
            "scores_nats": scores, "curve_nats": curve.tolist(), "adaptive_auc_nats": adaptive_auc(curve),
            "loss_pre_nats": -curve[0], "loss_at_budget_nats": -curve[-1],
            "endpoint_gain_nats": float(curve[-1] - curve[0]),
            "n_closed": sum(1 for e in tr["experiments"] if e["closed"]), "n_calls": tr["n_calls"],
            "n_invalid_actions": tr["n_invalid"], "n_invalid_checkpoints": n_bad, "end_reason": tr["end_reason"],
            "evidence_used": tr["budgets"]["evidence"] - tr["remaining"]["evidence"],
            "reviews_used": tr["budgets"]["reviews"] - tr["remaining"]["reviews"],
            "heldout_gains_nats": held_gains, "local_gains_nats": local_gains,
            "sign_agreement": sign_agreement(local_gains, held_gains), **{k: loc[k] for k in
                                                                          ("claim_calibration", "review_brier")},
            "experiments": loc["experiments"], "reviews": loc["reviews"],
        }
    if "random_control" in curves:
        a, r = curves["adaptive"], curves["random_control"]
        out["selection_lift_nats"] = adaptive_auc(a) - adaptive_auc(r)
        out["enhancement_at_budget_nats"] = float(a[-1] - r[-1])
        out["acceleration"] = [
            acceleration_factor(a, r, t, rule).__dict__ for t in TARGET_RATIOS
            for rule in ("first_passage", "sustained")]
    if "no_evidence" in curves:
        a, n = curves["adaptive"], curves["no_evidence"]
        out["evidence_lift_nats"] = float((a[-1] - a[0]) - (n[-1] - n[0]))
    out["signs"] = {k: sign(out.get(k)) for k in ("selection_lift_nats", "enhancement_at_budget_nats",
                                                    "evidence_lift_nats")}
    return out
