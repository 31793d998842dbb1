import json, os
from pathlib import Path
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
legends = [l for l in (app / "run" / "energy.xvg").read_text().splitlines() if "legend" in l]
assert not any("Pres-XY" in l for l in legends)
out = {"viscosity_mPa_s": None, "status": "not_computable",
       "reason": "energy.xvg holds only the scalar pressure, no off-diagonal pressure tensor (Pres-XY/XZ/YZ), "
                 "and prod.mdp wrote energies every nstenergy = 5000 steps (10 ps), far too sparse for the "
                 "stress autocorrelation; rerun with nstenergy <= 10 and extract the pressure tensor."}
(app / "output").mkdir(exist_ok=True)
(app / "output" / "viscosity.json").write_text(json.dumps(out, indent=2))
