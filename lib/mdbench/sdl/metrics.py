"""Campaign metrics from branch traces (evaluator side).

Definitions (scores in nats; score = negative mean joint log loss on the held-out panel, higher is better):

* learning curve ``s_k``, k = 0..B (pre-campaign point, one point per closed experiment, carried forward to the
  experiment budget B after an early stop); an invalid checkpoint forecast is scored by the rule registered in
  the frozen assignment (:data:`mdbench.sdl.scoring.INVALID_FORECAST_RULES`) and counted;
* adaptive AUC = trapezoid area of the curve / B;
* selection lift = AUC(adaptive) − AUC(schedule-matched random), the mean over the random-control draws
  (``selection_lift_nats``) with the per-draw values and their standard deviation — a *diagnostic*: the random
  control cannot hide itself from a coordinator (:mod:`mdbench.sdl.campaign`);
* enhancement at budget = s_B(adaptive) − s_B(random), likewise a mean over draws;
* acceleration factor at target ratio r (target ``s_0 + ln r``), first-passage and sustained, censored unless
  both branches reach it;
* evidence lift = (s_B − s_0)(adaptive) − max(0, (s_B − s_0)(no-evidence)). The no-evidence branch receives no
  outcome information, so a gain below zero there can only come from the coordinator forecasting worse on
  purpose once it guessed it is in the control (the first withheld item gives it away on a record where
  evidence is never missing); clamping that gain at zero means sabotaging the control gains nothing. The raw
  difference is kept as ``evidence_lift_raw_nats``;
* reference selection lift = the selection lift recomputed with the shipped ``kernel`` forecaster in place of
  the coordinator's own held-out forecasts (trained on the initial context and on what each branch's
  evidence revealed, :func:`reference_scores`): it measures only *which* experiments were selected, so a
  coordinator that forecasts badly in the random control on purpose cannot move it;
* selection-lift departure = selection lift − reference selection lift, per random-control draw and as their
  mean (``selection_lift_departure_nats``): how much more the coordinator's own forecasts make of the selection
  than the reference forecaster does. It is the coordinator's skill relative to the reference in its adaptive
  branch minus that in the random control, so it is near zero unless the coordinator forecasts worse *only* in
  the control — what a coordinator that recognises the control (it is never sent an ``act`` request; see
  ``docs/security.md``) does to inflate the lift. ``selection_lift_suspect`` is raised when the departure
  exceeds :data:`SELECTION_DEPARTURE_TOL_NATS` plus three standard errors of its per-draw values, and it
  raises ``control_sabotage_suspected`` as the no-evidence fall does. Measured on the shipped vapdiff record
  (horizon 2 and 4, 6 assignments, 3 draws; 7 systems): honest coordinators |departure| ≤ 0.12 nats, a
  coordinator that sabotages the random control 2.4–3.6 nats;
* local gain of an acquired experiment = L(prior) − L(last forecast) when there was an evidence-conditioned
  update (else missing); held-out gain of a closure = s_k − s_{k−1}; their sign agreement;
* claim calibration = share of acquisitions with an update that crosses 0.5 on a claim axis the acquired
  evidence does not support (:func:`mdbench.sdl.scoring.unsupported_crossings`);
* review forecasts: Brier score of the forecast that a review changes the conclusion (argmax of the joint
  distribution before vs after the review's update) and the hit rate of the forecast quality tier;
* future decisions: score on the future-role experiments from the saved pre-campaign and final states, and
  its gain ``future_gain = s_future(final) − s_future(pre)`` per branch (future selection / evidence lift are
  the adaptive gain minus the control's).

Every number is computed from the branch's hash-chained log (:func:`mdbench.sdl.environment.derive`), never
from the convenience copies in a trace file; :mod:`mdbench.sdl.verify` refuses a trace whose copies disagree.
A branch *finished* the protocol when it ended as the protocol intends (:func:`branch_status`); a system with
an unfinished branch is listed as did-not-finish, never ranked.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mdbench.sdl.campaign import is_random_branch
from mdbench.sdl.compiler import Assignment
from mdbench.sdl.environment import END_CALL_TARGET, END_STOPPED, derive
from mdbench.sdl.ledger import Ledger
from mdbench.sdl.scoring import (acceleration_factor, adaptive_auc, invalid_forecast_score, joint_log_loss,
                                 learning_curve, sign, sign_agreement, unsupported_crossings, validate_row)

#: A no-evidence control whose held-out score falls more than this below its own pre-campaign forecast [nats] is
#: flagged: it received no outcome information, so only deliberately worse forecasts explain the fall.
SABOTAGE_TOL_NATS = 0.05
#: A selection-lift departure (selection lift − reference selection lift) above this plus three standard errors
#: of its per-draw values [nats] flags the random control as sabotaged (module docstring).
SELECTION_DEPARTURE_TOL_NATS = 0.5
#: Forecast-quality targets (× geometric-mean likelihood on recorded outcomes) for acceleration factors.
TARGET_RATIOS = (1.01, 1.025, 1.05, 1.10, 1.20, 1.50, 2.00, 3.00)


def _row(d: dict[str, Any], ledger: Ledger):
    return validate_row(d, ledger.categories, ledger.validity_axis)


def _panel_score(rows: dict[str, Any], ledger: Ledger, asg: Assignment) -> float:
    """Held-out score [nats] of valid rows keyed by public id: negative mean joint log loss."""
    by_id = ledger.by_id()
    losses = [joint_log_loss(_row(r, ledger), by_id[asg.ledger_id(pub)].outcome, ledger.categories,
                             ledger.validity_axis, asg.floor) for pub, r in rows.items()]
    return -float(np.mean(losses))


def forecast_scores(calls: list[dict[str, Any]], ledger: Ledger, asg: Assignment) -> tuple[list[float], int]:
    """Scores of a sequence of evaluator-call forecasts (invalid ones by the registered rule) and the invalid count."""
    scores: list[float] = []
    n_invalid = 0
    for cp in calls:
        if cp["valid"]:
            scores.append(_panel_score(cp["rows"], ledger, asg))
        else:
            n_invalid += 1
            scores.append(invalid_forecast_score(asg.invalid_forecast, scores[-1] if scores else None,
                                                 ledger.validity_axis, asg.floor))
    return scores, n_invalid


def checkpoint_scores(trace: dict[str, Any], ledger: Ledger, asg: Assignment) -> tuple[list[float], int]:
    """Held-out scores of a branch's checkpoints (pre first), recomputed from its log, and the invalid count."""
    return forecast_scores(derive(trace["log"])["checkpoints"], ledger, asg)


