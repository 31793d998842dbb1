"""A scripted external policy speaking the mdbench-sdl-policy/2 JSON-lines protocol (used by the tests).

Usage: python scripted_policy.py [--cheat] [--die-after N] [--crash-on-act]
(its ``act``/``uniform`` also drive the scripted model behind the fake chat endpoint, sdl_fake_coordinator.py)
  --cheat         first tries actions the environment must refuse (evidence before a prior, a held-out id,
                  an extra "reveal_outcome" key), then behaves.
  --die-after N   exit without replying after N requests.
  --crash-on-act  raise on the first "act" request (a coordinator that crashes on every branch).
"""

import json
import sys

cheat = "--cheat" in sys.argv
crash_on_act = "--crash-on-act" in sys.argv
die_after = int(sys.argv[sys.argv.index("--die-after") + 1]) if "--die-after" in sys.argv else None
tried: set[str] = set()


def uniform(state, eid):
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


def act(state):
    phase, eid, rem = state["phase"], state["open_experiment"], state["budgets_remaining"]
    if crash_on_act:
        raise RuntimeError("scripted policy: crashing on purpose")
    if cheat:
        for name, action in [
            ("early", {"action": "inspect_evidence", "experiment_id": eid or "", "tier": state["record"]["evidence_tiers"][0]}),
            ("heldout", {"action": "inspect_evidence", "experiment_id": state["heldout_panel"][0]["experiment_id"],
                         "tier": state["record"]["evidence_tiers"][0]}),
            ("extra", {"action": "select_experiment", "experiment_id": state["candidates"][0]["experiment_id"],
                       "reveal_outcome": True}),
        ]:
            if name not in tried and (name != "early" or phase == "prior_forecast"):
                tried.add(name)
                return action
    if phase in ("prior_forecast", "update_forecast"):
        return {"action": "submit_forecast", "forecast": uniform(state, eid)}
    if phase == "investigate":
        tr = next(e for e in state["experiments"] if e["experiment_id"] == eid)
        if rem["evidence"] > 0 and not tr["reveals"]:
            return {"action": "inspect_evidence", "experiment_id": eid, "tier": state["record"]["evidence_tiers"][0]}
    options = [c["experiment_id"] for c in state["candidates"] if not c["selected"]]
    if rem["experiments"] > 0 and options:
        return {"action": "select_experiment", "experiment_id": options[-1]}
    return {"action": "stop"}


def review_expectation(state):
    tiers = state["record"]["review_quality_tiers"]
    return {"forecast_changes_conclusion": 0.5, "forecast_quality_tier": tiers[0] if tiers else "unknown"}


def main():
    n = 0
    for line in sys.stdin:
        msg = json.loads(line)
        n += 1
        if die_after is not None and n > die_after:
            sys.stderr.write("scripted policy: dying on purpose\n")
            sys.exit(3)
        t = msg["type"]
        if t == "hello":
            reply = {"ok": True, "name": "scripted"}
        elif t == "act":
            reply = act(msg["state"])
        elif t == "forecast":
            reply = {"forecasts": [uniform(msg["state"], i) for i in msg["experiment_ids"]]}
        elif t == "review_expectation":
            reply = review_expectation(msg["state"])
        elif t == "bye":
            break
        else:
            reply = {"error": f"unknown request {t}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
