def loglog_slope(t, msd):
    import numpy as np
    m = (t > 0) & (msd > 0)
    lt, lm = np.log(t[m]), np.log(msd[m])
    s = np.gradient(lm, lt)
    out = np.full(t.shape, np.nan); out[m] = s
    return out

import json, os
from pathlib import Path
import numpy as np
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
d = np.loadtxt([l for l in (app / "msd_li.xvg").read_text().splitlines() if l[:1] not in "#@"])
t, msd = d[:, 0], d[:, 1]
keep = t <= t[-1] / 2
t, msd = t[keep], msd[keep]
s = loglog_slope(t, msd)
w = np.abs(s - 1) <= 0.1
slope, c = np.polyfit(t[w], msd[w], 1)
D = slope / 6 * 1e-2 / 1e-5
(app / "output").mkdir(exist_ok=True)
(app / "output" / "diffusion.json").write_text(json.dumps(
    {"D_1e-5_cm2_s": D, "window_ps": [float(t[w].min()), float(t[w].max())], "n_points": int(w.sum())}, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("Computed the local log-log slope d ln MSD / d ln t (central differences) before fitting; the "
         f"diffusive window (|slope - 1| <= 0.1) is {float(t[w].min()):.0f}-{float(t[w].max()):.0f} ps.",
         call=("python", {"code": "np.gradient(np.log(msd), np.log(t))"}))
rec.step(f"Fitted MSD = 6 D t + c in that window: D = slope / 6 nm^2/ps; 1 nm^2/ps = 1e-2 cm^2/s, so D = {D:.3f} "
         "x 1e-5 cm^2/s.")
rec.save()
