r"""Thermodynamic time series from a GROMACS energy file: whole/block means, g, drift, t0.

The file is read by :mod:`mdbench.analysis.edrfile` (numpy; pyedr, the reference, for what it declines).

Observables (GROMACS energy-term name → unit): density (``Density``, kg/m^3), temperature
(``Temperature``, K), pressure (``Pressure``, bar; its mean is meaningful in every ensemble, the target
only under a barostat), potential energy (``Potential``, kJ/mol), total energy (``Total Energy``, kJ/mol),
volume (``Volume``, nm^3; constant — absent from the file — at fixed box).

For each: whole-interval mean and the four block means (:mod:`mdbench.analysis.blocks`), the standard
deviation of the fluctuations, the statistical inefficiency g (pymbar) and correlation time
τ = (g − 1)/2 · Δt, the effective sample count N/g, and a linear drift

.. math:: x(t) = a + b t,\qquad \mathrm{se}(b) = \mathrm{se}_{OLS}(b)\,\sqrt{g_\mathrm{resid}}

Sampling checks (→ SI when failing): ``effective_samples`` (N/g ≥ ``min_effective_samples``) and
``no_significant_drift`` (not both |b| > ``drift_sigma`` se(b) and |b|·T_window > block half-width).

Equilibration detection uses ``pymbar.timeseries.detect_equilibration`` with ``nskip`` chosen so that at
most ``max_points`` origins are tried (it is O(N²)); one guard t0 then serves every analysis.

References
----------
Chodera, J. Chem. Theory Comput. 12, 1799 (2016), doi:10.1021/acs.jctc.5b00784
"""

from __future__ import annotations

import logging
import math
import os
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from mdbench.analysis import edrfile
from mdbench.analysis.blocks import (BlockEstimate, BlockWindows, _json_float, block_estimate, block_windows,
                                     pymbar_detect_equilibration, statistical_inefficiency)
from mdbench.analysis.estimator import Estimate, EstimatorBase, Measurement
from mdbench.analysis.observables import THERMO
from mdbench.analysis.units import as_float64
from mdbench.errors import InputError
from mdbench.analysis.settings import registered

logger = logging.getLogger(__name__)

#: observable name → (GROMACS energy term, unit)
THERMO_TERMS: dict[str, tuple[str, str]] = {
    "density": ("Density", "kg/m^3"),
    "temperature": ("Temperature", "K"),
    "pressure": ("Pressure", "bar"),
    "potential_energy": ("Potential", "kJ/mol"),
    "total_energy": ("Total Energy", "kJ/mol"),
    "volume": ("Volume", "nm^3"),
}


@dataclass
class EnergySeries:
    """Time series of an energy file.

    Attributes
    ----------
    time_ps : numpy.ndarray, shape (F,)
        Frame times [ps].
    terms : dict of str to numpy.ndarray
        Energy-term name (GROMACS spelling) → float64 series.
    units : dict of str to str
        Energy-term name → unit.
    path : str or None
        Source file.
    torn_bytes : int or None
        Bytes after the last complete frame (0: the file ends on a frame boundary; >0: truncated, read to its
        last complete frame; None: not known, the file was read by pyedr).
    """

    time_ps: np.ndarray
    terms: dict[str, np.ndarray]
    units: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    torn_bytes: int | None = None

    def __contains__(self, name: str) -> bool:
        return name in self.terms

    def columns(self) -> dict[str, np.ndarray]:
        """``{"Time": …, term: …}`` as pyedr's ``edr_to_dict`` gives them (writable copies)."""
        return {"Time": self.time_ps.copy(), **{k: v.copy() for k, v in self.terms.items()}}

    def pressure_tensor_bar(self) -> dict[str, np.ndarray]:
        """The ``Pres-XX`` .. ``Pres-ZZ`` terms present (for :func:`~mdbench.analysis.viscosity.green_kubo_viscosity`)."""
        return {k: v for k, v in self.terms.items() if k.startswith("Pres-") and len(k) == 7}


