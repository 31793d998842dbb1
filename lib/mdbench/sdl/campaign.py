"""Drive campaign branches: the adaptive branch, its two controls, evaluator checkpoints and future decisions.

* :func:`run_adaptive` — the policy acts freely under the protocol.
* :func:`run_schedule_matched_random` — a fresh session of the same policy; the adaptive branch's experiment
  count and its sequence of evidence/review actions per experiment are replayed, but each experiment choice is
  replaced by a seeded random choice among unselected candidates that can support that experiment's part of
  the schedule (enough recorded items of each tier and reviews; any candidate if none can). The policy
  supplies every forecast (prior, updates, review expectations). :func:`run_campaign` runs
  ``random_draws`` (default :data:`RANDOM_DRAWS` = 3) such branches with different seeds (branches
  ``random_control``, ``random_control_1``, …), so a selection-lift sign is a mean over draws with a spread.
  This control *cannot* hide itself: its selections are not the coordinator's own, and a coordinator that
  recomputes its own choice can tell. Selection lift is therefore a diagnostic reported beside the primary
  adaptive AUC, never a ranking criterion (:mod:`mdbench.sdl.leaderboard`).
* :func:`run_no_evidence` — call-matched no-evidence control: a fresh session that gets *exactly* the adaptive
  branch's number of policy-action calls (:class:`~mdbench.sdl.environment.CampaignEnv` ``call_target``); it
  sees the same budgets and state schema as the adaptive branch, and every evidence or review request is
  answered as missing (counted, never refused by a zero budget), so nothing in its state announces the control.

Robustness: a coordinator's failure (crash, timeout, exit, a reply that is not data) ends its branch or
invalidates its evaluator call with the real cause in the trace; nothing a coordinator sends makes these
functions raise. A per-campaign wall-clock budget (``wall_budget_s``) is recorded in every branch's first log
entry; once spent, the running branch ends (did not finish) and no further evaluator session is started.

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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mdbench.errors import MdbenchError
from mdbench.sdl.compiler import Assignment
from mdbench.sdl.environment import CampaignEnv, InvalidReply, future_panel
from mdbench.sdl.ledger import Ledger, canonical_json
from mdbench.sdl.policies import Policy, session_record

log = logging.getLogger(__name__)

BRANCHES = ("adaptive", "random_control", "no_evidence")
RANDOM = "random_control"
#: Schedule-matched random-control draws per assignment (seeded).
RANDOM_DRAWS = 3
FUTURE_PRE = "future_pre"
FUTURE_FINAL = "future_final"


def random_branch(draw: int) -> str:
    """Branch label of random-control draw ``draw`` (``random_control``, ``random_control_1``, …)."""
    return RANDOM if draw == 0 else f"{RANDOM}_{draw}"


def is_random_branch(branch: str) -> bool:
    """True for every random-control draw's label."""
    return branch == RANDOM or (branch.startswith(RANDOM + "_") and branch[len(RANDOM) + 1:].isdigit())


def random_seed(seed: int, draw: int) -> int:
    """Seed of random-control draw ``draw`` of a campaign run with ``seed``."""
    return seed + 7919 + 104_729 * draw


def one_line(text: Any, limit: int = 300) -> str:
    """``text`` as one line of at most ``limit`` characters."""
    t = " ".join(str(text).split())
    return t if len(t) <= limit else t[: limit - 1] + "…"


def failure_cause(exc: BaseException) -> str:
    """One line naming why a coordinator session failed (its own message for project errors)."""
    if isinstance(exc, MdbenchError):
        return one_line(exc)
    return one_line(f"coordinator session raised {type(exc).__name__}: {exc}")


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


def _start(factory: Callable[[], Policy], seed: int, deadline: float | None = None) -> tuple[Policy, str | None]:
    """A fresh branch session, or the session object and why it could not start (none is started once the
    campaign's wall budget is spent)."""
    pol = factory()
    if deadline is not None and time.monotonic() > deadline:
        return pol, "campaign wall budget spent: no session started"
    try:
        pol.reset(seed)
    except Exception as exc:  # noqa: BLE001 — a coordinator must never crash the runner
        return pol, f"session did not start: {failure_cause(exc)}"
    return pol, None


def _close(pol: Policy) -> None:
    try:
        pol.close()
    except Exception as exc:  # noqa: BLE001
        log.warning("closing a coordinator session failed: %s", failure_cause(exc))


def _record(pol: Policy) -> dict[str, Any]:
    try:
        rec = session_record(pol)
        return rec if isinstance(rec, dict) else {"name": str(rec)[:200]}
    except Exception as exc:  # noqa: BLE001
        return {"name": type(pol).__name__, "record_error": failure_cause(exc)}


