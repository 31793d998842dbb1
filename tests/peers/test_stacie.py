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

from _peers import dump, observable

#: the shared micro production (built once per session, ~2 min on an idle core) counts against the first test
pytestmark = pytest.mark.timeout(2400)

KB = 1.380649e-23  # J/K
BAR = 1e5  # Pa


def stacie_viscosity(edr, volume_nm3: float) -> tuple[float, float, dict]:
    """(eta [mPa s], 1-sigma [mPa s], details) from STACIE's ExpPolyModel([0, 1, 2]) (its viscosity recipe)."""
    import pyedr
    from stacie import ExpPolyModel, compute_spectrum, estimate_acint

    e = pyedr.edr_to_dict(str(edr))
    t = np.asarray(e["Time"])
    p = {k: np.asarray(e[f"Pres-{k}"]) * BAR for k in ("XX", "YY", "ZZ", "XY", "XZ", "YZ", "YX", "ZX", "ZY")}
    comps = np.array([
        (p["XY"] + p["YX"]) / 2, (p["XZ"] + p["ZX"]) / 2, (p["YZ"] + p["ZY"]) / 2,
        (p["XX"] - p["YY"]) / 2, (2 * p["ZZ"] - p["XX"] - p["YY"]) / (2 * math.sqrt(3)),
    ])
    comps -= comps.mean(axis=1, keepdims=True)
    volume_m3 = volume_nm3 * 1e-27
    temperature = float(np.mean(e["Temperature"]))
    dt_s = float(np.median(np.diff(t))) * 1e-12
    spectrum = compute_spectrum(comps, prefactors=volume_m3 / (KB * temperature), timestep=dt_s)
    result = estimate_acint(spectrum, ExpPolyModel([0, 1, 2]), rng=np.random.default_rng(7))
    return result.acint * 1e3, result.acint_std * 1e3, {"neff": int(result.neff),
                                                         "corrtime_int_ps": result.corrtime_int * 1e12}


@pytest.mark.xfail(strict=True, reason=(
    "known analysis defect (docs/validation.md, section 2): the registered plateau rule takes tau_c from the "
    "first zero of the stress ACF (~10 fs in carbonate liquids, intramolecular oscillations) and accepts a "
    "40-fs flat stretch at ~0.2 ps, before the slow structural decay; the GK running integral keeps rising "
    "(0.57 -> 1.0 mPa s from 0.2 to 2 ps on this run) and STACIE's spectral fit sees the slow part. "
    "Strict: passes (and so fails here) once the analysis' plateau rule is fixed; then remove this mark."))
def test_viscosity_agrees_with_stacie(micro_de):
    ob = observable(micro_de["results"], "viscosity")
    ours, ours_hw = ob["value"], ob["uncertainty"]["half_width_95"]
    assert ours is not None and math.isfinite(ours) and ours > 0, ob
    import MDAnalysis as mda

    u = mda.Universe(str(micro_de["tpr"]), str(micro_de["xtc"]))
    volume_nm3 = float(np.prod(u.dimensions[:3])) / 1000.0  # NVT: the box of the first frame, in nm^3
    eta, sigma, info = stacie_viscosity(micro_de["edr"], volume_nm3)
    combined = math.hypot(ours_hw if ours_hw is not None else math.inf, 1.96 * sigma)
    dump("viscosity", {"ours_mPa_s": ours, "ours_hw95": ours_hw, "eh_mPa_s": ob["diagnostics"].get(
        "einstein_helfand_mPa_s"), "stacie_mPa_s": eta, "stacie_hw95": 1.96 * sigma, **info,
        "plateau_ps": ob["window"]["plateau_window_ps"], "state": ob["state"]})
    assert abs(eta - ours) <= combined, (ours, ours_hw, eta, sigma)
