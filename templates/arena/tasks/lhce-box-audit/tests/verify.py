import re
from mdbench.arena.grading import Grader, app_dir, read_json

g = Grader("mdbench/lhce-box-audit")
app = app_dir()
box = app / "box"
out = app / "output" / "box_audit.json"


def itp_molecules(text):
    """{moleculetype: (charge, mass)} from [ atoms ] sections (columns: nr type resnr res atom cgnr charge mass)."""
    mols, name, section = {}, None, None
    for raw in text.splitlines():
        code = raw.split(";")[0].strip()
        if not code or code.startswith("#"):
            continue
        m = re.match(r"\[\s*(\w+)\s*\]", code)
        if m:
            section = m.group(1).lower()
            continue
        f = code.split()
        if section == "moleculetype":
            name = f[0]; mols[name] = [0.0, 0.0]
        elif section == "atoms" and name:
            mols[name][0] += float(f[6]); mols[name][1] += float(f[7])
    return mols


top = (box / "topol.top").read_text()
mols = {}
for inc in re.findall(r'#include\s+"([^"]+)"', top):
    mols.update(itp_molecules((box / inc).read_text()))
counts = {}
for raw in top.split("[ molecules ]")[1].splitlines():
    f = raw.split(";")[0].split()
    if len(f) == 2:
        counts[f[0]] = int(f[1])
edges = [float(x) for x in (box / "LHCE.gro").read_text().splitlines()[-1].split()[:3]]
mass = sum(counts[k] * mols[k][1] for k in counts)
density = mass / 6.02214076e23 / (edges[0] * edges[1] * edges[2] * 1e-21)
total = sum(counts[k] * mols[k][0] for k in counts)
res = lambda: read_json(out)
g.check("output_exists", out.is_file, "output/box_audit.json exists", weight=0.0)
g.check("counts", lambda: (res()["counts"] == counts, res()["counts"]), f"molecule counts {counts}")
g.check("molecule_charges", lambda: (all(abs(res()["molecule_charge_e"][k] - mols[k][0]) <= 1e-4 for k in counts),
                                     res()["molecule_charge_e"]),
        "per-molecule charges " + ", ".join(f"{k} {mols[k][0]:+.2f}" for k in counts))
g.check("total_charge", lambda: (abs(res()["total_charge_e"] - total) <= 1e-4, res()["total_charge_e"]), "net charge 0")
g.check("density", lambda: (abs(res()["density_g_cm3"] - density) <= 0.005 * density, res()["density_g_cm3"]),
        f"density {density:.4f} g/cm3 within 0.5 %")
g.check("min_edge", lambda: (abs(res()["min_edge_nm"] - min(edges)) <= 1e-4, res()["min_edge_nm"]),
        f"shortest edge {min(edges):.4f} nm")
g.check("max_cutoff", lambda: (abs(res()["max_cutoff_nm"] - min(edges) / 2) <= 1e-4, res()["max_cutoff_nm"]),
        f"largest cut-off {min(edges) / 2:.4f} nm")
g.check("rc_check", lambda: (res()["rc_1.2_ok"] is (2.5 <= min(edges) + 1e-9), res()["rc_1.2_ok"]),
        "2 x 1.2 + 0.1 nm against the shortest edge")
g.finish()
