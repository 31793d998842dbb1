import json, os
from pathlib import Path
app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
natoms = {"LI": 1, "FSI": 9, "DMC": 12}
lines = (app / "conf.gro").read_text().splitlines()
n = int(lines[1])
seen, order = {}, []
for line in lines[2:2 + n]:
    resid, resname = int(line[:5]), line[5:10].strip()
    seen.setdefault(resname, set()).add(resid)
    if resname not in order:
        order.append(resname)
gro = {k: len(v) for k, v in seen.items()}
top, section, top_order = {}, None, []
for raw in (app / "topol.top").read_text().splitlines():
    code = raw.split(";")[0].strip()
    if code.startswith("["):
        section = code.strip("[] ").lower()
    elif section == "molecules" and code:
        name, cnt = code.split()[:2]
        top[name] = int(cnt); top_order.append(name)
case = json.loads((app / "case.json").read_text())["counts"]
mism = sorted(m for m in set(case) | set(gro) if case.get(m, 0) != gro.get(m, 0))
out = {"gro_counts": gro, "top_counts": top,
       "counts_match": gro == case == top, "order_matches": order == top_order, "mismatches": mism}
(app / "output").mkdir(exist_ok=True)
(app / "output" / "audit.json").write_text(json.dumps(out, indent=2))

# --- the reference solution's own trajectory (ATIF), what a process judge reads --------------------
from mdbench.arena.atif import Recorder
rec = Recorder("oracle")
rec.step("Counted molecules by residue number for each residue name of conf.gro, in order of appearance, and "
         "read the [ molecules ] section of topol.top.", call=("python", {"code": "parse conf.gro residues; topol.top"}),
         result={"gro": gro, "top": top, "order": order, "top_order": top_order})
rec.step(f"Compared with case.json: mismatches {mism}, order matches {order == top_order}. With such a mismatch "
         "grompp fails (atom count differs) or, when counts agree but order does not, silently assigns the wrong "
         "parameters to atoms.", result=out)
rec.save()
