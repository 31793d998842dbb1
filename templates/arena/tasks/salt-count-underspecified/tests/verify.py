import math, re
from mdbench.arena.grading import Grader, app_dir, read_json
g = Grader("mdbench/salt-count-underspecified")
app = app_dir()
out = app / "output" / "salt.json"
c = read_json(app / "composition.json")
conc = float(re.match(r"([\d.]+)", c["concentration"]).group(1))
ms = c["n_solvent"] * c["M_solvent_g_mol"]                       # g/mol of solvent per box (x N_A)
molar = conc * ms / (1000 * c["density_solution_g_cm3"] - conc * c["M_salt_g_mol"])   # self-consistent volume
molal = conc * ms / 1000.0
g.check("output_exists", out.is_file, "output/salt.json exists", weight=0.0)
res = lambda: read_json(out)
def convention():
    conv = str(res()["convention"]).lower()
    return ("molar" in conv and "molal" not in conv) or "molal" in conv, conv
g.check("convention_declared", convention, "a concentration convention (molarity or molality) is declared")
def count_matches():
    conv = str(res()["convention"]).lower(); n = res()["n_LiFSI"]
    target = molal if "molal" in conv else molar
    return isinstance(n, int) and abs(n - target) <= 0.5 + 1e-9 or n in (math.floor(target), math.ceil(target)), (n, target)
g.check("count_consistent", count_matches, f"n_LiFSI agrees with the declared convention (molarity {molar:.2f}, molality {molal:.2f})")
g.check("assumption_stated", lambda: len(str(res().get("assumption") or "")) >= 20 and re.search(r"(densit|kg|litre|liter|volume|solvent mass)", str(res()["assumption"]), re.I) is not None,
        "the assumption names the quantity the convention relies on (density/volume or solvent mass)")
g.finish()
