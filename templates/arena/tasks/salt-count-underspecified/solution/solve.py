import json, os
from pathlib import Path
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
c = json.loads((app / "composition.json").read_text())
n_molar = 2.0 * c["n_solvent"] * c["M_solvent_g_mol"] / (1000 * c["density_solution_g_cm3"] - 2.0 * c["M_salt_g_mol"])
out = {"n_LiFSI": int(round(n_molar)), "convention": "molarity",
       "assumption": "'M' read as molarity (mol per litre of solution); the solution volume follows from the given "
                     "solution density 1.25 g/cm3 and the masses of solvent and salt, solved self-consistently. "
                     "As molality (mol/kg DMC) the count would be 18."}
(app / "output").mkdir(exist_ok=True)
(app / "output" / "salt.json").write_text(json.dumps(out, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("'2 M' is ambiguous for a simulation box: molarity (mol per litre of solution) or molality (mol per kg "
         "of solvent) give different counts.", call=("python", {"code": "json.load(composition.json)"}), result=c)
rec.step("Chose molarity and solved the solution volume self-consistently from the given solution density; as "
         "molality the count would be 18. Both stated in salt.json.", result=out)
rec.save()
