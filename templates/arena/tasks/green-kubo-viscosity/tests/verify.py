import numpy as np
from mdbench.arena.grading import Grader, app_dir, read_json, read_xvg
g = Grader("mdbench/green-kubo-viscosity")
app = app_dir()
out = app / "output" / "viscosity.json"
d = read_xvg(app / "pressure_offdiag.xvg"); s = read_json(app / "system.json")
t = d[:, 0] - d[0, 0]; dt = t[1] - t[0]; n = len(t)
acfs = []
for i in (1, 2, 3):                                   # unbiased ACF by zero-padded FFT
    x = d[:, i]; f = np.fft.rfft(x, 2 * n)
    acfs.append(np.fft.irfft(f * np.conj(f))[:n] / (n - np.arange(n)))
acf = np.mean(acfs, axis=0)
w = (t >= 1.0 - 1e-9) & (t <= 2.0 + 1e-9)
cum = np.concatenate([[0.0], np.cumsum(0.5 * (acf[1:] + acf[:-1]) * dt)])   # trapezoid running integral
running = cum[w]
eta = s["volume_nm3"] * 1e-27 / (1.380649e-23 * s["temperature_K"]) * running.mean() * 1e10 * 1e-12 * 1e3
g.check("output_exists", out.is_file, "output/viscosity.json exists", weight=0.0)
res = lambda: read_json(out)
g.check("viscosity", lambda: (abs(res()["viscosity_mPa_s"] - eta) <= 0.03 * eta, res()["viscosity_mPa_s"]), f"eta = {eta:.4f} mPa s within 3 %")
g.check("three_components", lambda: res()["n_components"] == 3, "all three off-diagonal components averaged")
g.check("plateau", lambda: [float(x) for x in res()["plateau_ps"]] == [1.0, 2.0], "plateau window 1.0-2.0 ps as stated")
g.finish()
