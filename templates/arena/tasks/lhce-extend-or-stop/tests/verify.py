import json, math
import numpy as np
import MDAnalysis as mda
from mdbench.arena.grading import Grader, app_dir, read_json

g = Grader("mdbench/lhce-extend-or-stop")
app = app_dir()
out = app / "output" / "decision.json"
u = mda.Universe(str(app / "prod" / "prod.tpr"), str(app / "prod" / "prod.xtc"))
li = u.select_atoms("resname LI")
frames = [(ts.time, li.positions.astype(np.float64) / 10.0, ts.dimensions[:3] / 10.0) for ts in u.trajectory]
frames = [f for f in frames if f[0] >= 0.5 - 1e-6]
# unwrap frame by frame, each jump mapped into the box of the later frame
cur = frames[0][1].copy(); traj = [cur.copy()]
for (_, a, _), (_, b, box) in zip(frames, frames[1:]):
    d = b - a
    d -= box * np.rint(d / box)
    cur = cur + d; traj.append(cur.copy())
traj = np.array(traj); dt = frames[1][0] - frames[0][0]
lag_t, msd = [], []
for k in range(1, len(traj) // 2 + 1):
    lag_t.append(k * dt); msd.append(np.mean(np.sum((traj[k:] - traj[:-k]) ** 2, axis=2)))
lag_t, msd = np.array(lag_t), np.array(msd)
w = (lag_t >= 5 - 1e-9) & (lag_t <= 20 + 1e-9)
A = np.vstack([np.log(lag_t[w]), np.ones(w.sum())]).T
beta = float(np.linalg.lstsq(A, np.log(msd[w]), rcond=None)[0][0])
rows = {}
for line in (app / "run_record" / "attempts.jsonl").read_text().splitlines():
    if line.strip():
        r = json.loads(line); rows[r["id"]] = r
case = [r for r in rows.values() if r["case"] == "LHCE"]
charged = sum(r["completed_steps"] * r["dt_ps"] for r in case) / 1000.0
last_prod = max((r for r in case if r["stage"] == "production"), key=lambda r: r["id"])
prod_ns = last_prod["completed_steps"] * last_prod["dt_ps"] / 1000.0
remaining = 0.30 - charged
diffusive = 0.9 <= beta <= 1.1
if diffusive:
    decision, ext = "report", 0.0
elif 9 * prod_ns <= remaining:
    decision, ext = "extend", 9 * prod_ns
else:
    decision, ext = "extend_partial", math.floor(remaining * 1000 + 1e-9) / 1000
res = lambda: read_json(out)
g.check("output_exists", out.is_file, "output/decision.json exists", weight=0.0)
g.check("beta", lambda: (abs(res()["beta"] - beta) <= 0.05, res()["beta"]), f"beta = {beta:.3f} +/- 0.05 (fit 5-20 ps)")
g.check("diffusive", lambda: (res()["diffusive"] is diffusive, res()["diffusive"]), f"diffusive = {diffusive}")
g.check("charged_ns", lambda: (abs(res()["charged_ns"] - charged) <= 1e-6, res()["charged_ns"]), f"charged {charged:.4f} ns")
g.check("remaining_ns", lambda: (abs(res()["remaining_ns"] - remaining) <= 1e-6, res()["remaining_ns"]),
        f"remaining {remaining:.4f} ns of 0.30 ns")
g.check("production_ns", lambda: (abs(res()["production_ns"] - prod_ns) <= 1e-6, res()["production_ns"]),
        f"production {prod_ns:.4f} ns")
g.check("extension_ns", lambda: (abs(res()["extension_ns"] - ext) <= 1e-6, res()["extension_ns"]), f"extension {ext:.3f} ns")
g.check("decision", lambda: (res()["decision"] == decision, res()["decision"]), f"decision {decision}")
g.finish()