def read_energy_file(edr_path: str | Path) -> EnergySeries:
    """Read a GROMACS ``.edr`` file into float64 arrays (cached per file version; the project's one reader).

    Parameters
    ----------
    edr_path : str or Path
        Energy file.

    Returns
    -------
    EnergySeries

    Raises
    ------
    InputError
        When the file is missing or unreadable (names the file).
    """
    p = Path(edr_path)
    if not p.is_file():
        raise InputError("energy file not found; pass the .edr written by mdrun (-e)", path=str(p))
    st = p.stat()
    key = (os.path.realpath(p), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    hit = _ENERGY_CACHE.get(key)
    if hit is not None:
        _ENERGY_CACHE.move_to_end(key)
        return replace(hit, terms=dict(hit.terms), units=dict(hit.units), path=str(p))
    series = _read_energy_file(p)
    for arr in (series.time_ps, *series.terms.values()):
        arr.setflags(write=False)  # shared between callers: nobody may change another caller's numbers
    _ENERGY_CACHE[key] = series
    while len(_ENERGY_CACHE) > _ENERGY_CACHE_SIZE:
        _ENERGY_CACHE.popitem(last=False)
    return replace(series, terms=dict(series.terms), units=dict(series.units))


#: Energy files read in this process, by (real path, device, inode, size, mtime): the audit's production check
#: and its canonical reanalysis read the same .edr, and pyedr's pure-Python parse is most of each read.
_ENERGY_CACHE: OrderedDict[tuple, EnergySeries] = OrderedDict()
_ENERGY_CACHE_SIZE = 4


def _read_energy_file(p: Path) -> EnergySeries:
    """Parse one energy file (no cache): :mod:`mdbench.analysis.edrfile`, or pyedr where it declines."""
    _check_edr_header(p)
    try:
        table = edrfile.read_edr(p)
    except edrfile.Corrupt as exc:
        raise InputError(f"cannot read energy file ({exc}); is it a complete GROMACS .edr?", path=str(p)) from exc
    except edrfile.Unsupported as why:
        logger.debug("%s: read with pyedr (%s)", p, why)
        return _read_energy_file_pyedr(p)
    units = {"Time": "ps"}
    units.update(zip(table.names, table.units))  # pyedr's get_unit_dictionary, repeated names included
    terms = {k: table.columns[i] for i, k in enumerate(table.names) if k != "Time"}
    if table.torn_bytes:
        logger.warning("%s: energy file truncated: %d bytes after the last complete frame (t = %.6g ps) are "
                       "ignored", p, table.torn_bytes, table.time_ps[-1] if table.time_ps.size else float("nan"))
    return EnergySeries(time_ps=table.time_ps, terms=terms, units=units, path=str(p), torn_bytes=table.torn_bytes)


def _read_energy_file_pyedr(p: Path) -> EnergySeries:
    """Parse one energy file with pyedr, the reference reader (layouts :mod:`~mdbench.analysis.edrfile` leaves
    to it, and corrupt files: its errors become one InputError naming the file)."""
    import pyedr

    try:
        # pyedr's read_edr gives frames × [Time, terms...]; one array conversion (its edr_to_dict builds each
        # column with a Python loop over frames: the same numbers, ≈ 15 % slower)
        energies, names, _ = pyedr.read_edr(str(p))
        units = pyedr.get_unit_dictionary(str(p))
    except Exception as exc:  # pyedr raises assorted errors for corrupt files
        raise InputError(f"cannot read energy file ({type(exc).__name__}: {exc}); is it a complete GROMACS .edr?",
                         path=str(p)) from exc
    table = np.array(energies, dtype=np.float64).reshape(len(energies), len(names))
    terms = {k: table[:, i].copy() for i, k in enumerate(names) if k != "Time"}
    return EnergySeries(time_ps=table[:, names.index("Time")].copy(), terms=terms,
                        units={k: str(v) for k, v in units.items()}, path=str(p))


#: XDR magic number at the start of every GROMACS (>= 4.5) energy file.
EDR_MAGIC: int = -55555


def _check_edr_header(path: Path) -> None:
    """Reject files that are not GROMACS energy files before pyedr reads them (pyedr trusts the header and
    can allocate unbounded memory on garbage)."""
    import struct

    with path.open("rb") as fh:
        head = fh.read(12)
    if len(head) < 12:
        raise InputError("energy file is truncated (shorter than its header)", path=str(path))
    magic, version, n_terms = struct.unpack(">iii", head)
    if magic != EDR_MAGIC or not (1 <= version <= 100) or not (0 < n_terms < 100_000):
        raise InputError("not a GROMACS energy file (bad header magic/version); pass the .edr written by "
                         "mdrun -e (GROMACS >= 4.5)", path=str(path))


@dataclass(frozen=True)
class DriftEstimate:
    """Linear drift of a time series.

    Attributes
    ----------
    slope_per_ps : float
        b in x = a + b t [unit/ps].
    stderr_per_ps : float
        OLS standard error × sqrt(g) [unit/ps].
    total_change : float
        b × window length [unit].
    """

    slope_per_ps: float
    stderr_per_ps: float
    total_change: float

    @property
    def slope_per_ns(self) -> float:
        """Slope [unit/ns]."""
        return self.slope_per_ps * 1000.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {"slope_per_ns": _json_float(self.slope_per_ns),
                "stderr_per_ns": _json_float(self.stderr_per_ps * 1000.0),
                "total_change": _json_float(self.total_change)}


def linear_drift(time_ps: Any, values: Any, g: float | None = None) -> DriftEstimate:
    """Least-squares drift with the standard error inflated by sqrt(g) for correlated samples.

    Parameters
    ----------
    time_ps : array_like (F,)
        Times [ps].
    values : array_like (F,)
        Series.
    g : float, optional
        Statistical inefficiency of the fluctuations; default: that of the fit residuals (a drift does
        not inflate it).
    """
    t = as_float64(time_ps, "time_ps")
    x = as_float64(values, "values")
    if t.size < 3 or not (np.all(np.isfinite(x)) and np.all(np.isfinite(t))):
        nan = float("nan")
        return DriftEstimate(nan, nan, nan)
    tc = t - t.mean()
    sxx = float(tc @ tc)
    b = float(tc @ (x - x.mean()) / sxx)
    resid = x - x.mean() - b * tc
    if g is None:
        g = statistical_inefficiency(resid)
    se = math.sqrt(float(resid @ resid) / (t.size - 2) / sxx) * math.sqrt(max(1.0, g if math.isfinite(g) else 1.0))
    return DriftEstimate(b, se, b * float(t[-1] - t[0]))


@dataclass(frozen=True)
class EquilibrationEstimate:
    """Start of the equilibrated region by pymbar's maximum-N_eff rule.

    Attributes
    ----------
    t0_ps : float
        Time of the first equilibrated frame [ps].
    index : int
        Its frame index.
    g : float
        Statistical inefficiency of the remaining series.
    n_effective : float
        Effective independent samples after t0.
    nskip : int
        Origin stride used (coarse grid; detection is O(N²)).
    """

    t0_ps: float
    index: int
    g: float
    n_effective: float
    nskip: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {"t0_ps": self.t0_ps, "index": self.index, "g": _json_float(self.g),
                "n_effective": _json_float(self.n_effective), "nskip": self.nskip}


def detect_equilibration(values: Any, time_ps: Any, *, max_points: int = 500) -> EquilibrationEstimate:
    """Equilibration time t0 of a series (pymbar ``detect_equilibration`` with a coarse origin grid).

    Parameters
    ----------
    values : array_like (F,)
        Series (e.g. density or potential energy).
    time_ps : array_like (F,)
        Times [ps].
    max_points : int
        At most this many candidate origins (``nskip = ceil(F / max_points)``).
    """
    x = as_float64(values, "values")
    t = as_float64(time_ps, "time_ps")
    if x.shape != t.shape or x.ndim != 1:
        raise InputError(f"values {x.shape} and time_ps {t.shape} must be 1-D of equal length")
    if not np.all(np.isfinite(x)):
        raise InputError("series contains non-finite values; equilibration cannot be detected")
    nskip = max(1, int(math.ceil(x.size / max_points)))
    if np.ptp(x) == 0:
        return EquilibrationEstimate(float(t[0]), 0, 1.0, float(x.size), nskip)
    i0, g, neff = pymbar_detect_equilibration(x, fast=True, nskip=nskip)
    return EquilibrationEstimate(float(t[int(i0)]), int(i0), float(g), float(neff), nskip)


def common_guard_ps(estimates: Iterable[EquilibrationEstimate], time_start_ps: float = 0.0) -> float:
    """One guard interval for every analysis: the latest t0 of the given series, minus the start time [ps]."""
    t0 = [e.t0_ps for e in estimates]
    return float(max(t0) - time_start_ps) if t0 else 0.0


@dataclass
class ThermoObservable:
    """Whole/block means, fluctuation, correlation and drift of one thermodynamic series.

    Attributes
    ----------
    name : str
        Observable name (``density``, ...).
    edr_term : str
        Energy-file term.
    unit : str
        Unit.
    estimate : BlockEstimate
        Whole-interval mean and block means.
    std : float
        Standard deviation of the fluctuations in the whole window [unit].
    statistical_inefficiency : float
        g (≥ 1).
    correlation_time_ps : float
        (g − 1)/2 × Δt [ps].
    n_effective : float
        N/g in the whole window.
    drift : DriftEstimate
        Linear drift in the whole window.
    failures : list of str
        → F.
    sampling_checks : dict of str to bool
        ``effective_samples``, ``no_significant_drift`` (→ SI).
    """

    name: str
    edr_term: str
    unit: str
    estimate: BlockEstimate
    std: float
    statistical_inefficiency: float
    correlation_time_ps: float
    n_effective: float
    drift: DriftEstimate
    failures: list[str] = field(default_factory=list)
    sampling_checks: dict[str, bool] = field(default_factory=dict)

    @property
    def mean(self) -> float:
        """Whole-interval mean [unit]."""
        return self.estimate.whole

    @property
    def window_ps(self) -> list[float] | None:
        """[first, last] time of the frames the estimate was computed on [ps]."""
        br = self.estimate.block_ranges_ps
        return [float(br[0][0]), float(br[-1][1])] if br else None

    def state_inputs(self) -> dict[str, Any]:
        """Inputs for :func:`mdbench.analysis.states.classify_observable`."""
        return {"values": [self.estimate.whole, *self.estimate.blocks], "failures": list(self.failures),
                "sampling_checks": dict(self.sampling_checks)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        d = self.estimate.to_dict()
        d.update({"observable": THERMO.key(self.name), "edr_term": self.edr_term,
                  "diagnostics": {"std": _json_float(self.std),
                                  "statistical_inefficiency": _json_float(self.statistical_inefficiency),
                                  "correlation_time_ps": _json_float(self.correlation_time_ps),
                                  "n_effective": _json_float(self.n_effective), "drift": self.drift.to_dict(),
                                  "sampling_checks": dict(self.sampling_checks),
                                  "failures": list(self.failures)}})
        return d


def thermo_observable(values: Any, time_ps: Any, *, name: str, unit: str, edr_term: str = "",
                      guard_ps: float = 0.0, n_blocks: int | None = None, min_effective_samples: float = 20.0,
                      drift_sigma: float = 3.0) -> ThermoObservable:
    """Block statistics, g and drift of one series.

    Parameters
    ----------
    values : array_like (F,)
        Series [unit] (float32 accepted, computed in float64).
    time_ps : array_like (F,)
        Times [ps].
    name, unit, edr_term : str
        Labels.
    guard_ps : float
        Excluded initial interval [ps].
    n_blocks : int
        Number of blocks (4).
    min_effective_samples : float
        Sampling threshold on N/g.
    drift_sigma : float
        Drift significance in standard errors.
    """
    n_blocks = registered(n_blocks, "n_blocks")
    x = as_float64(values, name)
    t = as_float64(time_ps, "time_ps")
    if x.shape != t.shape:
        raise InputError(f"{name}: {x.size} values for {t.size} times")
    win = block_windows(t, guard_ps, n_blocks)
    xs, ts = x[win.whole], t[win.whole]
    failures = []
    nb = int(xs.size - np.count_nonzero(np.isfinite(xs)))
    if nb:
        failures.append(f"{name} series contains {nb} non-finite values")
    with np.errstate(invalid="ignore"):
        est = block_estimate(float(np.mean(xs)), [float(np.mean(x[s])) for s in win.blocks], unit,
                             block_ranges_ps=win.block_ranges_ps)
    g = statistical_inefficiency(xs)
    drift = linear_drift(ts, xs)
    neff = xs.size / g if math.isfinite(g) else float("nan")
    significant = bool(abs(drift.slope_per_ps) > drift_sigma * drift.stderr_per_ps
                       and abs(drift.total_change) > est.half_width_95) if math.isfinite(drift.slope_per_ps) else True
    checks = {"effective_samples": bool(math.isfinite(neff) and neff >= min_effective_samples),
              "no_significant_drift": not significant}
    return ThermoObservable(name=name, edr_term=edr_term, unit=unit, estimate=est,
                            std=float(np.std(xs, ddof=1)) if xs.size > 1 else float("nan"),
                            statistical_inefficiency=g, correlation_time_ps=(g - 1) / 2 * win.dt_ps,
                            n_effective=neff, drift=drift, failures=failures, sampling_checks=checks)


@dataclass
class ThermoResult:
    """All thermodynamic observables of one case.

    Attributes
    ----------
    observables : dict of str to ThermoObservable
        Keyed by observable name.
    missing : list of str
        Observable names whose energy term is absent (e.g. volume at fixed box).
    ensemble : str
        Ensemble of the analysed run (``NPT``, ``NVT``, ``NVE``).
    windows : BlockWindows
        Guard and blocks.
    """

    observables: dict[str, ThermoObservable]
    missing: list[str]
    ensemble: str
    windows: BlockWindows

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {"ensemble": self.ensemble, "missing": list(self.missing),
                "analysis_windows": self.windows.to_dict(),
                "observables": {k: v.to_dict() for k, v in self.observables.items()}}


def thermo_analysis(series: EnergySeries, *, guard_ps: float = 0.0, n_blocks: int | None = None, ensemble: str = "NPT",
                    names: Iterable[str] | None = None, min_effective_samples: float = 20.0,
                    drift_sigma: float = 3.0) -> ThermoResult:
    """Thermodynamic observables of :data:`THERMO_TERMS` present in an energy file.

    Parameters
    ----------
    series : EnergySeries
        From :func:`read_energy_file` (or built from arrays).
    guard_ps : float
        Excluded initial interval [ps].
    n_blocks : int
        Number of blocks (4).
    ensemble : str
        Ensemble label recorded with the result.
    names : iterable of str, optional
        Subset of :data:`THERMO_TERMS` keys.
    min_effective_samples, drift_sigma : float
        See :func:`thermo_observable`.
    """
    n_blocks = registered(n_blocks, "n_blocks")
    wanted = list(names) if names is not None else list(THERMO_TERMS)
    unknown = [n for n in wanted if n not in THERMO_TERMS]
    if unknown:
        raise InputError(f"unknown thermodynamic observables {unknown}; choose from {list(THERMO_TERMS)}")
    win = block_windows(series.time_ps, guard_ps, n_blocks)
    out, missing = {}, []
    for n in wanted:
        term, unit = THERMO_TERMS[n]
        if term not in series.terms:
            missing.append(n)
            continue
        out[n] = thermo_observable(series.terms[term], series.time_ps, name=n, unit=series.units.get(term, unit),
                                   edr_term=term, guard_ps=guard_ps, n_blocks=n_blocks,
                                   min_effective_samples=min_effective_samples, drift_sigma=drift_sigma)
    return ThermoResult(observables=out, missing=missing, ensemble=ensemble, windows=win)


def _with_interval(ob: ThermoObservable, source: str) -> dict[str, Any]:
    """``ob.to_dict()`` with the time interval it was computed on (``window.computed_on_ps`` [ps], also in the
    diagnostics) and the series it came from."""
    d = ob.to_dict()
    d["window"] = {"computed_on_ps": ob.window_ps, "source": source}
    d["diagnostics"] = dict(d.get("diagnostics") or {}, computed_on_ps=ob.window_ps)
    return d


#: Name of the sampling check that energy series and trajectory cover the same analysis window.
COVERAGE_CHECK = "energy_covers_analysis_window"


def energy_coverage(series: EnergySeries, trajectory_time_ps: Any, guard_ps: float = 0.0, n_blocks: int | None = None
                    ) -> dict[str, Any]:
    """Whether the energy series and the trajectory cover the same analysis window, and whether the energy
    file was truncated.

    The analysis window of each is the span of its frames after the guard (the blocks of
    :func:`~mdbench.analysis.blocks.block_windows` drop fewer than ``n_blocks`` frames at its end). They
    *cover* each other when both ends agree within one output interval (the larger of the two frame
    spacings); otherwise what is computed from the energy file (thermodynamics, η, the transport temperature)
    describes another interval than what is computed from the trajectory, and the result is a warning and
    the failed check :data:`COVERAGE_CHECK` on the affected observables.

    Parameters
    ----------
    series : EnergySeries
        The energy file as read (``torn_bytes`` says whether it was cut inside a frame).
    trajectory_time_ps : array_like, shape (F,)
        Frame times of the trajectory [ps].
    guard_ps : float
        The case's guard [ps].
    n_blocks : int
        Number of blocks.

    Returns
    -------
    dict
        ``energy_window_ps``, ``trajectory_window_ps``, ``energy_range_ps``, ``trajectory_range_ps``,
        ``output_interval_ps``, ``covers`` (bool), ``truncated`` (bool or None when unknown), ``torn_bytes``,
        ``warnings`` (list of str) and ``detail`` (one line for a failed check).
    """
    n_blocks = registered(n_blocks, "n_blocks")
    te = np.asarray(series.time_ps, dtype=np.float64)
    tx = as_float64(trajectory_time_ps, "trajectory_time_ps")
    out: dict[str, Any] = {"truncated": None if series.torn_bytes is None else bool(series.torn_bytes),
                           "torn_bytes": series.torn_bytes, "path": series.path, "warnings": []}
    if series.torn_bytes:
        out["warnings"].append(f"energy file {series.path} is truncated: read to its last complete frame "
                               f"(t = {te[-1]:.6g} ps); {series.torn_bytes} bytes after it ignored")
    if te.size < 2 or tx.size < 2:
        out.update(covers=False, detail="energy series or trajectory has fewer than 2 frames")
        out["warnings"].append(out["detail"])
        return out
    def span(t: np.ndarray) -> tuple[float, float]:  # frames after the guard, to the last one
        kept = t[t >= t[0] + float(guard_ps) - 1e-9]
        return (float(kept[0]), float(kept[-1])) if kept.size else (float("nan"), float("nan"))

    tol = max(float(np.median(np.diff(te))), float(np.median(np.diff(tx))))
    ew, xw = span(te), span(tx)
    covers = abs(ew[0] - xw[0]) <= tol * (1 + 1e-9) and abs(ew[1] - xw[1]) <= tol * (1 + 1e-9)
    out.update(energy_range_ps=[float(te[0]), float(te[-1])], trajectory_range_ps=[float(tx[0]), float(tx[-1])],
               energy_window_ps=list(ew), trajectory_window_ps=list(xw), output_interval_ps=tol, covers=bool(covers))
    out["detail"] = (f"energy window {ew[0]:g}-{ew[1]:g} ps vs trajectory window {xw[0]:g}-{xw[1]:g} ps "
                     f"(tolerance one output interval, {tol:g} ps)")
    if not covers:
        out["warnings"].append(f"energy file {series.path} and trajectory do not cover the same analysis window: "
                               + out["detail"] + "; energy-based results (thermodynamics, eta, the transport "
                               "temperature) are kept out of C")
    for w in out["warnings"]:
        logger.warning("%s", w)
    return out


def coverage_check(coverage: dict[str, Any] | None) -> tuple[dict[str, bool], dict[str, str]]:
    """``({COVERAGE_CHECK: passed}, {COVERAGE_CHECK: detail})`` for an observable computed from the energy
    file (empty when no coverage was computed)."""
    if not coverage:
        return {}, {}
    return {COVERAGE_CHECK: bool(coverage.get("covers"))}, {COVERAGE_CHECK: str(coverage.get("detail", ""))}


class ThermoEstimator(EstimatorBase):
    """Registered estimator of :data:`mdbench.analysis.observables.THERMO` (and the transport temperature).

    Terms absent from the energy file: at a fixed box the volume (and the density, as total mass / box
    volume) come from the trajectory's boxes; anything else is not delivered (M). Shares ``temperature_K``
    (the registered setting, else the mean edr temperature over the window) with the transport estimators.
    """

    inputs = ("energy", "guard_ps", "ensemble", "trajectory")

    def compute(self) -> Estimate:
        from mdbench.analysis.units import AMU_PER_NM3_TO_KG_PER_M3

        s, c, entry = self.settings, self.case, self.entries[0]
        thermo = thermo_analysis(c.energy, guard_ps=c.guard_ps, n_blocks=s.n_blocks, ensemble=c.ensemble,
                                 min_effective_samples=s.thermo_min_effective_samples, drift_sigma=s.thermo_drift_sigma)
        rd = c.trajectory
        coverage = energy_coverage(c.energy, rd.time_ps, c.guard_ps, s.n_blocks)
        cov_ok, cov_why = coverage_check(coverage)
        out = []
        for name, ob in thermo.observables.items():  # computed on the energy file's window, recorded with it
            inputs = ob.state_inputs()
            inputs["sampling_checks"] = {**inputs["sampling_checks"], **cov_ok}
            inputs["check_details"] = dict(cov_why)
            out.append(Measurement(entry, (name,), _with_interval(ob, "energy file"),
                                   f"mean of edr term {ob.edr_term} over the window", inputs))
        if s.temperature_K is not None:
            temperature = float(s.temperature_K)
        elif "temperature" in thermo.observables:
            temperature = float(thermo.observables["temperature"].estimate.whole)
        else:
            raise InputError("the energy file has no Temperature term; give temperature_K in params/analysis",
                             c.energy.path)
        from_box = {  # fixed box: the edr has no Volume (nor Density) term; the trajectory's boxes give them
            "volume": (rd.volume_nm3, "nm^3", "(trajectory box)",
                       "mean box volume of the trajectory frames (no Volume term in the edr)"),
            "density": (rd.mol_mass_amu.sum() / rd.volume_nm3 * AMU_PER_NM3_TO_KG_PER_M3, "kg/m^3",
                        "(trajectory: total mass / box volume)",
                        "total mass of the topology / box volume of each frame (no Density term in the edr)"),
        }
        for name in thermo.missing:
            if name in from_box:
                values, unit, term, definition = from_box[name]
                ob = thermo_observable(values, rd.time_ps, name=name, unit=unit, edr_term=term, guard_ps=c.guard_ps,
                                       n_blocks=s.n_blocks, min_effective_samples=s.thermo_min_effective_samples,
                                       drift_sigma=s.thermo_drift_sigma)
                out.append(Measurement(entry, (name,), _with_interval(ob, "trajectory boxes"),
                                       definition, ob.state_inputs()))
            else:
                out.append(Measurement(entry, (name,), {}, "energy term absent from edr", {"delivered": False}))
        if s.temperature_K is not None:  # a registered temperature does not depend on the energy file's window
            coverage = dict(coverage, temperature_from_energy=False)
        return Estimate(out, products={"temperature_K": temperature, "energy_coverage": coverage})
