"""An LLM coordinator: the SDL policy protocol over an OpenAI-compatible chat endpoint (``--policy-llm``).

Conversation structure after Dynamical-SDL-1 (Barnes 2026, appendix "Benchmark-Controlled System Prompt"):
the static system prompt :data:`SYSTEM_PROMPT` (the paper's, verbatim), then one user turn per policy call
carrying the current campaign phase, phase-specific requirements (what the phase asks for, which ids and
tiers are allowed), the exact permitted-action JSON schema, and the policy-visible state. The state is sent
*once in full* (the first turn of a session) and afterwards as a *delta* (:func:`state_delta`): the keys whose
values changed, the candidates newly selected, the experiment records that changed. The chat API is
stateless, so each request carries the conversation so far — one full copy of the (up to ~356 kB) state plus
small deltas, instead of a full copy per turn; the stable prefix also suits provider prompt caching.
:func:`apply_delta` reconstructs the state from the turns (tested to be exact).

The model answers each turn with one JSON object: an action, ``{"forecasts": [rows]}`` or the pre-review
forecasts. Replies are data: the JSON is taken from the whole text, a fenced block or the outermost ``{…}``
and parsed by the one reply parser (:func:`mdbench.sdl.external.parse_reply`: size, depth and integer caps,
finite numbers only). An action reply that yields no acceptable JSON becomes an
:class:`~mdbench.sdl.environment.InvalidReply` with the reason, which the environment rejects like any
invalid action (the model sees the rejection in the next turn's ``last_result``); such a forecast reply raises
:class:`LLMReplyError` with the reason (the evaluator call is recorded as an invalid forecast with it). Endpoint failures after
the client's retries raise :class:`mdbench.llm.client.EndpointError` and end the branch (did not finish).

Isolation: the model is a remote process that sees only the messages this adapter sends (the policy-visible
state); the adapter is shipped code running in the evaluator. Each session (branch or evaluator call) is a
fresh conversation; its token and cost accounting goes into the trace.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from mdbench.llm.client import ChatClient, Usage
from mdbench.sdl.environment import FORECAST_ROW_SCHEMA, InvalidReply, permitted_action_schema
from mdbench.sdl.external import ReplyRefused, parse_reply

#: The static system prompt shared by all systems in Dynamical-SDL-1 (Barnes 2026, appendix), verbatim.
SYSTEM_PROMPT = (
    "You are the policy in an experimentally grounded materials-science campaign. Exercise scientific judgment by "
    "selecting experiments, acquiring and interpreting evidence, revising scientific state, and deciding when to "
    "stop or escalate under fixed budgets. Reaction categories are ledger annotations and must remain separate from "
    "target-phase presence, phase interpretation, and refinement adequacy. Evidence sufficiency is claim-scoped: a "
    "numerical fit alone does not establish phase identity or refinement adequacy. Use only policy-visible state. "
    "Return one action that exactly satisfies the supplied JSON schema. Never invent evidence, identifiers, "
    "measurements, or expert judgments.")

PHASE_REQUIREMENTS = {
    "select": "Select the next candidate experiment (an unselected id from `candidates`) or stop. Selecting an "
              "experiment reveals nothing.",
    "prior_forecast": "Submit the prior forecast for the open experiment before any evidence or review.",
    "investigate": "For the open experiment: inspect one evidence item of a tier (uses one evidence inspection), "
                   "request an expert review (first forecast whether it will change your conclusion and which "
                   "quality tier it will have; uses one review), revise its forecast, select the next "
                   "experiment, or stop.",
    "update_forecast": "Evidence or a review was just revealed: submit the updated forecast for the open experiment.",
    "done": "The campaign is over.",
}
_FORECAST_REPLY = {"type": "object", "required": ["forecasts"], "additionalProperties": False,
                   "properties": {"forecasts": {"type": "array", "items": FORECAST_ROW_SCHEMA}}}
_REVIEW_REPLY = {"type": "object", "required": ["forecast_changes_conclusion", "forecast_quality_tier"],
                 "properties": {"forecast_changes_conclusion": {"type": "number", "minimum": 0, "maximum": 1},
                                "forecast_quality_tier": {"type": "string"}}}


class LLMReplyError(ReplyRefused):
    """The model's reply to a forecast or review-expectation request holds no usable JSON."""


