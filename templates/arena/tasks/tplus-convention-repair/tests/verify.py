import json
from mdbench.arena.grading import Grader, app_dir, read_json

g = Grader("mdbench/tplus-convention-repair")
app = app_dir()
out = app / "output" / "repair.json"
report = read_json(app / "study" / "report.json")
truth, wrong = {}, {}
for case, reported in report["t_plus"].items():
    c = read_json(app / "onsager" / f"{case}.json")
    denom = c["L_pp"] + c["L_mm"] - 2.0 * c["L_pm"]
    values = {"onsager": (c["L_pp"] - c["L_pm"]) / denom, "no_cross_terms": c["L_pp"] / (c["L_pp"] + c["L_mm"]),
              "self_diffusion_ratio": c["D_Li"] / (c["D_Li"] + c["D_FSI"])}
    truth[case] = values["onsager"]
    how = [k for k, v in values.items() if abs(v - reported) < 5e-4]
    if how and how[0] != "onsager":
        wrong[case] = how[0]
res = lambda: read_json(out)
g.check("output_exists", out.is_file, "output/repair.json exists", weight=0.0)
for case, v in truth.items():
    g.check(f"t_plus_{case}", lambda case=case, v=v: (abs(res()["t_plus"][case] - v) <= 1e-3, res()["t_plus"][case]),
            f"{case}: t+ = {v:.4f} in the stated convention")
g.check("wrong_cases", lambda: (set(res()["wrong"]) == set(wrong), sorted(res()["wrong"])),
        f"cases that broke the convention: {sorted(wrong)}")
g.check("wrong_conventions", lambda: (res()["wrong"] == wrong, res()["wrong"]), f"conventions actually used: {wrong}")
g.finish()
