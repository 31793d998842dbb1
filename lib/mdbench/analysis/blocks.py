"""Guard interval, four equal consecutive blocks, block spread and statistical inefficiency.

Definition (registered for every observable):

* the guard interval ``[t_first, t_first + guard_ps)`` is excluded;
* the remaining frames are split into ``n_blocks`` (= 4) consecutive, equal, non-overlapping blocks of
  ``m = n_kept // n_blocks`` frames each (trailing ``n_kept mod n_blocks`` frames are dropped so that
  the whole interval is exactly the union of the blocks);
* block spread: ``mean ± t(0.975, n-1) · s / sqrt(n)`` with ``s`` the sample standard deviation
  (ddof = 1) of the block values and ``t(0.975, 3) = 3.182``.

Blocks are diagnostic windows of one trajectory, not replicas; compare the block length with the
property's correlation time (see :func:`statistical_inefficiency`).

References
----------
Grossfield et al., Living J. Comp. Mol. Sci. 1, 5067 (2018), doi:10.33011/livecoms.1.1.5067
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from mdbench.analysis.units import as_float64
from mdbench.errors import InputError

logger = logging.getLogger(__name__)

#: Number of analysis blocks (registered definition).
N_BLOCKS: int = 4
#: Student t quantile t(0.975, 3) used for four blocks.
T_975_DOF3: float = 3.182

BLOCK_DEFINITION = (
    "half_width_95 = t(0.975, n-1) * s / sqrt(n) over n consecutive equal non-overlapping blocks "
    "after the guard interval (n = 4, t = 3.182); s = sample std (ddof=1) of block values; "
    "blocks are windows of one trajectory, not independent replicas"
)


def t_quantile_975(n_blocks: int) -> float:
    """Two-sided 95 % Student-t quantile for ``n_blocks - 1`` degrees of freedom (3.182 for 4 blocks)."""
    if n_blocks == 4:
        return T_975_DOF3
    from scipy.stats import t as student_t

    return float(student_t.ppf(0.975, n_blocks - 1))


@dataclass(frozen=True)
class BlockWindows:
    """Frame windows of the whole analysed interval and of each block.

    Attributes
    ----------
    guard_ps : float
        Excluded initial interval [ps], measured from the first frame.
    whole : slice
        Frame slice of the whole analysed interval (union of the blocks).
    blocks : list of slice
        Frame slices of the ``n_blocks`` consecutive blocks.
    whole_range_ps : tuple of float
        (first, last) frame time of the whole interval [ps].
    block_ranges_ps : list of tuple of float
        (first, last) frame time of each block [ps].
    frames_per_block : int
        Frames in each block.
    dt_ps : float
        Median frame spacing [ps].
    """

    guard_ps: float
    whole: slice
    blocks: list[slice]
    whole_range_ps: tuple[float, float]
    block_ranges_ps: list[tuple[float, float]]
    frames_per_block: int
    dt_ps: float

    @property
    def block_length_ps(self) -> float:
        """Length of one block [ps] (frames_per_block × dt_ps)."""
        return self.frames_per_block * self.dt_ps

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe description of the windows."""
        return {
            "guard_ps": self.guard_ps,
            "whole_range_ps": list(self.whole_range_ps),
            "block_ranges_ps": [list(r) for r in self.block_ranges_ps],
            "frames_per_block": self.frames_per_block,
            "dt_ps": self.dt_ps,
            "n_blocks": len(self.blocks),
        }


