from mdbench.arena.grading import Grader, app_dir, read_json
g = Grader("mdbench/cutoff-minimum-image")
app = app_dir()
out = app / "output" / "cutoffs.json"
g.check("output_exists", out.is_file, "output/cutoffs.json exists", weight=0.0)
for d in sorted((app / "runs").iterdir()):
    box = [float(x) for x in (d / "conf.gro").read_text().splitlines()[-1].split()[:3]]
    mdp = {}
    for line in (d / "md.mdp").read_text().splitlines():
        if "=" in line.split(";")[0]:
            k, v = line.split(";")[0].split("=", 1)
            mdp[k.strip().replace("_", "-")] = float(v) if v.strip().replace(".", "").isdigit() else v
    rc = max(mdp[k] for k in ("rvdw", "rcoulomb", "rlist"))
    def check(name=d.name, rc=rc, lmin=min(box)):
        r = read_json(out)[name]
        return (abs(r["max_cutoff_nm"] - rc) < 1e-6 and abs(r["min_box_nm"] - lmin) < 1e-6
                and r["ok"] is (rc < lmin / 2)), r
    g.check(f"{d.name}_verdict", check, f"{d.name}: cut-off, box edge and ok flag are right")
g.finish()
