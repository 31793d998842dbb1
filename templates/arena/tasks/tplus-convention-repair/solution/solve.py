import json, os
from pathlib import Path
from mdbench.arena.atif import Recorder

app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
rec = Recorder("oracle")
report = json.loads((app / "study" / "report.json").read_text())
out = {"t_plus": {}, "wrong": {}}
for case, reported in report["t_plus"].items():
    c = json.loads((app / "onsager" / f"{case}.json").read_text())
    cand = {"onsager": (c["L_pp"] - c["L_pm"]) / (c["L_pp"] + c["L_mm"] - 2 * c["L_pm"]),
            "no_cross_terms": c["L_pp"] / (c["L_pp"] + c["L_mm"]),
            "self_diffusion_ratio": c["D_Li"] / (c["D_Li"] + c["D_FSI"])}
    used = min(cand, key=lambda k: abs(cand[k] - reported))
    rec.step(f"{case}: recomputed t+ in all three conventions and matched the reported {reported}: it is the "
             f"{used} value.", call=("python", {"code": f"conventions of onsager/{case}.json"}), result=cand)
    out["t_plus"][case] = cand["onsager"]
    if used != "onsager":
        out["wrong"][case] = used
out["explanation"] = ("Reported values matched to the convention that reproduces them; the self-diffusion ratio "
                      "ignores all ion correlations and dropping L+- ignores distinct-ion correlations, both biased "
                      "where ions pair. Every case recomputed with the stated Onsager convention.")
rec.step("Repaired every case in the stated convention.", result=out)
(app / "output").mkdir(exist_ok=True)
(app / "output" / "repair.json").write_text(json.dumps(out, indent=2))
rec.save()
