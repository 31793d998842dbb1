"""Self-diffusion of every species: our analysis vs kinisi on the same micro DE trajectory and fit window.

kinisi (McCluskey et al., J. Chem. Phys. 162, 074103 (2025), doi:10.1063/5.0260928) estimates D from the MSD
with its full covariance (Bayesian generalised least squares). Same molecules (centres of mass), same
frames, same fit window (ours, from results.json); both D are compared within the combined 95 % uncertainty.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from _peers import dump, observable

#: the shared micro production (built once per session, ~2 min on an idle core) counts against the first test
pytestmark = pytest.mark.timeout(2400)

SPECIES = {"LI": "LI", "FSI": "FSI", "DMC": "DMC"}  # our species label -> resname
#: On 40 ps no species has a linear MSD over its fit window (the ions are caged: Li+ MSD ~1.7 A^2 at 4 ps; beta
#: of DMC, too, spans ~0.6-1.3 over the fixture's widened band). On a curved MSD the slope depends on how lags are
#: weighted -- kinisi's generalised least squares (covariance of a diffusive MSD) leans on the long-lag end, where
#: the local slope is lowest, our ordinary least squares weighs the window evenly. A gap between the two estimates
#: is therefore explained, not a failure, when (a) the MSD both estimators fit is the same -- the ordinary
#: least-squares slope of kinisi's own MSD over our window reproduces our D within the combined 95 % -- and
#: (b) the window is not diffusive by the registered beta band, so the study's registered rule does not call
#: that D converged (docs/validation.md, "kinisi"). Where beta stays in the band the two must agree.


def kinisi_D(universe, resname: str, lo_ps: float, hi_ps: float, dt_fs: float) -> tuple[np.ndarray, np.ndarray,
                                                                                         np.ndarray]:
    """(posterior samples of D [m^2/s], lags [ps], kinisi's MSD [nm^2]) of the centres of mass of ``resname``
    (kinisi, MSD over lags <= hi)."""
    import scipp as sc
    from kinisi.analyze import DiffusionAnalyzer

    res = universe.select_atoms(f"resname {resname}").residues
    idx = np.array([r.atoms.ix for r in res])
    masses = res[0].atoms.masses
    step_skip = int(round(float(universe.trajectory.dt) * 1000.0 / dt_fs))
    frame_ps = step_skip * dt_fs / 1000.0
    n_lags = int(round(hi_ps / frame_ps))
    # kinisi accepts only lags on its own grid k * time_step * step_skip
    dt = sc.arange("time interval", 1, n_lags + 1, 1) * sc.scalar(dt_fs / 1000.0, unit="ps") * step_skip
    an = DiffusionAnalyzer.from_universe(
        universe, time_step=sc.scalar(dt_fs / 1000.0, unit="ps"), step_skip=sc.scalar(step_skip),
        dt=dt, specie_indices=sc.array(dims=["particle", "atoms in particle"], values=idx),
        masses=sc.array(dims=["atoms in particle"], values=masses), progress=False)
    an.diffusion(start_dt=sc.scalar(lo_ps, unit="ps"), progress=False, random_state=np.random.RandomState(7))
    msd = an.msd.data if hasattr(an.msd, "data") else an.msd
    return (np.asarray(sc.to_unit(an.D, "m^2/s").values), np.asarray(sc.to_unit(an.dt, "ps").values),
            np.asarray(sc.to_unit(msd, "nm^2").values))


def ols_D(lag_ps: np.ndarray, msd_nm2: np.ndarray, lo_ps: float, hi_ps: float) -> float:
    """D [m^2/s] from the ordinary least-squares slope of an MSD over [lo, hi] (our ``fit_slope``)."""
    from mdbench.analysis.diffusion import fit_slope
    from mdbench.analysis.units import NM2_PER_PS_TO_M2_PER_S

    return fit_slope(lag_ps, msd_nm2, lo_ps, hi_ps) / 6.0 * NM2_PER_PS_TO_M2_PER_S


@pytest.mark.parametrize("species", sorted(SPECIES))
def test_self_diffusion_agrees_with_kinisi(micro_de, species):
    import MDAnalysis as mda

    doc = micro_de["results"]
    ob = observable(doc, f"self_diffusion/{species}")
    ours, ours_hw = ob["value"], ob["uncertainty"]["half_width_95"]
    lo, hi = ob["window"]["lo_ps"], ob["window"]["hi_ps"]
    if ours is None:
        # 40 ps is too short for the ions' registered diffusive window; ours must say so (SI), not guess
        assert ob["state"] == "SI" and "window" in ob["reason"], ob
        pytest.skip(f"our analysis withholds D({species}) on 40 ps (SI: {ob['reason'][:80]}); nothing to compare")
    assert math.isfinite(ours) and ours > 0, ob
    assert lo is not None and hi is not None and hi > lo, ob["window"]
    u = mda.Universe(str(micro_de["tpr"]), str(micro_de["xtc"]))
    samples, k_lag, k_msd = kinisi_D(u, SPECIES[species], lo, hi, dt_fs=2.0)
    k_mid = float(np.median(samples))
    k_lo, k_hi = np.percentile(samples, [2.5, 97.5])
    k_hw = float(k_hi - k_lo) / 2.0
    combined = math.hypot(ours_hw if ours_hw is not None else math.inf, k_hw)
    dump(f"D {species}", {"ours_m2_s": ours, "ours_hw95": ours_hw, "kinisi_m2_s": k_mid, "kinisi_hw95": k_hw,
                          "window_ps": [lo, hi], "rel_diff": k_mid / ours - 1})
    if k_lo <= 0.0:
        # kinisi's 95 % interval reaches zero: the peer cannot resolve D on this trajectory (8 FSI- over 40 ps
        # with its full-covariance weighting), so no value comparison is meaningful; ours must then not claim
        # convergence either (docs/validation.md, "kinisi").
        assert ob["state"] != "C", (ob["state"], ours, ours_hw, k_mid, k_hw)
        pytest.skip(f"kinisi cannot resolve D({species}) here (95 % interval {k_lo:.2g}..{k_hi:.2g} m^2/s); "
                    f"ours is {ob['state']}, not C")
    if abs(k_mid - ours) > combined:
        from mdbench.analysis.settings import AnalysisSettings

        band = AnalysisSettings().diffusion_beta_range  # the registered band, not the fixture's widened one
        d_ols = ols_D(k_lag, k_msd, lo, hi)
        w = ob["window"]
        dump(f"D {species} (curved MSD)", {"kinisi_msd_ols_m2_s": d_ols, "beta_window": [w["beta_min"], w["beta_max"]],
                                      "registered_beta_band": list(band)})
        assert abs(d_ols - ours) <= combined, (
            f"D({species}): the OLS slope of kinisi's MSD over [{lo:.2g}, {hi:.2g}] ps is {d_ols:.3g}, ours "
            f"{ours:.3g} +- {ours_hw:.2g} m^2/s: the MSDs differ, not only the estimators")
        assert w["beta_min"] < band[0] or w["beta_max"] > band[1], (
            f"D({species}): kinisi {k_mid:.3g} +- {k_hw:.2g} vs ours {ours:.3g} +- {ours_hw:.2g} m^2/s although "
            f"beta stays in the registered band {band} over the window")
        return
    assert abs(k_mid - ours) <= combined, (ours, ours_hw, k_mid, k_hw)
