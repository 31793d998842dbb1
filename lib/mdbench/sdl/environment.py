"""The campaign replay environment: information boundary, action protocol, budgets, hash-chained log.

The environment holds the ledger (evaluator-private: recorded outcomes, evidence payloads, reviews) and a
*policy-visible state* that only grows through the protocol. The policy only ever receives JSON copies of
that state, never a reference to the environment or the ledger, and every experiment id in it is the
assignment's salted *public id* (:attr:`~mdbench.sdl.compiler.Assignment.public_ids`).

Actions (JSON objects, validated against :data:`ACTION_SCHEMA`; anything else is rejected unchanged)::

    {"action": "select_experiment", "experiment_id": ID}
    {"action": "inspect_evidence", "experiment_id": ID, "tier": TIER}
    {"action": "request_review", "experiment_id": ID, "forecast_changes_conclusion": P, "forecast_quality_tier": Q}
    {"action": "submit_forecast", "forecast": {"experiment_id": ID, "p_valid": P, "p_category": {...}}}
    {"action": "stop"}

Rules

* Selecting a candidate opens it and reveals nothing; selecting the next one (or ``stop``) closes it.
* A prior forecast for the open experiment is required before any evidence or review on it.
* Every reveal (evidence or review) must be followed by an updated forecast before any other action.
* ``inspect_evidence`` reveals the next recorded item of that tier of the open experiment, or ``missing`` (with
  the recorded reason) — missing stays missing; each call uses one evidence inspection.
* ``request_review`` records the policy's forecasts of whether the review changes its conclusion and of the
  review's quality tier *before* revealing the review (or ``missing``); it uses one review.
* Experiment, evidence and review budgets are separate; an action beyond its budget is rejected.
* Rejected actions consume no budget, change nothing but the call counter and are logged; after
  ``max_consecutive_invalid`` rejections in a row, or ``max_calls`` calls, the campaign ends.
* Call-matched branches (``call_target=N``) get exactly ``N`` policy-action calls: a ``stop`` before the N-th
  call is acknowledged and deferred (logged, changes nothing), and the branch ends at the N-th call.
* Controls do not announce themselves: the no-evidence control (``evidence_enabled=False``) shows the same
  budgets, the same ``calls_max`` and the same state schema as the adaptive branch; its evidence and review
  requests are accepted, counted against the same budgets and answered as ``missing`` (exactly like a
  recorded-but-missing item), with ``withheld: true`` only in the evaluator's log. The call target is never in
  the visible state. (The schedule-matched random control cannot hide that its selections are not the
  coordinator's own: see :mod:`mdbench.sdl.campaign`.)
* Replies are data: an action must be plain JSON (objects, arrays, strings, booleans, null, finite numbers,
  integers of at most :data:`MAX_INT_DIGITS` digits, nesting at most :data:`MAX_DEPTH`); anything else — and
  an :class:`InvalidReply` (what a coordinator adapter passes on for a reply it could not parse, with the
  reason) — is rejected as an invalid action with its reason. :meth:`CampaignEnv.step` never raises on a reply.

The log is the record. Every action (with its forecast rows and reveals), every evaluator checkpoint (with
its forecast rows and the sha256 of the saved state it was made from), every future-decision forecast and
every policy session is appended to a sha256 hash chain. Everything a trace reports — per-experiment
forecasts and reveals, checkpoints, budgets, counters — is *derived* from the log by :func:`derive` (the
environment itself runs on that derivation), so scoring can recompute it from the chain alone
(:mod:`mdbench.sdl.verify`).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from typing import Any

import jsonschema

from mdbench.sdl.compiler import Assignment, check_against_ledger
from mdbench.sdl.ledger import CLAIM_AXES, Experiment, Ledger, canonical_json, sha256_json
from mdbench.sdl.scoring import ForecastError, validate_panel, validate_row

log = logging.getLogger(__name__)

PROTOCOL = "mdbench-sdl-policy/2"
TRACE_FORMAT = "mdbench-sdl-trace/3"
#: Deepest nesting and longest integer accepted in a reply (same limits as :func:`mdbench.untrusted.loads`).
MAX_DEPTH = 64
MAX_INT_DIGITS = 64
#: What a withheld evidence item / review of the no-evidence control looks like (same as a missing record).
_MISSING_EVIDENCE = "no further evidence of this tier recorded"
_MISSING_REVIEW = "no expert review recorded for this experiment"
_PROB = {"type": "number", "minimum": 0, "maximum": 1}
_ROW = {"type": "object", "required": ["experiment_id", "p_category"], "additionalProperties": False,
        "properties": {"experiment_id": {"type": "string"}, "p_valid": _PROB,
                       "p_category": {"type": "object", "additionalProperties": _PROB}}}
_ACTIONS = {
    "select_experiment": {"type": "object", "additionalProperties": False, "required": ["action", "experiment_id"],
                          "properties": {"action": {"const": "select_experiment"},
                                         "experiment_id": {"type": "string"}}},
    "inspect_evidence": {"type": "object", "additionalProperties": False,
                         "required": ["action", "experiment_id", "tier"],
                         "properties": {"action": {"const": "inspect_evidence"}, "experiment_id": {"type": "string"},
                                        "tier": {"type": "string"}}},
    "request_review": {"type": "object", "additionalProperties": False,
                       "required": ["action", "experiment_id", "forecast_changes_conclusion",
                                    "forecast_quality_tier"],
                       "properties": {"action": {"const": "request_review"}, "experiment_id": {"type": "string"},
                                      "forecast_changes_conclusion": _PROB,
                                      "forecast_quality_tier": {"type": "string"}}},
    "submit_forecast": {"type": "object", "additionalProperties": False, "required": ["action", "forecast"],
                        "properties": {"action": {"const": "submit_forecast"}, "forecast": _ROW}},
    "stop": {"type": "object", "additionalProperties": False, "required": ["action"],
             "properties": {"action": {"const": "stop"}}},
}
#: JSON schema of one action (draft 2020-12). A copy is sent to external policies.
ACTION_SCHEMA: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                                 "title": "mdbench SDL policy action", "oneOf": list(_ACTIONS.values())}
FORECAST_ROW_SCHEMA = _ROW
#: Actions the protocol accepts in each phase (the permitted-action schema of a turn is their ``oneOf``).
PHASE_ACTIONS: dict[str, tuple[str, ...]] = {
    "select": ("select_experiment", "stop"),
    "prior_forecast": ("submit_forecast",),
    "update_forecast": ("submit_forecast",),
    "investigate": ("inspect_evidence", "request_review", "submit_forecast", "select_experiment", "stop"),
    "done": (),
}
_VALIDATOR = jsonschema.Draft202012Validator(ACTION_SCHEMA)
GENESIS = "0" * 64

END_STOPPED = "policy stopped"
END_CALL_TARGET = "call target reached (call-matched control)"
END_CALL_LIMIT = "call limit reached"
END_POLICY_ERROR = "policy error"


def permitted_action_schema(phase: str) -> dict[str, Any]:
    """The exact JSON schema of the actions the protocol accepts in ``phase``."""
    return {"$schema": ACTION_SCHEMA["$schema"], "title": f"mdbench SDL action permitted in phase {phase}",
            "oneOf": [_ACTIONS[a] for a in PHASE_ACTIONS.get(phase, ())]}


@dataclass(frozen=True)
class InvalidReply:
    """A coordinator reply that is not data (not JSON, too deep, non-finite, …); ``reason`` says why."""

    reason: str


def data_problem(obj: Any, max_depth: int = MAX_DEPTH, max_int_digits: int = MAX_INT_DIGITS) -> str | None:
    """``None`` when ``obj`` is plain JSON data within the reply limits, else one line saying what is wrong.

    Iterative (no recursion): safe on objects nested arbitrarily deep.
    """
    stack: list[tuple[Any, int]] = [(obj, 1)]
    n = 0
    while stack:
        x, depth = stack.pop()
        n += 1
        if n > 2_000_000:
            return "reply has more than 2,000,000 values"
        if x is None or isinstance(x, (bool, str)):
            continue
        if isinstance(x, int):
            if abs(x) >= 10 ** max_int_digits:
                return f"integer of more than {max_int_digits} digits"
            continue
        if isinstance(x, float):
            if not math.isfinite(x):
                return f"non-finite number {x!r}"
            continue
        if isinstance(x, (dict, list)):
            if depth > max_depth:
                return f"nested more than {max_depth} levels"
            if isinstance(x, dict):
                if not all(isinstance(k, str) for k in x):
                    return "object keys must be strings"
                stack.extend((v, depth + 1) for v in x.values())
            else:
                stack.extend((v, depth + 1) for v in x)
            continue
        return f"not JSON data ({type(x).__name__})"
    return None


@dataclass
class StepResult:
    """What one action did: ``ok``, a message for the policy, the experiment it closed, whether it ended."""

    ok: bool
    message: str
    closed: str | None = None
    done: bool = False
    reveal: dict[str, Any] | None = None


def _plain(obj: Any) -> Any:
    """A detached, JSON-only copy."""
    return json.loads(json.dumps(obj))


def chain_problem(entries: list[dict[str, Any]]) -> str | None:
    """``None`` when every entry's ``sha256`` covers its content and links to the previous one; else the first
    broken entry, named (``log[17] (seq 17, action): sha256 does not match its content``)."""
    prev = GENESIS
    for n, e in enumerate(entries):
        if not isinstance(e, dict):
            return f"log[{n}]: not an object"
        body = {k: v for k, v in e.items() if k != "sha256"}
        name = f"log[{n}] (seq {e.get('seq')}, {e.get('kind')})"
        if e.get("seq") != n:
            return f"{name}: sequence number is not {n} (an entry was removed or inserted)"
        if body.get("prev_sha256") != prev:
            return f"{name}: does not link to the previous entry (an entry was removed, inserted or reordered)"
        try:
            digest = sha256_json(body)
        except (TypeError, ValueError):
            return f"{name}: content is not canonical JSON"
        if digest != e.get("sha256"):
            return f"{name}: sha256 does not match its content (the entry was edited)"
        prev = e["sha256"]
    return None


def verify_chain(entries: list[dict[str, Any]]) -> bool:
    """True when the log is an intact hash chain (see :func:`chain_problem`)."""
    return chain_problem(entries) is None


# ------------------------------------------------------------------------------------------------ derivation
class Derivation:
    """The state of a branch as a pure function of its log (fed entry by entry).

    Attributes hold everything a trace reports: ``experiments`` (public id → per-experiment record),
    ``open``, ``budgets``, ``remaining``, ``n_calls``, ``n_invalid``, ``end_reason``, ``checkpoints``,
    ``future``, ``sessions``, ``start``.
    """

    def __init__(self) -> None:
        self.start: dict[str, Any] = {}
        self.experiments: dict[str, dict[str, Any]] = {}
        self.open: str | None = None
        self.budgets: dict[str, int] = {}
        self.remaining: dict[str, int] = {}
        self.n_calls = 0
        self.n_invalid = 0
        self.n_withheld = 0
        self.consecutive_invalid = 0
        self.end_reason: str | None = None
        self.checkpoints: list[dict[str, Any]] = []
        self.future: list[dict[str, Any]] = []
        self.sessions: list[dict[str, Any]] = []
        self.last: dict[str, Any] = {"ok": True, "message": "campaign started; submit actions"}

    @property
    def done(self) -> bool:
        return self.end_reason is not None

    def phase(self) -> str:
        """select | prior_forecast | investigate | update_forecast | done."""
        if self.done:
            return "done"
        if self.open is None:
            return "select"
        e = self.experiments[self.open]
        if e["pending_update"]:
            return "update_forecast"
        if not e["forecasts"]:
            return "prior_forecast"
        return "investigate"

    def forecast_kind(self) -> str:
        """Kind of the next forecast on the open experiment: prior, update (after a reveal) or revision."""
        e = self.experiments[self.open] if self.open else None
        if e is None or not e["forecasts"]:
            return "prior"
        return "update" if e["pending_update"] else "revision"

    def _close_open(self) -> None:
        if self.open is not None:
            self.experiments[self.open]["closed"] = True
            self.experiments[self.open]["pending_update"] = False
            self.open = None

    def feed(self, e: dict[str, Any]) -> None:
        """Apply one log entry."""
        kind = e["kind"]
        if kind == "start":
            self.start = {k: e[k] for k in ("branch", "assignment_id", "assignment_sha256", "policy", "call_target",
                                             "max_calls", "evidence_enabled", "run_id", "wall_budget_s")}
            self.budgets = dict(e["budgets"])
            self.remaining = dict(e["budgets"])
        elif kind == "action":
            self.n_calls = e["call"]
            if not e["ok"]:
                self.n_invalid += 1
                self.consecutive_invalid += 1
                self.last = {"ok": False, "message": e["message"]}
                return
            self.consecutive_invalid = 0
            self.last = {"ok": True, "message": e["message"], **({"reveal": e["reveal"]} if e.get("reveal") else {})}
            a = e["action"]
            act = a["action"]
            if act == "select_experiment":
                self._close_open()
                self.remaining["experiments"] -= 1
                self.experiments[a["experiment_id"]] = {
                    "experiment_id": a["experiment_id"], "order": len(self.experiments), "closed": False,
                    "forecasts": [], "reveals": [], "review_forecasts": [], "pending_update": False}
                self.open = a["experiment_id"]
            elif act == "submit_forecast":
                x = self.experiments[self.open]
                x["forecasts"].append({"kind": self.forecast_kind(), "row": e["row"],
                                       "after_reveal": len(x["reveals"]), "call": e["call"], "seq": e["seq"]})
                x["pending_update"] = False
            elif act in ("inspect_evidence", "request_review"):
                x = self.experiments[self.open]
                if act == "request_review":
                    self.remaining["reviews"] -= 1
                    x["review_forecasts"].append({
                        "forecast_changes_conclusion": a["forecast_changes_conclusion"],
                        "forecast_quality_tier": a["forecast_quality_tier"], "before_reveal": len(x["reveals"]),
                        "prior_forecast_index": len(x["forecasts"]) - 1})
                else:
                    self.remaining["evidence"] -= 1
                if e.get("withheld"):
                    self.n_withheld += 1
                x["reveals"].append(e["reveal"])
                x["pending_update"] = True
        elif kind == "end":
            self._close_open()
            self.end_reason = e["reason"]
        elif kind == "checkpoint":
            self.checkpoints.append({k: e[k] for k in ("label", "n_closed", "state_sha256", "valid", "rows", "error",
                                                       "session", "seq")})
        elif kind == "future":
            self.future.append({k: e[k] for k in ("label", "state_sha256", "valid", "rows", "error", "session",
                                                  "seq")})
        elif kind == "session":
            self.sessions.append({"role": e["role"], "record": e["record"], "seq": e["seq"]})
        else:
            raise ValueError(f"unknown log entry kind {kind!r} at seq {e.get('seq')}")

    def report(self) -> dict[str, Any]:
        """The derived part of a trace (JSON-ready)."""
        exps = [{k: v for k, v in x.items() if k != "pending_update"}
                for x in sorted(self.experiments.values(), key=lambda x: x["order"])]
        return _plain({
            **self.start, "budgets": self.budgets, "remaining": self.remaining, "n_calls": self.n_calls,
            "n_invalid": self.n_invalid, "n_withheld": self.n_withheld, "end_reason": self.end_reason,
            "experiments": exps,
            "checkpoints": self.checkpoints, "future": self.future, "sessions": self.sessions})


#: Trace fields that are derived from the log (and must equal :func:`derive` of it).
DERIVED_FIELDS = ("branch", "assignment_id", "assignment_sha256", "policy", "call_target", "max_calls",
                  "evidence_enabled", "run_id", "wall_budget_s", "budgets", "remaining", "n_calls", "n_invalid",
                  "n_withheld", "end_reason", "experiments", "checkpoints", "future", "sessions")


def derive(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything a trace reports, recomputed from the hash-chained log alone."""
    d = Derivation()
    for e in entries:
        d.feed(e)
    return d.report()


