import json
from pathlib import Path
def load_jsonl(p):
    return [json.loads(l) for l in Path(p).read_text().splitlines() if l.strip()]
def find_errors(rr):
    """Consistency rules of the run record; returns a list of (file, record_id, field)."""
    att = {a["id"]: a for a in load_jsonl(rr / "attempts.jsonl")}
    errs = []
    for a in att.values():
        if abs(a["ns_charged"] - a["completed_steps"] * a["dt_ps"] / 1000.0) > 1e-9:
            errs.append(("attempts.jsonl", a["id"], "ns_charged"))
        if a["completed_steps"] > a["planned_steps"]:
            errs.append(("attempts.jsonl", a["id"], "completed_steps"))
        if a.get("parent"):
            p = att.get(a["parent"])
            if p is None or p["case"] != a["case"]:
                errs.append(("attempts.jsonl", a["id"], "parent"))
    states = json.loads((rr / "stage_states.json").read_text())
    for case, stages in states.items():
        for stage, st in stages.items():
            ok = [a for a in att.values() if a["case"] == case and a["stage"] == stage and a["status"] == "completed"]
            if st["state"] == "valid" and not ok:
                errs.append(("stage_states.json", f"{case}/{stage}", "state"))
    ev = load_jsonl(rr / "events.jsonl")
    for prev, cur in zip(ev, ev[1:]):
        if cur["id"] <= prev["id"]:
            errs.append(("events.jsonl", str(cur["id"]), "id"))
    return errs

import os
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
errs = find_errors(app / "run_record")
assert len(errs) == 1, errs
f, rid, field = errs[0]
(app / "output").mkdir(exist_ok=True)
(app / "output" / "finding.json").write_text(json.dumps(
    {"file": f, "record_id": rid, "field": field, "explanation": f"{f} {rid}: {field} violates the stated convention"}, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("Checked every record against every stated convention with a script: ns_charged, completed <= planned "
         "steps, parent of the same case, a valid stage needs a completed attempt, strictly increasing event ids.",
         call=("python", {"code": "find_errors(run_record)"}), result=errs)
impact = {"ns_charged": "the budget is mis-charged", "completed_steps": "more steps are charged than were planned",
          "parent": "the lineage of the segments is broken", "state": "an invalid stage is claimed valid",
          "id": "the event order can no longer be trusted"}[field]
rec.step(f"The single violation is {f} {rid} ({field}); consequence: {impact}.")
rec.save()
