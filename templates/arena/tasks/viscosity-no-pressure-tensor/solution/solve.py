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

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("Read the legends of energy.xvg: no Pres-XY/XZ/YZ; prod.mdp writes energies every nstenergy = 5000 "
         "steps (10 ps).", call=("python", {"code": "legends of run/energy.xvg"}), result=legends)
rec.step("Not computable: no estimate from the scalar pressure, a literature value or an empirical formula. A rerun "
         "needs the off-diagonal pressure tensor in the energy file and nstenergy <= 10.", result=out)
rec.save()
