import json
import numpy as np
r = np.round(np.arange(0.0, 1.2 + 1e-9, 0.002), 6)
g = np.zeros_like(r)
m = r > 0.16
g[m] = 1.0 + 11.0 * np.exp(-((r[m] - 0.206) ** 2) / (2 * 0.011 ** 2)) - 0.9 * np.exp(-((r[m] - 0.30) ** 2) / (2 * 0.03 ** 2)) \
    + 0.6 * np.exp(-((r[m] - 0.44) ** 2) / (2 * 0.04 ** 2)) - 0.15 * np.exp(-((r[m] - 0.62) ** 2) / (2 * 0.05 ** 2))
g[m] *= 1.0 - np.exp(-((r[m] - 0.16) / 0.02) ** 2)
g = np.clip(g, 0, None)
with open("rdf_li_ofsi.xvg", "w") as fh:
    fh.write("# gmx rdf -ref LI -sel O_FSI\n@    title \"Radial distribution\"\n@    xaxis  label \"r (nm)\"\n@    yaxis  label \"g(r)\"\n")
    for a, b in zip(r, g):
        fh.write(f"{a:10.3f} {b:12.6f}\n")
json.dump({"n_O_FSI": 4 * 40, "n_Li": 40, "volume_nm3": 42.875}, open("system.json", "w"), indent=2)
