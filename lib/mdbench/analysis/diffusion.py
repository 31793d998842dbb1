r"""Self-diffusion from molecular centres of mass: barycentric frame, FFT MSD, β(t), diffusive window.

.. math::

    D = \lim_{t\to\infty} \frac{1}{6}\frac{d\,\mathrm{MSD}(t)}{dt},\qquad
    \mathrm{MSD}(t) = \langle |r_\alpha(t_0+t) - r_\alpha(t_0)|^2 \rangle_{\alpha, t_0},\qquad
    \beta(t) = \frac{d \ln \mathrm{MSD}}{d \ln t}

Coordinates must be centres of mass of whole molecules, **unwrapped** (correctly under NPT box changes;
see :mod:`mdbench.analysis.reduce`), in nm. The barycentric frame subtracts the total-mass-weighted
centre of the whole system (all atoms, solvent included) from every molecule.

Fitting-window rule (registered): on a log-spaced lag grid (``points_per_decade`` points/decade), β is the
central log–log difference; the window is the longest contiguous run of lags with
``beta_range[0] <= β <= beta_range[1]`` and lag ≤ ``max_lag_fraction`` × block length; it is adequate
when it spans at least ``min_window_decades`` decades. D is the least-squares slope/6 of MSD vs lag over
every frame lag in that window; each block uses the same window. 1 nm²/ps = 1e-6 m²/s.

References
----------
Maginn et al., Living J. Comp. Mol. Sci. 1, 6324 (2019), doi:10.33011/livecoms.1.1.6324
Yeh & Hummer, J. Phys. Chem. B 108, 15873 (2004), doi:10.1021/jp0477147
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mdbench.analysis.adequacy import PrecisionBound, adequacy_checks
from mdbench.analysis.blocks import BlockEstimate, BlockWindows, block_estimate, block_windows, _json_float
from mdbench.analysis.estimator import Estimate, EstimatorBase, Measurement, new_figure
from mdbench.analysis.observables import SELF_DIFFUSION, SELF_DIFFUSION_YH
from mdbench.analysis.reduce.series import as_positions, count_non_finite_positions
from mdbench.analysis.msd import (  # noqa: F401 - re-exported: the diffusion API names them
    DIRECT_MSD_MAX_LAGS, DIRECT_MSD_MAX_WORK, GATHER_MIN_MOLECULES, TRANSPOSE_BLOCK_FRAMES, _default_threads,
    fit_slope, local_slope, msd_each_series, msd_fft, msd_fft_windows)
from mdbench.analysis.settings import AnalysisSettings, registered
from mdbench.analysis.units import KB_J_PER_K, NM2_PER_PS_TO_M2_PER_S, NM_M, PA_S_TO_MPA_S, as_float64
from mdbench.errors import InputError

logger = logging.getLogger(__name__)

#: Yeh–Hummer constant ξ for a cubic box.
YEH_HUMMER_XI: float = 2.837297


@dataclass(frozen=True)
class DiffusiveWindow:
    """Fit window chosen by the β(t) rule.

    Attributes
    ----------
    lo_ps, hi_ps : float
        Window bounds [ps] (lag times).
    decades : float
        ``log10(hi_ps / lo_ps)``.
    beta_min, beta_max : float
        Extremes of β(t) on the log grid inside the window.
    found : bool
        True when the window spans at least the required number of decades.
    rule : str
        The selection rule with its parameters.
    """

    lo_ps: float
    hi_ps: float
    decades: float
    beta_min: float
    beta_max: float
    found: bool
    rule: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {"lo_ps": _json_float(self.lo_ps), "hi_ps": _json_float(self.hi_ps),
                "decades": _json_float(self.decades), "beta_min": _json_float(self.beta_min),
                "beta_max": _json_float(self.beta_max), "found": self.found, "rule": self.rule}


@dataclass
class DiffusionResult:
    """Self-diffusion coefficient of one species with its window, β diagnostics and blocks.

    Attributes
    ----------
    species : str
        Species label.
    n_molecules : int
        Number of molecules averaged.
    D_m2_s : float
        Whole-interval D [m^2/s].
    D : BlockEstimate
        Whole and per-block D [m^2/s] with the block half-width (95 %).
    window : DiffusiveWindow
        Fit window and β extremes inside it.
    lag_ps : numpy.ndarray
        Lag times of ``msd_nm2`` [ps] (whole interval, up to the maximum lag).
    msd_nm2 : numpy.ndarray
        Whole-interval MSD [nm^2].
    msd_blocks_nm2 : list of numpy.ndarray
        MSD of each block on the same lag grid [nm^2] (kept for reuse, e.g. by
        :func:`mdbench.analysis.onsager.onsager_transport`; not written to results).
    beta_lag_ps, beta : numpy.ndarray
        Log-spaced lag grid [ps] and β(t) on it (dimensionless).
    frame : str
        ``"barycentric"`` when ``system_com_nm`` was given, else ``"as given (lab)"``.
    barycentre_drift_nm : float
        Largest displacement of the system centre of mass from its first analysed position [nm].
    windows : BlockWindows or None
        Guard/block windows used.
    failures : list of str
        Definition/implementation/numerical failures (→ state F).
    sampling_checks : dict of str to bool
        ``diffusive_window`` (β inside the range over the required decades), ``block_precision``
        (95 % half-width ≤ the registered fraction of |D|) and ``block_trend`` (no significant trend over
        the blocks) (any False → SI; :mod:`mdbench.analysis.adequacy`).
    check_details : dict of str to str
        The numbers behind each check (written into an SI reason).
    """

    species: str
    n_molecules: int
    D_m2_s: float
    D: BlockEstimate
    window: DiffusiveWindow
    lag_ps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    msd_nm2: np.ndarray = field(default_factory=lambda: np.zeros(0))
    msd_blocks_nm2: list[np.ndarray] = field(default_factory=list)
    beta_lag_ps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    beta: np.ndarray = field(default_factory=lambda: np.zeros(0))
    frame: str = "barycentric"
    barycentre_drift_nm: float = float("nan")
    windows: BlockWindows | None = None
    failures: list[str] = field(default_factory=list)
    sampling_checks: dict[str, bool] = field(default_factory=dict)
    too_short: str | None = None
    check_details: dict[str, str] = field(default_factory=dict)

    def state_inputs(self) -> dict[str, Any]:
        """Inputs for :func:`mdbench.analysis.states.classify_observable`."""
        return {"values": [self.D.whole, *self.D.blocks], "failures": list(self.failures),
                "sampling_checks": dict(self.sampling_checks), "too_short": self.too_short,
                "check_details": dict(self.check_details)}

    def to_dict(self, *, include_curves: bool = False) -> dict[str, Any]:
        """JSON-safe dict: value, unit, uncertainty + definition, blocks, window, diagnostics."""
        d = self.D.to_dict()
        d.update({
            "observable": SELF_DIFFUSION.key(self.species),
            "species": self.species,
            "n_molecules": self.n_molecules,
            "frame": self.frame,
            "window": self.window.to_dict(),
            "diagnostics": {
                "barycentre_drift_nm": _json_float(self.barycentre_drift_nm),
                "sampling_checks": dict(self.sampling_checks),
                "check_details": dict(self.check_details),
                "failures": list(self.failures),
                "too_short": self.too_short,
                "analysis_windows": None if self.windows is None else self.windows.to_dict(),
            },
        })
        if include_curves:
            d["curves"] = {"lag_ps": [_json_float(x) for x in self.lag_ps],
                           "msd_nm2": [_json_float(x) for x in self.msd_nm2],
                           "beta_lag_ps": [_json_float(x) for x in self.beta_lag_ps],
                           "beta": [_json_float(x) for x in self.beta]}
        return d


def select_diffusive_window(lag_ps: np.ndarray, msd_nm2: np.ndarray, *,
                            beta_range: tuple[float, float] | None = None, min_window_decades: float | None = None,
                            max_lag_ps: float | None = None, points_per_decade: int = 10) -> DiffusiveWindow:
    """Choose the fit window by the registered β rule (longest contiguous run with β in range).

    Parameters
    ----------
    lag_ps, msd_nm2 : numpy.ndarray
        MSD curve (linear lag grid starting at 0) [ps], [nm^2].
    beta_range : tuple of float, optional
        Accepted β interval; None: the registered ``diffusion_beta_range``.
    min_window_decades : float, optional
        Minimum span ``log10(hi/lo)`` for the window to count as diffusive ("close to a decade"); None: the
        registered ``diffusion_min_decades``.
    max_lag_ps : float, optional
        Longest lag eligible [ps].
    points_per_decade : int
        Log grid density for β.

    Returns
    -------
    DiffusiveWindow
        ``found`` False when no run spans ``min_window_decades`` (the longest run is still returned; where
        no run spans two grid points, the last half decade of lags; an empty curve gives nan bounds).
    """
    beta_range = registered(beta_range, "diffusion_beta_range")
    min_window_decades = registered(min_window_decades, "diffusion_min_decades")
    rule = (f"longest contiguous run of log-grid lags ({points_per_decade}/decade) with "
            f"{beta_range[0]} <= beta <= {beta_range[1]}, lag <= {max_lag_ps} ps; adequate if >= "
            f"{min_window_decades} decades")
    lag = np.asarray(lag_ps, dtype=np.float64)
    msd = np.asarray(msd_nm2, dtype=np.float64)
    if max_lag_ps is not None:
        keep = lag <= max_lag_ps * (1 + 1e-12)
        lag, msd = lag[keep], msd[keep]
    g, beta = local_slope(lag, msd, points_per_decade)
    ok = np.isfinite(beta) & (beta >= beta_range[0]) & (beta <= beta_range[1])
    best = (0, -1)  # (start, end) inclusive indices into g
    best_dec = -1.0
    i = 0
    while i < ok.size:
        if ok[i]:
            j = i
            while j + 1 < ok.size and ok[j + 1]:
                j += 1
            dec = math.log10(g[j] / g[i]) if g[i] > 0 else 0.0
            if dec > best_dec:
                best, best_dec = (i, j), dec
            i = j + 1
        else:
            i += 1
    if best_dec <= 0:
        # no lag with beta in range, or only isolated ones (a run of one grid point spans no lags to fit: the
        # tiny DE's DMC at 2.14 ns had its window at [106, 106] ps and no value): report the fallback window
        # (last half decade of lags) so that a value exists, flagged not found (the regime check fails -> SI,
        # not a numerical failure)
        if g.size == 0:
            return DiffusiveWindow(float("nan"), float("nan"), 0.0, float("nan"), float("nan"), False, rule)
        hi = float(lag[-1])
        lo = max(float(lag[1]), hi / math.sqrt(10.0))
        inside = (g >= lo) & (g <= hi)
        b = beta[inside] if inside.any() else beta
        return DiffusiveWindow(lo, hi, math.log10(hi / lo), float(np.nanmin(b)), float(np.nanmax(b)), False,
                               rule + "; no run of lags qualified: fallback window = last half decade of lags")
    i, j = best
    b = beta[i:j + 1]
    return DiffusiveWindow(float(g[i]), float(g[j]), float(best_dec), float(b.min()), float(b.max()),
                           bool(best_dec >= min_window_decades), rule)


def _nan_result(species: str, n: int, failures: list[str], frame: str) -> DiffusionResult:
    nan = float("nan")
    return DiffusionResult(species=species, n_molecules=n, D_m2_s=nan,
                           D=block_estimate(nan, [nan] * 4, "m^2/s"),
                           window=DiffusiveWindow(nan, nan, 0.0, nan, nan, False, "not evaluated"),
                           frame=frame, failures=failures, sampling_checks={})


def self_diffusion(com_nm: Any, time_ps: Any, *, system_com_nm: Any | None = None, species: str = "",
                   guard_ps: float = 0.0, n_blocks: int | None = None, beta_range: tuple[float, float] | None = None,
                   min_window_decades: float | None = None, max_lag_fraction: float | None = None,
                   fit_window_ps: tuple[float, float] | None = None, points_per_decade: int = 10,
                   max_relative_half_width: float | None = None, trend_alpha: float | None = None) -> DiffusionResult:
    r"""Self-diffusion coefficient of one species from molecular centres of mass.

    .. math:: D = \frac{1}{6}\,\frac{d\,\mathrm{MSD}}{dt}\quad\text{(slope over the diffusive window)}

    Parameters
    ----------
    com_nm : array_like, shape (F, N, 3)
        Unwrapped molecular centres of mass [nm] (any float dtype; computed in float64).
    time_ps : array_like, shape (F,)
        Frame times [ps], evenly spaced.
    system_com_nm : array_like, shape (F, 3), optional
        Total-mass-weighted centre of the whole system [nm]; subtracted (barycentric frame).
    species : str
        Species label for the report.
    guard_ps : float
        Excluded initial interval [ps].
    n_blocks, beta_range, min_window_decades, max_lag_fraction, max_relative_half_width, trend_alpha
        None (each): the registered setting (``n_blocks``, ``diffusion_beta_range``, ``diffusion_min_decades``,
        ``diffusion_max_lag_fraction``, ``diffusion_max_rel_half_width``, ``block_trend_alpha`` of
        ``params/analysis/default.yaml``).
    n_blocks : int
        Number of blocks.
    beta_range : tuple of float
        Accepted β(t) interval.
    min_window_decades : float
        Required window span in decades.
    max_lag_fraction : float
        Longest lag used, as a fraction of the block length (the same window serves every block).
    fit_window_ps : tuple of float, optional
        Registered fixed window [ps] (skips the β selection; β is still reported for it).
    points_per_decade : int
        Log grid density for β.
    max_relative_half_width : float
        Sampling threshold: 95 % half-width / |D| above it fails ``block_precision``.
    trend_alpha : float
        Blocks' OLS slope with a p-value below this fails ``block_trend``.

    Returns
    -------
    DiffusionResult
        Non-finite input gives a result with nan values and a failure (state F), not an exception.

    Raises
    ------
    InputError
        Wrong shapes or an unusable time axis.
    """
    n_blocks, beta_range = registered(n_blocks, "n_blocks"), registered(beta_range, "diffusion_beta_range")
    min_window_decades = registered(min_window_decades, "diffusion_min_decades")
    max_lag_fraction = registered(max_lag_fraction, "diffusion_max_lag_fraction")
    max_relative_half_width = registered(max_relative_half_width, "diffusion_max_rel_half_width")
    trend_alpha = registered(trend_alpha, "block_trend_alpha")
    x = as_positions(com_nm, "com_nm")
    if x.ndim == 2:
        x = x[:, None, :]
    if x.ndim != 3 or x.shape[2] != 3:
        raise InputError(f"com_nm must have shape (n_frames, n_molecules, 3), got {x.shape}")
    t = as_float64(time_ps, "time_ps")
    if t.shape != (x.shape[0],):
        raise InputError(f"time_ps has shape {t.shape}, expected ({x.shape[0]},) to match com_nm")
    frame = "barycentric" if system_com_nm is not None else "as given (lab)"
    failures: list[str] = []
    n_bad = count_non_finite_positions(x)
    if n_bad:
        failures.append(f"com_nm contains {n_bad} non-finite values")
    sys_com = None
    if system_com_nm is not None:
        sys_com = as_float64(system_com_nm, "system_com_nm")
        if sys_com.shape != (x.shape[0], 3):
            raise InputError(f"system_com_nm has shape {sys_com.shape}, expected ({x.shape[0]}, 3)")
        nb = int(sys_com.size - np.count_nonzero(np.isfinite(sys_com)))
        if nb:
            failures.append(f"system_com_nm contains {nb} non-finite values")
    if failures:
        return _nan_result(species, x.shape[1], failures, frame)
    win = block_windows(t, guard_ps, n_blocks)
    dt = win.dt_ps
    if np.max(np.abs(np.diff(t) - dt)) > 1e-6 * max(dt, 1e-12) + 1e-9:
        raise InputError("time_ps must be evenly spaced for the FFT MSD; resample the trajectory")
    if sys_com is not None:  # barycentric frame: msd_fft subtracts sys_com chunk by chunk (no copy here)
        drift = float(np.max(np.linalg.norm(sys_com[win.whole] - sys_com[win.whole.start], axis=1)))
    else:
        drift = float("nan")
    max_lag_frames = max(3, int(max_lag_fraction * win.frames_per_block))
    max_lag_ps = max_lag_frames * dt
    # whole interval and blocks in one call: the positions are transposed once for all five windows
    msd_whole, *msd_blocks = msd_fft_windows(x, [win.whole, *win.blocks], max_lag_frames, reference_nm=sys_com)
    lag = np.arange(msd_whole.size) * dt
    g, beta = local_slope(lag, msd_whole, points_per_decade)
    if fit_window_ps is None:
        window = select_diffusive_window(lag, msd_whole, beta_range=beta_range,
                                         min_window_decades=min_window_decades, max_lag_ps=max_lag_ps,
                                         points_per_decade=points_per_decade)
    else:
        lo, hi = map(float, fit_window_ps)
        inside = (g >= lo) & (g <= hi)
        bmin = float(np.min(beta[inside])) if inside.any() else float("nan")
        bmax = float(np.max(beta[inside])) if inside.any() else float("nan")
        ok = bool(inside.any() and bmin >= beta_range[0] and bmax <= beta_range[1] and hi <= max_lag_ps)
        window = DiffusiveWindow(lo, hi, math.log10(hi / lo) if lo > 0 else float("inf"), bmin, bmax, ok,
                                 f"registered fixed window [{lo}, {hi}] ps; beta must stay in {beta_range}")

    def estimate(m: np.ndarray) -> float:
        if not np.isfinite(window.lo_ps):
            return float("nan")
        slope = fit_slope(np.arange(m.size) * dt, m, window.lo_ps, window.hi_ps)
        return slope / 6.0 * NM2_PER_PS_TO_M2_PER_S

    D_whole = estimate(msd_whole)
    D_blocks = [estimate(m) for m in msd_blocks]
    est = block_estimate(D_whole, D_blocks, "m^2/s", block_ranges_ps=win.block_ranges_ps)
    # Input was finite (checked above), so a non-finite D here means too few MSD lags to fit: the
    # trajectory (or a block of it) is too short — a sampling shortfall, not a numerical failure.
    too_short = None
    if not np.isfinite(window.lo_ps):
        too_short = "MSD too short to define any fit window (fewer than 4 lags)"
    elif not (np.isfinite(D_whole) and all(np.isfinite(D_blocks))):
        too_short = (f"fewer than 2 MSD lags inside the fit window [{window.lo_ps:g}, {window.hi_ps:g}] ps "
                     "in the whole interval or a block")
    precise, details = adequacy_checks("", est, PrecisionBound(rel=max_relative_half_width), trend_alpha)
    checks = {"diffusive_window": bool(window.found), **precise}
    details["diffusive_window"] = (f"beta {window.beta_min:.2f}-{window.beta_max:.2f} over {window.decades:.2f} "
                                   f"decades [{window.lo_ps:g}, {window.hi_ps:g}] ps; required {window.rule}")
    logger.debug("D(%s) = %.4g m2/s window %s", species, D_whole, window)
    return DiffusionResult(species=species, n_molecules=int(x.shape[1]), D_m2_s=D_whole, D=est, window=window,
                           lag_ps=lag, msd_nm2=msd_whole, msd_blocks_nm2=msd_blocks, beta_lag_ps=g, beta=beta,
                           frame=frame,
                           barycentre_drift_nm=drift, windows=win, failures=failures, sampling_checks=checks,
                           too_short=too_short, check_details=details)


def yeh_hummer_correction(D_pbc_m2_s: float, temperature_K: float, viscosity_mPa_s: float,
                          box_length_nm: float) -> float:
    r"""Finite-size corrected diffusion coefficient for a cubic box (Yeh & Hummer 2004).

    .. math:: D_\infty = D_{PBC} + \frac{\xi\,k_B T}{6 \pi \eta L},\qquad \xi = 2.837297

    Parameters
    ----------
    D_pbc_m2_s : float
        D measured in the periodic box [m^2/s].
    temperature_K : float
        Temperature [K].
    viscosity_mPa_s : float
        Shear viscosity [mPa s].
    box_length_nm : float
        Cubic box edge [nm].

    Returns
    -------
    float
        D_∞ [m^2/s].
    """
    eta = float(viscosity_mPa_s) / PA_S_TO_MPA_S
    L = float(box_length_nm) * NM_M
    return float(D_pbc_m2_s) + YEH_HUMMER_XI * KB_J_PER_K * float(temperature_K) / (6.0 * math.pi * eta * L)


class SelfDiffusionEstimator(EstimatorBase):
    """Registered estimator of :data:`mdbench.analysis.observables.SELF_DIFFUSION`: D of every species from
    its molecular centres of mass in the barycentric frame (shares the results as ``diffusion``, whose MSDs
    the collective-transport estimator reuses)."""

    inputs = ("trajectory", "guard_ps")

    def compute(self) -> Estimate:
        s, c, entry = self.settings, self.case, self.entries[0]
        rd = c.trajectory
        results = {sp: self_diffusion(rd.species_com_nm(sp), rd.time_ps, system_com_nm=rd.system_com_nm, species=sp,
                                      guard_ps=c.guard_ps, n_blocks=s.n_blocks, beta_range=s.diffusion_beta_range,
                                      min_window_decades=s.diffusion_min_decades,
                                      max_lag_fraction=s.diffusion_max_lag_fraction,
                                      max_relative_half_width=s.diffusion_max_rel_half_width,
                                      trend_alpha=s.block_trend_alpha)
                   for sp in rd.species}
        out = [Measurement(entry, (sp,), dr.to_dict(), "D = slope(MSD)/6 over the diffusive window, molecular COMs, "
                           "barycentric frame", dr.state_inputs()) for sp, dr in results.items()]
        return Estimate(out, figure_data={"diffusion": results}, products={"diffusion": results})


    @classmethod
    def definition(cls, settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
        """Its part of ``analysis_fitting_rules``."""
        s = settings
        return {"analysis_fitting_rules": {
            "diffusion": {"beta_range": list(s.diffusion_beta_range), "min_window_decades": s.diffusion_min_decades,
                          "max_lag_fraction_of_block": s.diffusion_max_lag_fraction, "frame": "barycentric"}}}

    @classmethod
    def figures(cls, estimate: Estimate, settings: AnalysisSettings) -> dict[str, Any]:
        """The MSD of each species with its fit window, and β(t) against the accepted range."""
        diffusion = estimate.figure_data.get("diffusion")
        if not diffusion:
            return {}
        fig, (a1, a2) = new_figure(2, figsize=(10, 4))
        for sp, dr in diffusion.items():
            if dr.msd_nm2.size < 2:
                continue
            line, = a1.loglog(dr.lag_ps[1:], dr.msd_nm2[1:], label=sp)
            if np.isfinite(dr.window.lo_ps):
                a1.axvspan(dr.window.lo_ps, dr.window.hi_ps, color=line.get_color(), alpha=0.08)
            a2.semilogx(dr.beta_lag_ps, dr.beta, color=line.get_color(), label=sp)
        a2.axhspan(*settings.diffusion_beta_range, color="0.85", label="accepted β")
        a1.set_xlabel("lag [ps]")
        a1.set_ylabel("MSD [nm²] (barycentric)")
        a2.set_xlabel("lag [ps]")
        a2.set_ylabel("β = dlnMSD/dlnt")
        a1.legend(fontsize=7)
        a2.legend(fontsize=7)
        return {SELF_DIFFUSION.figure: fig}


#: Definition written with every Yeh-Hummer result.
YEH_HUMMER_DEFINITION = ("D_YH = D_PBC + xi kB T / (6 pi eta L), xi = 2.837297 (cubic box; Yeh & Hummer, J. Phys. "
                         "Chem. B 108, 15873 (2004)); eta = this case's Green-Kubo viscosity, L = mean box edge "
                         "V^(1/3) of the window, T = the transport temperature; blocks: D and eta of each block; "
                         "half_width_95 propagated to first order: sqrt(hw_D^2 + (corr * hw_eta / eta)^2)")


def yeh_hummer_estimate(D: BlockEstimate, eta: BlockEstimate, temperature_K: float, box_length_nm: float
                        ) -> tuple[BlockEstimate, float]:
    """(D_YH block estimate with the propagated 95 % half-width, correction term [m^2/s]) from the blocked D and
    η (mPa s) of one case."""
    corr = yeh_hummer_correction(0.0, temperature_K, eta.whole, box_length_nm) if eta.whole > 0 else float("nan")
    blocks = [d + yeh_hummer_correction(0.0, temperature_K, e, box_length_nm) if e > 0 else float("nan")
              for d, e in zip(D.blocks, eta.blocks)]
    est = block_estimate(D.whole + corr, blocks, "m^2/s", block_ranges_ps=D.block_ranges_ps)
    hw = math.hypot(D.half_width_95, corr * eta.half_width_95 / eta.whole) if eta.whole > 0 else float("nan")
    return dataclasses.replace(est, half_width_95=hw, definition=YEH_HUMMER_DEFINITION), corr


class YehHummerEstimator(EstimatorBase):
    """Registered estimator of :data:`mdbench.analysis.observables.SELF_DIFFUSION_YH`: the Yeh–Hummer corrected
    D of every species, from the uncorrected D (``diffusion``) and this case's η (``viscosity``). Its state
    joins both inputs' checks; without a usable η (none delivered, or not positive) it is not estimable."""

    inputs = ("trajectory", "products.diffusion", "products.temperature_K")
    optional_inputs = ("products.viscosity",)

    def compute(self) -> Estimate:
        c, entry = self.case, self.entries[0]
        from mdbench.analysis.observables import VISCOSITY

        visc = c.products.get(VISCOSITY.name)
        rd = c.trajectory
        L = float(np.mean(rd.volume_nm3[c.windows.whole])) ** (1.0 / 3.0)
        T = float(c.products["temperature_K"])
        out = []
        for sp, dr in c.products["diffusion"].items():
            inputs = dr.state_inputs()
            if visc is None or not (visc.viscosity.whole > 0):
                why = ("this case delivered no Green-Kubo viscosity" if visc is None else
                       f"this case's viscosity {visc.viscosity.whole:.3g} mPa s is not positive")
                payload = withheld_yh(dr, L, T)
                out.append(Measurement(entry, (sp,), payload, YEH_HUMMER_DEFINITION,
                                       dict(inputs, not_estimable=f"the correction needs eta: {why}")))
                continue
            est, corr = yeh_hummer_estimate(dr.D, visc.viscosity, T, L)
            v_in = visc.state_inputs()
            checks = {**inputs.get("sampling_checks", {}),
                      **{f"viscosity_{k}": ok for k, ok in v_in.get("sampling_checks", {}).items()}}
            details = {**inputs.get("check_details", {}),
                       **{f"viscosity_{k}": w for k, w in v_in.get("check_details", {}).items()}}
            payload = dict(est.to_dict(), observable=SELF_DIFFUSION_YH.key(sp), species=sp,
                           label="Yeh-Hummer corrected (additional result; the uncorrected D is "
                                 f"{SELF_DIFFUSION.key(sp)})",
                           window=dr.window.to_dict(),
                           diagnostics={"D_pbc_m2_s": _json_float(dr.D.whole), "correction_m2_s": _json_float(corr),
                                        "viscosity_mPa_s": _json_float(visc.viscosity.whole),
                                        "viscosity_hw95_mPa_s": _json_float(visc.viscosity.half_width_95),
                                        "box_length_nm": L, "temperature_K": T, "xi": YEH_HUMMER_XI,
                                        "sampling_checks": checks, "check_details": details,
                                        "too_short": inputs.get("too_short")})
            out.append(Measurement(entry, (sp,), payload, YEH_HUMMER_DEFINITION,
                                   {"values": [est.whole, *est.blocks],
                                    "failures": list(inputs.get("failures", [])) + list(v_in.get("failures", [])),
                                    "sampling_checks": checks, "check_details": details,
                                    "too_short": inputs.get("too_short"), "not_estimable": v_in.get("not_estimable")}))
        return Estimate(out)


    @classmethod
    def definition(cls, settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
        """Its part of ``analysis_fitting_rules``."""
        return {"analysis_fitting_rules": {
            "yeh_hummer": "D_YH = D_PBC + 2.837297 kB T / (6 pi eta L) with the case's own Green-Kubo eta and "
                          "mean box edge L (cubic box); reported beside the uncorrected D, uncertainty propagated; "
                          "not_estimable without a positive eta"}}


def withheld_yh(dr: DiffusionResult, L: float, T: float) -> dict[str, Any]:
    """Payload of a Yeh–Hummer result that cannot be formed (no usable η): value withheld."""
    return {"value": None, "unit": "m^2/s", "uncertainty": {"half_width_95": None, "definition": YEH_HUMMER_DEFINITION},
            "blocks": [None] * len(dr.D.blocks), "block_ranges_ps": dr.D.to_dict()["block_ranges_ps"],
            "window": dr.window.to_dict(),
            "diagnostics": {"D_pbc_m2_s": _json_float(dr.D.whole), "box_length_nm": L, "temperature_K": T,
                            "too_short": dr.too_short}}
