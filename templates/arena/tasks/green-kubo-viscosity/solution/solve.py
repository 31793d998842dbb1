import json, os
from pathlib import Path
import numpy as np
import tidynamics
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
d = np.loadtxt([l for l in (app / "pressure_offdiag.xvg").read_text().splitlines() if l[:1] not in "#@"])
s = json.loads((app / "system.json").read_text())
t = d[:, 0] - d[0, 0]; dt = t[1] - t[0]
acf = np.mean([tidynamics.acf(d[:, i]) for i in (1, 2, 3)], axis=0)      # bar^2, unbiased
running = np.concatenate([[0.0], np.cumsum(0.5 * (acf[1:] + acf[:-1]) * dt)])   # bar^2 ps
w = (t >= 1.0 - 1e-9) & (t <= 2.0 + 1e-9)
eta = s["volume_nm3"] * 1e-27 / (1.380649e-23 * s["temperature_K"]) * running[w].mean() * 1e10 * 1e-12   # Pa s
(app / "output").mkdir(exist_ok=True)
(app / "output" / "viscosity.json").write_text(json.dumps({"viscosity_mPa_s": eta * 1e3, "plateau_ps": [1.0, 2.0], "n_components": 3}, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("Computed the stress autocorrelation of Pres-XY, Pres-XZ, Pres-YZ with tidynamics.acf (FFT, unbiased "
         "estimator) and averaged the three.", call=("python", {"code": "tidynamics.acf(p) for each component"}))
table = {f"{x:.1f} ps": float(running[int(round(x / dt))]) for x in (0.5, 1.0, 1.5, 2.0, 3.0) if int(round(x / dt)) < len(running)}
rec.step("Printed the running integral (bar^2 ps) to check the plateau: flat over 1.0-2.0 ps.", result=table)
rec.step("Units: bar^2 -> Pa^2 (x 1e10), ps -> s (x 1e-12), nm^3 -> m^3 (x 1e-27); "
         f"eta = {eta * 1e3:.3g} mPa s.")
rec.save()
