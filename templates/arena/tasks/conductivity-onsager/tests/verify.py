E_C = 1.602176634e-19      # C
KB = 1.380649e-23          # J/K

import numpy as np
from scipy import stats
from mdbench.arena.grading import Grader, app_dir, read_json, read_xvg
g = Grader("mdbench/conductivity-onsager")
app = app_dir()
out = app / "output" / "conductivity.json"
d = read_xvg(app / "onsager_msd.xvg"); s = read_json(app / "system.json")
t = d[:, 0]; w = (t >= 100) & (t <= 1000)
# sigma from the charge-displacement correlation directly: <|dM+ - dM-|^2> = pp + mm - 2 pm
q = d[:, 1] + d[:, 2] - 2 * d[:, 3]
V_m3, T = s["volume_nm3"] * 1e-27, s["temperature_K"]
sigma = E_C ** 2 / (6 * V_m3 * KB * T) * stats.linregress(t[w], q[w]).slope * 1e-6
sl = [stats.linregress(t[w], d[w, i]).slope for i in (1, 2, 3)]
t_plus = (sl[0] - sl[2]) / (sl[0] + sl[1] - 2 * sl[2])
sigma_ne = E_C ** 2 * s["n_Li"] * (s["D_Li_nm2_ps"] + s["D_FSI_nm2_ps"]) * 1e-6 / (V_m3 * KB * T)
g.check("output_exists", out.is_file, "output/conductivity.json exists", weight=0.0)
res = lambda: read_json(out)
close = lambda a, b, rel: abs(a - b) <= rel * abs(b)
g.check("sigma", lambda: (close(res()["sigma_S_m"], sigma, 0.02), res()["sigma_S_m"]), f"sigma = {sigma:.4g} S/m within 2 % (cross terms included)")
g.check("sigma_NE", lambda: (close(res()["sigma_NE_S_m"], sigma_ne, 0.02), res()["sigma_NE_S_m"]), f"sigma_NE = {sigma_ne:.4g} S/m within 2 %")
g.check("ionicity", lambda: (close(res()["ionicity"], sigma / sigma_ne, 0.03), res()["ionicity"]), f"ionicity = {sigma / sigma_ne:.3f} within 3 %")
g.check("t_plus", lambda: (abs(res()["t_plus"] - t_plus) <= 0.02, res()["t_plus"]), f"t+ = {t_plus:.3f} +/- 0.02 in the stated convention")
g.finish()
