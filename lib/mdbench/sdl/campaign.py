"""Drive campaign branches: the adaptive branch and its two controls, with evaluator checkpoints.

* :func:`run_adaptive` — the policy acts freely under the protocol.
* :func:`run_schedule_matched_random` — a fresh session of the same policy; the adaptive branch's experiment
  count and its sequence of evidence/review actions per experiment are replayed, but each experiment choice is
  replaced by a seeded random choice among unselected candidates that can support that experiment's part of
  the schedule (enough recorded items of each tier and reviews; any candidate if none can). The policy
  supplies every forecast (prior, updates, review expectations, held-out checkpoints).
* :func:`run_no_evidence` — call-matched no-evidence control: a fresh session with the same number of
  policy-action calls as the adaptive branch and evidence/review budgets of 0.

All three start from the same frozen assignment and the *same* pre-campaign held-out forecast (made once, in
the adaptive branch). After every closed experiment an evaluator call asks the policy for held-out forecasts
on a hash-bound copy of its visible state (:meth:`CampaignEnv.checkpoint_state`); it consumes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from mdbench.errors import MdbenchError
from mdbench.sdl.compiler import Assignment
from mdbench.sdl.environment import CampaignEnv
from mdbench.sdl.ledger import Ledger
from mdbench.sdl.policies import Policy

log = logging.getLogger(__name__)

BRANCHES = ("adaptive", "random_control", "no_evidence")


def _checkpoint(env: CampaignEnv, policy: Policy, label: str | None = None) -> None:
    state, sha = env.checkpoint_state()
    n = sum(1 for e in state["experiments"] if e["closed"])
    try:
        rows = policy.forecast(state, env.heldout_ids)
    except MdbenchError as exc:
        rows = {"error": str(exc)}
    env.record_checkpoint(label or f"after_{n}", rows, sha)


def _pre(env: CampaignEnv, policy: Policy, pre_rows: Any | None) -> Any:
    if pre_rows is None:
        state, sha = env.checkpoint_state()
        try:
            pre_rows = policy.forecast(state, env.heldout_ids)
        except MdbenchError as exc:
            pre_rows = {"error": str(exc)}
        env.record_checkpoint("pre", pre_rows, sha)
    else:
        env.record_checkpoint("pre", pre_rows, env.checkpoint_state()[1])
    return pre_rows


def _drive(env: CampaignEnv, policy: Policy, progress: Callable[[], None] | None = None) -> None:
    while not env.done:
        try:
            action = policy.act(env.visible_state())
        except MdbenchError as exc:
            res = env.abort(f"policy error: {exc}")
        else:
            res = env.step(action)
        if res.closed:
            _checkpoint(env, policy)
            if progress:
                progress()


def run_adaptive(ledger: Ledger, asg: Assignment, policy: Policy,
                 progress: Callable[[], None] | None = None) -> tuple[CampaignEnv, Any]:
    """Run the adaptive branch; returns ``(env, pre_campaign_rows)``."""
    env = CampaignEnv(ledger, asg, branch="adaptive")
    pre = _pre(env, policy, None)
    _drive(env, policy, progress)
    return env, pre


def run_no_evidence(ledger: Ledger, asg: Assignment, policy: Policy, max_calls: int, pre_rows: Any) -> CampaignEnv:
    """Call-matched no-evidence control (``max_calls`` = the adaptive branch's policy-action calls)."""
    env = CampaignEnv(ledger, asg, branch="no_evidence", evidence_enabled=False, max_calls=max(1, max_calls))
    _pre(env, policy, pre_rows)
    _drive(env, policy)
    return env


def _supports(ledger_by_id: dict, eid: str, steps: list[dict[str, Any]]) -> bool:
    exp = ledger_by_id[eid]
    for tier in {s["tier"] for s in steps if s["kind"] == "evidence"}:
        need = sum(1 for s in steps if s["kind"] == "evidence" and s["tier"] == tier)
        if sum(1 for x in exp.evidence if x.tier == tier) < need:
            return False
    return sum(1 for s in steps if s["kind"] == "review") <= len(exp.reviews)


def run_schedule_matched_random(ledger: Ledger, asg: Assignment, policy: Policy, schedule: list[dict[str, Any]],
                                pre_rows: Any, seed: int) -> CampaignEnv:
    """Schedule-matched random control (see module docstring)."""
    env = CampaignEnv(ledger, asg, branch="random_control")
    _pre(env, policy, pre_rows)
    rng = np.random.default_rng(seed)
    by_id = ledger.by_id()

    def step(action: dict[str, Any]) -> bool:
        res = env.step(action)
        if not res.ok:
            log.warning("random control: action rejected: %s", res.message)
        if res.closed:
            _checkpoint(env, policy)
        return res.ok

    try:
        for item in schedule:
            if env.done:
                break
            options = [c for c in asg.roles["candidates"] if c not in env.traces]
            eligible = [c for c in options if _supports(by_id, c, item["steps"])] or options
            choice = eligible[int(rng.integers(len(eligible)))]
            step({"action": "select_experiment", "experiment_id": choice})
            if not item["prior"]:
                continue
            step({"action": "submit_forecast", "forecast": policy.forecast(env.visible_state(), [choice])[0]})
            for s in item["steps"]:
                if env.done:
                    break
                if s["kind"] == "evidence":
                    step({"action": "inspect_evidence", "experiment_id": choice, "tier": s["tier"]})
                else:
                    exp = policy.review_expectation(env.visible_state(), choice)
                    step({"action": "request_review", "experiment_id": choice, **exp})
                if not env.done:
                    step({"action": "submit_forecast",
                          "forecast": policy.forecast(env.visible_state(), [choice])[0]})
        if not env.done:
            step({"action": "stop"})
    except MdbenchError as exc:
        res = env.abort(f"policy error: {exc}")
        if res.closed:
            _checkpoint(env, policy)
    return env


@dataclass
class CampaignRun:
    """The three branch traces of one campaign and the assignment they ran on."""

    assignment: Assignment
    policy_name: str
    seed: int
    traces: dict[str, dict[str, Any]]


def run_campaign(ledger: Ledger, asg: Assignment, policy_factory: Callable[[], Policy], *, seed: int = 0,
                 controls: bool = True, policy_name: str = "policy",
                 progress: Callable[[], None] | None = None) -> CampaignRun:
    """Run the adaptive branch and (with ``controls``) both controls, each with a fresh policy session.

    Parameters
    ----------
    policy_factory : callable
        Returns a *fresh* policy session (called once per branch).
    seed : int
        Seed passed to every policy session's ``reset`` and used for the random control's choices.
    """
    traces = {}
    pol = policy_factory()
    pol.reset(seed)
    try:
        env, pre = run_adaptive(ledger, asg, pol, progress)
    finally:
        pol.close()
    traces["adaptive"] = env.trace()
    if controls:
        pol = policy_factory()
        pol.reset(seed)
        try:
            rnd = run_schedule_matched_random(ledger, asg, pol, env.schedule(), pre, seed + 7919)
        finally:
            pol.close()
        traces["random_control"] = rnd.trace()
        pol = policy_factory()
        pol.reset(seed)
        try:
            noev = run_no_evidence(ledger, asg, pol, env.n_calls, pre)
        finally:
            pol.close()
        traces["no_evidence"] = noev.trace()
    return CampaignRun(asg, policy_name, seed, traces)