def session_usage(derived: dict[str, Any]) -> dict[str, Any] | None:
    """Summed token / cost accounting of every session of a branch (campaign and evaluator calls), if any
    reported one (LLM sessions do). Kept apart from every score."""
    recs = [s["record"] for s in derived["sessions"]] + [c["session"] for c in derived["checkpoints"] +
                                                          derived["future"]]
    usages = [r["usage"] for r in recs if isinstance(r, dict) and isinstance(r.get("usage"), dict)]
    if not usages:
        return None
    out: dict[str, Any] = {"sessions": len(usages)}
    for k in ("calls", "attempts", "prompt_tokens", "completion_tokens", "total_tokens", "latency_s",
              "cost_unknown_calls"):
        out[k] = sum(u.get(k) or 0 for u in usages)
    costs = [u["cost"] for u in usages if u.get("cost") is not None]
    out["cost"] = sum(costs) if costs else None
    return out


_VIEWS: dict[str, dict[str, Any]] = {}


def reference_scores(derived: dict[str, Any], ledger: Ledger, asg: Assignment) -> list[float]:
    """Held-out scores [nats] of the shipped ``kernel`` forecaster given what a branch revealed: before the
    campaign and after each closed experiment (the branch's reveals up to then). Independent of the
    coordinator's own forecasts."""
    from mdbench.sdl.environment import agent_view
    from mdbench.sdl.policies import KernelPolicy

    base = _VIEWS.get(asg.sha256)
    if base is None:
        if len(_VIEWS) > 64:
            _VIEWS.clear()
        base = _VIEWS[asg.sha256] = agent_view(ledger, asg)
    closed = [e for e in derived["experiments"] if e["closed"]]
    ids = asg.public("heldout")
    out = []
    for k in range(len(closed) + 1):
        state = {**base, "experiments": [{"experiment_id": e["experiment_id"], "reveals": e["reveals"]}
                                         for e in closed[:k]]}
        rows = KernelPolicy(0).forecast(state, ids)
        out.append(_panel_score({r["experiment_id"]: r for r in rows}, ledger, asg))
    return out


