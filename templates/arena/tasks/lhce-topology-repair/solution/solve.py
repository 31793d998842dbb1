import json, os, subprocess, tempfile
from pathlib import Path
from mdbench.arena.atif import Recorder

app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
system, out = app / "system", app / "output"
out.mkdir(exist_ok=True)
rec = Recorder("oracle")
lines = (system / "LHCE.gro").read_text().splitlines()
n = int(lines[1])
order, counts, last = [], {}, None
for line in lines[2:2 + n]:
    resid, name = int(line[:5]), line[5:10].strip()
    if (resid, name) != last:
        if not order or order[-1] != name:
            order.append(name)
        counts[name] = counts.get(name, 0) + 1
        last = (resid, name)
rec.step("Counted molecules in LHCE.gro by residue, in order of appearance, and compared with [ molecules ].",
         call=("python", {"code": "parse LHCE.gro residues"}), result={"order": order, "counts": counts})
head = (system / "topol.top").read_text().split("[ molecules ]")[0]
head = head.replace('#include "', f'#include "{system}/')
(out / "topol.top").write_text(head + "[ molecules ]\n; name  count\n" + "".join(f"{k:<6}{counts[k]}\n" for k in order))
scratch = Path(tempfile.mkdtemp())
r = subprocess.run(["gmx", "-quiet", "grompp", "-f", str(system / "em.mdp"), "-c", str(system / "LHCE.gro"),
                    "-p", str(out / "topol.top"), "-o", str(scratch / "check.tpr"), "-po", str(scratch / "check.mdp"),
                    "-maxwarn", "0"], capture_output=True, text=True, cwd=scratch)
rec.step("Ran gmx grompp -maxwarn 0 on the repaired topology and read its output for warnings and notes.",
         call=("bash", {"command": "gmx grompp -f em.mdp -c LHCE.gro -p topol.top -maxwarn 0"}),
         result=(r.stdout + r.stderr)[-1500:])
(out / "changes.md").write_text("- [ molecules ]: DMC and TTE were swapped relative to the coordinate file; grompp "
                                "assigns parameters by position, so the order must follow LHCE.gro.\n"
                                "- FSI count was 21; the box holds 20 FSI molecules.\n")
rec.save()
