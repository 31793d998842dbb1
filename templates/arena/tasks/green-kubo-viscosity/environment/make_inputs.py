def write_xvg(path, cols, legends, title, xlabel, ylabel):
    import numpy as np
    with open(path, "w") as fh:
        fh.write(f"# generated for an mdbench arena task\n@    title \"{title}\"\n@    xaxis  label \"{xlabel}\"\n@    yaxis  label \"{ylabel}\"\n@TYPE xy\n")
        for i, leg in enumerate(legends):
            fh.write(f"@ s{i} legend \"{leg}\"\n")
        for row in np.column_stack(cols):
            fh.write(" ".join(f"{v:14.6f}" for v in row) + "\n")

import json
import numpy as np
rng = np.random.default_rng(17)
dt, n, tau, sd = 0.01, 40000, 0.25, 320.0          # ps, samples, ps, bar
a = np.exp(-dt / tau); b = sd * np.sqrt(1 - a * a)
P = np.empty((n, 3)); P[0] = rng.normal(0, sd, 3)
noise = rng.standard_normal((n, 3))
for i in range(1, n):
    P[i] = a * P[i - 1] + b * noise[i]
t = np.arange(n) * dt
write_xvg("pressure_offdiag.xvg", [t, P[:, 0], P[:, 1], P[:, 2]], ["Pres-XY", "Pres-XZ", "Pres-YZ"],
          "GROMACS Energies", "Time (ps)", "(bar)")
json.dump({"volume_nm3": 27.0, "temperature_K": 298.15}, open("system.json", "w"), indent=2)
