"""A reported self-diffusion coefficient against the MSD of the run's own trajectory and its own recorded MSD,
by a ratio with its own band — not against the canonical interval, which on a short run spans several-fold
(A3: a D far off its own MSD is a wrong implementation whatever its diagnostics claim).

The trajectory's MSD is the one the canonical reanalysis formed (:meth:`mdbench.audit.transport.WindowRefit.msd`,
cached: no second pass over the trajectory). Its diffusive window is re-derived here by the analysis' own rule
(:func:`mdbench.analysis.diffusion.select_diffusive_window`, lags up to half a block) whatever the run's
``found`` flag or β say; where that rule finds no window of at least two lags, the analysis' fallback (the last
half decade of lags) is used. D is the diffusion module's slope/6 (:func:`mdbench.audit.transport.curve_diffusion`)
on every *candidate window* — the re-derived one and the run's own window (the one the result reports, else the
one the run registered), where it lies inside the MSD — and the *band* is

.. math:: [\\min_w D(w) / B,\\ \\max_w D(w) \\cdot B], \\qquad B = 1.5 \\ (:data:`BAND_FACTOR`),

i.e. every value a linear fit of this trajectory's MSD gives on a defensible window, widened by 50 % for
estimator details (time-origin spacing, frame, fit weights). A reported D outside it follows from no window
of the trajectory: ``diffusion_off_trajectory_msd`` (A3, F, both numbers and the ratio). The same band on the
run's own recorded MSD (where the result cites one and states no fit window, which
:func:`mdbench.audit.canonical.recorded_curve_checks` then cannot re-fit): ``diffusion_off_recorded_msd``.
An entry already found with a trajectory-treatment cause (A4) is left to that finding.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

import numpy as np

from mdbench.analysis.observables import SELF_DIFFUSION_GROUP, SELF_DIFFUSION_YH
from mdbench.audit.codes import GroupCheck, check
from mdbench.audit.model import Evidence
from mdbench.audit.runread import Entry, RunData, group_entries, read_recorded_curve
from mdbench.audit.transport import curve_diffusion, reported_window, snap_window
from mdbench.audit.canonical import _canonical_match
from mdbench.audit.registered_definitions import fit_window

log = logging.getLogger(__name__)

#: Factor by which the band of a D re-fitted on the trajectory's candidate windows is widened.
BAND_FACTOR = 1.5
#: Fraction of the longest MSD lag (one block) up to which a diffusive window is looked for (the analysis'
#: ``max_lag_fraction``).
MAX_LAG_FRACTION = 0.5
#: Values [m²/s] a self-diffusion coefficient in SI units can take; others (another unit, a ratio) are skipped.
D_RANGE_M2_S = (1e-14, 1e-5)
_GROUP = SELF_DIFFUSION_GROUP.name
_SI_UNITS = {"", "m^2/s", "m2/s", "m²/s", "m^2s^-1", "m2s-1", "m^2*s^-1", "m**2/s"}


def _si_unit(raw: dict) -> bool:
    unit = raw.get("unit", raw.get("units", ""))
    return isinstance(unit, str) and unit.replace(" ", "").lower()[:32] in _SI_UNITS


def _n_lags(lag: np.ndarray, w: tuple[float, float]) -> int:
    lo, hi = snap_window(lag, w)
    return int(np.sum((lag >= lo) & (lag <= hi) & (lag > 0)))


def rederived_window(lag_ps: np.ndarray, msd_nm2: np.ndarray) -> tuple[tuple[float, float], bool]:
    """(window [ps], found) of the trajectory's MSD by the analysis' β rule, or its fallback (last half decade of
    lags up to :data:`MAX_LAG_FRACTION` of the longest lag) where the rule's window holds fewer than two lags."""
    from mdbench.analysis.diffusion import select_diffusive_window  # noqa: PLC0415

    lag = np.asarray(lag_ps, dtype=np.float64)
    hi_max = MAX_LAG_FRACTION * float(lag[-1])
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # a hostile curve: all-nan slopes
        warnings.simplefilter("ignore", RuntimeWarning)
        w = select_diffusive_window(lag, np.asarray(msd_nm2, dtype=np.float64), max_lag_ps=hi_max)
    if math.isfinite(w.lo_ps) and math.isfinite(w.hi_ps) and w.hi_ps > w.lo_ps and \
            _n_lags(lag, (w.lo_ps, w.hi_ps)) >= 2:
        return (float(w.lo_ps), float(w.hi_ps)), bool(w.found)
    inside = lag[(lag > 0) & (lag <= hi_max * (1 + 1e-9))]
    if inside.size < 2:
        return (float("nan"), float("nan")), False
    hi = float(inside[-1])
    return (max(float(inside[0]), hi / math.sqrt(10.0)), hi), False


