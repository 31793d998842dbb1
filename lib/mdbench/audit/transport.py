"""Transport claims against the trajectory: the run's own fit window and reference frame (A3, A4, A5).

The canonical reanalysis fits D, σ and t+ on its registered windows. Where its own regime checks fail (a
short run), a transport value depends on the fit window, so comparing a value fitted elsewhere with it says
nothing. A careful adjudicator then applies the *canonical estimator on the window the run reported* — the
same definition, guard and four blocks — and compares with that (:class:`WindowRefit`). The same re-fit
gives the trajectory's MSD exponent over the reported window, against which a reported exponent or a passed
regime check is compared, and a window that does not fit inside the analysed interval is a contradiction.

The re-fit reads only centres of mass: one reduced pass over the production trajectory
(:func:`mdbench.analysis.reduce.reduce_files`, structure data on a single frame), made lazily — only when a
comparison needs it, so an audit of a run analysed on the canonical windows never pays for it — and at most
once per case. The estimators are the library's (:func:`mdbench.analysis.diffusion.self_diffusion`,
:func:`mdbench.analysis.onsager.onsager_transport`) with a fixed ``fit_window_ps``; nothing is re-implemented.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mdbench.analysis.blocks import t_quantile_975

log = logging.getLogger(__name__)

#: Margin [dimensionless] by which an MSD exponent must miss the accepted range, or differ from a reported
#: one, before the audit calls a reported regime diagnostic contradicted (β of a short MSD scatters by ~0.1).
BETA_MARGIN = 0.15


def reported_window(raw: dict[str, Any]) -> tuple[float, float] | None:
    """The fit window [ps] a result says it used (``fit_window_ps``, ``window.fit_window_ps`` or
    ``window.lo_ps/hi_ps``); None when it states none or an unusable one."""
    cands: list[Any] = [raw.get("fit_window_ps")]
    for sub in ("window", "diagnostics", "details"):
        d = raw.get(sub)
        if isinstance(d, dict):
            cands += [d.get("fit_window_ps"), [d.get("lo_ps"), d.get("hi_ps")]]
    for c in cands:
        if isinstance(c, (list, tuple)) and len(c) == 2 and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in c) \
                and 0.0 <= float(c[0]) < float(c[1]):
            return float(c[0]), float(c[1])
    return None


def same_window(a: tuple[float, float], b: tuple[float, float], dt_ps: float) -> bool:
    """Two fit windows equal within one frame (or 2 % of the longer lag)."""
    tol = max(dt_ps, 0.02 * max(a[1], b[1])) + 1e-9
    return abs(a[0] - b[0]) <= tol and abs(a[1] - b[1]) <= tol


def declared_frame(text: str) -> str | None:
    """``barycentric``, ``solvent`` or ``lab`` as a definition text names its reference frame (None: silent).
    Centre-of-mass motion removed counts as barycentric. Only the first 2,000 characters are read (a run's
    text is untrusted)."""
    t = text[:2000].lower()
    if "solvent" in t and "frame" in t:
        return "solvent"
    if re.search(r"barycent|com[- ](?:motion|drift)[^.;]*remov|centre[- ]of[- ]mass[^.;]*remov|"
                 r"center[- ]of[- ]mass[^.;]*remov|drift[- ]corrected", t):
        return "barycentric"
    if re.search(r"\blab(?:oratory)?\b", t):
        return "lab"
    return None


@dataclass
class Refit:
    """The canonical estimator on one window: whole value, four blocks, and the MSD exponent over it."""

    value: float
    blocks: list[float]
    window_ps: tuple[float, float]
    beta_fit: float = float("nan")   # log–log slope of the whole-interval MSD over the window
    note: str = ""


@dataclass
class WindowRefit:
    """Canonical estimators re-applied on a run's reported windows (one lazy reduced pass per case)."""

    tpr: str | Path
    xtc: str | Path
    guard_ps: float
    n_blocks: int = 4
    temperature_K: float | None = None
    _rd: Any = None
    _failed: str | None = None
    _cache: dict[Any, Any] = field(default_factory=dict)

    @classmethod
    def for_case(cls, tpr: str | Path, xtc: str | Path, canonical_results: Any,
                 centres: Any = None) -> WindowRefit | None:
        """A re-fit on the guard/blocks of the canonical reanalysis (None without a usable one); ``centres``: the
        molecular centres of mass the reanalysis kept of the same production
        (:func:`mdbench.analysis.reduce.centres.load_centres`), else the trajectory is read when first needed."""
        if not isinstance(canonical_results, dict):
            return None
        guard = canonical_results.get("guard_ps")
        win = canonical_results.get("windows") if isinstance(canonical_results.get("windows"), dict) else {}
        n = win.get("n_blocks", 4)
        if not isinstance(guard, (int, float)) or not isinstance(n, int):
            return None
        T = canonical_results.get("temperature_K")
        return cls(tpr, xtc, float(guard), n, float(T) if isinstance(T, (int, float)) else None, _rd=centres)

    def trajectory(self) -> Any:
        """Centres of mass of every molecule (the reduced trajectory), read once."""
        if self._rd is None and self._failed is None:
            self._rd, self._failed = reduce_for_refit(self.tpr, self.xtc)
        return self._rd

    def block_length_ps(self) -> float | None:
        rd = self.trajectory()
        if rd is None:
            return None
        from mdbench.analysis.blocks import block_windows  # noqa: PLC0415

        return float(block_windows(rd.time_ps, self.guard_ps, self.n_blocks).block_length_ps)

    def _max_lag_fraction(self, hi: float) -> float | None:
        bl = self.block_length_ps()
        if bl is None or hi > bl + 1e-6:
            return None
        return min(1.0, hi / bl + 0.05)

    def diffusion(self, species: str, window: tuple[float, float]) -> Refit | None:
        """D [m^2/s] of ``species`` on ``window`` (barycentric, as the canonical one)."""
        key = ("D", species, window)
        if key not in self._cache:
            self._cache[key] = self._diffusion(species, window)
        return self._cache[key]

    def _diffusion(self, species: str, window: tuple[float, float]) -> Refit | None:
        rd = self.trajectory()
        frac = self._max_lag_fraction(window[1]) if rd is not None else None
        if rd is None or frac is None or species not in rd.species:
            return None
        from mdbench.analysis.diffusion import self_diffusion  # noqa: PLC0415

        try:
            dr = self_diffusion(rd.species_com_nm(species), rd.time_ps, system_com_nm=rd.system_com_nm,
                                species=species, guard_ps=self.guard_ps, n_blocks=self.n_blocks,
                                fit_window_ps=window, max_lag_fraction=frac)
        except Exception as exc:  # noqa: BLE001
            log.debug("re-fit of D(%s) failed: %s", species, exc)
            return None
        if not (math.isfinite(dr.D.whole) and all(math.isfinite(b) for b in dr.D.blocks)):
            return None
        return Refit(float(dr.D.whole), [float(b) for b in dr.D.blocks], window,
                     _loglog_slope(dr.lag_ps, dr.msd_nm2, window))

    def msd(self, species: str) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]] | None:
        """(lag [ps], whole-interval MSD, block MSDs [nm^2]) of ``species`` as the canonical estimator forms
        them (molecular centres of mass, barycentric, same guard and blocks), lags up to one block."""
        key = ("msd", species)
        if key not in self._cache:
            self._cache[key] = self._msd(species)
        return self._cache[key]

    def _msd(self, species: str) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]] | None:
        rd = self.trajectory()
        if rd is None or species not in rd.species:
            return None
        from mdbench.analysis.diffusion import self_diffusion  # noqa: PLC0415

        try:
            dr = self_diffusion(rd.species_com_nm(species), rd.time_ps, system_com_nm=rd.system_com_nm,
                                species=species, guard_ps=self.guard_ps, n_blocks=self.n_blocks, max_lag_fraction=1.0)
        except Exception as exc:  # noqa: BLE001
            log.debug("canonical MSD of %s failed: %s", species, exc)
            return None
        if dr.msd_nm2.size < 3 or len(dr.msd_blocks_nm2) < 2:
            return None
        n = min(dr.msd_nm2.size, *(b.size for b in dr.msd_blocks_nm2))
        return dr.lag_ps[:n], dr.msd_nm2[:n], [b[:n] for b in dr.msd_blocks_nm2]

    def onsager(self, window: tuple[float, float]) -> Any:
        """The Onsager result (σ, t+ in every frame) on ``window``; None where it cannot be computed."""
        key = ("L", window)
        if key not in self._cache:
            self._cache[key] = self._onsager(window)
        return self._cache[key]

    def _onsager(self, window: tuple[float, float]) -> Any:
        rd = self.trajectory()
        if rd is None or self._max_lag_fraction(window[1]) is None or not rd.ions():
            return None
        from mdbench.analysis.onsager import onsager_transport  # noqa: PLC0415
        from mdbench.analysis.settings import AnalysisSettings  # noqa: PLC0415

        neutral = rd.neutral_species()
        ref = max(neutral, key=lambda sp: int(np.sum(rd.mol_species == sp))) if neutral else None
        T = self.temperature_K if self.temperature_K is not None else AnalysisSettings().temperature_K
        lo = max(window[0], float(np.median(np.diff(rd.time_ps))))  # lag 0 carries no slope information
        try:
            return onsager_transport({sp: rd.species_com_nm(sp) for sp in rd.species}, dict(rd.species_charge_e),
                                     rd.time_ps, rd.volume_nm3, T, system_com_nm=rd.system_com_nm,
                                     reference_species=ref, guard_ps=self.guard_ps, n_blocks=self.n_blocks,
                                     fit_window_ps=(lo, window[1]))
        except Exception as exc:  # noqa: BLE001
            log.debug("re-fit of the Onsager matrix failed: %s", exc)
            return None

    def collective(self, canonical_key: str, window: tuple[float, float]) -> Refit | None:
        """σ [S/m] or the t+ named by the canonical key (``conductivity/sigma``,
        ``transference/barycentric/unweighted_L``) on ``window``."""
        o = self.onsager(window)
        if o is None:
            return None
        tail = canonical_key.split("/", 1)[-1]
        est = None
        from mdbench.analysis.observables import CONDUCTIVITY, CONDUCTIVITY_MEMBERS  # noqa: PLC0415

        if CONDUCTIVITY.owns(canonical_key):
            attr = CONDUCTIVITY_MEMBERS.get(tail)
            est = getattr(o, attr) if attr else None
        else:
            est = next((te.t_plus for te in o.transference if te.key == tail), None)
        if est is None or not (math.isfinite(est.whole) and all(math.isfinite(b) for b in est.blocks)):
            return None
        return Refit(float(est.whole), [float(b) for b in est.blocks], window,
                     float(getattr(o, "charge_msd_beta", float("nan"))))


