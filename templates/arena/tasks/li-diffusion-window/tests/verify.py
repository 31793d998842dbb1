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
g = Grader("mdbench/li-diffusion-window")
app = app_dir()
out = app / "output" / "diffusion.json"
d = read_xvg(app / "msd_li.xvg"); t, msd = d[:, 0], d[:, 1]
keep = t <= t[-1] / 2; t, msd = t[keep], msd[keep]
w = np.abs(loglog_slope(t, msd) - 1) <= 0.1
D = np.polyfit(t[w], msd[w], 1)[0] / 6 * 1e3   # nm^2/ps -> 1e-5 cm^2/s
t0, t1 = t[w].min(), t[w].max()
g.check("output_exists", out.is_file, "output/diffusion.json exists", weight=0.0)
res = lambda: read_json(out)
g.check("D_value", lambda: (abs(res()["D_1e-5_cm2_s"] - D) <= 0.03 * D, res()["D_1e-5_cm2_s"]), f"D = {D:.4f} x 1e-5 cm2/s within 3 %")
g.check("window_start", lambda: (abs(res()["window_ps"][0] - t0) <= 0.15 * t0 + 10, res()["window_ps"]), f"window starts at the onset of the diffusive regime (~{t0:.0f} ps)")
g.check("window_end", lambda: (res()["window_ps"][1] <= t[-1] + 1e-6, res()["window_ps"]), f"window ends at or before half the trajectory ({t[-1]:.0f} ps)")
g.finish()
