def write_xvg(path, cols, legends, title, xlabel, ylabel):
    import numpy as np
    with open(path, "w") as fh:
        fh.write(f"# generated for an mdbench arena task\n@    title \"{title}\"\n@    xaxis  label \"{xlabel}\"\n@    yaxis  label \"{ylabel}\"\n@TYPE xy\n")
        for i, leg in enumerate(legends):
            fh.write(f"@ s{i} legend \"{leg}\"\n")
        for row in np.column_stack(cols):
            fh.write(" ".join(f"{v:14.6f}" for v in row) + "\n")

import numpy as np
rng = np.random.default_rng(3)
t = np.arange(0.0, 2000.0 + 1e-9, 2.0)
def series(rho_inf, rho_tau, drift_rel, pot_inf):
    rho = rho_inf * (1 - 0.08 * np.exp(-t / rho_tau)) * (1 + drift_rel * t / t[-1]) + rng.normal(0, 1.5, t.size)
    pot = pot_inf * (1 - 0.03 * np.exp(-t / rho_tau)) + rng.normal(0, abs(pot_inf) * 4e-4, t.size)
    T = 298.15 + rng.normal(0, 2.0, t.size)
    return rho, pot, T
for case, args in {"DE": (1190.0, 120.0, 0.0, -61000.0), "LHCE": (1420.0, 900.0, 0.004, -83000.0)}.items():
    rho, pot, T = series(*args)
    write_xvg(f"energy_{case}.xvg", [t, pot, T, rho], ["Potential", "Temperature", "Density"],
              "GROMACS Energies", "Time (ps)", "(kJ/mol), (K), (kg/m^3)")
