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
