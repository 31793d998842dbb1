import json, os
from pathlib import Path
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
out = {}
for d in sorted((app / "runs").iterdir()):
    box = [float(x) for x in (d / "conf.gro").read_text().splitlines()[-1].split()[:3]]
    mdp = {}
    for line in (d / "md.mdp").read_text().splitlines():
        line = line.split(";")[0]
        if "=" in line:
            k, v = line.split("=", 1)
            mdp[k.strip().replace("_", "-")] = v.strip()
    rc = max(float(mdp.get(k, 0)) for k in ("rvdw", "rcoulomb", "rlist"))
    out[d.name] = {"max_cutoff_nm": rc, "min_box_nm": min(box), "ok": rc < min(box) / 2}
(app / "output").mkdir(exist_ok=True)
(app / "output" / "cutoffs.json").write_text(json.dumps(out, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("For each run took the largest of rvdw, rcoulomb and rlist and the smallest box edge (last line of "
         "conf.gro).", call=("python", {"code": "parse md.mdp and conf.gro per run"}), result=out)
bad = sorted(k for k, v in out.items() if not v["ok"])
rec.step(f"Runs violating the minimum-image condition: {bad}. Remedy: a larger box (more molecules) or cut-offs "
         "shorter than half the smallest edge.")
rec.save()
