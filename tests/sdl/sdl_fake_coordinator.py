"""A scripted "model" behind the fake chat endpoint: rebuilds the state from the conversation (full state, then
deltas) and answers like a simple coordinator — for the LLM-adapter tests."""

from __future__ import annotations

import json
import threading

from scripted_policy import act, review_expectation, uniform

from mdbench.sdl.llm_policy import SYSTEM_PROMPT, apply_delta


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
            return json.dumps({"forecasts": [uniform(state, i) for i in body["experiment_ids"]]})
        if body["request"] == "review_expectation":
            return json.dumps(review_expectation(state))
        return "```json\n" + json.dumps(act(state)) + "\n```"
