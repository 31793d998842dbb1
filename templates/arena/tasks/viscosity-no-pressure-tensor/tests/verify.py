import re
from mdbench.arena.grading import Grader, app_dir, read_json
g = Grader("mdbench/viscosity-no-pressure-tensor")
app = app_dir()
out = app / "output" / "viscosity.json"
legends = re.findall(r'legend "(.*)"', (app / "run" / "energy.xvg").read_text())
has_tensor = any(re.match(r"Pres-[XYZ]{2}", l) for l in legends)
g.check("output_exists", out.is_file, "output/viscosity.json exists", weight=0.0)
res = lambda: read_json(out)
g.check("no_number", lambda: (res()["viscosity_mPa_s"] is None) is (not has_tensor), "no viscosity value is reported (the data cannot support one)")
g.check("status", lambda: res()["status"] == ("computed" if has_tensor else "not_computable"), "status is not_computable")
g.check("reason_pressure_tensor", lambda: re.search(r"(off.?diagonal|pressure.tensor|pres-?xy|p_?xy|stress.tensor)", res()["reason"], re.I) is not None,
        "the reason names the missing off-diagonal pressure tensor")
g.check("reason_sampling", lambda: re.search(r"(nstenergy|10 ?ps|5000)", res()["reason"], re.I) is not None,
        "the reason names the too-sparse energy output (nstenergy = 5000, 10 ps)")
g.finish()
