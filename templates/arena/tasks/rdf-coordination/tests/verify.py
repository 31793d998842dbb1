import numpy as np
from mdbench.arena.grading import Grader, app_dir, read_json, read_xvg
g = Grader("mdbench/rdf-coordination")
app = app_dir()
out = app / "output" / "rdf.json"
d = read_xvg(app / "rdf_li_ofsi.xvg"); r, gr = d[:, 0], d[:, 1]
s = read_json(app / "system.json")
ipk = int(np.argmax(gr))
after = gr[ipk:]
imin = ipk + next(i for i in range(1, len(after) - 1) if after[i] <= after[i - 1] and after[i] < after[i + 1])
rho = s["n_O_FSI"] / s["volume_nm3"]
sl = slice(0, imin + 1)
cn = 4 * np.pi * rho * float(np.sum(0.5 * (gr[sl][1:] * r[sl][1:] ** 2 + gr[sl][:-1] * r[sl][:-1] ** 2) * np.diff(r[sl])))
g.check("output_exists", out.is_file, "output/rdf.json exists", weight=0.0)
res = lambda: read_json(out)
g.check("r_peak", lambda: (abs(res()["r_peak_nm"] - r[ipk]) <= 0.004, res()["r_peak_nm"]), f"first peak at {r[ipk]:.3f} +/- 0.004 nm")
g.check("r_min", lambda: (abs(res()["r_min_nm"] - r[imin]) <= 0.01, res()["r_min_nm"]), f"first minimum at {r[imin]:.3f} +/- 0.01 nm")
g.check("cn", lambda: (abs(res()["cn"] - cn) <= 0.03 * cn, res()["cn"]), f"CN = {cn:.3f} within 3 %")
g.finish()