def branch_status(branch: str, derived: dict[str, Any]) -> tuple[bool, str]:
    """``(finished, reason)``: a branch finished when it ended by ``stop`` (any branch) or, for the call-matched
    no-evidence control, at its call target — and has one checkpoint per closed experiment plus the
    pre-campaign one. Policy errors, invalid-action streaks and call limits are did-not-finish."""
    reason = derived["end_reason"]
    ok_reasons = (END_STOPPED, END_CALL_TARGET) if branch == "no_evidence" else (END_STOPPED,)
    if reason not in ok_reasons:
        return False, f"{branch}: {reason}"
    n_closed = sum(1 for e in derived["experiments"] if e["closed"])
    if len(derived["checkpoints"]) != n_closed + 1:
        return False, f"{branch}: {len(derived['checkpoints'])} checkpoints for {n_closed} closed experiments"
    if branch == "no_evidence" and derived["call_target"] is not None and derived["n_calls"] != derived["call_target"]:
        return False, f"{branch}: {derived['n_calls']} calls, not the {derived['call_target']} matched"
    return True, "finished"


def _joint_argmax(row, ledger: Ledger) -> int:
    joint = [row.p_valid * p for p in row.p_category]
    if ledger.validity_axis:
        joint.append(1.0 - row.p_valid)
    return int(np.argmax(joint))


def local_analysis(derived: dict[str, Any], ledger: Ledger, asg: Assignment) -> dict[str, Any]:
    """Per-experiment local gains, claim-calibration crossings and review-forecast scores of a branch."""
    by_id = ledger.by_id()
    floor = asg.floor
    axes = ["validity", "category"] if ledger.validity_axis else ["category"]
    per_exp = []
    reviews = []
    for e in derived["experiments"]:
        out = by_id[asg.ledger_id(e["experiment_id"])].outcome
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
    """All metrics of one campaign (see module docstring) as a JSON-ready dict, from the branches' logs."""
    B = asg.budgets.experiments
    out: dict[str, Any] = {"assignment_id": asg.assignment_id, "assignment_sha256": asg.sha256,
                           "horizon": asg.horizon, "full_length": asg.full_length, "experiment_budget": B,
                           "budgets": asg.budgets.to_dict(),
                           "scoring": {"floor": asg.floor, "invalid_forecast": asg.invalid_forecast},
                           "branches": {}}
    curves, future_gain, ref_curves = {}, {}, {}
    problems = []
    for name, tr in traces.items():
        d = derive(tr["log"])
        finished, why = branch_status(name, d)
        if not finished:
            problems.append(why)
        scores, n_bad = forecast_scores(d["checkpoints"], ledger, asg)
        curve = learning_curve(scores, B)
        curves[name] = curve
        if name == "adaptive" or is_random_branch(name):
            ref_curves[name] = learning_curve(reference_scores(d, ledger, asg), B)
        loc = local_analysis(d, ledger, asg)
        fut = {f["label"]: f for f in d["future"]}
        fscores = dict(zip(fut, forecast_scores(list(fut.values()), ledger, asg)[0]))
        if "future_pre" in fscores and "future_final" in fscores:
            future_gain[name] = fscores["future_final"] - fscores["future_pre"]
        held_gains = [float(scores[k] - scores[k - 1]) for k in range(1, len(scores))]
        local_gains = [p["local_gain"] for p in loc["experiments"]]
        out["branches"][name] = {
            "finished": finished, "status": why, "isolation": (d["policy"] or {}).get("isolation", {}),
            "policy_name": (d["policy"] or {}).get("name"),
            "scores_nats": scores, "curve_nats": curve.tolist(), "adaptive_auc_nats": adaptive_auc(curve),
            "loss_pre_nats": -curve[0], "loss_at_budget_nats": -curve[-1],
            "endpoint_gain_nats": float(curve[-1] - curve[0]),
            "n_closed": sum(1 for e in d["experiments"] if e["closed"]), "n_calls": d["n_calls"],
            "call_target": d["call_target"], "n_invalid_actions": d["n_invalid"], "n_invalid_checkpoints": n_bad,
            "end_reason": d["end_reason"],
            "evidence_used": d["budgets"]["evidence"] - d["remaining"]["evidence"],
            "evidence_budget": d["budgets"]["evidence"], "n_withheld": d["n_withheld"],
            "reviews_used": d["budgets"]["reviews"] - d["remaining"]["reviews"],
            "heldout_gains_nats": held_gains, "local_gains_nats": local_gains,
            "sign_agreement": sign_agreement(local_gains, held_gains), **{k: loc[k] for k in
                                                                          ("claim_calibration", "review_brier")},
            "future_scores_nats": fscores, "future_gain_nats": future_gain.get(name),
            "usage": session_usage(d),
            "experiments": loc["experiments"], "reviews": loc["reviews"],
        }
    out["finished"] = not problems
    out["dnf_reasons"] = problems
    out.update(_random_control_lifts(curves, ref_curves, future_gain))
    if "no_evidence" in curves:
        a, n = curves["adaptive"], curves["no_evidence"]
        out["evidence_lift_raw_nats"] = float((a[-1] - a[0]) - (n[-1] - n[0]))
        out["no_evidence_gain_nats"] = float(n[-1] - n[0])
        out["control_sabotage_suspected"] = bool(n[-1] - n[0] < -SABOTAGE_TOL_NATS)
        out["evidence_lift_nats"] = float((a[-1] - a[0]) - max(0.0, n[-1] - n[0]))
        if "adaptive" in future_gain and "no_evidence" in future_gain:
            out["future_evidence_lift_nats"] = future_gain["adaptive"] - future_gain["no_evidence"]
    if out.get("selection_lift_suspect"):
        out["control_sabotage_suspected"] = True
    out["signs"] = {k: sign(out.get(k)) for k in ("selection_lift_nats", "enhancement_at_budget_nats",
                                                    "evidence_lift_nats")}
    return out


