import json
import numpy as np
rng = np.random.default_rng(11)
rows, i = [], 0
plan = {"DE": [("em", 5000, 0.0, "completed"), ("equil", 2_000_000, 0.002, "completed"),
               ("prod", 20_000_000, 0.002, "completed")],
        "HCE": [("equil", 2_000_000, 0.002, "failed"), ("equil", 2_500_000, 0.002, "completed"),
                ("prod", 25_000_000, 0.002, "interrupted"), ("prod", 15_000_000, 0.002, "completed")],
        "LHCE": [("equil", 2_500_000, 0.002, "completed"), ("prod", 30_000_000, 0.002, "discarded"),
                 ("prod", 25_000_000, 0.002, "completed")]}
for case, atts in plan.items():
    for stage, steps, dt, status in atts:
        i += 1
        aid = f"A{i:04d}"
        rows.append({"id": aid, "case": case, "stage": stage, "planned_steps": steps, "completed_steps": 0,
                     "dt_ps": dt, "status": "running"})
        done = steps if status in ("completed", "discarded") else int(steps * rng.uniform(0.2, 0.8))
        rows.append({"id": aid, "case": case, "stage": stage, "planned_steps": steps, "completed_steps": done,
                     "dt_ps": dt, "status": status})
import os
os.makedirs("run_record", exist_ok=True)
with open("run_record/attempts.jsonl", "w") as fh:
    for r in rows:
        fh.write(json.dumps(r) + "\n")