# ------------------------------------------------------------------------------------------------ visible state
def agent_view(ledger: Ledger, asg: Assignment) -> dict[str, Any]:
    """The static, agent-visible part of an assignment (public ids only; what ``compile`` writes to ``agent/``).

    Keys: protocol, assignment_id, assignment_sha256, horizon, full_length, record (name, categories,
    validity_axis, evidence_tiers, review_quality_tiers, claim_axes, synthetic), initial_context
    (descriptors + recorded outcomes), candidates (descriptors), heldout_panel (descriptors).
    The future-decision experiments are *not* part of it: they are shown only after the campaign.
    """
    by_id = ledger.by_id()

    def desc(pub: str) -> dict[str, Any]:
        return by_id[asg.ledger_id(pub)].descriptors

    def outcome(pub: str) -> dict[str, Any]:
        o = by_id[asg.ledger_id(pub)].outcome
        return {"valid": o.valid, "category": o.category}

    return _plain({
        "protocol": PROTOCOL, "assignment_id": asg.assignment_id, "assignment_sha256": asg.sha256,
        "horizon": asg.horizon, "full_length": asg.full_length,
        "record": {"name": ledger.name, "categories": list(ledger.categories), "validity_axis": ledger.validity_axis,
                   "evidence_tiers": list(ledger.evidence_tiers),
                   "review_quality_tiers": list(ledger.review_quality_tiers), "claim_axes": list(CLAIM_AXES),
                   "synthetic": not bool(ledger.provenance.get("experimental", True))},
        "initial_context": [{"experiment_id": p, "descriptors": desc(p), "outcome": outcome(p)}
                            for p in asg.public("initial_context")],
        "candidates": [{"experiment_id": p, "descriptors": desc(p)} for p in asg.public("candidates")],
        "heldout_panel": [{"experiment_id": p, "descriptors": desc(p)} for p in asg.public("heldout")],
    })