def extract_reply(text: Any, request: str) -> Any:
    """The JSON value of a model reply — the whole text, a fenced ```json block or the outermost ``{…}`` —
    parsed by :func:`mdbench.sdl.external.parse_reply`. Raises :class:`LLMReplyError` with the reason."""
    if not isinstance(text, str):
        raise LLMReplyError(request, f"reply is not text ({type(text).__name__})")
    t = text.strip()
    candidates = [t]
    fence = re.search(r"```(?:json)?\s*(.*?)```", t, re.S)
    if fence:
        candidates.append(fence.group(1))
    i, j = t.find("{"), t.rfind("}")
    if 0 <= i < j:
        candidates.append(t[i:j + 1])
    reasons = []
    for c in candidates:
        try:
            return parse_reply(c, request)
        except ReplyRefused as exc:
            reasons.append(exc.reason)
    informative = [r for r in reasons if not r.startswith("not_json")]
    raise LLMReplyError(request, (informative or reasons or ["empty reply"])[0])


# ------------------------------------------------------------------------------------------- state deltas
def state_delta(prev: dict[str, Any], cur: dict[str, Any]) -> dict[str, Any]:
    """What changed from ``prev`` to ``cur`` (visible states of one campaign); see :func:`apply_delta`."""
    delta: dict[str, Any] = {"set": {}, "removed": sorted(set(prev) - set(cur))}
    for k, v in cur.items():
        if k in ("candidates", "experiments") or prev.get(k) == v:
            continue
        delta["set"][k] = v
    pc = {c["experiment_id"]: c for c in prev.get("candidates", [])}
    cc = cur.get("candidates", [])
    if [c["experiment_id"] for c in cc] == list(pc) and all(
            {**pc[c["experiment_id"]], "selected": c["selected"]} == c for c in cc):
        delta["candidates_now_selected"] = [c["experiment_id"] for c in cc
                                            if c["selected"] and not pc[c["experiment_id"]]["selected"]]
    else:
        delta["set"]["candidates"] = cc
    pe = {e["experiment_id"]: e for e in prev.get("experiments", [])}
    delta["experiments_changed"] = [e for e in cur.get("experiments", []) if pe.get(e["experiment_id"]) != e]
    return delta


