def write_xvg(path, cols, legends, title, xlabel, ylabel):
    import numpy as np
    with open(path, "w") as fh:
        fh.write(f"# generated for an mdbench arena task\n@    title \"{title}\"\n@    xaxis  label \"{xlabel}\"\n@    yaxis  label \"{ylabel}\"\n@TYPE xy\n")
        for i, leg in enumerate(legends):
            fh.write(f"@ s{i} legend \"{leg}\"\n")
        for row in np.column_stack(cols):
            fh.write(" ".join(f"{v:14.6f}" for v in row) + "\n")

import numpy as np
rng = np.random.default_rng(13)
t = np.arange(0.0, 5000.0 + 1e-9, 10.0)
write_xvg("run/energy.xvg", [t, -83000 + rng.normal(0, 40, t.size), 298.15 + rng.normal(0, 2, t.size),
          1 + rng.normal(0, 180, t.size), 1421 + rng.normal(0, 1.5, t.size)],
          ["Potential", "Temperature", "Pressure", "Density"], "GROMACS Energies", "Time (ps)", "")
