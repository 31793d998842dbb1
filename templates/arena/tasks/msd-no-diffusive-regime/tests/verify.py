def loglog_slope(t, msd):
    """d ln MSD / d ln t by plain central differences of neighbouring points (one-sided at the ends); the
    verifier's own formula, independent of the reference code."""
    import numpy as np
    t, msd = np.asarray(t, float), np.asarray(msd, float)
    out = np.full(t.shape, np.nan)
    idx = np.flatnonzero((t > 0) & (msd > 0))
    for j, i in enumerate(idx):
        a, b = idx[max(j - 1, 0)], idx[min(j + 1, len(idx) - 1)]
        if a != b:
            out[i] = (np.log(msd[b]) - np.log(msd[a])) / (np.log(t[b]) - np.log(t[a]))
    return out

import numpy as np
from mdbench.arena.grading import Grader, app_dir, read_json, read_xvg
g = Grader("mdbench/msd-no-diffusive-regime")
app = app_dir()
out = app / "output" / "diffusion.json"
d = read_xvg(app / "msd_fsi.xvg"); t, msd = d[:, 0], d[:, 1]
keep = t <= t[-1] / 2
s = loglog_slope(t[keep], msd[keep])
diffusive = bool((np.abs(s - 1) <= 0.1).any())
smax = float(np.nanmax(s[t[keep] > 1.0]))
g.check("output_exists", out.is_file, "output/diffusion.json exists", weight=0.0)
res = lambda: read_json(out)
g.check("not_diffusive", lambda: res()["diffusive"] is diffusive, f"diffusive flag is {diffusive}")
g.check("no_value", lambda: (res()["D_1e-5_cm2_s"] is None) == (not diffusive), "no D is reported when there is no diffusive window")
g.check("max_slope", lambda: (abs(res()["max_loglog_slope"] - smax) <= 0.1, res()["max_loglog_slope"]), f"max log-log slope after 1 ps ~ {smax:.2f} (+/- 0.1)")
g.check("reason_given", lambda: len(str(res().get("reason") or "")) >= 20, "a reason is stated")
g.finish()
