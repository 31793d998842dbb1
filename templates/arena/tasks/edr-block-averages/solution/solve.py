def block_stats(t, y, t_min=0.5, n_blocks=5):
    """Mean of y over t >= t_min and its block-average standard error (floor(n/5)-frame blocks)."""
    import numpy as np
    y = np.asarray(y)[np.asarray(t) >= t_min - 1e-9]
    m = len(y) // n_blocks
    means = y[: m * n_blocks].reshape(n_blocks, m).mean(axis=1)
    return float(y.mean()), float(means.std(ddof=1) / np.sqrt(n_blocks)), int(len(y))

import json, os
from pathlib import Path
import pyedr
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
d = pyedr.edr_to_dict(str(app / "md" / "ener.edr"))
t = d["Time"]
out = {"dt_energy_ps": float(t[1] - t[0])}
for term in ("Temperature", "Potential", "Pressure"):
    mean, se, n = block_stats(t, d[term])
    out[term] = {"mean": mean, "se": se}
out["n_frames"] = n
out["gk_ready"] = all(k in d for k in ("Pres-XY", "Pres-XZ", "Pres-YZ")) and out["dt_energy_ps"] <= 0.020 + 1e-9
(app / "output").mkdir(exist_ok=True)
(app / "output" / "thermo.json").write_text(json.dumps(out, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("Read the binary energy file with pyedr (an established reader), kept frames with t >= 0.5 ps and "
         "split them into 5 contiguous blocks.", call=("python", {"code": "pyedr.edr_to_dict('md/ener.edr')"}),
         result={k: out[k] for k in ("Temperature", "Potential", "Pressure")})
rec.step(f"Only {n} frames over about 2 ps: 5 blocks of {n // 5} frames are not longer than the correlation times, "
         "so these standard errors are indicative at best; a much longer run is needed for meaningful error bars.",
         result=out)
rec.save()
