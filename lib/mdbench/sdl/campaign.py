"""Drive campaign branches: the adaptive branch, its two controls, evaluator checkpoints and future decisions.

* :func:`run_adaptive` — the policy acts freely under the protocol.
* :func:`run_schedule_matched_random` — a fresh session of the same policy; the adaptive branch's experiment
  count and its sequence of evidence/review actions per experiment are replayed, but each experiment choice is
  replaced by a seeded random choice among unselected candidates that can support that experiment's part of
  the schedule (enough recorded items of each tier and reviews; any candidate if none can). The policy
  supplies every forecast (prior, updates, review expectations).
* :func:`run_no_evidence` — call-matched no-evidence control: a fresh session that gets *exactly* the adaptive
  branch's number of policy-action calls (:class:`~mdbench.sdl.environment.CampaignEnv` ``call_target``) with
  evidence and review budgets of 0.

Evaluator calls. Every held-out forecast is made in a *separate evaluator session* — a fresh session of the
same system (a new process for an external policy, a new conversation for an LLM, a new instance for a
built-in) — from a saved copy of the agent-visible state: the state is written to the :class:`StateStore`,
its sha256 goes into the hash chain, and the session is given the copy read back and verified against that
hash. The call consumes nothing and cannot alter the campaign. The pre-campaign forecast is made once (from
the adaptive branch's initial state) and shared by all three branches; then one checkpoint follows every
closed experiment. After a branch ends, the *future decisions* are forecast the same way from the saved
pre-campaign and final states (:data:`FUTURE_PRE`, :data:`FUTURE_FINAL`), with the future-role experiments
added to the state as ``future_panel``; they were never visible during the campaign.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mdbench.errors import MdbenchError
from mdbench.sdl.compiler import Assignment
from mdbench.sdl.environment import CampaignEnv, future_panel
from mdbench.sdl.ledger import Ledger, canonical_json
from mdbench.sdl.policies import Policy, session_record

log = logging.getLogger(__name__)

BRANCHES = ("adaptive", "random_control", "no_evidence")
FUTURE_PRE = "future_pre"
FUTURE_FINAL = "future_final"


class StateStore:
    """Saved agent-visible states, keyed by (branch, label); on disk (gzipped canonical JSON,
    ``<folder>/<branch>/<label>.state.json.gz``) when ``folder`` is given, else in memory.

    :meth:`load` returns a fresh copy only when it matches the sha256 it was saved under.
    """

    def __init__(self, folder: str | Path | None = None):
        self.folder = Path(folder) if folder is not None else None
        self._mem: dict[tuple[str, str], str] = {}

    def _path(self, branch: str, label: str) -> Path:
        assert self.folder is not None
        return self.folder / branch / f"{label}.state.json.gz"

    def save(self, branch: str, label: str, state: dict[str, Any]) -> str:
        """Save ``state``; returns the sha256 of its canonical JSON (:func:`~mdbench.sdl.ledger.sha256_json`)."""
        text = canonical_json(state)
        if self.folder is None:
            self._mem[(branch, label)] = text
        else:
            p = self._path(branch, label)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(gzip.compress(text.encode("ascii"), compresslevel=6, mtime=0))
        return hashlib.sha256(text.encode("ascii")).hexdigest()

    def load(self, branch: str, label: str, sha256: str) -> dict[str, Any]:
        """The saved state, verified against ``sha256`` (a changed file raises :class:`MdbenchError`)."""
        if self.folder is None:
            text = self._mem.get((branch, label))
        else:
            text = gzip.decompress(self._path(branch, label).read_bytes()).decode("ascii")
        if text is None:
            raise MdbenchError(f"no saved state {branch}/{label}")
        if hashlib.sha256(text.encode("ascii")).hexdigest() != sha256:
            raise MdbenchError(f"saved state {branch}/{label} does not match its sha256 {sha256[:12]}…")
        return json.loads(text)


def _start(factory: Callable[[], Policy], seed: int) -> tuple[Policy, str | None]:
    """A fresh branch session, or the session object and why it could not start."""
    pol = factory()
    try:
        pol.reset(seed)
    except MdbenchError as exc:
        return pol, f"session did not start: {exc}"
    return pol, None


def evaluator_call(factory: Callable[[], Policy], seed: int, state: dict[str, Any],
                   ids: list[str]) -> tuple[Any, dict[str, Any]]:
    """Ask a fresh session for forecasts on ``ids`` from ``state``; returns ``(rows, session record)``.

    A failure of the session (it crashed, timed out, answered garbage) gives ``{"error": ...}`` rows, which the
    environment records as an invalid forecast.
    """
    pol = factory()
    try:
        pol.reset(seed)
        rows = pol.forecast(state, ids)
    except MdbenchError as exc:
        rows = {"error": str(exc)}
    finally:
        pol.close()
    return rows, session_record(pol)


@dataclass
class _Ctx:
    """What every branch of one campaign shares."""

    ledger: Ledger
    asg: Assignment
    factory: Callable[[], Policy]
    seed: int
    store: StateStore
    pre_rows: Any = None
    pre_sha: str = ""
    future_pre_rows: Any = None
    future_pre_sha: str = ""
    future_sess: dict[str, Any] = field(default_factory=dict)


def _checkpoint(env: CampaignEnv, ctx: _Ctx) -> None:
    n = sum(1 for x in env.traces.values() if x["closed"])
    label = f"after_{n}"
    sha = ctx.store.save(env.branch, label, env.evaluator_state())
    rows, sess = evaluator_call(ctx.factory, ctx.seed, ctx.store.load(env.branch, label, sha), env.heldout_ids)
    env.record_checkpoint(label, rows, sha, sess)


def _future_state(env: CampaignEnv, ctx: _Ctx) -> dict[str, Any]:
    state = env.evaluator_state("future_forecast")
    state["future_panel"] = future_panel(ctx.ledger, ctx.asg)
    return state


def _pre(env: CampaignEnv, ctx: _Ctx) -> None:
    """Pre-campaign held-out and future forecasts: made once (adaptive branch), shared by the controls."""
    if ctx.pre_rows is None:
        ctx.pre_sha = ctx.store.save(env.branch, "pre", env.evaluator_state())
        ctx.pre_rows, sess = evaluator_call(ctx.factory, ctx.seed, ctx.store.load(env.branch, "pre", ctx.pre_sha),
                                            env.heldout_ids)
        env.record_checkpoint("pre", ctx.pre_rows, ctx.pre_sha, sess)
        fstate = _future_state(env, ctx)
        ctx.future_pre_sha = ctx.store.save(env.branch, FUTURE_PRE, fstate)
        ctx.future_pre_rows, fsess = evaluator_call(
            ctx.factory, ctx.seed, ctx.store.load(env.branch, FUTURE_PRE, ctx.future_pre_sha), env.future_ids)
        ctx.future_sess = fsess
    else:
        env.record_checkpoint("pre", ctx.pre_rows, ctx.pre_sha, {"shared_from": "adaptive"})


def _finish(env: CampaignEnv, pol: Policy, ctx: _Ctx) -> None:
    """Close the branch session, record it, then the future-decision forecasts from saved states."""
    pol.close()
    env.record_session("campaign", session_record(pol))
    shared = {"shared_from": "adaptive"} if env.branch != "adaptive" else ctx.future_sess
    env.record_future(FUTURE_PRE, ctx.future_pre_rows, ctx.future_pre_sha, shared)
    fstate = _future_state(env, ctx)
    sha = ctx.store.save(env.branch, FUTURE_FINAL, fstate)
    rows, sess = evaluator_call(ctx.factory, ctx.seed, ctx.store.load(env.branch, FUTURE_FINAL, sha), env.future_ids)
    env.record_future(FUTURE_FINAL, rows, sha, sess)


def _drive(env: CampaignEnv, policy: Policy, ctx: _Ctx, progress: Callable[[], None] | None = None) -> None:
    while not env.done:
        try:
            action = policy.act(env.visible_state())
        except MdbenchError as exc:
            res = env.abort(str(exc))
        else:
            res = env.step(action)
        if res.closed:
            _checkpoint(env, ctx)
            if progress:
                progress()


def _policy_info(pol: Policy) -> dict[str, Any]:
    rec = session_record(pol)
    return {"name": rec.get("name"), "isolation": rec.get("isolation", {})}


def run_adaptive(ledger: Ledger, asg: Assignment, factory: Callable[[], Policy], ctx: _Ctx | None = None,
                 progress: Callable[[], None] | None = None) -> tuple[CampaignEnv, _Ctx]:
    """Run the adaptive branch (a fresh session of ``factory``); returns ``(env, shared context)``."""
    ctx = ctx or _Ctx(ledger, asg, factory, 0, StateStore())
    pol, error = _start(factory, ctx.seed)
    env = CampaignEnv(ledger, asg, branch="adaptive", policy=_policy_info(pol))
    try:
        _pre(env, ctx)
        if error:
            env.abort(error)
        _drive(env, pol, ctx, progress)
    finally:
        if not env.done:
            env.abort("campaign interrupted")
        _finish(env, pol, ctx)
    return env, ctx


def run_no_evidence(ctx: _Ctx, call_target: int) -> CampaignEnv:
    """Call-matched no-evidence control: exactly ``call_target`` policy-action calls, no evidence, no reviews."""
    pol, error = _start(ctx.factory, ctx.seed)
    env = CampaignEnv(ctx.ledger, ctx.asg, branch="no_evidence", evidence_enabled=False,
                      call_target=max(1, call_target), policy=_policy_info(pol))
    try:
        _pre(env, ctx)
        if error:
            env.abort(error)
        _drive(env, pol, ctx)
    finally:
        if not env.done:
            env.abort("campaign interrupted")
        _finish(env, pol, ctx)
    return env


def _supports(exp, steps: list[dict[str, Any]]) -> bool:
    for tier in {s["tier"] for s in steps if s["kind"] == "evidence"}:
        need = sum(1 for s in steps if s["kind"] == "evidence" and s["tier"] == tier)
        if sum(1 for x in exp.evidence if x.tier == tier) < need:
            return False
    return sum(1 for s in steps if s["kind"] == "review") <= len(exp.reviews)


def run_schedule_matched_random(ctx: _Ctx, schedule: list[dict[str, Any]], seed: int) -> CampaignEnv:
    """Schedule-matched random control (see module docstring)."""
    pol, error = _start(ctx.factory, ctx.seed)
    env = CampaignEnv(ctx.ledger, ctx.asg, branch="random_control", policy=_policy_info(pol))
    rng = np.random.default_rng(seed)
    by_id = ctx.ledger.by_id()
    candidates = ctx.asg.public("candidates")

    def step(action: dict[str, Any]) -> bool:
        res = env.step(action)
        if not res.ok:
            log.warning("random control: action rejected: %s", res.message)
        if res.closed:
            _checkpoint(env, ctx)
        return res.ok

    try:
        _pre(env, ctx)
        if error:
            env.abort(error)
        for item in schedule:
            if env.done:
                break
            options = [c for c in candidates if c not in env.traces]
            eligible = [c for c in options if _supports(by_id[ctx.asg.ledger_id(c)], item["steps"])] or options
            choice = eligible[int(rng.integers(len(eligible)))]
            step({"action": "select_experiment", "experiment_id": choice})
            if not item["prior"]:
                continue
            step({"action": "submit_forecast", "forecast": pol.forecast(env.visible_state(), [choice])[0]})
            for s in item["steps"]:
                if env.done:
                    break
                if s["kind"] == "evidence":
                    step({"action": "inspect_evidence", "experiment_id": choice, "tier": s["tier"]})
                else:
                    exp = pol.review_expectation(env.visible_state(), choice)
                    step({"action": "request_review", "experiment_id": choice, **exp})
                if not env.done:
                    step({"action": "submit_forecast", "forecast": pol.forecast(env.visible_state(), [choice])[0]})
        if not env.done:
            step({"action": "stop"})
    except (MdbenchError, IndexError, KeyError, TypeError) as exc:
        res = env.abort(f"{exc}")
        if res.closed:
            _checkpoint(env, ctx)
    finally:
        if not env.done:
            env.abort("campaign interrupted")
        _finish(env, pol, ctx)
    return env


@dataclass
class CampaignRun:
    """The branch traces of one campaign and the assignment they ran on."""

    assignment: Assignment
    policy_name: str
    seed: int
    traces: dict[str, dict[str, Any]]


def run_campaign(ledger: Ledger, asg: Assignment, policy_factory: Callable[[], Policy], *, seed: int = 0,
                 controls: bool = True, policy_name: str = "policy", progress: Callable[[], None] | None = None,
                 states: StateStore | None = None) -> CampaignRun:
    """Run the adaptive branch and (with ``controls``) both controls; every branch and every evaluator call
    gets a fresh session from ``policy_factory``.

    Parameters
    ----------
    policy_factory : callable
        Returns a *fresh* policy session (called once per branch and once per evaluator call).
    seed : int
        Seed passed to every session's ``reset``; ``seed + 7919`` seeds the random control's choices.
    states : StateStore, optional
        Where saved states go (default: in memory).
    """
    ctx = _Ctx(ledger, asg, policy_factory, seed, states or StateStore())
    env, ctx = run_adaptive(ledger, asg, policy_factory, ctx, progress)
    traces = {"adaptive": env.trace()}
    if controls:
        traces["random_control"] = run_schedule_matched_random(ctx, env.schedule(), seed + 7919).trace()
        traces["no_evidence"] = run_no_evidence(ctx, env.n_calls).trace()
    return CampaignRun(asg, policy_name, seed, traces)
