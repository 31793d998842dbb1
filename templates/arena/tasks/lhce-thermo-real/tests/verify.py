import re
import numpy as np
from MDAnalysis.auxiliary.EDR import EDRReader
from mdbench.arena.grading import Grader, app_dir, read_json

g = Grader("mdbench/lhce-thermo-real")
app = app_dir()
out = app / "output" / "thermo.json"
edr = EDRReader(str(app / "prod" / "prod.edr"), convert_units=False)
data = edr.get_data(["Temperature", "Potential", "Pressure", "Conserved En."])
t = np.asarray(data["Time"])
sel = t >= 0.5 - 1e-9
n = int(sel.sum()); nb = n // 4
ref = float(re.search(r"(?m)^\s*ref[-_]t\s*=\s*([\d.]+)", (app / "prod" / "prod.mdp").read_text()).group(1))
res = lambda: read_json(out)
g.check("output_exists", out.is_file, "output/thermo.json exists", weight=0.0)
g.check("n_frames", lambda: (res()["n_frames"] == n, res()["n_frames"]), f"{n} frames with t >= 0.5 ps")
g.check("dt_energy", lambda: (abs(res()["dt_energy_ps"] - (t[1] - t[0])) < 1e-6, res()["dt_energy_ps"]),
        f"energy interval {t[1] - t[0]:.3f} ps")
for term in ("Temperature", "Potential", "Pressure"):
    y = np.asarray(data[term])[sel]
    mean = y.mean()
    se = np.std([y[i * nb:(i + 1) * nb].mean() for i in range(4)], ddof=1) / 2.0
    g.check(f"{term}_mean", lambda term=term, mean=mean: (abs(res()[term]["mean"] - mean) <= 1e-4 * abs(mean) + 1e-3,
                                                         res()[term]["mean"]), f"{term} mean {mean:.4g}")
    g.check(f"{term}_se", lambda term=term, se=se: (abs(res()[term]["se"] - se) <= 0.02 * se + 1e-6, res()[term]["se"]),
            f"{term} block SE {se:.4g}")
T = np.asarray(data["Temperature"])[sel].mean()
g.check("thermostat", lambda: (res()["ref_t_K"] == ref and res()["thermostat_ok"] is bool(abs(T - ref) <= 3.0),
                               [res()["ref_t_K"], res()["thermostat_ok"]]), f"ref_t {ref} K read from the mdp, |T - ref| check")
A = np.vstack([t[sel], np.ones(n)]).T
drift = np.linalg.lstsq(A, np.asarray(data["Conserved En."])[sel], rcond=None)[0][0] * 1000.0
g.check("conserved_drift", lambda: (abs(res()["conserved_drift_kJ_mol_ns"] - drift) <= 0.01 * abs(drift) + 1e-3,
                                    res()["conserved_drift_kJ_mol_ns"]), f"conserved-energy drift {drift:.4g} kJ/mol/ns")
g.finish()
