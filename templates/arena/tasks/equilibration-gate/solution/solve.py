import json, os, re
from pathlib import Path
import numpy as np
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
out = {}
for f in sorted(app.glob("energy_*.xvg")):
    lines = f.read_text().splitlines()
    legends = [re.search(r'legend "(.*)"', l).group(1) for l in lines if re.match(r"@ s\d+ legend", l)]
    d = np.loadtxt([l for l in lines if l[:1] not in "#@"])
    t = d[:, 0]; half = t >= t[-1] / 2
    res = {}
    for name, key in (("Density", "density_drift_pct"), ("Potential", "potential_drift_pct")):
        y = d[half, 1 + legends.index(name)]
        slope = np.polyfit(t[half], y, 1)[0]
        res[key] = abs(slope) * (t[half][-1] - t[half][0]) / abs(y.mean()) * 100
    res["pass"] = bool(res["density_drift_pct"] < 0.5 and res["potential_drift_pct"] < 0.5)
    out[f.stem.split("_", 1)[1]] = res
(app / "output").mkdir(exist_ok=True)
(app / "output" / "gate.json").write_text(json.dumps(out, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("Identified the Density and Potential columns from the '@ sN legend' lines instead of assuming their "
         "order; fitted the second half of each series.", call=("python", {"code": "legends from xvg; np.polyfit"}),
         result=out)
failing = sorted(k for k, v in out.items() if not v["pass"])
rec.step(f"Failing case(s): {failing}. Recommendation: extend the equilibration of those cases before starting "
         "production; the passing ones may proceed.")
rec.save()
