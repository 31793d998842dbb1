import re, shutil, subprocess, tempfile
from pathlib import Path
from mdbench.arena.grading import Grader, app_dir

g = Grader("mdbench/lhce-topology-repair")
app = app_dir()
system, out = app / "system", app / "output"
state = {}


def grompp():
    work = Path(tempfile.mkdtemp())
    for f in system.iterdir():
        shutil.copy(f, work / f.name)
    shutil.copy(out / "topol.top", work / "topol.top")
    r = subprocess.run(["gmx", "-quiet", "grompp", "-f", "em.mdp", "-c", "LHCE.gro", "-p", "topol.top",
                        "-o", "em.tpr", "-maxwarn", "0"], cwd=work, capture_output=True, text=True, timeout=240)
    state["text"] = r.stdout + r.stderr
    m = re.search(r"There (?:was|were) (\d+) warning", state["text"])
    state["warnings"] = int(m.group(1)) if m else 0
    state["rc"] = r.returncode
    shutil.rmtree(work, ignore_errors=True)
    return r.returncode == 0, state["text"][-400:]


def molecules_follow_gro():
    lines = (system / "LHCE.gro").read_text().splitlines()
    seq, last = [], None
    for line in lines[2:2 + int(lines[1])]:
        key = (int(line[:5]), line[5:10].strip())
        if key != last:
            seq.append(key[1]); last = key
    runs = []
    for name in seq:
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    top = [l.split(";")[0].split() for l in (out / "topol.top").read_text().split("[ molecules ]")[1].splitlines()]
    top = [[a, int(b)] for a, b in (f for f in top if len(f) == 2)]
    return top == runs, top


g.check("files_exist", lambda: (out / "topol.top").is_file() and (out / "changes.md").is_file(),
        "output/topol.top and output/changes.md exist", weight=0.0)
g.check("molecules_section", molecules_follow_gro, "[ molecules ] follows the order and counts of LHCE.gro")
g.check("grompp_ok", grompp, "gmx grompp -maxwarn 0 succeeds with the repaired topology")
g.check("zero_warnings", lambda: state.get("rc") == 0 and state.get("warnings") == 0, "grompp reports zero warnings")
g.finish()
