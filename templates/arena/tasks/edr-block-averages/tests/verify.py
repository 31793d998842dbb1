import numpy as np
import MDAnalysis.auxiliary.EDR as edr
from mdbench.arena.grading import Grader, app_dir, read_json
g = Grader("mdbench/edr-block-averages")
app = app_dir()
out = app / "output" / "thermo.json"
aux = edr.EDRReader(str(app / "md" / "ener.edr"))          # independent reader (MDAnalysis, on top of pyedr)
data = aux.data_dict
t = np.asarray(data["Time"])
keep = t >= 0.5 - 1e-9
n = int(keep.sum()); m = n // 5
g.check("output_exists", out.is_file, "output/thermo.json exists", weight=0.0)
res = lambda: read_json(out)
g.check("n_frames", lambda: (res()["n_frames"] == n, res()["n_frames"]), f"{n} frames with t >= 0.5 ps")
dt = float(np.median(np.diff(t)))
tensor = all(k in data for k in ("Pres-XY", "Pres-XZ", "Pres-YZ"))
g.check("dt_and_gk", lambda: (abs(res()["dt_energy_ps"] - dt) < 1e-6 and res()["gk_ready"] is bool(tensor and dt <= 0.020 + 1e-9), res()["gk_ready"]),
        f"energy interval {dt} ps; gk_ready = {tensor and dt <= 0.02}")
for term in ("Temperature", "Potential", "Pressure"):
    y = np.asarray(data[term])[keep]
    mean = y.mean()
    se = np.std([y[i * m:(i + 1) * m].mean() for i in range(5)], ddof=1) / np.sqrt(5)
    g.check(f"{term}_mean", lambda k=term, v=mean: (abs(res()[k]["mean"] - v) <= 1e-4 * max(1.0, abs(v)), res()[k]["mean"]), f"{term} mean = {mean:.4f}")
    g.check(f"{term}_se", lambda k=term, v=se: (abs(res()[k]["se"] - v) <= 0.02 * v + 1e-9, res()[k]["se"]), f"{term} block SE = {se:.4f} within 2 %")
g.finish()
