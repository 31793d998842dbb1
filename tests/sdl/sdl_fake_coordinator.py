"""A scripted "model" behind the fake chat endpoint: rebuilds the state from the conversation (full state, then
deltas) and answers like a simple coordinator — for the LLM-adapter tests."""

from __future__ import annotations

import json
import threading

from mdbench.sdl.llm_policy import SYSTEM_PROMPT, apply_delta


def _uniform(state, eid):
    cats = state["record"]["categories"]
    k = len(cats)
    row = {"experiment_id": eid, "p_category": {c: 1.0 / k for c in cats}}
    if state["record"]["validity_axis"]:
        row["p_valid"] = k / (k + 1)
    for e in state["experiments"]:
        if e["experiment_id"] == eid:
            for r in e["reveals"]:
                cat = (r.get("payload") or {}).get("category")
                if r.get("status") == "revealed" and cat in cats:
                    row["p_category"] = {c: (0.97 if c == cat else 0.01) for c in cats}
    return row


class ScriptedModel:
    """Callable responder; ``garble`` = request numbers (1-based) answered with prose instead of JSON."""

    def __init__(self, garble: tuple[int, ...] = ()):
        self.garble = set(garble)
        self.n = 0
        self.states: list[dict] = []          # the state it rebuilt at each request
        self._lock = threading.Lock()

    def __call__(self, req: dict) -> str:
        msgs = req["messages"]
        assert msgs[0] == {"role": "system", "content": SYSTEM_PROMPT}
        state = None
        for m in msgs[1:]:
            if m["role"] != "user":
                continue
            body = json.loads(m["content"])
            state = body["campaign_state"] if "campaign_state" in body else apply_delta(state, body["state_delta"])
        with self._lock:
            self.n += 1
            n = self.n
            self.states.append(state)
        if n in self.garble:
            return "Let me think about which experiment is most informative here."
        if body["request"] == "forecast":
            return json.dumps({"forecasts": [_uniform(state, i) for i in body["experiment_ids"]]})
        if body["request"] == "review_expectation":
            tiers = state["record"]["review_quality_tiers"]
            return json.dumps({"forecast_changes_conclusion": 0.4, "forecast_quality_tier": tiers[0] if tiers else "x"})
        phase, eid, rem = state["phase"], state["open_experiment"], state["budgets_remaining"]
        if phase in ("prior_forecast", "update_forecast"):
            action = {"action": "submit_forecast", "forecast": _uniform(state, eid)}
        else:
            tr = next((e for e in state["experiments"] if e["experiment_id"] == eid), None)
            options = [c["experiment_id"] for c in state["candidates"] if not c["selected"]]
            if phase == "investigate" and rem["evidence"] > 0 and not tr["reveals"]:
                action = {"action": "inspect_evidence", "experiment_id": eid,
                          "tier": state["record"]["evidence_tiers"][0]}
            elif rem["experiments"] > 0 and options:
                action = {"action": "select_experiment", "experiment_id": options[0]}
            else:
                action = {"action": "stop"}
        return "```json\n" + json.dumps(action) + "\n```"
