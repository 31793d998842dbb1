import json
import numpy as np
rng = np.random.default_rng(7)
case = {"LI": 3, "FSI": 3, "DMC": 5}
gro_counts = {"LI": 3, "FSI": 3, "DMC": 4}      # one DMC lost during packing
natoms = {"LI": 1, "FSI": 9, "DMC": 12}
names = {"LI": ["LI"], "FSI": ["F1", "S1", "O1", "O2", "N", "S2", "O3", "O4", "F2"],
         "DMC": ["C1", "H1", "H2", "H3", "O1", "C2", "O2", "O3", "C3", "H4", "H5", "H6"]}
lines, res, atom = [], 0, 0
for mol in ("LI", "FSI", "DMC"):
    for _ in range(gro_counts[mol]):
        res += 1
        centre = rng.uniform(0.3, 2.2, 3)
        for name in names[mol]:
            atom += 1
            x, y, z = centre + rng.normal(0, 0.08, 3)
            lines.append(f"{res:5d}{mol:<5s}{name:>5s}{atom:5d}{x:8.3f}{y:8.3f}{z:8.3f}")
with open("conf.gro", "w") as fh:
    fh.write("DE micro box\n" + f"{atom:5d}\n" + "\n".join(lines) + "\n   2.50000   2.50000   2.50000\n")
json.dump({"case": "DE", "counts": case}, open("case.json", "w"), indent=2)
open("topol.top", "w").write("""#include "forcefield.itp"
#include "fsi_li.itp"
#include "dmc.itp"

[ system ]
DE micro

[ molecules ]
; name  count
DMC     5
LI      3
FSI     3
""")