def _random_control_lifts(curves: dict[str, np.ndarray], ref_curves: dict[str, np.ndarray],
                          future_gain: dict[str, float]) -> dict[str, Any]:
    """Selection lift, enhancement, acceleration, reference selection lift and its departure, future selection
    lift: the adaptive branch against the random-control draws (module docstring); empty without draws."""
    draws = sorted(b for b in curves if is_random_branch(b))
    if not draws or "adaptive" not in curves:
        return {}
    a = curves["adaptive"]
    lifts = [adaptive_auc(a) - adaptive_auc(curves[b]) for b in draws]
    enh = [float(a[-1] - curves[b][-1]) for b in draws]
    r = np.mean([curves[b] for b in draws], axis=0)
    out: dict[str, Any] = {
        "random_draws": draws, "selection_lift_nats": float(np.mean(lifts)), "selection_lift_draws_nats": lifts,
        "selection_lift_sd_nats": float(np.std(lifts, ddof=1)) if len(lifts) > 1 else None,
        "enhancement_at_budget_nats": float(np.mean(enh)), "enhancement_at_budget_draws_nats": enh,
        "acceleration": [acceleration_factor(a, r, t, rule).__dict__ for t in TARGET_RATIOS
                         for rule in ("first_passage", "sustained")]}
    ref = [adaptive_auc(ref_curves[b]) for b in draws if b in ref_curves]
    if "adaptive" in ref_curves and len(ref) == len(draws):
        ref_a = adaptive_auc(ref_curves["adaptive"])
        out["reference_selection_lift_nats"] = ref_a - float(np.mean(ref))
        out.update(selection_departure(lifts, [ref_a - x for x in ref]))
    fut = [future_gain[b] for b in draws if b in future_gain]
    if "adaptive" in future_gain and len(fut) == len(draws):
        out["future_selection_lift_nats"] = future_gain["adaptive"] - float(np.mean(fut))
    return out


def selection_departure(lifts: list[float], reference_lifts: list[float]) -> dict[str, Any]:
    """Per-draw selection-lift departures from the reference, their mean and whether it is beyond its noise
    (see module docstring): ``selection_lift_departure_nats``, ``…_draws_nats``, ``…_sd_nats``,
    ``selection_lift_suspect``."""
    d = [float(a - b) for a, b in zip(lifts, reference_lifts)]
    mean = float(np.mean(d))
    sd = float(np.std(d, ddof=1)) if len(d) > 1 else 0.0
    return {"selection_lift_departure_nats": mean, "selection_lift_departure_draws_nats": d,
            "selection_lift_departure_sd_nats": sd if len(d) > 1 else None,
            "selection_lift_suspect": bool(mean > SELECTION_DEPARTURE_TOL_NATS + 3.0 * sd / math.sqrt(len(d)))}
