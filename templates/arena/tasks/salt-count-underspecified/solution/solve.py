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