def evaluator_call(factory: Callable[[], Policy], seed: int, state: dict[str, Any],
                   ids: list[str], deadline: float | None = None) -> tuple[Any, dict[str, Any], str | None]:
    """Ask a fresh session for forecasts on ``ids`` from ``state``; returns ``(rows, session record, error)``.

    ``error`` is the real cause when the session failed (did not start, timed out, exited, a reply that is not
    data, the campaign's wall budget spent), else None; the environment records such a call as an invalid
    forecast with that cause.
    """
    if deadline is not None and time.monotonic() > deadline:
        return None, {"skipped": "campaign wall budget spent"}, "campaign wall budget spent: no session started"
    pol = factory()
    rows, error = None, None
    try:
        pol.reset(seed)
        rows = pol.forecast(state, ids)
    except Exception as exc:  # noqa: BLE001 — a coordinator must never crash the runner
        error = failure_cause(exc)
    finally:
        _close(pol)
    return rows, _record(pol), error


@dataclass
class _Ctx:
    """What every branch of one campaign shares."""

    ledger: Ledger
    asg: Assignment
    factory: Callable[[], Policy]
    seed: int
    store: StateStore
    run_id: str = ""
    wall_budget_s: float | None = None
    deadline: float | None = None
    pre_rows: Any = None
    pre_error: str | None = None
    pre_sha: str = ""
    future_pre_rows: Any = None
    future_pre_error: str | None = None
    future_pre_sha: str = ""
    future_sess: dict[str, Any] = field(default_factory=dict)

    def env(self, policy: dict[str, Any], **kw: Any) -> CampaignEnv:
        """A new branch environment on this campaign's assignment."""
        return CampaignEnv(self.ledger, self.asg, policy=policy, run_id=self.run_id,
                           wall_budget_s=self.wall_budget_s, **kw)

    def over_budget(self) -> bool:
        """True once the campaign's wall-clock budget is spent."""
        return self.deadline is not None and time.monotonic() > self.deadline


def _checkpoint(env: CampaignEnv, ctx: _Ctx) -> None:
    n = sum(1 for x in env.traces.values() if x["closed"])
    label = f"after_{n}"
    sha = ctx.store.save(env.branch, label, env.evaluator_state())
    rows, sess, err = evaluator_call(ctx.factory, ctx.seed, ctx.store.load(env.branch, label, sha), env.heldout_ids,
                                     ctx.deadline)
    env.record_checkpoint(label, rows, sha, sess, err)


def _future_state(env: CampaignEnv, ctx: _Ctx) -> dict[str, Any]:
    state = env.evaluator_state("future_forecast")
    state["future_panel"] = future_panel(ctx.ledger, ctx.asg)
    return state


def _pre(env: CampaignEnv, ctx: _Ctx) -> None:
    """Pre-campaign held-out and future forecasts: made once (adaptive branch), shared by the controls."""
    if ctx.pre_rows is None:
        ctx.pre_sha = ctx.store.save(env.branch, "pre", env.evaluator_state())
        ctx.pre_rows, sess, ctx.pre_error = evaluator_call(
            ctx.factory, ctx.seed, ctx.store.load(env.branch, "pre", ctx.pre_sha), env.heldout_ids, ctx.deadline)
        env.record_checkpoint("pre", ctx.pre_rows, ctx.pre_sha, sess, ctx.pre_error)
        fstate = _future_state(env, ctx)
        ctx.future_pre_sha = ctx.store.save(env.branch, FUTURE_PRE, fstate)
        ctx.future_pre_rows, fsess, ctx.future_pre_error = evaluator_call(
            ctx.factory, ctx.seed, ctx.store.load(env.branch, FUTURE_PRE, ctx.future_pre_sha), env.future_ids,
            ctx.deadline)
        ctx.future_sess = fsess
    else:
        env.record_checkpoint("pre", ctx.pre_rows, ctx.pre_sha, {"shared_from": "adaptive"}, ctx.pre_error)


def _finish(env: CampaignEnv, pol: Policy, ctx: _Ctx) -> None:
    """Close the branch session, record it, then the future-decision forecasts from saved states."""
    _close(pol)
    env.record_session("campaign", _record(pol))
    shared = {"shared_from": "adaptive"} if env.branch != "adaptive" else ctx.future_sess
    env.record_future(FUTURE_PRE, ctx.future_pre_rows, ctx.future_pre_sha, shared, ctx.future_pre_error)
    fstate = _future_state(env, ctx)
    sha = ctx.store.save(env.branch, FUTURE_FINAL, fstate)
    rows, sess, err = evaluator_call(ctx.factory, ctx.seed, ctx.store.load(env.branch, FUTURE_FINAL, sha),
                                     env.future_ids, ctx.deadline)
    env.record_future(FUTURE_FINAL, rows, sha, sess, err)


def _over_budget(env: CampaignEnv, ctx: _Ctx) -> bool:
    if ctx.over_budget():
        res = env.abort(f"campaign wall budget of {ctx.wall_budget_s:g} s spent")
        if res.closed:
            _checkpoint(env, ctx)     # recorded as invalid: no session is started once the budget is spent
        return True
    return False


def _drive(env: CampaignEnv, policy: Policy, ctx: _Ctx, progress: Callable[[], None] | None = None) -> None:
    while not env.done:
        if _over_budget(env, ctx):
            break
        try:
            action = policy.act(env.visible_state())
        except Exception as exc:  # noqa: BLE001 — a coordinator must never crash the runner
            res = env.abort(failure_cause(exc))
        else:
            res = env.step(action)
        if res.closed:
            _checkpoint(env, ctx)
            if progress:
                progress()


