"""The campaign replay environment: information boundary, action protocol, budgets, hash-chained log.

The environment holds the ledger (evaluator-private: recorded outcomes, evidence payloads, reviews) and a
*policy-visible state* that only grows through the protocol. The policy only ever receives JSON copies of
that state (``json.loads(json.dumps(...))``), never a reference to the environment or the ledger.

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
* Every action and every evaluator checkpoint is appended to a sha256 hash-chained log.

After each closed experiment the driver (:mod:`mdbench.sdl.campaign`) asks the policy — in a separate
evaluator call on :meth:`CampaignEnv.checkpoint_state`, a hash-bound copy of the visible state — for
held-out forecasts; that call consumes nothing and changes no campaign state.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from mdbench.sdl.compiler import Assignment, check_against_ledger
from mdbench.sdl.ledger import CLAIM_AXES, Ledger, canonical_json, sha256_json
from mdbench.sdl.scoring import ForecastError, validate_panel, validate_row

log = logging.getLogger(__name__)

_PROB = {"type": "number", "minimum": 0, "maximum": 1}
_ROW = {"type": "object", "required": ["experiment_id", "p_category"], "additionalProperties": False,
        "properties": {"experiment_id": {"type": "string"}, "p_valid": _PROB,
                       "p_category": {"type": "object", "additionalProperties": _PROB}}}
#: JSON schema of one action (draft 2020-12). A copy is sent to external policies.
ACTION_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "mdbench SDL policy action",
    "oneOf": [
        {"type": "object", "additionalProperties": False, "required": ["action", "experiment_id"],
         "properties": {"action": {"const": "select_experiment"}, "experiment_id": {"type": "string"}}},
        {"type": "object", "additionalProperties": False, "required": ["action", "experiment_id", "tier"],
         "properties": {"action": {"const": "inspect_evidence"}, "experiment_id": {"type": "string"},
                        "tier": {"type": "string"}}},
        {"type": "object", "additionalProperties": False,
         "required": ["action", "experiment_id", "forecast_changes_conclusion", "forecast_quality_tier"],
         "properties": {"action": {"const": "request_review"}, "experiment_id": {"type": "string"},
                        "forecast_changes_conclusion": _PROB, "forecast_quality_tier": {"type": "string"}}},
        {"type": "object", "additionalProperties": False, "required": ["action", "forecast"],
         "properties": {"action": {"const": "submit_forecast"}, "forecast": _ROW}},
        {"type": "object", "additionalProperties": False, "required": ["action"],
         "properties": {"action": {"const": "stop"}}},
    ],
}
FORECAST_ROW_SCHEMA = _ROW
_VALIDATOR = jsonschema.Draft202012Validator(ACTION_SCHEMA)
GENESIS = "0" * 64


@dataclass
class StepResult:
    """What one action did: ``ok``, a message for the policy, the experiment it closed, whether it ended."""

    ok: bool
    message: str
    closed: str | None = None
    done: bool = False
    reveal: dict[str, Any] | None = None


@dataclass
class _ExpTrace:
    """Evaluator-side trace of one selected experiment."""

    experiment_id: str
    order: int
    forecasts: list[dict[str, Any]] = field(default_factory=list)   # {"kind", "row", "after_reveal", "call"}
    reveals: list[dict[str, Any]] = field(default_factory=list)
    review_forecasts: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False
    pending_update: bool = False


def _plain(obj: Any) -> Any:
    """A detached, JSON-only copy."""
    return json.loads(json.dumps(obj))


def verify_chain(entries: list[dict[str, Any]]) -> bool:
    """True when every log entry's ``sha256`` covers its content and links to the previous entry."""
    prev = GENESIS
    for e in entries:
        body = {k: v for k, v in e.items() if k != "sha256"}
        if body.get("prev_sha256") != prev or sha256_json(body) != e.get("sha256"):
            return False
        prev = e["sha256"]
    return True


