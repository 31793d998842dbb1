def write_xvg(path, cols, legends, title, xlabel, ylabel):
    import numpy as np
    with open(path, "w") as fh:
        fh.write(f"# generated for an mdbench arena task\n@    title \"{title}\"\n@    xaxis  label \"{xlabel}\"\n@    yaxis  label \"{ylabel}\"\n@TYPE xy\n")
        for i, leg in enumerate(legends):
            fh.write(f"@ s{i} legend \"{leg}\"\n")
        for row in np.column_stack(cols):
            fh.write(" ".join(f"{v:14.6f}" for v in row) + "\n")

import numpy as np
rng = np.random.default_rng(9)
t = np.concatenate([np.arange(0, 10, 1.0), np.arange(10, 400.0 + 1e-9, 5.0)])
# caged anion: fast rattling then sub-diffusive creep (slope ~0.6), never linear within 400 ps
msd = 0.02 * (1 - np.exp(-t / 0.8)) + 0.0009 * np.power(np.maximum(t, 1e-9), 0.6)
msd *= 1 + 0.004 * rng.standard_normal(t.size)
msd[0] = 0.0
write_xvg("msd_fsi.xvg", [t, msd], ["FSI"], "Mean Square Displacement", "Time (ps)", "MSD (nm\\S2\\N)")