def future_panel(ledger: Ledger, asg: Assignment) -> list[dict[str, Any]]:
    """Descriptors of the future-decision experiments (public ids), shown only after a campaign."""
    by_id = ledger.by_id()
    return _plain([{"experiment_id": p, "descriptors": by_id[asg.ledger_id(p)].descriptors}
                   for p in asg.public("future")])


class CampaignEnv:
    """One campaign branch on one frozen assignment.

    Parameters
    ----------
    ledger : Ledger
    assignment : Assignment
        Verified against the ledger (hash, roles and public ids) before anything runs.
    branch : str
        Label of the branch (``adaptive``, ``random_control``, ``no_evidence``) recorded in the log.
    evidence_enabled : bool
        False for the call-matched no-evidence control: the same budgets are shown and counted, but every
        evidence item and review is answered as missing (see module docstring).
    call_target : int, optional
        Exactly this many policy-action calls (the call-matched control passes the adaptive branch's count).
    max_calls : int, optional
        Cap on policy-action calls of an ordinary branch (default ``4 * sum(budgets) + 20``).
    max_consecutive_invalid : int
        Rejections in a row after which the campaign ends.
    policy : dict, optional
        Who acts (name, isolation method); recorded in the first log entry.
    run_id : str, optional
        Id of the run this branch belongs to (recorded in the first entry; binds the trace to its run manifest).
    wall_budget_s : float, optional
        Wall-clock budget of the whole campaign [s] (recorded; enforced by :mod:`mdbench.sdl.campaign`).
    """

    def __init__(self, ledger: Ledger, assignment: Assignment, *, branch: str = "adaptive",
                 evidence_enabled: bool = True, call_target: int | None = None, max_calls: int | None = None,
                 max_consecutive_invalid: int = 10, policy: dict[str, Any] | None = None, run_id: str = "",
                 wall_budget_s: float | None = None):
        check_against_ledger(assignment, ledger)
        self._ledger = ledger
        self._asg = assignment
        by_id = ledger.by_id()
        self._exp: dict[str, Experiment] = {p: by_id[i] for i, p in assignment.public_ids.items()}
        self.branch = branch
        b = assignment.budgets
        budgets = {"experiments": b.experiments, "evidence": b.evidence, "reviews": b.reviews}
        self.evidence_enabled = evidence_enabled
        if call_target is not None and call_target < 1:
            raise ValueError("call_target must be >= 1")
        self.call_target = call_target
        #: what the state shows as calls_max: the same in every branch
        self.visible_max_calls = max_calls if max_calls is not None else 4 * sum(budgets.values()) + 20
        self.max_calls = call_target if call_target is not None else self.visible_max_calls
        self.max_consecutive_invalid = max_consecutive_invalid
        self.log: list[dict[str, Any]] = []
        self.state = Derivation()
        self._candidates = assignment.public("candidates")
        self._panel = assignment.public("heldout")
        self._static_text = canonical_json(agent_view(ledger, assignment))
        self._append({"kind": "start", "branch": branch, "assignment_id": assignment.assignment_id,
                      "assignment_sha256": assignment.sha256, "budgets": budgets, "call_target": call_target,
                      "max_calls": self.max_calls, "evidence_enabled": evidence_enabled, "run_id": run_id,
                      "wall_budget_s": wall_budget_s, "policy": policy or {}})

    # --------------------------------------------------------------------------------------- read-only views
    @property
    def heldout_ids(self) -> list[str]:
        """Public ids of the held-out query panel."""
        return list(self._panel)

    @property
    def future_ids(self) -> list[str]:
        """Public ids of the future-decision experiments (never part of the visible state)."""
        return self._asg.public("future")

    @property
    def done(self) -> bool:
        return self.state.done

    @property
    def n_calls(self) -> int:
        return self.state.n_calls

    @property
    def remaining(self) -> dict[str, int]:
        return dict(self.state.remaining)

    @property
    def end_reason(self) -> str | None:
        return self.state.end_reason

    @property
    def traces(self) -> dict[str, dict[str, Any]]:
        """Selected experiments so far (public id → derived record; read-only use)."""
        return self.state.experiments

    def visible_state(self) -> dict[str, Any]:
        """A fresh JSON copy of everything the policy may see now (no outcome it has not inspected).

        The static part of :func:`agent_view` plus: phase (select | prior_forecast | investigate |
        update_forecast | done; ``heldout_forecast`` / ``future_forecast`` in evaluator calls),
        open_experiment, budgets, budgets_remaining, calls_used, calls_max, candidates (with a ``selected``
        flag), experiments (own forecasts, reveals, review forecasts), last_result. The same keys and the same
        budgets in every branch: nothing says which branch this is.
        """
        s = self.state
        state = json.loads(self._static_text)
        sel = set(s.experiments)
        for c in state["candidates"]:
            c["selected"] = c["experiment_id"] in sel
        state.update(_plain({
            "phase": s.phase(), "open_experiment": s.open, "budgets": s.budgets, "budgets_remaining": s.remaining,
            "calls_used": s.n_calls, "calls_max": self.visible_max_calls,
            "experiments": [
                {"experiment_id": x["experiment_id"], "order": x["order"], "closed": x["closed"],
                 "forecasts": [{"kind": f["kind"], "forecast": f["row"]} for f in x["forecasts"]],
                 "reveals": x["reveals"], "review_forecasts": x["review_forecasts"]}
                for x in sorted(s.experiments.values(), key=lambda x: x["order"])],
            "last_result": s.last,
        }))
        return state

    def evaluator_state(self, phase: str = "heldout_forecast") -> dict[str, Any]:
        """A copy of the visible state for an evaluator call (``phase`` says which call)."""
        st = self.visible_state()
        st["phase"] = phase
        return st

    def checkpoint_state(self, phase: str = "heldout_forecast") -> tuple[dict[str, Any], str]:
        """:meth:`evaluator_state` and the sha256 of its canonical JSON."""
        st = self.evaluator_state(phase)
        return st, sha256_json(st)

    # --------------------------------------------------------------------------------------------- the log
    def _append(self, body: dict[str, Any]) -> dict[str, Any]:
        prev = self.log[-1]["sha256"] if self.log else GENESIS
        entry = {"seq": len(self.log), **_plain(body), "prev_sha256": prev}
        entry["sha256"] = sha256_json(entry)
        self.log.append(entry)
        self.state.feed(entry)
        return entry

    def _reject(self, action: Any, message: str) -> StepResult:
        self._append({"kind": "action", "call": self.n_calls + 1, "action": _safe(action), "ok": False,
                      "message": message})
        res = StepResult(False, message)
        if self.state.consecutive_invalid >= self.max_consecutive_invalid:
            res = self._finish(f"{self.state.consecutive_invalid} invalid actions in a row", res)
        elif self.n_calls >= self.max_calls:
            res = self._finish(END_CALL_TARGET if self.call_target else END_CALL_LIMIT, res)
        return res

    def _accept(self, action: dict[str, Any], message: str, *, reveal: dict[str, Any] | None = None,
                row: dict[str, Any] | None = None, closed: str | None = None, effect: str | None = None,
                withheld: bool = False) -> None:
        body = {"kind": "action", "call": self.n_calls + 1, "action": action, "ok": True, "message": message,
                "reveal": reveal, "closed": closed}
        if withheld:
            body["withheld"] = True
        if row is not None:
            body["row"] = row
        if effect is not None:
            body["effect"] = effect
        self._append(body)

    def _finish(self, reason: str, res: StepResult) -> StepResult:
        closed = self.state.open
        self._append({"kind": "end", "reason": reason, "closed": closed})
        return StepResult(res.ok, res.message, closed or res.closed, True, res.reveal)

    def step(self, action: Any) -> StepResult:
        """Apply one policy action (see module docstring); returns a :class:`StepResult`."""
        if self.done:
            raise RuntimeError("campaign is over")
        if isinstance(action, InvalidReply):
            return self._reject({"invalid_reply": action.reason[:500]},
                                f"reply is not a valid action: {action.reason[:500]}")
        problem = data_problem(action)
        if problem:
            return self._reject({"invalid_reply": problem}, f"reply is not a valid action: {problem}")
        errors = list(_VALIDATOR.iter_errors(action)) if isinstance(action, dict) else []
        if not isinstance(action, dict) or errors:
            return self._reject(action, f"action does not match the action schema: {_schema_message(action)}")
        kind = action["action"]
        if self.state.phase() == "update_forecast" and kind != "submit_forecast":
            return self._reject(action, f"an evidence reveal on {self.state.open} requires an updated forecast "
                                        "(submit_forecast) before any other action")
        res = getattr(self, f"_do_{kind}")(action)
        if res.ok and not self.done:
            if res.done:
                res = self._finish(END_STOPPED, res)
            elif self.n_calls >= self.max_calls:
                res = self._finish(END_CALL_TARGET if self.call_target else END_CALL_LIMIT, res)
        return res

    def _do_select_experiment(self, a: dict[str, Any]) -> StepResult:
        eid = a["experiment_id"]
        if eid not in self._candidates:
            return self._reject(a, f"{eid} is not a candidate of this campaign")
        if eid in self.state.experiments:
            return self._reject(a, f"{eid} was already selected")
        if self.state.remaining["experiments"] <= 0:
            return self._reject(a, "experiment budget exhausted: stop")
        closed = self.state.open
        msg = f"selected {eid}; submit a prior forecast for it before any evidence"
        self._accept(a, msg, closed=closed)
        return StepResult(True, msg, closed)

    def _do_stop(self, a: dict[str, Any]) -> StepResult:
        if self.call_target is not None and self.n_calls + 1 < self.call_target:
            msg = "stop not accepted yet; continue (e.g. revise the open forecast or stop again)"
            self._accept(a, msg, effect="deferred_stop")
            return StepResult(True, msg)
        self._accept(a, "campaign stopped", closed=self.state.open)
        return StepResult(True, "campaign stopped", done=True)

    def _need_open(self, a: dict[str, Any]) -> str | None:
        eid = a["experiment_id"]
        if self.state.open is None:
            return "no experiment is open: select one first"
        if eid != self.state.open:
            return f"{eid} is not the open experiment ({self.state.open})"
        if not self.state.experiments[eid]["forecasts"]:
            return f"submit a prior forecast for {eid} before inspecting evidence or requesting review"
        return None

    def _do_inspect_evidence(self, a: dict[str, Any]) -> StepResult:
        err = self._need_open(a)
        if err:
            return self._reject(a, err)
        tier = a["tier"]
        if tier not in self._ledger.evidence_tiers:
            return self._reject(a, f"unknown evidence tier {tier}; tiers: {list(self._ledger.evidence_tiers)}")
        if self.state.remaining["evidence"] <= 0:
            return self._reject(a, "evidence budget exhausted")
        pub = self.state.open
        x = self.state.experiments[pub]
        used = sum(1 for r in x["reveals"] if r["kind"] == "evidence" and r["tier"] == tier)
        items = [it for it in self._exp[pub].evidence if it.tier == tier] if self.evidence_enabled else []
        if used < len(items) and items[used].payload is not None:
            it = items[used]
            reveal = {"kind": "evidence", "tier": tier, "evidence_id": f"{pub}:{tier}:{used}", "status": "revealed",
                      "payload": it.payload, "supports": list(it.supports)}
        else:
            reason = items[used].missing_reason if used < len(items) else None
            reveal = {"kind": "evidence", "tier": tier, "evidence_id": f"{pub}:{tier}:{used}", "status": "missing",
                      "missing_reason": reason or _MISSING_EVIDENCE, "supports": []}
        msg = f"evidence {reveal['status']}; submit an updated forecast for {pub}"
        self._accept(a, msg, reveal=reveal, withheld=not self.evidence_enabled)
        return StepResult(True, msg, reveal=_plain(reveal))

    def _do_request_review(self, a: dict[str, Any]) -> StepResult:
        err = self._need_open(a)
        if err:
            return self._reject(a, err)
        tiers = self._ledger.review_quality_tiers
        if tiers and a["forecast_quality_tier"] not in tiers:
            return self._reject(a, f"forecast_quality_tier must be one of {list(tiers)}")
        if self.state.remaining["reviews"] <= 0:
            return self._reject(a, "expert-review budget exhausted (or none in this record)")
        pub = self.state.open
        used = sum(1 for r in self.state.experiments[pub]["reveals"] if r["kind"] == "review")
        revs = self._exp[pub].reviews if self.evidence_enabled else []
        if used < len(revs) and revs[used].payload is not None:
            r = revs[used]
            reveal = {"kind": "review", "review_id": f"{pub}:review:{used}", "status": "revealed",
                      "quality_tier": r.quality_tier, "payload": r.payload, "supports": list(r.supports)}
        else:
            reveal = {"kind": "review", "review_id": f"{pub}:review:{used}", "status": "missing",
                      "missing_reason": _MISSING_REVIEW, "supports": []}
        msg = f"review {reveal['status']}; submit an updated forecast for {pub}"
        self._accept(a, msg, reveal=reveal, withheld=not self.evidence_enabled)
        return StepResult(True, msg, reveal=_plain(reveal))

    def _do_submit_forecast(self, a: dict[str, Any]) -> StepResult:
        if self.state.open is None:
            return self._reject(a, "no experiment is open: local forecasts are for the open experiment")
        try:
            row = validate_row(a["forecast"], self._ledger.categories, self._ledger.validity_axis, "forecast")
        except ForecastError as exc:
            return self._reject(a, str(exc))
        if row.experiment_id != self.state.open:
            return self._reject(a, f"forecast is for {row.experiment_id}, but the open experiment is "
                                   f"{self.state.open}")
        kind = self.state.forecast_kind()
        msg = f"{kind} forecast recorded for {self.state.open}"
        self._accept(a, msg, row=row.to_dict(self._ledger.categories))
        return StepResult(True, msg)

    def abort(self, reason: str) -> StepResult:
        """End the campaign from outside (e.g. the policy process failed); closes the open experiment."""
        return self._finish(f"{END_POLICY_ERROR}: {reason}", StepResult(False, reason))

    # ------------------------------------------------------------------------------------------ evaluator
    def _validated_rows(self, rows: Any, ids: list[str], label: str,
                        error: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
        if error is not None:
            log.warning("invalid evaluator-call forecast at %s: %s", label, error)
            return None, error
        problem = data_problem(rows)
        if problem:
            return None, f"forecast ({label}): reply is not data: {problem}"
        try:
            valid = validate_panel(rows, ids, self._ledger.categories, self._ledger.validity_axis,
                                   f"forecast ({label})")
        except ForecastError as exc:
            log.warning("invalid evaluator-call forecast at %s: %s", label, exc)
            return None, str(exc)
        return {k: v.to_dict(self._ledger.categories) for k, v in sorted(valid.items())}, None

    def record_checkpoint(self, label: str, rows: Any, state_sha256: str,
                          session: dict[str, Any] | None = None, error: str | None = None) -> dict[str, Any]:
        """Record an evaluator-call held-out forecast made from the saved state ``state_sha256``.

        The rows go into the hash chain; an invalid forecast is recorded as such (scored by the assignment's
        registered rule) with its real cause: ``error`` when the session failed (not JSON, timeout, exit …), else
        what validation found. Consumes no budget and changes no campaign state.
        """
        valid_rows, error = self._validated_rows(rows, self._panel, label, error)
        n_closed = sum(1 for x in self.state.experiments.values() if x["closed"])
        self._append({"kind": "checkpoint", "label": label, "n_closed": n_closed, "state_sha256": state_sha256,
                      "valid": valid_rows is not None, "rows": valid_rows, "error": error, "session": session or {}})
        return self.state.checkpoints[-1]

    def record_future(self, label: str, rows: Any, state_sha256: str,
                      session: dict[str, Any] | None = None, error: str | None = None) -> dict[str, Any]:
        """Record a future-decision forecast (the ``future`` role) made from a saved state."""
        valid_rows, error = self._validated_rows(rows, self.future_ids, label, error)
        self._append({"kind": "future", "label": label, "state_sha256": state_sha256, "valid": valid_rows is not None,
                      "rows": valid_rows, "error": error, "session": session or {}})
        return self.state.future[-1]

    def record_session(self, role: str, record: dict[str, Any]) -> None:
        """Record what a policy session did (isolation, exit status, stderr tail, tokens) in the chain."""
        self._append({"kind": "session", "role": role, "record": record})

    def schedule(self) -> list[dict[str, Any]]:
        """The evidence/review schedule of this branch: per selected experiment, in order, its reveal steps."""
        out = []
        for x in sorted(self.state.experiments.values(), key=lambda x: x["order"]):
            steps = [{"kind": r["kind"], "tier": r.get("tier")} for r in x["reveals"]]
            out.append({"experiment_id": x["experiment_id"], "steps": steps, "prior": bool(x["forecasts"])})
        return out

    def trace(self) -> dict[str, Any]:
        """Evaluator-side trace: the hash-chained log and everything derived from it."""
        return {"format": TRACE_FORMAT, **derive(self.log), "chain_head": self.log[-1]["sha256"],
                "log": _plain(self.log)}


#: Longest action logged verbatim [characters of canonical JSON]; longer ones are logged as a note.
MAX_LOGGED_ACTION_CHARS = 20_000


def _safe(action: Any) -> Any:
    """The action as logged: itself when it is canonical JSON of bounded size, else a note."""
    problem = data_problem(action)
    if problem:
        return {"invalid_reply": problem}
    try:
        text = canonical_json(action)
    except (TypeError, ValueError, RecursionError) as exc:
        return {"invalid_reply": f"not canonical JSON ({type(exc).__name__})"}
    if len(text) > MAX_LOGGED_ACTION_CHARS:
        return {"invalid_reply": f"action of {len(text)} characters (not logged)"}
    return _plain(action)


def _schema_message(action: Any) -> str:
    if not isinstance(action, dict):
        return f"expected a JSON object, got {type(action).__name__}"
    sub = _ACTIONS.get(action.get("action"))
    if sub is None:
        return f"'action' must be one of {list(_ACTIONS)}"
    errs = list(jsonschema.Draft202012Validator(sub).iter_errors(action))
    return "; ".join(e.message for e in errs[:3]) or "invalid"