def _policy_info(pol: Policy) -> dict[str, Any]:
    rec = _record(pol)
    return {"name": rec.get("name"), "isolation": rec.get("isolation", {})}


def run_adaptive(ledger: Ledger, asg: Assignment, factory: Callable[[], Policy], ctx: _Ctx | None = None,
                 progress: Callable[[], None] | None = None) -> tuple[CampaignEnv, _Ctx]:
    """Run the adaptive branch (a fresh session of ``factory``); returns ``(env, shared context)``."""
    ctx = ctx or _Ctx(ledger, asg, factory, 0, StateStore())
    pol, error = _start(factory, ctx.seed, ctx.deadline)
    env = ctx.env(_policy_info(pol), branch="adaptive")
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
    pol, error = _start(ctx.factory, ctx.seed, ctx.deadline)
    env = ctx.env(_policy_info(pol), branch="no_evidence", evidence_enabled=False, call_target=max(1, call_target))
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


def _local_forecast(pol: Policy, env: CampaignEnv, eid: str) -> dict[str, Any]:
    """A ``submit_forecast`` action from the session's forecast for ``eid``; an unusable reply is an
    :class:`InvalidReply` with its reason (rejected by the environment). Process failures propagate."""
    from mdbench.sdl.external import ReplyRefused

    try:
        rows = pol.forecast(env.visible_state(), [eid])
    except ReplyRefused as exc:
        return InvalidReply(exc.reason)   # type: ignore[return-value]
    if not isinstance(rows, list) or not rows:
        return InvalidReply("forecast reply holds no row")   # type: ignore[return-value]
    return {"action": "submit_forecast", "forecast": rows[0]}


def run_schedule_matched_random(ctx: _Ctx, schedule: list[dict[str, Any]], seed: int,
                                branch: str = RANDOM) -> CampaignEnv:
    """Schedule-matched random control (see module docstring). Choices are drawn over the candidates in
    ledger order (evaluator side), so a draw does not depend on how public ids are salted."""
    pol, error = _start(ctx.factory, ctx.seed, ctx.deadline)
    env = ctx.env(_policy_info(pol), branch=branch)
    rng = np.random.default_rng(seed)
    by_id = ctx.ledger.by_id()
    candidates = sorted(ctx.asg.public("candidates"), key=ctx.asg.ledger_id)

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
            if env.done or _over_budget(env, ctx):
                break
            options = [c for c in candidates if c not in env.traces]
            eligible = [c for c in options if _supports(by_id[ctx.asg.ledger_id(c)], item["steps"])] or options
            choice = eligible[int(rng.integers(len(eligible)))]
            step({"action": "select_experiment", "experiment_id": choice})
            if not item["prior"]:
                continue
            step(_local_forecast(pol, env, choice))
            for s in item["steps"]:
                if env.done:
                    break
                if s["kind"] == "evidence":
                    step({"action": "inspect_evidence", "experiment_id": choice, "tier": s["tier"]})
                else:
                    exp = pol.review_expectation(env.visible_state(), choice)
                    step({"action": "request_review", "experiment_id": choice,
                          **(exp if isinstance(exp, dict) else {})})
                if not env.done:
                    step(_local_forecast(pol, env, choice))
        if not env.done:
            step({"action": "stop"})
    except Exception as exc:  # noqa: BLE001 — a coordinator must never crash the runner
        if not env.done:
            res = env.abort(failure_cause(exc))
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
                 states: StateStore | None = None, random_draws: int = RANDOM_DRAWS, run_id: str = "",
                 wall_budget_s: float | None = None) -> CampaignRun:
    """Run the adaptive branch and (with ``controls``) ``random_draws`` random controls and the no-evidence
    control; every branch and every evaluator call gets a fresh session from ``policy_factory``.

    Parameters
    ----------
    policy_factory : callable
        Returns a *fresh* policy session (called once per branch and once per evaluator call).
    seed : int
        Seed passed to every session's ``reset``; :func:`random_seed` seeds the random controls' choices.
    states : StateStore, optional
        Where saved states go (default: in memory).
    random_draws : int
        Schedule-matched random-control draws (>= 1).
    run_id : str
        Id of the run (recorded in every branch's first log entry).
    wall_budget_s : float, optional
        Wall-clock budget of the whole campaign, all branches and evaluator calls together [s].
    """
    if random_draws < 1:
        raise ValueError("random_draws must be >= 1")
    ctx = _Ctx(ledger, asg, policy_factory, seed, states or StateStore(), run_id=run_id, wall_budget_s=wall_budget_s,
               deadline=None if wall_budget_s is None else time.monotonic() + wall_budget_s)
    env, ctx = run_adaptive(ledger, asg, policy_factory, ctx, progress)
    traces = {"adaptive": env.trace()}
    if controls:
        for d in range(random_draws):
            b = random_branch(d)
            traces[b] = run_schedule_matched_random(ctx, env.schedule(), random_seed(seed, d), b).trace()
        traces["no_evidence"] = run_no_evidence(ctx, env.n_calls).trace()
    return CampaignRun(asg, policy_name, seed, traces)
