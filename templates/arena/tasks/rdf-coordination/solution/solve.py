import json, os
from pathlib import Path
import numpy as np
from scipy.signal import argrelmin
from scipy.integrate import cumulative_trapezoid
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
data = np.loadtxt([l for l in (app / "rdf_li_ofsi.xvg").read_text().splitlines() if l[:1] not in "#@"])
r, g = data[:, 0], data[:, 1]
sysinfo = json.loads((app / "system.json").read_text())
ipk = int(np.argmax(g))
imin = ipk + int(argrelmin(g[ipk:])[0][0])
rho = sysinfo["n_O_FSI"] / sysinfo["volume_nm3"]
cn = 4 * np.pi * rho * cumulative_trapezoid(g * r ** 2, r, initial=0)[imin]
(app / "output").mkdir(exist_ok=True)
(app / "output" / "rdf.json").write_text(json.dumps({"r_peak_nm": r[ipk], "r_min_nm": r[imin], "cn": cn}, indent=2))
