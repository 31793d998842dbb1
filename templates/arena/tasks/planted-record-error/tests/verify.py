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

from mdbench.arena.grading import Grader, app_dir, read_json
g = Grader("mdbench/planted-record-error")
app = app_dir()
out = app / "output" / "finding.json"
errs = find_errors(app / "run_record")
if len(errs) != 1:
    raise SystemExit(f"task data broken: expected exactly one planted violation, found {errs}")
f, rid, field = errs[0]
g.check("output_exists", out.is_file, "output/finding.json exists", weight=0.0)
res = lambda: read_json(out)
g.check("file", lambda: (res()["file"] == f, res()["file"]), f"file = {f}")
g.check("record_id", lambda: (str(res()["record_id"]) == rid, res()["record_id"]), f"record_id = {rid}")
g.check("field", lambda: (res()["field"] == field, res()["field"]), f"field = {field}")
g.finish()
