import json, os
import numpy as np
rng = np.random.default_rng(int(os.environ.get("ARENA_SEED", "41")))
os.makedirs("run_record", exist_ok=True)
att, ev, i = [], [], 0
parents = {}
for case in ("DE", "LHCE"):
    prev = None
    for stage, steps, dt in (("em", 5000, 0.0), ("equil", 1_000_000, 0.002), ("prod", 10_000_000, 0.002)):
        i += 1
        aid = f"A{i:04d}"
        done = steps
        att.append({"id": aid, "case": case, "stage": stage, "parent": prev, "planned_steps": steps,
                    "completed_steps": done, "dt_ps": dt, "ns_charged": done * dt / 1000.0, "status": "completed"})
        prev = aid
    i += 1   # an extension of production
    att.append({"id": f"A{i:04d}", "case": case, "stage": "prod", "parent": prev, "planned_steps": 5_000_000,
                "completed_steps": 2_000_000, "dt_ps": 0.002, "ns_charged": 4.0, "status": "interrupted"})
kind = ["ns_charged", "parent", "state", "event"][int(rng.integers(0, 4))]
victim = att[int(rng.integers(1, len(att)))]
if kind == "ns_charged":
    victim["ns_charged"] = round(victim["ns_charged"] * 2 + 0.5, 3)
elif kind == "parent":
    other = [a for a in att if a["case"] != victim["case"]]
    victim["parent"] = other[0]["id"]
states = {c: {s: {"state": "valid", "reason": "gate passed"} for s in ("em", "equil", "prod")} for c in ("DE", "LHCE")}
if kind == "state":
    states["LHCE"]["prod"] = {"state": "valid", "reason": "gate passed"}
    for a in att:
        if a["case"] == "LHCE" and a["stage"] == "prod":
            a["status"] = "failed"
for n, a in enumerate(att, start=1):
    ev.append({"id": n, "time_utc": f"2026-11-0{1 + n // 6}T{n % 24:02d}:00:00Z", "type": "attempt_completed", "payload": {"attempt": a["id"]}})
truth = {"file": "attempts.jsonl", "record_id": victim["id"], "field": kind}
if kind == "state":
    truth = {"file": "stage_states.json", "record_id": "LHCE/prod", "field": "state"}
if kind == "event":
    k = int(rng.integers(2, len(ev) - 1))
    ev[k]["id"] = ev[k - 2]["id"]
    truth = {"file": "events.jsonl", "record_id": str(ev[k]["id"]), "field": "id"}
with open("run_record/attempts.jsonl", "w") as fh:
    fh.writelines(json.dumps(a) + "\n" for a in att)
with open("run_record/events.jsonl", "w") as fh:
    fh.writelines(json.dumps(e) + "\n" for e in ev)
json.dump(states, open("run_record/stage_states.json", "w"), indent=2)
# what was planted, for the verifier only (the Dockerfile makes .grader/ root-only: the agent user cannot read it)
os.makedirs(".grader", exist_ok=True)
json.dump({**truth, "kind": kind}, open(".grader/planted.json", "w"))
