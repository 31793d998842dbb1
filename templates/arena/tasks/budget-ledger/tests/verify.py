import json
from mdbench.arena.grading import Grader, app_dir, read_json
g = Grader("mdbench/budget-ledger")
app = app_dir()
out = app / "output" / "budget.json"
latest = {}
for line in (app / "run_record" / "attempts.jsonl").read_text().splitlines():
    if line.strip():
        r = json.loads(line); latest[r["id"]] = r
ns = {}
for r in latest.values():
    ns[r["case"]] = ns.get(r["case"], 0.0) + r["completed_steps"] * r["dt_ps"] / 1e3
g.check("output_exists", out.is_file, "output/budget.json exists", weight=0.0)
for case, v in sorted(ns.items()):
    g.check(f"charged_{case}", lambda c=case, v=v: (abs(read_json(out)["charged_ns"][c] - v) < 1e-6, read_json(out)["charged_ns"][c]),
            f"ns charged to {case} (all completed steps, latest state per attempt) within 1e-6 ns")
g.check("total", lambda: abs(read_json(out)["total_ns"] - sum(ns.values())) < 1e-6, "total ns")
g.check("over_case", lambda: sorted(read_json(out)["over_case_budget"]) == sorted(c for c, v in ns.items() if v > 100),
        "cases over the 100 ns case budget")
g.check("over_study", lambda: read_json(out)["over_study_budget"] is (sum(ns.values()) > 300), "study budget flag")
g.finish()
