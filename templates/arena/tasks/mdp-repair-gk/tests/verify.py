def read_mdp(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        line = line.split(";")[0]
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip().lower().replace("_", "-")] = " ".join(v.split())
    return out

from mdbench.arena.grading import Grader, app_dir
g = Grader("mdbench/mdp-repair-gk")
app = app_dir()
out = app / "output" / "prod.mdp"
orig = read_mdp(app / "prod.mdp")
dt = float(orig["dt"])
g.check("output_exists", out.is_file, "output/prod.mdp exists", weight=0.0)
new = lambda: read_mdp(out)
g.check("single_comm_group", lambda: (new().get("comm-grps", "System").lower() in ("system",), new().get("comm-grps")),
        "COM motion removed for the whole system (comm-grps = System or default)")
g.check("comm_mode_kept", lambda: new().get("comm-mode", "linear").lower() == "linear", "comm-mode stays Linear (not None)")
def energy_often():
    n = int(new()["nstenergy"]); return n * dt <= 0.020 + 1e-12, n
g.check("nstenergy_dense", energy_often, "pressure tensor written at least every 20 fs (nstenergy x dt <= 0.02 ps)")
def calc_consistent():
    n, c = int(new()["nstenergy"]), int(new().get("nstcalcenergy", 100))
    return c <= n and n % c == 0, (n, c)
g.check("nstcalcenergy_divides", calc_consistent, "nstcalcenergy <= nstenergy and divides it")
def rest_unchanged():
    a = {k: v for k, v in orig.items() if k not in ("comm-grps", "nstenergy", "nstcalcenergy")}
    b = {k: v for k, v in new().items() if k not in ("comm-grps", "nstenergy", "nstcalcenergy")}
    return a == b, sorted(set(a.items()) ^ set(b.items()))
g.check("rest_unchanged", rest_unchanged, "every other parameter is unchanged")
g.check("changes_documented", lambda: (app / "output" / "changes.md").read_text().strip() != "", "output/changes.md explains the changes")
g.finish()
