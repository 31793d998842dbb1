import json, os
from pathlib import Path
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
latest = {}
for line in (app / "run_record" / "attempts.jsonl").read_text().splitlines():
    if line.strip():
        r = json.loads(line); latest[r["id"]] = r
ns = {}
for r in latest.values():
    ns[r["case"]] = ns.get(r["case"], 0.0) + r["completed_steps"] * r["dt_ps"] / 1000.0
total = sum(ns.values())
out = {"charged_ns": ns, "total_ns": total, "over_case_budget": sorted(c for c, v in ns.items() if v > 100.0),
       "over_study_budget": total > 300.0}
(app / "output").mkdir(exist_ok=True)
(app / "output" / "budget.json").write_text(json.dumps(out, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("Kept the latest line per attempt id (later lines supersede earlier ones) instead of summing every "
         f"line: {len(latest)} attempts.", call=("python", {"code": "latest[r['id']] = r for every line"}))
rec.step("Charged completed_steps x dt_ps / 1000 for every attempt whatever its final status (failed, interrupted "
         "and discarded included), as the study rule demands.", result=out)
rec.save()