def reduce_for_refit(tpr: str | Path, xtc: str | Path) -> tuple[Any, str | None]:
    """(reduced trajectory, None) or (None, why not) of a production, as :class:`WindowRefit` reads it: molecular
    centres of mass only (one structure frame, a 0.3-nm neighbour range). Only where the reanalysis kept no
    centres of its pass (:mod:`mdbench.analysis.reduce.centres`: a trajectory above the size cap, a file that
    does not read) does a re-fit read the trajectory itself."""
    try:
        from mdbench.analysis import reduce  # noqa: PLC0415

        return reduce.reduce_files(tpr, xtc, structure_max_frames=1, rdf_rmax_nm=0.3, r_store_nm=0.3,
                                   workers=1), None
    except Exception as exc:  # noqa: BLE001 - no re-fit is a note, never a crash
        return None, f"{type(exc).__name__}: {exc}"[:200]


def _loglog_slope(lag_ps: np.ndarray, msd_nm2: np.ndarray, window: tuple[float, float]) -> float:
    """Log–log slope of an MSD over the lags inside ``window`` (nan with fewer than two positive lags)."""
    lag, m = np.asarray(lag_ps, dtype=np.float64), np.asarray(msd_nm2, dtype=np.float64)
    sel = (lag >= window[0] - 1e-9) & (lag <= window[1] + 1e-9) & (lag > 0) & (m > 0)
    if sel.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(lag[sel]), np.log(m[sel]), 1)[0])