def block_windows(time_ps: Any, guard_ps: float = 0.0, n_blocks: int = N_BLOCKS,
                  min_frames_per_block: int = 2) -> BlockWindows:
    """Split a time axis into the guard interval and ``n_blocks`` equal consecutive blocks.

    Parameters
    ----------
    time_ps : array_like, shape (F,)
        Frame times [ps], strictly increasing.
    guard_ps : float
        Excluded initial interval [ps] measured from ``time_ps[0]``.
    n_blocks : int
        Number of blocks (4 by registered definition).
    min_frames_per_block : int
        Fewer frames per block raise :class:`~mdbench.errors.InputError`.

    Returns
    -------
    BlockWindows
    """
    t = as_float64(time_ps, "time_ps")
    if t.ndim != 1 or t.size < 2:
        raise InputError(f"time_ps must be a 1-D array with at least 2 frames, got shape {t.shape}")
    if not np.all(np.isfinite(t)):
        raise InputError("time_ps contains non-finite values; fix the time axis of the trajectory/energy file")
    if np.any(np.diff(t) <= 0):
        raise InputError("time_ps must be strictly increasing (concatenated or restarted trajectory?); "
                         "remove duplicate frames first")
    if guard_ps < 0:
        raise InputError(f"guard_ps must be >= 0, got {guard_ps}")
    start = int(np.searchsorted(t, t[0] + guard_ps - 1e-9 * max(1.0, abs(t[0]) + guard_ps), side="left"))
    n_kept = t.size - start
    m = n_kept // n_blocks
    if m < min_frames_per_block:
        raise InputError(
            f"only {n_kept} frames after the guard interval of {guard_ps} ps: need at least "
            f"{n_blocks * min_frames_per_block} for {n_blocks} blocks; shorten the guard or sample longer")
    blocks = [slice(start + k * m, start + (k + 1) * m) for k in range(n_blocks)]
    whole = slice(start, start + n_blocks * m)
    dt = float(np.median(np.diff(t)))
    return BlockWindows(
        guard_ps=float(guard_ps),
        whole=whole,
        blocks=blocks,
        whole_range_ps=(float(t[whole.start]), float(t[whole.stop - 1])),
        block_ranges_ps=[(float(t[b.start]), float(t[b.stop - 1])) for b in blocks],
        frames_per_block=m,
        dt_ps=dt,
    )


