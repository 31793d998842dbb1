import json, os
from pathlib import Path
import numpy as np
import MDAnalysis as mda
from MDAnalysis.analysis.rdf import InterRDF
from MDAnalysis.lib.distances import distance_array
from mdbench.arena.atif import Recorder

app = Path(os.environ.get("ARENA_APP_DIR", "/app"))
rec = Recorder("oracle")
u = mda.Universe(str(app / "prod" / "prod.tpr"), str(app / "prod" / "prod.xtc"))
li = u.select_atoms("resname LI")


def channel(atom):
    if atom.residue.resname == "FSI":
        return "O_FSI"
    heavy = [b for b in atom.bonded_atoms if b.element != "H"]
    if len(heavy) == 1 and heavy[0].element == "C":
        return "O_carbonyl"
    if len(heavy) == 2 and all(b.element == "C" for b in heavy):
        return "O_ether"
    return "other"


groups = {}
for a in u.select_atoms("element O"):
    groups.setdefault(channel(a), []).append(a.index)
rec.step("Classified oxygens from the tpr's bonds and elements, not atom names.",
         call=("python", {"code": "atom.bonded_atoms per O"}), result={k: len(v) for k, v in groups.items()})
out = {}
for name in ("O_FSI", "O_carbonyl", "O_ether"):
    sel = u.atoms[groups[name]]
    rdf = InterRDF(li, sel, nbins=160, range=(0.0, 8.0)).run()          # MDAnalysis works in Angstrom
    r, g = rdf.results.bins / 10.0, rdf.results.rdf
    win = np.where((r >= 0.15 - 1e-9) & (r <= 0.30 + 1e-9))[0]
    ipk = win[np.argmax(g[win])]
    after = np.where((r > r[ipk] + 1e-9) & (r <= r[ipk] + 0.15 + 1e-9))[0]
    imin = after[np.argmin(g[after])]
    counts = [(distance_array(li.positions, sel.positions, box=ts.dimensions) / 10.0 < r[imin]).sum(axis=1).mean()
              for ts in u.trajectory]
    out[name] = {"n_sites": len(sel), "r_peak_nm": round(float(r[ipk]), 5), "r_min_nm": round(float(r[imin]), 5),
                 "cn": float(np.mean(counts))}
    rec.step(f"{name}: MDAnalysis InterRDF (160 bins on 0-0.8 nm); printed g(r) from the peak to the minimum to "
             "check the minimum is the lowest point of the stated window, then counted neighbours directly.",
             call=("python", {"code": f"InterRDF(li, {name})"}),
             result={f"{x:.4f}": round(float(y), 3) for x, y in zip(r[ipk:imin + 3], g[ipk:imin + 3])})
(app / "output").mkdir(exist_ok=True)
(app / "output" / "li_o_channels.json").write_text(json.dumps(out, indent=2))
rec.step("Carbonyl oxygens dominate the first shell per site; ether oxygens contribute little.", result=out)
rec.save()