# ------------------------------------------------------------------------------------------ recorded curves
def curve_diffusion(lag_ps: np.ndarray, msd_nm2: np.ndarray, window: tuple[float, float]
                    ) -> tuple[float, float, int]:
    """(D [m^2/s], MSD exponent β, number of lags) of a recorded MSD over ``window``: the diffusion
    module's definition (:func:`mdbench.analysis.diffusion.fit_slope` of MSD vs lag, / 6, its unit constant)
    and the log–log slope :func:`_loglog_slope` the re-fit uses."""
    from mdbench.analysis.diffusion import fit_slope  # noqa: PLC0415
    from mdbench.analysis.units import NM2_PER_PS_TO_M2_PER_S  # noqa: PLC0415

    lag, m = np.asarray(lag_ps, dtype=np.float64), np.asarray(msd_nm2, dtype=np.float64)
    w = snap_window(lag, window)
    n = int(np.sum((lag >= w[0]) & (lag <= w[1])))
    D = fit_slope(lag, m, w[0], w[1]) / 6.0 * NM2_PER_PS_TO_M2_PER_S
    return float(D), _loglog_slope(lag, m, w), n


def snap_window(lag_ps: np.ndarray, window: tuple[float, float]) -> tuple[float, float]:
    """``window`` widened by 1 % of the curve's lag step on each side: a table prints its lags rounded
    (``0.440000`` for a lag of 0.4399996 ps), and a window edge on a lag must still include it."""
    step = float(np.median(np.diff(lag_ps))) if len(lag_ps) > 1 else 0.0
    return window[0] - 0.01 * step, window[1] + 0.01 * step


