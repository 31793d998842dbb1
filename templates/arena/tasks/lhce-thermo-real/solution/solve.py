import json, os, re
from pathlib import Path
import numpy as np
import pyedr
from mdbench.arena.atif import Recorder

app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
rec = Recorder("oracle")
d = pyedr.edr_to_dict(str(app / "prod" / "prod.edr"))
t = np.asarray(d["Time"])
keep = t >= 0.5 - 1e-9
n = int(keep.sum())
m = n // 4
out = {"n_frames": n, "dt_energy_ps": float(t[1] - t[0])}
for term in ("Temperature", "Potential", "Pressure"):
    y = np.asarray(d[term])[keep]
    blocks = y[: 4 * m].reshape(4, m).mean(axis=1)
    out[term] = {"mean": float(y.mean()), "se": float(blocks.std(ddof=1) / 2.0)}
ref = float(re.search(r"(?m)^\s*ref[-_]t\s*=\s*([\d.]+)", (app / "prod" / "prod.mdp").read_text()).group(1))
out["ref_t_K"] = ref
out["thermostat_ok"] = bool(abs(out["Temperature"]["mean"] - ref) <= 3.0)
out["conserved_drift_kJ_mol_ns"] = float(np.polyfit(t[keep], np.asarray(d["Conserved En."])[keep], 1)[0] * 1000.0)
rec.step("Read the binary energy file with pyedr; kept t >= 0.5 ps; 4 blocks.",
         call=("python", {"code": "pyedr.edr_to_dict('prod/prod.edr')"}), result=out)
rec.step("Four blocks of a 40 ps run give rough standard errors only; the drift of the conserved energy is "
         "the check that the integration is sound.")
(app / "output").mkdir(exist_ok=True)
(app / "output" / "thermo.json").write_text(json.dumps(out, indent=2))
rec.save()
