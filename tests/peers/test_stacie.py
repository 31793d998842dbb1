"""Shear viscosity: our Green-Kubo (plateau rule) vs STACIE on the same pressure tensor of the micro DE run.

STACIE (Toraman et al., J. Chem. Theory Comput. 2025, doi:10.1021/acs.jctc.5c00496) fits a model to the
low-frequency power spectrum of the five independent anisotropic stress components and returns the
autocorrelation integral with its uncertainty. Same edr, same components, same volume and temperature;
the two viscosities are compared within their combined 95 % uncertainty.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mdbench.validation.forcefield import stacie_viscosity

from _peers import dump, observable

#: the shared micro production (built once per session, ~2 min on an idle core) counts against the first test
pytestmark = pytest.mark.timeout(2400)


#: Regression (docs/validation.md, section 2): with a plateau-window floor of 2 % of the longest lag (40 fs on
#: this run) the registered rule accepted an early flat stretch of the running integral (0.2-1.0 ps) before the
#: slow structural decay and gave 0.47-0.66 mPa s where STACIE gives 0.77-0.86 on four trajectories of this
#: protocol; the registered floor is now 10 %.

def test_viscosity_agrees_with_stacie(micro_de):
    ob = observable(micro_de["results"], "viscosity")
    ours, ours_hw = ob["value"], ob["uncertainty"]["half_width_95"]
    assert ours is not None and math.isfinite(ours) and ours > 0, ob
    import MDAnalysis as mda

    u = mda.Universe(str(micro_de["tpr"]), str(micro_de["xtc"]))
    volume_nm3 = float(np.prod(u.dimensions[:3])) / 1000.0  # NVT: the box of the first frame, in nm^3
    eta, sigma = stacie_viscosity(micro_de["edr"], volume_nm3)
    combined = math.hypot(ours_hw if ours_hw is not None else math.inf, 1.96 * sigma)
    dump("viscosity", {"ours_mPa_s": ours, "ours_hw95": ours_hw, "eh_mPa_s": ob["diagnostics"].get(
        "einstein_helfand_mPa_s"), "stacie_mPa_s": eta, "stacie_hw95": 1.96 * sigma,
        "plateau_ps": ob["window"]["plateau_window_ps"], "state": ob["state"]})
    assert abs(eta - ours) <= combined, (
        f"ours {ours:.3g} +- {ours_hw:.2g} mPa s (plateau {ob['window']['plateau_window_ps']} ps, {ob['state']}) "
        f"vs STACIE {eta:.3g} +- {1.96 * sigma:.2g} mPa s")
