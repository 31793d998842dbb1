def write_xvg(path, cols, legends, title, xlabel, ylabel):
    import numpy as np
    with open(path, "w") as fh:
        fh.write(f"# generated for an mdbench arena task\n@    title \"{title}\"\n@    xaxis  label \"{xlabel}\"\n@    yaxis  label \"{ylabel}\"\n@TYPE xy\n")
        for i, leg in enumerate(legends):
            fh.write(f"@ s{i} legend \"{leg}\"\n")
        for row in np.column_stack(cols):
            fh.write(" ".join(f"{v:14.6f}" for v in row) + "\n")

import numpy as np
rng = np.random.default_rng(5)
D = 2.0e-4                                 # nm^2/ps (0.2e-5 cm^2/s)
t = np.arange(0.0, 4000.0 + 1e-9, 10.0)
t = np.concatenate([np.arange(0, 10, 1.0), t[1:]])
msd = 0.02 * (1 - np.exp(-t / 0.3)) + 6 * D * t     # fast cage rattling, then the Einstein regime
msd *= 1 + 0.01 * rng.standard_normal(t.size) * np.sqrt(t / t.max())
write_xvg("msd_li.xvg", [t, msd], ["LI"], "Mean Square Displacement", "Time (ps)", "MSD (nm\\S2\\N)")
