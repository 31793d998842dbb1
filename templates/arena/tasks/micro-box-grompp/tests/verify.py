import os, re, shutil, subprocess, tempfile
from pathlib import Path
def grompp(out_dir):
    """Run gmx grompp -maxwarn 0 on the agent's files; return (rc, text, n_warnings)."""
    tmp = Path(tempfile.mkdtemp())
    r = subprocess.run(["gmx", "-quiet", "grompp", "-f", str(out_dir / "em.mdp"), "-c", str(out_dir / "conf.gro"),
                        "-p", str(out_dir / "topol.top"), "-o", str(tmp / "em.tpr"), "-po", str(tmp / "mdout.mdp"),
                        "-maxwarn", "0"], cwd=out_dir, capture_output=True, text=True, timeout=240)
    text = r.stdout + r.stderr
    m = re.search(r"There (?:was|were) (\d+) warning", text)
    shutil.rmtree(tmp, ignore_errors=True)
    return r.returncode, text, int(m.group(1)) if m else 0

from mdbench.arena.grading import Grader, app_dir
g = Grader("mdbench/micro-box-grompp")
out = app_dir() / "output"
g.check("files_exist", lambda: all((out / f).is_file() for f in ("conf.gro", "topol.top", "em.mdp")), "conf.gro, topol.top, em.mdp exist", weight=0.0)
state = {}
def run_grompp():
    state["rc"], state["text"], state["nwarn"] = grompp(out)
    return state["rc"] == 0, state["text"][-400:]
g.check("grompp_ok", run_grompp, "gmx grompp -maxwarn 0 succeeds")
g.check("zero_warnings", lambda: state["rc"] == 0 and state["nwarn"] == 0 and "WARNING" not in state["text"], "grompp reports zero warnings")
def counts():
    lines = (out / "conf.gro").read_text().splitlines()
    n = int(lines[1]); names = [l[5:10].strip() for l in lines[2:2 + n]]
    li, cl = names.count("LI"), names.count("CL")
    return li == 3 and cl == 3, {"LI": li, "CL": cl}
g.check("ion_counts", counts, "exactly 3 LI and 3 CL in conf.gro")
def neutral_and_box():
    text = state.get("text", "")
    box = [float(x) for x in (out / "conf.gro").read_text().splitlines()[-1].split()[:3]]
    nonzero = re.search(r"non-zero total charge", text)
    return (not nonzero) and all(abs(b - 2.5) < 0.05 for b in box), box
g.check("neutral_cubic_box", neutral_and_box, "system is neutral and the box is a 2.5 nm cube")
def em_params():
    mdp = {}
    for line in (out / "em.mdp").read_text().splitlines():
        if "=" in line.split(";")[0]:
            k, v = line.split(";")[0].split("=", 1); mdp[k.strip().lower().replace("_", "-")] = v.strip()
    return (mdp.get("integrator") == "steep" and mdp.get("coulombtype", "").lower() == "pme"
            and float(mdp.get("rcoulomb", 0)) == 1.0 and float(mdp.get("rvdw", 0)) == 1.0), mdp
g.check("em_mdp", em_params, "em.mdp: steep, PME, rcoulomb = rvdw = 1.0 nm")
g.finish()