def apply_delta(prev: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """The state after ``delta`` (inverse of :func:`state_delta`: ``apply_delta(a, state_delta(a, b)) == b``)."""
    cur = json.loads(json.dumps(prev))
    for k in delta.get("removed", []):
        cur.pop(k, None)
    cur.update(json.loads(json.dumps(delta.get("set", {}))))
    if "candidates_now_selected" in delta:
        now = set(delta["candidates_now_selected"])
        for c in cur.get("candidates", []):
            c["selected"] = c["selected"] or c["experiment_id"] in now
    exps = {e["experiment_id"]: e for e in cur.get("experiments", [])}
    for e in delta.get("experiments_changed", []):
        exps[e["experiment_id"]] = e
    if "experiments" in cur or exps:
        cur["experiments"] = sorted(exps.values(), key=lambda e: e["order"])
    return cur


def _allowed(state: dict[str, Any]) -> dict[str, Any]:
    """Phase-specific provenance requirements: which ids and tiers an answer may name."""
    phase = state["phase"]
    if phase == "select":
        return {"experiment_ids": [c["experiment_id"] for c in state["candidates"] if not c["selected"]]}
    if phase in ("prior_forecast", "update_forecast", "investigate"):
        out: dict[str, Any] = {"open_experiment": state["open_experiment"],
                               "evidence_tiers": state["record"]["evidence_tiers"]}
        if state["record"]["review_quality_tiers"]:
            out["review_quality_tiers"] = state["record"]["review_quality_tiers"]
        if phase == "investigate":
            out["next_candidates"] = [c["experiment_id"] for c in state["candidates"] if not c["selected"]]
        return out
    return {}


class LLMPolicy:
    """A coordinator behind an OpenAI-compatible endpoint (see module docstring). One instance = one session."""

    def __init__(self, client: ChatClient, name: str | None = None):
        self.client = client
        self.name = name or client.model
        self.usage = Usage()
        self.messages: list[dict[str, Any]] = []
        self._last_state: dict[str, Any] | None = None
        self.session = ""
        self.n_turns = 0
        self.payload_chars: list[int] = []

    def reset(self, seed: int) -> None:
        """A fresh conversation (nothing carried over from another session)."""
        self.seed = seed
        self.messages = [{"role": "system", "content": SYSTEM_PROMPT}]
        self._last_state = None
        self.session = f"{self.name}:{uuid.uuid4().hex[:12]}"
        self.n_turns = 0
        self.payload_chars = []

    def _turn(self, state: dict[str, Any], request: dict[str, Any]) -> str:
        if self._last_state is None:
            body = {**request, "campaign_state": state,
                    "note": "Later turns send only what changed in the state (state_delta)."}
        else:
            body = {**request, "state_delta": state_delta(self._last_state, state)}
        self._last_state = state
        content = json.dumps(body, separators=(",", ":"))
        self.payload_chars.append(len(content))
        log_from = 0 if len(self.messages) == 1 else len(self.messages) - 1   # the reply before, and this turn
        self.messages.append({"role": "user", "content": content})
        res = self.client.chat(self.messages, session=self.session, log_from=log_from)
        self.usage += res.usage
        self.n_turns += 1
        self.messages.append({"role": "assistant", "content": res.text})
        return res.text

    def act(self, state: dict[str, Any]) -> Any:
        """One action; a reply without JSON goes to the environment as-is (and is rejected there)."""
        phase = state["phase"]
        text = self._turn(state, {"request": "action", "phase": phase, "requirements": PHASE_REQUIREMENTS[phase],
                                  "allowed": _allowed(state), "permitted_action_schema": permitted_action_schema(phase)})
        try:
            return extract_reply(text, "act")
        except LLMReplyError as exc:
            return InvalidReply(exc.reason)

    def forecast(self, state: dict[str, Any], experiment_ids: list[str]) -> list[dict[str, Any]]:
        """Forecast rows for ``experiment_ids`` (held-out checkpoint, future decision or the open experiment)."""
        purpose = {"heldout_forecast": "held-out query panel checkpoint (evaluator call: consumes nothing)",
                   "future_forecast": "future decisions (evaluator call: consumes nothing)"}.get(
            state["phase"], "local forecast of the open experiment")
        text = self._turn(state, {"request": "forecast", "phase": state["phase"], "purpose": purpose,
                                  "experiment_ids": list(experiment_ids),
                                  "requirements": "Return one row per listed id: p_valid (when the record has a "
                                                  "validity axis) and p_category over every category.",
                                  "reply_schema": _FORECAST_REPLY})
        reply = extract_reply(text, "forecast")
        if not isinstance(reply, dict) or not isinstance(reply.get("forecasts"), list):
            raise LLMReplyError("forecast", "expected {\"forecasts\": [rows]}")
        return reply["forecasts"]

    def review_expectation(self, state: dict[str, Any], experiment_id: str) -> dict[str, Any]:
        """The forecasts recorded before an expert review is revealed."""
        text = self._turn(state, {"request": "review_expectation", "phase": state["phase"],
                                  "experiment_id": experiment_id, "allowed": _allowed(state),
                                  "reply_schema": _REVIEW_REPLY})
        try:
            reply = extract_reply(text, "review_expectation")
        except LLMReplyError:
            reply = None
        if not isinstance(reply, dict):
            reply = {}         # None values: the request_review action is rejected by the environment
        return {k: reply.get(k) for k in ("forecast_changes_conclusion", "forecast_quality_tier")}

    def close(self) -> None:
        """Nothing to release (the endpoint is stateless)."""

    def session_record(self) -> dict[str, Any]:
        """Name, isolation (remote model behind this adapter), usage and payload sizes of the session."""
        return {"name": self.name, "session": self.session,
                "isolation": {"method": "llm_endpoint", **self.client.describe(),
                              "boundary": "the model sees only the chat messages this adapter sends"},
                "usage": self.usage.to_dict(), "n_turns": self.n_turns, "payload_chars": self.payload_chars}