@dataclass
class CurveComparison:
    """A recorded MSD against the canonical one of the same species over their common lags."""

    n_lags: int
    lag_range_ps: tuple[float, float]
    median_excess: float      # median over the lags of |recorded − canonical| / tolerance (> 1: disagree)
    ratio_median: float       # median recorded / canonical
    exponent_shift: float     # log–log slope of recorded / canonical vs lag (≠ 0: another time dependence)
    worst: str                # the lag of largest excess, both numbers

    @property
    def disagrees(self) -> bool:
        return self.n_lags >= 3 and self.median_excess > 1.0

    @property
    def shape_differs(self) -> bool:
        """The recorded MSD grows with another exponent than the trajectory's (a frame or unwrapping
        fault), not by a constant factor (units, normalisation)."""
        return math.isfinite(self.exponent_shift) and abs(self.exponent_shift) > BETA_MARGIN


def compare_curves(lag_ps: np.ndarray, msd_nm2: np.ndarray, canonical: tuple[np.ndarray, np.ndarray, list[np.ndarray]],
                   window: tuple[float, float] | None, rel_tol: float) -> CurveComparison | None:
    r"""Compare a recorded MSD with the canonical one at the recorded lags inside the canonical range (the
    canonical curves interpolated linearly; lag 0 left out), restricted to ``window`` where it holds at least
    three of them. The tolerance at each lag is twice :math:`\max(h, \mathrm{rel\_tol}\cdot\mathrm{MSD})`, with
    :math:`h = t_{0.975}\, s_b/\sqrt{n_b}` of the canonical block MSDs — twice, as for every sampling-limited
    comparison, so that no finding rests on a borderline state; the quantile follows the number of canonical
    blocks (:func:`mdbench.analysis.blocks.t_quantile_975`, the analysis' rule)."""
    lag_c, whole, blocks = canonical
    lag, m = np.asarray(lag_ps, dtype=np.float64), np.asarray(msd_nm2, dtype=np.float64)
    sel = (lag > 0) & (lag <= lag_c[-1] * (1 + 1e-9)) & np.isfinite(m)
    if window is not None:
        lo, hi = snap_window(lag, window)
        inw = sel & (lag >= lo) & (lag <= hi)
        if inw.sum() >= 3:
            sel = inw
    if sel.sum() < 3:
        return None
    x, y = lag[sel], m[sel]
    c = np.interp(x, lag_c, whole)
    bl = np.asarray([np.interp(x, lag_c, b) for b in blocks])
    h = t_quantile_975(bl.shape[0]) * bl.std(axis=0, ddof=1) / math.sqrt(bl.shape[0])
    tol = 2.0 * np.maximum(h, rel_tol * np.abs(c))
    ok = tol > 0
    if ok.sum() < 3:
        return None
    with np.errstate(all="ignore"):       # a hostile curve may hold numbers near the float range's ends
        excess = np.abs(y - c)[ok] / tol[ok]
        logr = np.log(y / c)
    i = int(np.argmax(excess))
    pos = ok & (y > 0) & (c > 0) & np.isfinite(logr)
    shift = float(np.polyfit(np.log(x[pos]), logr[pos], 1)[0]) if pos.sum() >= 3 else float("nan")
    ratio = float(np.exp(np.median(logr[pos]))) if pos.any() else float("nan")
    xs, ys, cs = x[ok], y[ok], c[ok]
    return CurveComparison(int(ok.sum()), (float(x[0]), float(x[-1])), float(np.median(excess)), ratio, shift,
                           f"at {xs[i]:g} ps recorded {ys[i]:.4g} nm^2, trajectory {cs[i]:.4g} ± {tol[ok][i]:.2g} nm^2")
