import json
import re
from mdbench.arena.grading import Grader, app_dir, read_json
import MDAnalysis as mda
g = Grader("mdbench/box-count-audit")
app = app_dir()
out = app / "output" / "audit.json"
u = mda.Universe(str(app / "conf.gro"))
gro = {}
order = []
for r in u.residues:
    gro[r.resname] = gro.get(r.resname, 0) + 1
    if r.resname not in order:
        order.append(r.resname)
# the [ molecules ] block cut out with regular expressions (the verifier's own reading of the topology)
block = re.split(r"^\s*\[\s*molecules\s*\]\s*$", (app / "topol.top").read_text(), flags=re.M | re.I)[-1]
block = re.split(r"^\s*\[", block, flags=re.M)[0]
top, top_order = {}, []
for entry in (line.partition(";")[0].split() for line in block.splitlines()):
    if len(entry) >= 2:
        top[entry[0]] = int(entry[1])
        top_order.append(entry[0])
case = read_json(app / "case.json")["counts"]
g.check("output_exists", out.is_file, "output/audit.json exists and is JSON", weight=0.0)
res = lambda: read_json(out)
g.check("gro_counts", lambda: (res()["gro_counts"] == gro, res()["gro_counts"]), "gro counts equal an MDAnalysis count")
g.check("top_counts", lambda: res()["top_counts"] == top, "topology counts read from [ molecules ]")
g.check("counts_match", lambda: res()["counts_match"] is (gro == case == top), "counts_match flag is right")
g.check("order_matches", lambda: res()["order_matches"] is (order == top_order), "order_matches flag is right")
want = sorted(m for m in set(case) | set(gro) if case.get(m, 0) != gro.get(m, 0))
g.check("mismatches", lambda: sorted(res()["mismatches"]) == want, "mismatches lists exactly the molecules whose count differs")
g.finish()
