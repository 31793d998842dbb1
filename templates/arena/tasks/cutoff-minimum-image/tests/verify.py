import re
from mdbench.arena.grading import Grader, app_dir, read_json
g = Grader("mdbench/cutoff-minimum-image")
app = app_dir()
out = app / "output" / "cutoffs.json"
g.check("output_exists", out.is_file, "output/cutoffs.json exists", weight=0.0)
for d in sorted(p for p in (app / "runs").glob("*") if p.is_dir()):
    # box: the last non-empty line of the .gro; cut-offs: key = value pairs of the .mdp (the verifier's own parse)
    gro_lines = [line for line in (d / "conf.gro").read_text().split("\n") if line.strip()]
    box = list(map(float, gro_lines[-1].split()[0:3]))
    pairs = re.findall(r"^\s*([\w-]+)\s*=\s*([^;\n]*?)\s*(?:;.*)?$", (d / "md.mdp").read_text(), flags=re.M)
    mdp = {k.replace("_", "-"): v for k, v in pairs}
    rc = max(float(mdp[k]) for k in ("rvdw", "rcoulomb", "rlist"))
    def check(name=d.name, rc=rc, lmin=min(box)):
        r = read_json(out)[name]
        return (abs(r["max_cutoff_nm"] - rc) < 1e-6 and abs(r["min_box_nm"] - lmin) < 1e-6
                and r["ok"] is (rc < lmin / 2)), r
    g.check(f"{d.name}_verdict", check, f"{d.name}: cut-off, box edge and ok flag are right")
g.finish()
