import numpy as np
import MDAnalysis as mda
from MDAnalysis.lib.distances import distance_array
from mdbench.arena.grading import Grader, app_dir, read_json

g = Grader("mdbench/lhce-ion-association")
app = app_dir()
out = app / "output" / "association.json"
u = mda.Universe(str(app / "prod" / "prod.tpr"), str(app / "prod" / "prod.xtc"))
li = u.select_atoms("resname LI")
fsi = u.select_atoms("resname FSI").residues
o_idx = [r.atoms.select_atoms("element O").indices for r in fsi]
counts = []
for ts in u.trajectory:
    if ts.time < 0.5 - 1e-6:
        continue
    counts.append([int((distance_array(li.positions, u.atoms[o].positions, box=ts.dimensions).min(axis=1) < 3.0).sum())
                   for o in o_idx])
n = np.array(counts)
classes = {"SSIP": n == 0, "CIP": n == 1, "AGG": n >= 2}
nb = len(n) // 4
block_vals = {k: [float(v[i * nb:(i + 1) * nb].mean()) for i in range(4)] for k, v in classes.items()}
res = lambda: read_json(out)
g.check("output_exists", out.is_file, "output/association.json exists", weight=0.0)
g.check("n_frames", lambda: (res()["n_frames"] == len(n), res()["n_frames"]), f"{len(n)} frames with t >= 0.5 ps")
for k, v in classes.items():
    want = float(v.mean())
    g.check(f"fraction_{k}", lambda k=k, want=want: (abs(res()["fractions"][k] - want) <= 0.003, res()["fractions"][k]),
            f"{k} fraction {want:.4f} +/- 0.003")
    g.check(f"blocks_{k}", lambda k=k: (np.allclose(res()["blocks"][k], block_vals[k], atol=0.005), res()["blocks"][k]),
            f"{k} block fractions {np.round(block_vals[k], 4).tolist()}")
    hw = 3.182 * np.std(block_vals[k], ddof=1) / 2.0
    g.check(f"half_width_{k}", lambda k=k, hw=hw: (abs(res()["half_width_95"][k] - hw) <= 0.05 * hw + 0.002,
                                                    res()["half_width_95"][k]), f"{k} half width {hw:.4f}")
g.check("mean_li_per_fsi", lambda: (abs(res()["mean_li_per_fsi"] - n.mean()) <= 0.01 * n.mean(), res()["mean_li_per_fsi"]),
        f"mean distinct Li per FSI {n.mean():.3f} within 1 %")
g.finish()
