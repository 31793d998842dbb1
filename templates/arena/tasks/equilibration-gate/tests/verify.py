import re
import numpy as np
from scipy import stats
from mdbench.arena.grading import Grader, app_dir, read_json, read_xvg
g = Grader("mdbench/equilibration-gate")
app = app_dir()
out = app / "output" / "gate.json"
g.check("output_exists", out.is_file, "output/gate.json exists", weight=0.0)
for case in ("DE", "LHCE"):
    f = app / f"energy_{case}.xvg"
    legends = re.findall(r'@ s\d+ legend "(.*)"', f.read_text())
    d = read_xvg(f); t = d[:, 0]; half = t >= t[-1] / 2
    drift = {}
    for name in ("Density", "Potential"):
        y = d[half, 1 + legends.index(name)]
        fit = stats.linregress(t[half], y)
        drift[name] = abs(fit.slope) * np.ptp(t[half]) / abs(y.mean()) * 100
    passed = bool(drift["Density"] < 0.5 and drift["Potential"] < 0.5)
    res = lambda c=case: read_json(out)[c]
    g.check(f"{case}_drifts", lambda r=res, dr=drift: (abs(r()["density_drift_pct"] - dr["Density"]) <= 0.02 + 0.05 * dr["Density"]
            and abs(r()["potential_drift_pct"] - dr["Potential"]) <= 0.02 + 0.05 * dr["Potential"], r()),
            f"{case}: density drift {drift['Density']:.3f} %, potential drift {drift['Potential']:.3f} %")
    g.check(f"{case}_pass", lambda r=res, p=passed: r()["pass"] is p, f"{case}: gate {'passes' if passed else 'fails'}")
g.finish()
