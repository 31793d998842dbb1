import json, math, os
from pathlib import Path
import numpy as np
import MDAnalysis as mda
from mdbench.arena.atif import Recorder

app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
rec = Recorder("oracle")
u = mda.Universe(str(app / "prod" / "prod.tpr"), str(app / "prod" / "prod.xtc"))
li = u.select_atoms("resname LI")
pos, times = [], []
for ts in u.trajectory:
    pos.append(li.positions / 10.0); times.append(ts.time)
pos, times = np.array(pos), np.array(times)
box = u.dimensions[:3] / 10.0
step = np.diff(pos, axis=0)
step -= box * np.round(step / box)                         # minimum image between consecutive frames
unwrapped = np.concatenate([pos[:1], pos[:1] + np.cumsum(step, axis=0)])
keep = times >= 0.5 - 1e-6
x, t = unwrapped[keep], times[keep] - times[keep][0]
lags = np.arange(1, len(t) // 2 + 1)
msd = np.array([((x[k:] - x[:-k]) ** 2).sum(axis=2).mean() for k in lags])
lag_t = lags * (t[1] - t[0])
w = (lag_t >= 5 - 1e-9) & (lag_t <= 20 + 1e-9)
beta = float(np.polyfit(np.log(lag_t[w]), np.log(msd[w]), 1)[0])
rec.step(f"Li MSD from positions unwrapped in minimum image; log-log fit over 5-20 ps gives beta = {beta:.2f}, "
         "outside 0.9-1.1: sub-diffusive, no D can be reported from this run.",
         call=("python", {"code": "np.polyfit(log t, log MSD)"}),
         result={f"{a:.1f} ps": round(float(b), 5) for a, b in zip(lag_t[::8], msd[::8])})
latest = {}
for line in (app / "run_record" / "attempts.jsonl").read_text().splitlines():
    if line.strip():
        r = json.loads(line); latest[r["id"]] = r
lhce = [r for r in latest.values() if r["case"] == "LHCE"]
charged = sum(r["completed_steps"] * r["dt_ps"] / 1000.0 for r in lhce)
prod = [r for r in lhce if r["stage"] == "production"][-1]
prod_ns = prod["completed_steps"] * prod["dt_ps"] / 1000.0
remaining = 0.30 - charged
wanted = 9 * prod_ns
rec.step(f"Ledger: latest line per attempt id, every attempt charged: {charged:.3f} ns for LHCE; production "
         f"{prod_ns:.3f} ns; budget 0.30 ns leaves {remaining:.3f} ns, less than the {wanted:.3f} ns a tenfold run needs.",
         call=("python", {"code": "latest line per id in attempts.jsonl"}), result=lhce)
if 0.9 <= beta <= 1.1:
    decision, ext = "report", 0.0
elif wanted <= remaining + 1e-12:
    decision, ext = "extend", wanted
else:
    decision, ext = "extend_partial", math.floor(remaining * 1000 + 1e-9) / 1000
out = {"beta": beta, "diffusive": bool(0.9 <= beta <= 1.1), "charged_ns": charged, "remaining_ns": remaining,
       "production_ns": prod_ns, "extension_ns": ext, "decision": decision}
rec.step(f"Decision {decision}: extend by {ext:.3f} ns; even then the run stays far from ten times its length, so D "
         "remains not reached and must not be reported.", result=out)
(app / "output").mkdir(exist_ok=True)
(app / "output" / "decision.json").write_text(json.dumps(out, indent=2))
rec.save()
