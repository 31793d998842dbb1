E_C = 1.602176634e-19      # C
KB = 1.380649e-23          # J/K

import json, os
from pathlib import Path
import numpy as np
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
d = np.loadtxt([l for l in (app / "onsager_msd.xvg").read_text().splitlines() if l[:1] not in "#@"])
s = json.loads((app / "system.json").read_text())
t = d[:, 0]; w = (t >= 100) & (t <= 1000)
slope = [np.polyfit(t[w], d[w, i], 1)[0] for i in (1, 2, 3)]         # nm^2/ps
Lpp, Lmm, Lpm = (x / 6 for x in slope)
V = s["volume_nm3"] * 1e-27; T = s["temperature_K"]
conv = 1e-18 / 1e-12                                                 # nm^2/ps -> m^2/s
sigma = E_C ** 2 / (V * KB * T) * (Lpp + Lmm - 2 * Lpm) * conv
sigma_ne = E_C ** 2 * s["n_Li"] * (s["D_Li_nm2_ps"] + s["D_FSI_nm2_ps"]) * conv / (V * KB * T)
out = {"sigma_S_m": sigma, "sigma_NE_S_m": sigma_ne, "ionicity": sigma / sigma_ne,
       "t_plus": (Lpp - Lpm) / (Lpp + Lmm - 2 * Lpm)}
(app / "output").mkdir(exist_ok=True)
(app / "output" / "conductivity.json").write_text(json.dumps(out, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("Fitted the three correlations linearly over 100-1000 ps; units converted explicitly: nm^2/ps -> m^2/s "
         "(x 1e-6), nm^3 -> m^3 (x 1e-27), e = 1.602176634e-19 C, kB = 1.380649e-23 J/K. "
         f"sigma = {sigma:.3g} S/m is of the order expected for a lithium-salt electrolyte (0.1-1 S/m).",
         call=("python", {"code": "np.polyfit over 100-1000 ps"}), result={"L_pp": Lpp, "L_mm": Lmm, "L_pm": Lpm})
rec.step(f"Ionicity sigma/sigma_NE = {sigma / sigma_ne:.2f}: below 1, the ion motions are correlated (ion pairing "
         "and aggregation carry less charge than independent ions would).")
rec.step(f"t+ in the stated convention L_ij = slope of <dM_i.dM_j> / 6: t+ = (L++ - L+-)/(L++ + L-- - 2 L+-) = "
         f"{out['t_plus']:.3f}.", result=out)
rec.save()