@dataclass
class BlockEstimate:
    """Whole-interval value, per-block values and the block spread of one scalar observable.

    Attributes
    ----------
    whole : float
        Estimate over the whole analysed interval (the reported value).
    blocks : list of float
        Estimate in each of the consecutive blocks.
    unit : str
        Unit of ``whole`` and ``blocks``.
    mean : float
        Mean of the block values.
    std : float
        Sample standard deviation of the block values (ddof = 1).
    half_width_95 : float
        ``t(0.975, n-1) · std / sqrt(n)`` (t = 3.182 for 4 blocks).
    definition : str
        Definition of the uncertainty.
    block_ranges_ps : list of tuple of float, optional
        Time range of each block [ps].
    correlation_time_ps : float, optional
        Integrated correlation time τ = (g − 1)/2 · Δt [ps] of the per-frame series the value averages, over
        the whole analysed interval (:func:`frame_mean_estimate`); None for a value that is not a frame
        average (a fit, a correlation function). The block half-width falls as 1/√(block length) only for
        blocks much longer than τ (:mod:`mdbench.analysis.projection`).
    """

    whole: float
    blocks: list[float]
    unit: str
    mean: float = float("nan")
    std: float = float("nan")
    half_width_95: float = float("nan")
    definition: str = BLOCK_DEFINITION
    block_ranges_ps: list[tuple[float, float]] | None = None
    correlation_time_ps: float | None = None

    @property
    def finite(self) -> bool:
        """True when the whole value and every block value are finite."""
        return bool(np.isfinite(self.whole) and all(np.isfinite(b) for b in self.blocks))

    @property
    def relative_half_width(self) -> float:
        """``half_width_95 / |whole|`` (nan when whole is 0 or non-finite)."""
        if not np.isfinite(self.whole) or self.whole == 0:
            return float("nan")
        return float(self.half_width_95 / abs(self.whole))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict: value, unit, uncertainty with its definition (and the series' correlation time
        where it is a frame average), blocks."""
        unc: dict[str, Any] = {
            "half_width_95": _json_float(self.half_width_95),
            "block_mean": _json_float(self.mean),
            "block_std": _json_float(self.std),
            "definition": self.definition,
        }
        if self.correlation_time_ps is not None:
            unc["correlation_time_ps"] = _json_float(self.correlation_time_ps)
        return {
            "value": _json_float(self.whole),
            "unit": self.unit,
            "uncertainty": unc,
            "blocks": [_json_float(b) for b in self.blocks],
            "block_ranges_ps": None if self.block_ranges_ps is None else [list(r) for r in self.block_ranges_ps],
        }


def block_estimate(whole: float, blocks: Sequence[float], unit: str, *,
                   block_ranges_ps: Sequence[tuple[float, float]] | None = None) -> BlockEstimate:
    """Build a :class:`BlockEstimate` from a whole-interval value and per-block values.

    Parameters
    ----------
    whole : float
        Whole-interval estimate.
    blocks : sequence of float
        Per-block estimates (usually 4).
    unit : str
        Unit of the values.
    block_ranges_ps : sequence of (float, float), optional
        Time range of each block [ps].

    Returns
    -------
    BlockEstimate
        With ``mean``, ``std`` (ddof = 1) and ``half_width_95 = t·std/sqrt(n)``; nan when any block is
        non-finite or fewer than 2 blocks are given.
    """
    b = [float(x) for x in blocks]
    arr = np.asarray(b, dtype=np.float64)
    n = arr.size
    if n >= 2 and np.all(np.isfinite(arr)):
        mean = float(arr.mean())
        std = float(arr.std(ddof=1))
        hw = t_quantile_975(n) * std / math.sqrt(n)
    else:
        mean = float(arr.mean()) if n and np.all(np.isfinite(arr)) else float("nan")
        std = hw = float("nan")
    return BlockEstimate(whole=float(whole), blocks=b, unit=unit, mean=mean, std=std, half_width_95=hw,
                         block_ranges_ps=None if block_ranges_ps is None else [tuple(r) for r in block_ranges_ps])


def blocked(estimator: Callable[[slice], float], windows: BlockWindows, unit: str) -> BlockEstimate:
    """Apply ``estimator(frame_slice) -> float`` to the whole interval and to every block.

    Parameters
    ----------
    estimator : callable
        Maps a frame slice to a scalar estimate.
    windows : BlockWindows
        From :func:`block_windows`.
    unit : str
        Unit of the estimate.
    """
    return block_estimate(estimator(windows.whole), [estimator(s) for s in windows.blocks], unit,
                          block_ranges_ps=windows.block_ranges_ps)


def frame_mean_estimate(per_frame: Any, windows: BlockWindows, unit: str) -> BlockEstimate:
    """Whole-interval and block means of a per-frame series, with the series' correlation time.

    Parameters
    ----------
    per_frame : array_like, shape (F,)
        One value per frame of the frames ``windows`` index (e.g. the CIP fraction of each frame).
    windows : BlockWindows
        From :func:`block_windows`.
    unit : str
        Unit of the values.

    Returns
    -------
    BlockEstimate
        As :func:`block_estimate`, with ``correlation_time_ps`` = (g − 1)/2 · Δt, g the
        :func:`statistical_inefficiency` of the series over the whole analysed interval.
    """
    x = as_float64(per_frame, "per_frame").ravel()
    est = block_estimate(float(x[windows.whole].mean()), [float(x[b].mean()) for b in windows.blocks], unit,
                         block_ranges_ps=windows.block_ranges_ps)
    g = statistical_inefficiency(x[windows.whole])
    est.correlation_time_ps = (g - 1.0) / 2.0 * float(windows.dt_ps) if math.isfinite(g) else None
    return est


def statistical_inefficiency(values: Any, *, mintime: int = 3) -> float:
    r"""Statistical inefficiency g = 1 + 2τ of a time series (pymbar's estimator, computed by FFT).

    Same definition as ``pymbar.timeseries.statistical_inefficiency(A, fast=False, mintime=3)``
    (checked against it in the tests), with the normalised autocorrelation obtained in O(N log N):

    .. math:: g = 1 + 2\sum_{t=1}^{t_c - 1} C(t)\left(1 - \frac{t}{N}\right),\qquad
              C(t) = \frac{\sum_{n=0}^{N-t-1}\delta A_n\,\delta A_{n+t}}{(N-t)\,\sigma^2}

    summing until the first ``t > mintime`` with ``C(t) <= 0`` (``t_c``). ``g`` is the number of
    correlated samples per independent sample; the effective sample size is ``N / g`` and the correlation
    time is ``τ = (g - 1)/2`` frames.

    Parameters
    ----------
    values : array_like, shape (N,)
        Time series sampled at constant spacing.
    mintime : int
        Minimum lag summed before the zero-crossing stop applies (pymbar default 3).

    Returns
    -------
    float
        ``g >= 1``; 1.0 for a constant series (zero variance: every sample is the mean);
        nan when the series contains non-finite values or has fewer than 3 samples.

    References
    ----------
    Chodera, J. Chem. Theory Comput. 12, 1799 (2016), doi:10.1021/acs.jctc.5b00784
    """
    x = as_float64(values, "values").ravel()
    n = x.size
    if n < 3 or not np.all(np.isfinite(x)):
        return float("nan")
    dx = x - x.mean()
    sigma2 = float(np.mean(dx * dx))
    if np.ptp(x) == 0 or sigma2 <= 0.0:
        return 1.0
    nfft = 1 << int(2 * n - 1).bit_length()
    X = np.fft.rfft(dx, n=nfft)
    acov = np.fft.irfft(X.real ** 2 + X.imag ** 2, n=nfft)[:n]
    t = np.arange(1, n - 1)
    C = acov[1:n - 1] / ((n - t) * sigma2)
    stop = np.nonzero((C <= 0.0) & (t > mintime))[0]
    end = int(stop[0]) if stop.size else C.size
    g = 1.0 + 2.0 * float(np.sum(C[:end] * (1.0 - t[:end] / n)))
    return float(max(1.0, g))


def detect_equilibration(values: Any, *, max_candidates: int = 100) -> tuple[int, float, float]:
    r"""First sample of the equilibrated part of a time series (Chodera's rule, computed here).

    Chooses the start :math:`t_0` that maximises the number of effectively uncorrelated samples of what
    follows it, :math:`N_\mathrm{eff}(t_0) = (N - t_0)/g(t_0)`, with :math:`g` from
    :func:`statistical_inefficiency`. A drift at the start (a box still densifying) inflates ``g`` of every
    window that contains it, so the maximum lies after the drift. Candidates are spaced evenly
    (``max_candidates`` of them), as ``pymbar.timeseries.detect_equilibration(nskip=...)`` does.

    Parameters
    ----------
    values : array_like, shape (N,)
        Time series at constant spacing.
    max_candidates : int
        Number of trial starts over the series (evenly spaced).

    Returns
    -------
    tuple of (int, float, float)
        ``(t0, g, n_eff)``: first equilibrated sample index, statistical inefficiency of ``values[t0:]``,
        its effective sample count. ``(0, nan, nan)`` for fewer than 6 samples or non-finite values.

    References
    ----------
    Chodera, J. Chem. Theory Comput. 12, 1799 (2016), doi:10.1021/acs.jctc.5b00784
    """
    x = as_float64(values, "values").ravel()
    n = x.size
    if n < 6 or not np.all(np.isfinite(x)):
        return 0, float("nan"), float("nan")
    best = (0, float("nan"), -1.0)
    step = max(1, (n - 3) // max(1, int(max_candidates)))
    for t0 in range(0, n - 3, step):
        g = statistical_inefficiency(x[t0:])
        n_eff = (n - t0) / g
        if n_eff > best[2]:
            best = (t0, g, n_eff)
    return best[0], float(best[1]), float(best[2])


def pymbar_detect_equilibration(A_t: Any, *, fast: bool = True, nskip: int = 1) -> tuple[int, float, float]:
    r"""``pymbar.timeseries.detect_equilibration(A_t, fast=fast, nskip=nskip)``, the same three numbers, faster.

    pymbar evaluates :math:`g(t_0)` of every trial start by its own Python loop over lags, :math:`O(T^2)`
    array operations (about 0.5 s for a 2,000-frame series); the registered equilibration gate is computed
    with it by the engine and again by the audit. Here the autocorrelation sums of all starts are formed
    at once from prefix sums, one array pass per lag (pymbar's lag sequence, ``fast`` included), which
    locates the maximum of :math:`N_\mathrm{eff}(t_0) = (T - t_0 + 1)/g(t_0)`. The starts whose
    approximate :math:`N_\mathrm{eff}` lies within :data:`_EXACT_BAND` of that maximum, and every start where
    a stopping decision (:math:`C(t) \le 0`) was within rounding of zero, are then recomputed with
    ``pymbar.timeseries.statistical_inefficiency`` itself and stored in pymbar's float32 arrays, so the
    returned ``(t0, g, Neff_max)`` is pymbar's, bit for bit (tests compare the two on drifting, constant,
    short and real energy series). A series with non-finite values goes to pymbar unchanged.

    Parameters
    ----------
    A_t : array_like, shape (T,)
        Time series.
    fast : bool
        pymbar's ``fast`` lag stepping (its default for ``detect_equilibration``).
    nskip : int
        Spacing of the trial starts.

    Returns
    -------
    tuple of (int, float, float)
        ``(t0, g, Neff_max)`` exactly as pymbar returns them (``Neff_max`` counts :math:`T - t_0 + 1` samples).

    References
    ----------
    Chodera, J. Chem. Theory Comput. 12, 1799 (2016), doi:10.1021/acs.jctc.5b00784
    """
    ts = _pymbar_timeseries()
    A = np.asarray(A_t)
    T = int(A.size)
    nskip = max(1, int(nskip))
    if A.ndim != 1 or T < 3 or not np.all(np.isfinite(A)):
        return ts.detect_equilibration(A, fast=fast, nskip=nskip)
    if A.std() == 0.0:
        return 0, 1, 1
    starts = np.arange(0, T - 1, nskip)
    g_approx, doubtful = _statistical_inefficiency_of_tails(A.astype(np.float64), starts, fast=fast)
    g_t = np.ones([T - 1], np.float32)
    neff_t = np.ones([T - 1], np.float32)
    g_t[starts] = g_approx
    neff_t[starts] = (T - starts + 1) / g_t[starts]
    best = float(neff_t.max())
    exact = starts[(neff_t[starts] >= best * (1.0 - _EXACT_BAND)) | doubtful]
    for t in exact:
        try:
            g_t[t] = ts.statistical_inefficiency(A[t:T], fast=fast)
        except ts.ParameterError:
            g_t[t] = T - t + 1
        neff_t[t] = (T - t + 1) / g_t[t]
    neff_max = neff_t.max()
    t = neff_t.argmax()
    return t, g_t[t], neff_max


#: Relative band below the approximate maximum of N_eff inside which the starts are recomputed by pymbar
#: (the prefix-sum sums agree with pymbar's to ~1e-12 relative; the band is far wider).
_EXACT_BAND = 1e-4


def _statistical_inefficiency_of_tails(a: np.ndarray, starts: np.ndarray, *, fast: bool,
                                       mintime: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """pymbar's ``statistical_inefficiency(a[s:], fast=fast, mintime=mintime)`` for every start ``s``, from
    prefix sums: (g per start, whether a decision of that start was within rounding of its threshold)."""
    T = a.size
    a = a - a.mean()
    c1 = np.concatenate(([0.0], np.cumsum(a)))
    c2 = np.concatenate(([0.0], np.cumsum(a * a)))
    n = (T - starts).astype(np.float64)
    mu = (c1[T] - c1[starts]) / n
    scale = (c2[T] - c2[starts]) / n  # mean square about the series' mean: the size rounding is judged against
    sigma2 = scale - mu * mu
    doubtful = np.abs(sigma2) <= 1e-9 * np.maximum(scale, 1e-300)
    g = np.ones(starts.size)
    active = ~doubtful
    t, inc = 1, 1
    while True:
        active &= t < n - 1
        if not active.any():
            break
        idx = np.nonzero(active)[0]
        s = starts[idx]
        # sum_{i=s}^{T-1-t} (a_i - mu)(a_{i+t} - mu), the prefix sums of the lag-t products
        cp = np.concatenate(([0.0], np.cumsum(a[:T - t] * a[t:])))
        m = mu[idx]
        cross = (cp[T - t] - cp[s]) - m * ((c1[T - t] - c1[s]) + (c1[T] - c1[s + t])) + (n[idx] - t) * m * m
        C = cross / ((n[idx] - t) * sigma2[idx])
        near = np.abs(cross) <= 1e-9 * (n[idx] - t) * scale[idx]
        if t > mintime:
            doubtful[idx[near]] = True
            stop = C <= 0.0
            active[idx[stop]] = False
            keep = ~stop
            idx, C = idx[keep], C[keep]
        g[idx] += 2.0 * C * (1.0 - t / n[idx]) * inc
        t += inc
        if fast:
            inc += 1
    return np.maximum(g, 1.0), doubtful


def _pymbar_timeseries():
    """Import pymbar.timeseries lazily, swallowing its import-time banner."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        logging.getLogger("pymbar").setLevel(logging.ERROR)
        from pymbar import timeseries  # noqa: PLC0415 - pymbar takes seconds to import; only the guard needs it
    return timeseries


def _json_float(x: Any) -> float | None:
    """float for finite values, None for nan/inf (JSON has no nan)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


#: Alias of :func:`block_estimate` (name used in the analysis brief).
block_analysis = block_estimate
