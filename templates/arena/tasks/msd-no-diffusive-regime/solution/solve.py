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
d = np.loadtxt([l for l in (app / "msd_fsi.xvg").read_text().splitlines() if l[:1] not in "#@"])
t, msd = d[:, 0], d[:, 1]
keep = t <= t[-1] / 2
s = loglog_slope(t[keep], msd[keep])
w = np.abs(s - 1) <= 0.1
smax = float(np.nanmax(s[t[keep] > 1.0]))
out = {"D_1e-5_cm2_s": None, "diffusive": bool(w.any()), "max_loglog_slope": smax,
       "reason": f"the log-log slope never reaches 1 +/- 0.1 (max {smax:.2f} after the ballistic part): the anion is "
                 "still sub-diffusive, so no Einstein fit is valid; a longer run is needed."}
(app / "output").mkdir(exist_ok=True)
(app / "output" / "diffusion.json").write_text(json.dumps(out, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step(f"Local log-log slope of the MSD: at most {smax:.2f} after the ballistic part; it never reaches "
         "1 +/- 0.1.", call=("python", {"code": "np.gradient(np.log(msd), np.log(t))"}))
rec.step("Declined to fit a diffusion coefficient to a sub-diffusive MSD; remedy: a longer production run (or "
         "report only an upper bound).", result=out)
rec.save()