def band(lag_ps: np.ndarray, msd_nm2: np.ndarray, windows: list[tuple[float, float]]
         ) -> tuple[float, float, list[tuple[tuple[float, float], float]]] | None:
    """(lower, upper) bound [m²/s] of the D a linear fit of ``msd_nm2`` gives on ``windows`` (each with at least
    two lags inside the curve), widened by :data:`BAND_FACTOR`, and the (window, D) pairs; None without any."""
    lag = np.asarray(lag_ps, dtype=np.float64)
    got = []
    for w in windows:
        if not (math.isfinite(w[0]) and math.isfinite(w[1])) or w[1] <= w[0] or w[1] > lag[-1] * (1 + 1e-6):
            continue
        D, _beta, n = curve_diffusion(lag, msd_nm2, w)
        if n >= 2 and math.isfinite(D) and D > 0:
            got.append((w, D))
    if not got:
        return None
    ds = [d for _, d in got]
    return min(ds) / BAND_FACTOR, max(ds) * BAND_FACTOR, got


def _species(e: Entry, canonical: dict[str, Entry]) -> tuple[str | None, tuple[float, float] | None]:
    """(species, the fit window the run registered for it) of the reanalysis entry ``e`` pairs with."""
    try:
        ce = _canonical_match(_GROUP, e, canonical)
        return (None, None) if ce is None else (str(ce.raw.get("species") or ce.key.rsplit("/", 1)[-1]),
                                                fit_window(ce))
    except Exception:  # noqa: BLE001 - a failing matcher: nothing to compare, never a crash
        return None, None


def _already_treatment(groups: list[Any] | None, key: str) -> bool:
    for gr in groups or []:
        a = getattr(gr, "assessment", None)
        if a is not None and a.observable == _GROUP:
            return any(c.code == "trajectory_treatment_differs" and key in c.message for c in a.checks)
    return False


def _uncorrected(e: Entry) -> float | None:
    """The D of ``e`` as the trajectory's MSD gives it: a finite-size corrected D (Yeh–Hummer) less the correction
    it records (``diagnostics.correction_m2_s``); None for a corrected D that records no correction to undo."""
    diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
    corr = diag.get("correction_m2_s")
    if corr is None and SELF_DIFFUSION_YH.name not in e.key:
        return e.value
    if isinstance(corr, bool) or not isinstance(corr, (int, float)) or not math.isfinite(corr):
        return None
    return e.value - float(corr)


def _finding(case: str, e: Entry, code: str, what: str, b: tuple[float, float, list], found: bool,
             value: float) -> GroupCheck:
    lo, hi, got = b
    ref = got[0][1]
    wins = ", ".join(f"[{w[0]:.3g}, {w[1]:.3g}] ps: {d:.4g}" for w, d in got)
    shown = f"{e.value:.4g} m^2/s" if value == e.value else f"{e.value:.4g} m^2/s ({value:.4g} without its correction)"
    msg = (f"{e.key} = {shown} is {value / ref:.3g} × the D of {what} (slope/6 on its diffusive window "
           f"re-derived by the β rule{'' if found else ', not found: fallback window'}; {wins} m^2/s); a linear fit "
           f"of that MSD gives [{lo:.4g}, {hi:.4g}] m^2/s on any candidate window (× {BAND_FACTOR:g} either way): "
           "the value follows from no window of it, whatever the run's diffusive diagnostics say")
    return GroupCheck(_GROUP, check(code, msg, (Evidence(f"analysis/{case}/results.json", key=e.key, note="value"),)))


def checks(run: RunData, case: str, canonical_results: Any, refit: Any, groups: list[Any] | None = None
           ) -> list[GroupCheck]:
    """Every reported D of ``case`` against the trajectory's MSD and its own recorded MSD (module docstring)."""
    mine = (group_entries(run.results.get(case)) or {}).get(_GROUP) or {}
    if not mine or refit is None:
        return []
    canon = (group_entries(canonical_results) or {}).get(_GROUP) or {}
    out: list[GroupCheck] = []
    for e in list(mine.values())[:50]:
        if not e.finite_value or not D_RANGE_M2_S[0] <= e.value <= D_RANGE_M2_S[1] or not _si_unit(e.raw) \
                or _already_treatment(groups, e.key):
            continue  # another unit or a ratio: the unit checks' matter, not a value off the trajectory
        value = _uncorrected(e)
        species, registered_window = _species(e, canon) if value is not None else (None, None)
        traj = refit.msd(species) if species else None
        if traj is None:
            continue
        lag, whole, _blocks = traj
        window, found = rederived_window(lag, whole)
        rep = reported_window(e.raw) or registered_window  # the run's window: stated, else registered
        wins = [window] + ([rep] if rep is not None else [])
        b = band(lag, whole, wins)
        if b is not None and not (b[0] <= value <= b[1]):
            out.append(_finding(case, e, "diffusion_off_trajectory_msd", f"the trajectory's MSD ({species})", b,
                                found, value))
            continue
        if rep is not None:
            continue  # a stated window: the recorded curve is re-fitted on it by recorded_curve_checks
        try:
            curve = read_recorded_curve(run, case, e, species)
        except Exception as exc:  # noqa: BLE001 - a hostile curve: its own finding elsewhere, never a crash
            log.debug("recorded curve of %s unreadable: %s", e.key, exc)
            curve = None
        if curve is None or len(curve.lag_ps) < 3:
            continue
        rb = band(curve.lag_ps, curve.msd_nm2, [window])
        if rb is not None and not (rb[0] <= value <= rb[1]):
            out.append(_finding(case, e, "diffusion_off_recorded_msd", f"its own recorded MSD ({curve.source})", rb,
                                found, value))
    return out
