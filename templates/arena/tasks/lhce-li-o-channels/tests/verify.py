import numpy as np
import MDAnalysis as mda
from MDAnalysis.lib.distances import distance_array
from mdbench.arena.grading import Grader, app_dir, read_json

g = Grader("mdbench/lhce-li-o-channels")
app = app_dir()
out = app / "output" / "li_o_channels.json"
u = mda.Universe(str(app / "prod" / "prod.tpr"), str(app / "prod" / "prod.xtc"))
li = u.select_atoms("resname LI")
ox = u.select_atoms("element O")
heavy = lambda a: [b for b in a.bonded_atoms if b.element != "H"]
sets = {"O_FSI": [a.index for a in ox if a.residue.resname == "FSI"],
        "O_carbonyl": [a.index for a in ox if a.residue.resname != "FSI" and len(heavy(a)) == 1 and heavy(a)[0].element == "C"],
        "O_ether": [a.index for a in ox if len(heavy(a)) == 2 and all(b.element == "C" for b in heavy(a))]}
edges = np.linspace(0.0, 0.8, 161)
centres = 0.5 * (edges[1:] + edges[:-1])
dist = {k: [] for k in sets}
vol = []
for ts in u.trajectory:
    vol.append(ts.volume / 1000.0)
    for k, idx in sets.items():
        dist[k].append(distance_array(li.positions, u.atoms[idx].positions, box=ts.dimensions) / 10.0)
expect = {}
for k, idx in sets.items():
    d = np.stack(dist[k])                                     # frames x Li x sites [nm]
    hist = np.histogram(d.ravel(), bins=edges)[0]
    shell = 4.0 / 3.0 * np.pi * (edges[1:] ** 3 - edges[:-1] ** 3)
    gr = hist / (len(vol) * len(li) * len(idx) / np.mean(vol) * shell)
    win = np.where((centres >= 0.15 - 1e-9) & (centres <= 0.30 + 1e-9))[0]
    ipk = win[np.argmax(gr[win])]
    after = np.where((centres > centres[ipk] + 1e-9) & (centres <= centres[ipk] + 0.15 + 1e-9))[0]
    imin = after[np.argmin(gr[after])]
    expect[k] = {"n_sites": len(idx), "r_peak": centres[ipk], "r_min": centres[imin], "d": d}
g.check("output_exists", out.is_file, "output/li_o_channels.json exists", weight=0.0)
res = lambda: read_json(out)
for k, e in expect.items():
    g.check(f"{k}_n_sites", lambda k=k, e=e: (res()[k]["n_sites"] == e["n_sites"], res()[k]["n_sites"]),
            f"{k}: {e['n_sites']} oxygens classified from the bonds")
    g.check(f"{k}_r_peak", lambda k=k, e=e: (abs(res()[k]["r_peak_nm"] - e["r_peak"]) <= 0.0051, res()[k]["r_peak_nm"]),
            f"{k}: first peak at {e['r_peak']:.4f} nm (+/- one bin)")
    g.check(f"{k}_r_min", lambda k=k, e=e: (abs(res()[k]["r_min_nm"] - e["r_min"]) <= 0.0051, res()[k]["r_min_nm"]),
            f"{k}: first-shell boundary at {e['r_min']:.4f} nm by the stated rule (+/- one bin)")

    def cn_ok(k=k, e=e):
        rc = float(res()[k]["r_min_nm"])
        if abs(rc - e["r_min"]) > 0.0051:
            return False, "r_min outside tolerance"
        want = float((e["d"] < rc).sum(axis=2).mean())
        return abs(res()[k]["cn"] - want) <= 0.03 * want + 1e-3, {"cn": res()[k]["cn"], "expected_at_r_min": want}
    g.check(f"{k}_cn", cn_ok, f"{k}: coordination number at the reported r_min within 3 %")
g.finish()
