r"""Shear viscosity by Green–Kubo from the pressure tensor, with plateau rule and Einstein–Helfand check.

.. math::

    \eta = \frac{V}{k_B T}\int_0^\infty \langle P_{\alpha\beta}(t)\,P_{\alpha\beta}(0)\rangle\,dt
    \qquad
    \eta_{EH} = \lim_{t\to\infty}\frac{V}{2 k_B T}\frac{d}{dt}
    \Big\langle\Big(\int_{t_0}^{t_0+t} P_{\alpha\beta}\,dt'\Big)^2\Big\rangle

The ACF is the average over the five independent traceless components
:math:`(P_{xx}-P_{yy}/2-P_{zz}/2)/\sqrt3,\ (P_{yy}-P_{zz})/2,\ P_{yz},\ P_{zx},\ P_{xy}` (off-diagonals
symmetrised), each mean-subtracted, computed by FFT over all time origins. The running integral
:math:`\eta(t)` uses the trapezoidal rule (scipy ``cumulative_trapezoid``).

Plateau rule (registered, :class:`PlateauRule`): the correlation time τ_c is the integral of the
normalised component-averaged ACF up to its first zero crossing. Scanning start times
``t_s >= max(search_start_ps, start_tau * τ_c)`` on the lag grid, the plateau is the first window
``[t_s, t_s + width]`` (``width = max(width_tau * τ_c, min_width_fraction * max_lag)`` unless ``width_ps`` is
given; the floor keeps a fast oscillation of a real stress ACF from passing as a plateau) over which the running
integral changes by at most ``rel_tol`` × its window mean (end-to-start and max−min both) and that is not a
shoulder: the running integral over the later lags (hi, 3 hi] agrees with the window's mean within
``max(rel_tol, 2 SE)`` (SE from the spread of the five components), so a flat stretch where the ACF crosses
zero before its slow tail raises the integral again is passed over; η is the mean of the running integral
over that window. When no window qualifies the window with the smallest relative
change is reported and the sampling check ``plateau`` fails; when the start and width leave no window inside
the longest lag (a run short against τ_c), the last window that fits is judged the same way. Blocks use the
same window.

Requirements checked (failures → F, since longer sampling cannot repair them): pressure output spacing
≤ 0.5 ps, constant volume (no barostat) in the window. 1 bar = 1e5 Pa, 1 mPa s = 1 cP.

References
----------
Maginn et al., Living J. Comp. Mol. Sci. 1, 6324 (2019), doi:10.33011/livecoms.1.1.6324
Zhang, Otani & Maginn, J. Chem. Theory Comput. 11, 3537 (2015), doi:10.1021/acs.jctc.5b00351
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from mdbench.analysis.adequacy import PrecisionBound, adequacy_checks, withheld
from mdbench.analysis.blocks import BlockEstimate, BlockWindows, _json_float, block_estimate, block_windows
from mdbench.analysis.diffusion import fit_slope
from mdbench.analysis.estimator import Estimate, EstimatorBase, Measurement, new_figure
from mdbench.analysis.observables import VISCOSITY
from mdbench.analysis.units import BAR_PA, KB_J_PER_K, NM3_M3, PA_S_TO_MPA_S, PS_S, as_float64
from mdbench.errors import InputError
from mdbench.analysis.settings import AnalysisSettings, registered

logger = logging.getLogger(__name__)

#: Names of the five traceless components, in order.
COMPONENT_NAMES: tuple[str, ...] = ("(Pxx-Pyy/2-Pzz/2)/sqrt3", "(Pyy-Pzz)/2", "Pyz", "Pzx", "Pxy")
#: Largest pressure-output spacing accepted for Green–Kubo [ps].
MAX_OUTPUT_SPACING_PS: float = 0.5

_EDR_KEYS = {(a, b): f"Pres-{a.upper()}{b.upper()}" for a in "xyz" for b in "xyz"}


@dataclass(frozen=True)
class PlateauRule:
    """Registered plateau rule for the Green–Kubo running integral.

    Attributes
    ----------
    width_ps : float or None
        Plateau window width [ps]; default ``width_tau * τ_c``.
    width_tau : float
        Default width in units of the ACF correlation time τ_c.
    min_width_fraction : float
        Floor of the default width as a fraction of the longest lag.
    start_tau : float
        Earliest plateau start in units of τ_c.
    rel_tol : float
        Largest accepted relative change of the running integral across the window.
    search_start_ps : float
        Earliest plateau start [ps].
    max_lag_ps : float or None
        Longest correlation lag integrated [ps]; default block length / 5.
    """

    width_ps: float | None = None
    width_tau: float = 4.0
    min_width_fraction: float = 0.1
    start_tau: float = 2.0
    rel_tol: float = 0.03
    search_start_ps: float = 0.0
    max_lag_ps: float | None = None

    def describe(self, width_ps: float, max_lag_ps: float, tau_c_ps: float = float("nan")) -> str:
        """Text of the rule with resolved parameters (what gets registered)."""
        start = max(self.search_start_ps, self.start_tau * tau_c_ps) if math.isfinite(tau_c_ps) else \
            self.search_start_ps
        return (f"tau_c = integral of normalised ACF to its first zero = {tau_c_ps:.4g} ps; "
                f"first window [t_s, t_s+{width_ps:g} ps], t_s >= {start:.4g} ps "
                f"(max({self.search_start_ps:g} ps, {self.start_tau:g} tau_c)), lags <= "
                f"{max_lag_ps:g} ps, where the GK running integral changes by <= {self.rel_tol:g} of its "
                "window mean (end-to-start and max-min) and is not a shoulder (mean over the lags (t_e, 3 t_e] "
                f"within max({self.rel_tol:g}, 2 SE of the five components) of it); eta = mean running integral "
                "in the window")


@dataclass
class ViscosityResult:
    """Green–Kubo shear viscosity with running integral, plateau diagnostics and Einstein–Helfand value.

    Attributes
    ----------
    viscosity_mPa_s : float
        Whole-interval Green–Kubo η [mPa s].
    viscosity : BlockEstimate
        Whole and per-block η [mPa s].
    plateau_window_ps : tuple of float
        Plateau window [ps] (lag).
    plateau_found : bool
        The rule found a window within tolerance.
    plateau_relative_change : float
        Relative change of the running integral over the chosen window.
    correlation_time_ps : float
        τ_c of the component-averaged stress ACF [ps] (sets the default plateau search).
    rule : str
        Plateau rule text.
    lag_ps : numpy.ndarray
        Lag grid [ps].
    acf_bar2 : numpy.ndarray
        Component-averaged stress ACF [bar^2] (whole interval).
    running_integral_mPa_s : numpy.ndarray
        η(t) [mPa s] (whole interval).
    component_viscosity_mPa_s : dict of str to float
        Per-component plateau value (component consistency diagnostic).
    einstein_helfand_mPa_s : float
        Einstein–Helfand η [mPa s] fitted over the plateau window (cross-check).
    volume_nm3, temperature_K, dt_ps : float
        Inputs used (mean volume of the window).
    windows : BlockWindows
        Guard and blocks.
    failures : list of str
        → F (non-finite input, output spacing > 0.5 ps, fluctuating volume).
    sampling_checks : dict of str to bool
        ``plateau``, ``block_precision`` (95 % half-width ≤ the registered fraction of η), ``block_trend``
        (no significant trend over the blocks), ``component_consistency`` (→ SI).
    check_details : dict of str to str
        The numbers behind each check (written into an SI reason).
    not_estimable : str or None
        Why η is not estimable (a plateau value that is not positive: the Green–Kubo integral defines no
        viscosity), else None.
    """

    viscosity_mPa_s: float
    viscosity: BlockEstimate
    plateau_window_ps: tuple[float, float]
    plateau_found: bool
    plateau_relative_change: float
    rule: str
    correlation_time_ps: float = float("nan")
    lag_ps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    acf_bar2: np.ndarray = field(default_factory=lambda: np.zeros(0))
    running_integral_mPa_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    component_viscosity_mPa_s: dict[str, float] = field(default_factory=dict)
    einstein_helfand_mPa_s: float = float("nan")
    volume_nm3: float = float("nan")
    temperature_K: float = float("nan")
    dt_ps: float = float("nan")
    windows: BlockWindows | None = None
    failures: list[str] = field(default_factory=list)
    sampling_checks: dict[str, bool] = field(default_factory=dict)
    check_details: dict[str, str] = field(default_factory=dict)
    not_estimable: str | None = None

    def state_inputs(self) -> dict[str, Any]:
        """Inputs for :func:`mdbench.analysis.states.classify_observable`."""
        return {"values": [self.viscosity.whole, *self.viscosity.blocks], "failures": list(self.failures),
                "sampling_checks": dict(self.sampling_checks), "check_details": dict(self.check_details),
                "not_estimable": self.not_estimable}

    def to_dict(self, *, include_curves: bool = False) -> dict[str, Any]:
        """JSON-safe dict: value, unit, uncertainty + definition, blocks, plateau window, diagnostics."""
        d = self.viscosity.to_dict()
        d.update({
            "observable": VISCOSITY.key(),
            "method": "Green-Kubo, 5 traceless pressure-tensor components averaged, mean-subtracted",
            "window": {"plateau_window_ps": [_json_float(v) for v in self.plateau_window_ps],
                       "plateau_found": self.plateau_found,
                       "plateau_relative_change": _json_float(self.plateau_relative_change), "rule": self.rule,
                       "correlation_time_ps": _json_float(self.correlation_time_ps)},
            "diagnostics": {
                "einstein_helfand_mPa_s": _json_float(self.einstein_helfand_mPa_s),
                "component_viscosity_mPa_s": {k: _json_float(v) for k, v in self.component_viscosity_mPa_s.items()},
                "volume_nm3": _json_float(self.volume_nm3), "temperature_K": self.temperature_K,
                "dt_ps": _json_float(self.dt_ps), "sampling_checks": dict(self.sampling_checks),
                "check_details": dict(self.check_details), "not_estimable": self.not_estimable,
                "failures": list(self.failures),
                "analysis_windows": None if self.windows is None else self.windows.to_dict(),
            },
        })
        if include_curves:
            d["curves"] = {"lag_ps": [_json_float(x) for x in self.lag_ps],
                           "acf_bar2": [_json_float(x) for x in self.acf_bar2],
                           "running_integral_mPa_s": [_json_float(x) for x in self.running_integral_mPa_s]}
        return d


def pressure_tensor_array(pressure_tensor_bar: Any) -> np.ndarray:
    """Normalise a pressure tensor to a float64 array of shape (F, 3, 3) [bar].

    Parameters
    ----------
    pressure_tensor_bar : ndarray (F, 3, 3) or (F, 9), or mapping
        A mapping may use pyedr names (``"Pres-XX"``, ``"Pres-XY"``, ...) or ``"xx"``, ``"xy"``, ...;
        missing lower-triangle entries are taken from the upper triangle.
    """
    if isinstance(pressure_tensor_bar, Mapping):
        keys = {str(k).lower().replace("pres-", ""): k for k in pressure_tensor_bar}
        comps: dict[tuple[int, int], np.ndarray] = {}
        for i, a in enumerate("xyz"):
            for j, b in enumerate("xyz"):
                k = keys.get(a + b)
                if k is not None:
                    comps[(i, j)] = as_float64(pressure_tensor_bar[k], f"pressure tensor {k}")
        for i in range(3):
            for j in range(3):
                if (i, j) not in comps and (j, i) in comps:
                    comps[(i, j)] = comps[(j, i)]
        missing = [f"Pres-{'XYZ'[i]}{'XYZ'[j]}" for i in range(3) for j in range(3) if (i, j) not in comps]
        if missing:
            raise InputError(f"pressure tensor components missing: {missing}; write them to the energy file "
                             "(GROMACS writes Pres-XX..Pres-ZZ when nstenergy > 0)")
        n = {v.shape for v in comps.values()}
        if len(n) != 1:
            raise InputError("pressure tensor components have different lengths")
        P = np.empty((next(iter(n))[0], 3, 3))
        for (i, j), v in comps.items():
            P[:, i, j] = v
        return P
    P = as_float64(pressure_tensor_bar, "pressure_tensor_bar")
    if P.ndim == 2 and P.shape[1] == 9:
        P = P.reshape(-1, 3, 3)
    if P.ndim != 3 or P.shape[1:] != (3, 3):
        raise InputError(f"pressure tensor must have shape (F, 3, 3) or (F, 9), got {P.shape}")
    return P


def traceless_components(P_bar: np.ndarray) -> np.ndarray:
    """The five independent traceless shear components, shape (F, 5) [bar] (see :data:`COMPONENT_NAMES`).

    Each has the same autocorrelation function as P_xy in an isotropic fluid.
    """
    P = 0.5 * (P_bar + np.transpose(P_bar, (0, 2, 1)))
    return np.stack([
        (P[:, 0, 0] - 0.5 * P[:, 1, 1] - 0.5 * P[:, 2, 2]) / math.sqrt(3.0),
        0.5 * (P[:, 1, 1] - P[:, 2, 2]),
        P[:, 1, 2], P[:, 2, 0], P[:, 0, 1],
    ], axis=1)


def _acf(x: np.ndarray, max_lag: int) -> np.ndarray:
    """ACF of a mean-subtracted 1-D series over all origins (FFT), lags 0..max_lag."""
    import tidynamics

    return tidynamics.acf(x - x.mean())[: max_lag + 1]


def _eh_msd(x: np.ndarray, dt_ps: float, max_lag: int) -> np.ndarray:
    """<(∫ P dt)^2> for one component [bar^2 ps^2]."""
    import tidynamics
    from scipy.integrate import cumulative_trapezoid

    G = cumulative_trapezoid(x - x.mean(), dx=dt_ps, initial=0.0)
    return tidynamics.msd(G)[: max_lag + 1]


def correlation_time_ps(acf: np.ndarray, dt_ps: float) -> float:
    """τ_c = ∫ C(t)/C(0) dt up to the first zero crossing of C (trapezoid) [ps]; nan when C(0) <= 0."""
    c = np.asarray(acf, dtype=np.float64)
    if c.size < 2 or not c[0] > 0:
        return float("nan")
    neg = np.nonzero(c <= 0)[0]
    end = int(neg[0]) if neg.size else c.size
    seg = c[:end] / c[0]
    if seg.size < 2:
        return 0.5 * dt_ps
    return float(np.trapezoid(seg, dx=dt_ps))


def _plateau(lag: np.ndarray, I: np.ndarray, start_ps: float, width_ps: float, rel_tol: float,
             I_components: np.ndarray | None = None) -> tuple[float, float, bool, float]:
    """(lo, hi, found, relative change) by the first-flat-window rule, with the shoulder guard.

    A window is accepted when the running integral changes by at most ``rel_tol`` of its mean across it
    **and** it is not a shoulder: the mean running integral over the following lags ``(hi, 3 hi]`` (at least
    one window width; as many as fit) agrees with the window's mean within ``max(rel_tol |mean|, 2 SE)``,
    SE the standard error of that later mean from the spread of the five components' running integrals (``I_components``,
    ``SE = std_k / sqrt(5)``). A stretch that is flat while the ACF crosses zero and then rises with its slow
    tail fails the guard, and the search continues to later windows.

    When the rule's start and width leave no window inside the longest lag (a trajectory too short for its
    correlation time), the last window that fits is the one judged — a sampling limitation that the failed
    ``plateau`` check reports, not a missing value."""
    dt = lag[1] - lag[0]
    w = min(max(1, int(round(width_ps / dt))), lag.size - 2)
    best = (float("nan"), float("nan"), False, float("inf"))
    i0 = min(int(np.searchsorted(lag, start_ps)), lag.size - w - 1)
    for i in range(max(i0, 1), lag.size - w):
        seg = I[i:i + w + 1]
        m = float(seg.mean())
        if not math.isfinite(m) or m == 0:
            continue
        change = max(abs(seg[-1] - seg[0]), float(seg.max() - seg.min())) / abs(m)
        if change <= rel_tol and not _is_shoulder(I, I_components, i + w, w, m, rel_tol):
            return float(lag[i]), float(lag[i + w]), True, change
        if change < best[3]:
            best = (float(lag[i]), float(lag[i + w]), False, change)
    return best


def _is_shoulder(I: np.ndarray, I_components: np.ndarray | None, end: int, w: int, plateau: float,
                 rel_tol: float) -> bool:
    """True when the running integral after ``end`` departs from ``plateau`` by more than the tolerance
    (see :func:`_plateau`); False when no later lag exists (the last window is judged on its own)."""
    later = slice(end + 1, min(I.size, end + 1 + max(w, 2 * end)))
    if later.start >= I.size:
        return False
    m_later = float(np.mean(I[later]))
    se = 0.0
    if I_components is not None and I_components.shape[0] > 1:
        se = float(np.mean(np.std(I_components[:, later], axis=0, ddof=1))) / math.sqrt(I_components.shape[0])
    return abs(m_later - plateau) > max(rel_tol * abs(plateau), 2.0 * se)


def green_kubo_viscosity(pressure_tensor_bar: Any, dt_ps: float, volume_nm3: float | Any, temperature_K: float,
                         *, guard_ps: float = 0.0, n_blocks: int | None = None, plateau_rule: PlateauRule | None = None,
                         max_relative_half_width: float | None = None, max_component_spread: float = 0.5,
                         volume_rtol: float = 1e-4, trend_alpha: float | None = None) -> ViscosityResult:
    r"""Green–Kubo shear viscosity with running integral, plateau, blocks and Einstein–Helfand value.

    Parameters
    ----------
    pressure_tensor_bar : ndarray (F, 3, 3) / (F, 9) or mapping of components
        Pressure tensor time series [bar] at constant spacing ``dt_ps`` (pyedr ``Pres-XX``...).
    dt_ps : float
        Spacing of the pressure samples [ps]; must be ≤ 0.5 ps.
    volume_nm3 : float or array_like (F,)
        Box volume [nm^3]; must be constant in the window (NVT at the NPT mean volume).
    temperature_K : float
        Temperature [K].
    guard_ps : float
        Excluded initial interval [ps].
    n_blocks : int
        Number of blocks (4).
    plateau_rule : PlateauRule, optional
        Registered plateau rule; defaults as in :class:`PlateauRule`.
    max_relative_half_width : float
        Sampling threshold on the 95 % half-width / |η|.
    max_component_spread : float
        Sampling threshold on (max − min)/mean of the five per-component plateau values.
    volume_rtol : float
        Relative volume fluctuation above which a barostat is assumed (failure).
    trend_alpha : float
        Blocks' OLS slope with a p-value below this fails ``block_trend``.

    Returns
    -------
    ViscosityResult
        η in mPa s; non-finite input → nan with a failure (→ F), not an exception.
    """
    n_blocks = registered(n_blocks, "n_blocks")
    max_relative_half_width = registered(max_relative_half_width, "viscosity_max_rel_half_width")
    trend_alpha = registered(trend_alpha, "block_trend_alpha")
    P = pressure_tensor_array(pressure_tensor_bar)
    F = P.shape[0]
    dt = float(dt_ps)
    if not (dt > 0):
        raise InputError(f"dt_ps must be positive, got {dt_ps}")
    t = np.arange(F) * dt
    vol = as_float64(volume_nm3, "volume_nm3")
    if vol.ndim == 0:
        vol = np.full(F, float(vol))
    if vol.shape != (F,):
        raise InputError(f"volume_nm3 must be a scalar or shape ({F},), got {vol.shape}")
    rule = plateau_rule or PlateauRule()
    win = block_windows(t, guard_ps, n_blocks)
    max_lag_ps = rule.max_lag_ps if rule.max_lag_ps is not None else win.block_length_ps / 5.0
    max_lag = max(2, min(win.frames_per_block - 1, int(round(max_lag_ps / dt))))
    max_lag_ps = max_lag * dt
    rule_text = rule.describe(float("nan"), max_lag_ps)
    T = float(temperature_K)
    failures: list[str] = []
    nb = int(P[win.whole].size - np.count_nonzero(np.isfinite(P[win.whole])))
    if nb:
        failures.append(f"pressure tensor contains {nb} non-finite values")
    vw = vol[win.whole]
    if not np.all(np.isfinite(vw)) or np.any(vw <= 0):
        failures.append("volume_nm3 contains non-finite or non-positive values")
    elif np.ptp(vw) > volume_rtol * np.mean(vw):
        failures.append(f"volume fluctuates by {np.ptp(vw) / np.mean(vw):.2e} (relative) in the window: "
                        "barostat active; Green-Kubo needs NVT at the NPT mean volume")
    if dt > MAX_OUTPUT_SPACING_PS + 1e-12:
        failures.append(f"pressure output spacing {dt:g} ps > {MAX_OUTPUT_SPACING_PS} ps: set nstenergy and "
                        "nstcalcenergy so that pressure is written every <= 0.5 ps")
    if not (math.isfinite(T) and T > 0):
        failures.append(f"temperature_K = {T} is not a positive finite number")
    if any(f.startswith(("pressure tensor", "volume_nm3 contains", "temperature_K")) for f in failures):
        nan = float("nan")
        return ViscosityResult(nan, block_estimate(nan, [nan] * n_blocks, "mPa*s"), (nan, nan), False, nan,
                               rule_text, windows=win, dt_ps=dt, temperature_K=T, failures=failures)

    lag = np.arange(max_lag + 1) * dt
    from scipy.integrate import cumulative_trapezoid

    def curves(sl: slice) -> tuple[np.ndarray, np.ndarray, float]:
        comp = traceless_components(P[sl])
        acfs = np.stack([_acf(comp[:, k], max_lag) for k in range(5)])  # bar^2
        V_m3 = float(np.mean(vol[sl])) * NM3_M3
        pref = V_m3 / (KB_J_PER_K * T) * BAR_PA ** 2 * PS_S * PA_S_TO_MPA_S  # bar^2 ps -> mPa s
        run = cumulative_trapezoid(acfs, dx=dt, axis=1, initial=0.0) * pref
        return acfs, run, pref

    acfs, run, pref = curves(win.whole)
    run_mean = run.mean(axis=0)
    acf_mean = acfs.mean(axis=0)
    tau_c = correlation_time_ps(acf_mean, dt)
    width_ps = rule.width_ps if rule.width_ps is not None else max(
        2 * dt, rule.width_tau * tau_c, rule.min_width_fraction * max_lag_ps)
    start_ps = max(rule.search_start_ps, rule.start_tau * tau_c)
    rule_text = rule.describe(width_ps, max_lag_ps, tau_c)
    lo, hi, found, change = _plateau(lag, run_mean, start_ps, width_ps, rule.rel_tol, I_components=run)

    def plateau_value(r: np.ndarray) -> float:
        if not math.isfinite(lo):
            return float("nan")
        sel = (lag >= lo - 1e-12) & (lag <= hi + 1e-12)
        return float(r[..., sel].mean(axis=-1)) if r.ndim == 1 else r[:, sel].mean(axis=1)

    eta_whole = plateau_value(run_mean)
    comp_vals = plateau_value(run) if math.isfinite(lo) else np.full(5, np.nan)
    eta_blocks = [plateau_value(curves(s)[1].mean(axis=0)) for s in win.blocks]
    est = block_estimate(eta_whole, eta_blocks, "mPa*s", block_ranges_ps=win.block_ranges_ps)
    # Einstein-Helfand cross-check over the plateau window
    comp = traceless_components(P[win.whole])
    eh = np.mean([_eh_msd(comp[:, k], dt, max_lag) for k in range(5)], axis=0)
    eh_val = 0.5 * fit_slope(lag, eh, lo, hi) * pref if math.isfinite(lo) else float("nan")
    spread = (float(np.ptp(comp_vals) / abs(np.mean(comp_vals)))
              if np.all(np.isfinite(comp_vals)) and np.mean(comp_vals) != 0 else float("inf"))
    if not math.isfinite(lo):
        failures.append("running integral has no finite non-zero window: plateau rule cannot be applied")
    precise, details = adequacy_checks("", est, PrecisionBound(rel=max_relative_half_width), trend_alpha)
    checks = {"plateau": bool(found), **precise, "component_consistency": bool(spread <= max_component_spread)}
    details["plateau"] = (f"largest relative change {change:.3g} of the running integral in [{lo:.3g}, {hi:.3g}] ps "
                          f"(accepted <= {rule.rel_tol:g})")
    details["component_consistency"] = f"(max - min)/mean of the five plateaus {spread:.2f} (<= {max_component_spread:g})"
    not_estimable = (f"Green-Kubo plateau value {eta_whole:.3g} mPa s is not positive: the integral defines no "
                     "viscosity" if math.isfinite(eta_whole) and eta_whole <= 0 else None)
    return ViscosityResult(
        viscosity_mPa_s=eta_whole, viscosity=est, plateau_window_ps=(lo, hi), plateau_found=bool(found),
        plateau_relative_change=float(change), rule=rule_text, correlation_time_ps=tau_c, lag_ps=lag,
        acf_bar2=acf_mean,
        running_integral_mPa_s=run_mean,
        component_viscosity_mPa_s={n: float(v) for n, v in zip(COMPONENT_NAMES, comp_vals)},
        einstein_helfand_mPa_s=float(eh_val), volume_nm3=float(np.mean(vol[win.whole])), temperature_K=T,
        dt_ps=dt, windows=win, failures=failures, sampling_checks=checks, check_details=details,
        not_estimable=not_estimable)


class ViscosityEstimator(EstimatorBase):
    """Registered estimator of :data:`mdbench.analysis.observables.VISCOSITY` (Green–Kubo from the energy
    file's pressure tensor; not delivered when the file has no pressure tensor)."""

    inputs = ("energy", "guard_ps", "trajectory", "products.temperature_K", "products.energy_coverage")

    def compute(self) -> Estimate:
        s, c, entry = self.settings, self.case, self.entries[0]
        definition = ("eta = V/(kB T) int_0^inf <P_ab(t) P_ab(0)> dt (Green-Kubo), plateau by the registered rule")
        from mdbench.analysis.thermo import coverage_check

        ptens = c.energy.pressure_tensor_bar()
        if len(ptens) < 6:
            return Estimate([Measurement(entry, (), {}, definition, {"delivered": False})],
                            figure_data={"green_kubo": None})
        t_e = c.energy.time_ps
        volume = c.energy.terms.get("Volume", float(np.mean(c.trajectory.volume_nm3)))
        rule = PlateauRule(width_tau=s.viscosity_plateau_width_tau, start_tau=s.viscosity_plateau_start_tau,
                           rel_tol=s.viscosity_plateau_rel_tol,
                           min_width_fraction=s.viscosity_plateau_min_width_fraction)
        visc = green_kubo_viscosity(ptens, float(np.median(np.diff(t_e))), volume, c.products["temperature_K"],
                                    guard_ps=c.guard_ps, n_blocks=s.n_blocks, plateau_rule=rule,
                                    max_relative_half_width=s.viscosity_max_rel_half_width,
                                    max_component_spread=s.viscosity_max_component_spread,
                                    trend_alpha=s.block_trend_alpha)
        payload = withheld(visc.to_dict()) if visc.not_estimable else visc.to_dict()
        computed_on = [float(t_e[visc.windows.whole][0]), float(t_e[visc.windows.whole][-1])] if visc.windows else None
        payload["diagnostics"] = dict(payload.get("diagnostics") or {}, computed_on_ps=computed_on)
        inputs = visc.state_inputs()
        cov_ok, cov_why = coverage_check(c.products.get("energy_coverage"))
        inputs["sampling_checks"] = {**inputs["sampling_checks"], **cov_ok}
        inputs["check_details"] = {**inputs["check_details"], **cov_why}
        return Estimate([Measurement(entry, (), payload, definition, inputs)],
                        figure_data={"green_kubo": visc}, products={VISCOSITY.name: visc})


    @classmethod
    def definition(cls, settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
        """Its part of ``analysis_fitting_rules``."""
        s = settings
        return {"analysis_fitting_rules": {
            VISCOSITY.name: {"method": "Green-Kubo, 5 traceless pressure components, plateau rule: first window of "
                                       f"width {s.viscosity_plateau_width_tau:g} tau_c (at least "
                                       f"{s.viscosity_plateau_min_width_fraction:g} of the longest lag), starting at "
                                       f">= {s.viscosity_plateau_start_tau:g} tau_c, where the running integral "
                                       f"changes by <= {s.viscosity_plateau_rel_tol:g} of its window mean",
                             "requires": "pressure output <= 0.5 ps and constant volume (no barostat)"}}}

    @classmethod
    def figures(cls, estimate: Estimate, settings: AnalysisSettings) -> dict[str, Any]:
        """The Green–Kubo running integral with its plateau window and η."""
        visc = estimate.figure_data.get("green_kubo")
        if not (visc is not None and getattr(visc, "running_integral_mPa_s", np.zeros(0)).size):
            return {}
        fig, ax = new_figure()
        ax.plot(visc.lag_ps[: visc.running_integral_mPa_s.size], visc.running_integral_mPa_s,
                label="GK running integral")
        lo, hi = visc.plateau_window_ps
        if np.isfinite(lo) and np.isfinite(hi):
            ax.axvspan(lo, hi, color="C1", alpha=0.15, label="plateau window")
        if np.isfinite(visc.viscosity_mPa_s):
            ax.axhline(visc.viscosity_mPa_s, color="C1", ls="--", label="η")
        ax.set_xlabel("lag [ps]")
        ax.set_ylabel("η(t) [mPa·s]")
        ax.legend(fontsize=7)
        return {VISCOSITY.figure: fig}