class CampaignEnv:
    """One campaign branch on one frozen assignment.

    Parameters
    ----------
    ledger : Ledger
    assignment : Assignment
        Verified against the ledger (hash and roles) before anything runs.
    branch : str
        Label of the branch (``adaptive``, ``random_control``, ``no_evidence``) recorded in the log.
    evidence_enabled : bool
        False for the call-matched no-evidence control: evidence and review budgets are 0.
    max_calls : int, optional
        Cap on policy-action calls (the call-matched control passes the adaptive branch's count).
    max_consecutive_invalid : int
        Rejections in a row after which the campaign ends.
    """

    def __init__(self, ledger: Ledger, assignment: Assignment, *, branch: str = "adaptive",
                 evidence_enabled: bool = True, max_calls: int | None = None, max_consecutive_invalid: int = 10):
        check_against_ledger(assignment, ledger)
        if assignment.compute_sha256() != assignment.sha256:
            raise ValueError("assignment content does not match its frozen sha256")
        self._ledger = ledger
        self._by_id = ledger.by_id()
        self._asg = assignment
        self.branch = branch
        b = assignment.budgets
        self.budgets = {"experiments": b.experiments, "evidence": b.evidence if evidence_enabled else 0,
                        "reviews": b.reviews if evidence_enabled else 0}
        self.remaining = dict(self.budgets)
        self.max_calls = max_calls if max_calls is not None else 4 * sum(self.budgets.values()) + 20
        self.max_consecutive_invalid = max_consecutive_invalid
        self.n_calls = 0
        self.n_invalid = 0
        self._consecutive_invalid = 0
        self.done = False
        self.end_reason: str | None = None
        self.open: str | None = None
        self.traces: dict[str, _ExpTrace] = {}
        self.log: list[dict[str, Any]] = []
        self.checkpoints: list[dict[str, Any]] = []
        self._last: dict[str, Any] = {"ok": True, "message": "campaign started; submit actions"}
        self._candidates = list(assignment.roles["candidates"])
        self._panel = list(assignment.roles["heldout"])
        self._append({"kind": "start", "branch": branch, "assignment_id": assignment.assignment_id,
                      "assignment_sha256": assignment.sha256, "budgets": self.budgets})

    # ----------------------------------------------------------------------------------------- visible state
    @property
    def heldout_ids(self) -> list[str]:
        """Ids of the held-out query panel (visible to the policy)."""
        return list(self._panel)

    def _phase(self) -> str:
        if self.done:
            return "done"
        if self.open is None:
            return "select"
        t = self.traces[self.open]
        if t.pending_update:
            return "update_forecast"
        if not t.forecasts:
            return "prior_forecast"
        return "investigate"

    def _static(self) -> tuple[str, str]:
        """JSON text and sha256 of the part of the visible state that never changes in a campaign."""
        if getattr(self, "_static_cache", None) is None:
            L = self._ledger
            ctx = [{"experiment_id": i, "descriptors": self._by_id[i].descriptors,
                    "outcome": {"valid": self._by_id[i].outcome.valid,
                                "category": self._by_id[i].outcome.category}}
                   for i in self._asg.roles["initial_context"]]
            static = {
                "protocol": "mdbench-sdl-policy/1",
                "assignment_id": self._asg.assignment_id, "assignment_sha256": self._asg.sha256,
                "record": {"name": L.name, "categories": list(L.categories), "validity_axis": L.validity_axis,
                           "evidence_tiers": list(L.evidence_tiers),
                           "review_quality_tiers": list(L.review_quality_tiers), "claim_axes": list(CLAIM_AXES)},
                "budgets": dict(self.budgets), "calls_max": self.max_calls,
                "initial_context": ctx,
                "heldout_panel": [{"experiment_id": i, "descriptors": self._by_id[i].descriptors}
                                  for i in self._panel],
                "candidate_descriptors": {i: self._by_id[i].descriptors for i in self._candidates},
            }
            text = canonical_json(static)
            self._static_cache = (text, sha256_json(static))
        return self._static_cache

    def _dynamic(self) -> dict[str, Any]:
        return _plain({
            "phase": self._phase(), "open_experiment": self.open,
            "budgets_remaining": dict(self.remaining), "calls_used": self.n_calls,
            "selected": [t.experiment_id for t in sorted(self.traces.values(), key=lambda t: t.order)],
            "experiments": [
                {"experiment_id": t.experiment_id, "order": t.order, "closed": t.closed,
                 "forecasts": [{"kind": f["kind"], "forecast": f["row"]} for f in t.forecasts],
                 "reveals": t.reveals, "review_forecasts": t.review_forecasts}
                for t in sorted(self.traces.values(), key=lambda t: t.order)],
            "last_result": self._last,
        })

    def visible_state(self) -> dict[str, Any]:
        """A fresh JSON copy of everything the policy may see now (no outcome it has not inspected).

        Keys: protocol, assignment_id, assignment_sha256, record (categories, validity_axis, evidence_tiers,
        review_quality_tiers, claim_axes), budgets, budgets_remaining, calls_used, calls_max, phase
        (select | prior_forecast | investigate | update_forecast | done | heldout_forecast), open_experiment,
        initial_context (descriptors + outcomes), candidates (descriptors + selected flag), heldout_panel
        (descriptors), experiments (own forecasts, reveals, review forecasts), last_result.
        """
        text, _ = self._static()
        state = json.loads(text)
        dyn = self._dynamic()
        cand_desc = state.pop("candidate_descriptors")
        sel = set(dyn.pop("selected"))
        state["candidates"] = [{"experiment_id": i, "descriptors": cand_desc[i], "selected": i in sel}
                               for i in self._candidates]
        state.update(dyn)
        return state

    def checkpoint_state(self) -> tuple[dict[str, Any], str]:
        """A hash-bound copy of the visible state for an evaluator call: ``(state, sha256)``.

        The hash covers the static part's sha256 and the canonical JSON of the dynamic part.
        """
        st = self.visible_state()
        st["phase"] = "heldout_forecast"
        dyn = self._dynamic()
        dyn["phase"] = "heldout_forecast"
        return st, sha256_json({"static_sha256": self._static()[1], "dynamic": dyn})

    # --------------------------------------------------------------------------------------------- actions
    def _append(self, body: dict[str, Any]) -> dict[str, Any]:
        prev = self.log[-1]["sha256"] if self.log else GENESIS
        entry = {"seq": len(self.log), **_plain(body), "prev_sha256": prev}
        entry["sha256"] = sha256_json(entry)
        self.log.append(entry)
        return entry

    def _reject(self, action: Any, message: str) -> StepResult:
        self.n_invalid += 1
        self._consecutive_invalid += 1
        self._last = {"ok": False, "message": message}
        self._append({"kind": "action", "call": self.n_calls, "action": _safe(action), "ok": False,
                      "message": message})
        res = StepResult(False, message)
        if self._consecutive_invalid >= self.max_consecutive_invalid:
            res = self._finish(f"{self._consecutive_invalid} invalid actions in a row", res)
        elif self.n_calls >= self.max_calls:
            res = self._finish("call limit reached", res)
        return res

    def _finish(self, reason: str, res: StepResult) -> StepResult:
        closed = self._close_open()
        self.done = True
        self.end_reason = reason
        self._append({"kind": "end", "reason": reason, "closed": closed})
        return StepResult(res.ok, res.message, closed or res.closed, True, res.reveal)

    def _close_open(self) -> str | None:
        if self.open is None:
            return None
        t = self.traces[self.open]
        t.closed = True
        t.pending_update = False
        closed, self.open = self.open, None
        return closed

    def step(self, action: Any) -> StepResult:
        """Apply one policy action (see module docstring); returns a :class:`StepResult`."""
        if self.done:
            raise RuntimeError("campaign is over")
        self.n_calls += 1
        errors = sorted(_VALIDATOR.iter_errors(action), key=lambda e: e.path) if isinstance(action, dict) else []
        if not isinstance(action, dict) or errors:
            detail = _schema_message(action)
            return self._reject(action, f"action does not match the action schema: {detail}")
        kind = action["action"]
        phase = self._phase()
        if phase == "update_forecast" and kind != "submit_forecast":
            return self._reject(action, f"an evidence reveal on {self.open} requires an updated forecast "
                                        "(submit_forecast) before any other action")
        handler = getattr(self, f"_do_{kind}")
        res = handler(action)
        if res.ok:
            self._consecutive_invalid = 0
            self._last = {"ok": True, "message": res.message, **({"reveal": res.reveal} if res.reveal else {})}
            self._append({"kind": "action", "call": self.n_calls, "action": action, "ok": True,
                          "message": res.message, "reveal": res.reveal, "closed": res.closed})
            if res.done:
                res = self._finish("policy stopped", res)
            elif self.n_calls >= self.max_calls:
                res = self._finish("call limit reached", res)
        return res

    def _do_select_experiment(self, a: dict[str, Any]) -> StepResult:
        eid = a["experiment_id"]
        if eid not in self._candidates:
            return self._reject(a, f"{eid} is not a candidate of this campaign")
        if eid in self.traces:
            return self._reject(a, f"{eid} was already selected")
        if self.remaining["experiments"] <= 0:
            return self._reject(a, "experiment budget exhausted: stop")
        closed = self._close_open()
        self.remaining["experiments"] -= 1
        self.traces[eid] = _ExpTrace(eid, len(self.traces))
        self.open = eid
        return StepResult(True, f"selected {eid}; submit a prior forecast for it before any evidence", closed)

    def _do_stop(self, a: dict[str, Any]) -> StepResult:
        return StepResult(True, "campaign stopped", done=True)

    def _need_open(self, a: dict[str, Any]) -> str | None:
        eid = a["experiment_id"]
        if self.open is None:
            return "no experiment is open: select one first"
        if eid != self.open:
            return f"{eid} is not the open experiment ({self.open})"
        if not self.traces[eid].forecasts:
            return f"submit a prior forecast for {eid} before inspecting evidence or requesting review"
        return None

    def _do_inspect_evidence(self, a: dict[str, Any]) -> StepResult:
        err = self._need_open(a)
        if err:
            return self._reject(a, err)
        tier = a["tier"]
        if tier not in self._ledger.evidence_tiers:
            return self._reject(a, f"unknown evidence tier {tier}; tiers: {list(self._ledger.evidence_tiers)}")
        if self.remaining["evidence"] <= 0:
            return self._reject(a, "evidence budget exhausted")
        self.remaining["evidence"] -= 1
        t = self.traces[self.open]
        used = sum(1 for r in t.reveals if r["kind"] == "evidence" and r["tier"] == tier)
        items = [x for x in self._by_id[self.open].evidence if x.tier == tier]
        if used < len(items) and items[used].payload is not None:
            x = items[used]
            reveal = {"kind": "evidence", "tier": tier, "evidence_id": x.evidence_id, "status": "revealed",
                      "payload_ref": x.payload_ref, "payload": x.payload, "supports": list(x.supports)}
        else:
            reason = items[used].missing_reason if used < len(items) else None
            reveal = {"kind": "evidence", "tier": tier, "status": "missing",
                      "missing_reason": reason or "no further evidence of this tier recorded", "supports": []}
        t.reveals.append(reveal)
        t.pending_update = True
        return StepResult(True, f"evidence {reveal['status']}; submit an updated forecast for {self.open}",
                          reveal=reveal)

    def _do_request_review(self, a: dict[str, Any]) -> StepResult:
        err = self._need_open(a)
        if err:
            return self._reject(a, err)
        tiers = self._ledger.review_quality_tiers
        if tiers and a["forecast_quality_tier"] not in tiers:
            return self._reject(a, f"forecast_quality_tier must be one of {list(tiers)}")
        if self.remaining["reviews"] <= 0:
            return self._reject(a, "expert-review budget exhausted (or none in this record)")
        self.remaining["reviews"] -= 1
        t = self.traces[self.open]
        rf = {"forecast_changes_conclusion": a["forecast_changes_conclusion"],
              "forecast_quality_tier": a["forecast_quality_tier"], "before_reveal": len(t.reveals),
              "prior_forecast_index": len(t.forecasts) - 1}
        t.review_forecasts.append(rf)
        used = sum(1 for r in t.reveals if r["kind"] == "review")
        revs = self._by_id[self.open].reviews
        if used < len(revs) and revs[used].payload is not None:
            r = revs[used]
            reveal = {"kind": "review", "review_id": r.review_id, "status": "revealed",
                      "quality_tier": r.quality_tier, "payload": r.payload, "supports": list(r.supports)}
        else:
            reveal = {"kind": "review", "status": "missing",
                      "missing_reason": "no expert review recorded for this experiment", "supports": []}
        t.reveals.append(reveal)
        t.pending_update = True
        return StepResult(True, f"review {reveal['status']}; submit an updated forecast for {self.open}",
                          reveal=reveal)

    def _do_submit_forecast(self, a: dict[str, Any]) -> StepResult:
        if self.open is None:
            return self._reject(a, "no experiment is open: local forecasts are for the open experiment")
        try:
            row = validate_row(a["forecast"], self._ledger.categories, self._ledger.validity_axis, "forecast")
        except ForecastError as exc:
            return self._reject(a, str(exc))
        if row.experiment_id != self.open:
            return self._reject(a, f"forecast is for {row.experiment_id}, but the open experiment is {self.open}")
        t = self.traces[self.open]
        kind = "prior" if not t.forecasts else ("update" if t.pending_update else "revision")
        t.forecasts.append({"kind": kind, "row": row.to_dict(self._ledger.categories),
                            "after_reveal": len(t.reveals), "call": self.n_calls})
        t.pending_update = False
        return StepResult(True, f"{kind} forecast recorded for {self.open}")

    def abort(self, reason: str) -> StepResult:
        """End the campaign from outside (e.g. the policy process failed); closes the open experiment."""
        return self._finish(reason, StepResult(False, reason))

    # ------------------------------------------------------------------------------------------ evaluator
    def record_checkpoint(self, label: str, rows: Any, state_sha256: str) -> dict[str, Any]:
        """Record an evaluator-call held-out forecast (validated; invalid → flagged, scored by carry-forward)."""
        try:
            valid = validate_panel(rows, self._panel, self._ledger.categories, self._ledger.validity_axis,
                                   f"held-out forecast ({label})")
            cp = {"label": label, "n_closed": sum(t.closed for t in self.traces.values()), "valid": True,
                  "rows": {k: v.to_dict(self._ledger.categories) for k, v in valid.items()}, "error": None}
        except ForecastError as exc:
            log.warning("invalid held-out forecast at %s: %s", label, exc)
            cp = {"label": label, "n_closed": sum(t.closed for t in self.traces.values()), "valid": False,
                  "rows": None, "error": str(exc)}
        cp["state_sha256"] = state_sha256
        self.checkpoints.append(cp)
        self._append({"kind": "evaluator_checkpoint", "label": label, "state_sha256": state_sha256,
                      "valid": cp["valid"], "rows_sha256": sha256_json(cp["rows"]) if cp["rows"] else None})
        return cp

    def schedule(self) -> list[dict[str, Any]]:
        """The evidence/review schedule of this branch: per selected experiment, in order, its reveal steps."""
        out = []
        for t in sorted(self.traces.values(), key=lambda t: t.order):
            steps = [{"kind": r["kind"], "tier": r.get("tier")} for r in t.reveals]
            out.append({"experiment_id": t.experiment_id, "steps": steps, "prior": bool(t.forecasts)})
        return out

    def trace(self) -> dict[str, Any]:
        """Evaluator-side trace: per-experiment forecasts/reveals, checkpoints, log, counters."""
        return _plain({
            "branch": self.branch, "assignment_id": self._asg.assignment_id, "assignment_sha256": self._asg.sha256,
            "budgets": self.budgets, "remaining": self.remaining, "n_calls": self.n_calls,
            "max_calls": self.max_calls, "n_invalid": self.n_invalid, "end_reason": self.end_reason,
            "experiments": [{"experiment_id": t.experiment_id, "order": t.order, "closed": t.closed,
                             "forecasts": t.forecasts, "reveals": t.reveals,
                             "review_forecasts": t.review_forecasts}
                            for t in sorted(self.traces.values(), key=lambda t: t.order)],
            "checkpoints": self.checkpoints, "log": self.log,
        })


def _safe(action: Any) -> Any:
    try:
        return _plain(action)
    except (TypeError, ValueError):
        return repr(action)[:500]


def _schema_message(action: Any) -> str:
    if not isinstance(action, dict):
        return f"expected a JSON object, got {type(action).__name__}"
    kind = action.get("action")
    for sub in ACTION_SCHEMA["oneOf"]:
        if sub["properties"]["action"]["const"] == kind:
            errs = list(jsonschema.Draft202012Validator(sub).iter_errors(action))
            return "; ".join(e.message for e in errs[:3]) or "invalid"
    names = [s["properties"]["action"]["const"] for s in ACTION_SCHEMA["oneOf"]]
    return f"'action' must be one of {names}"
