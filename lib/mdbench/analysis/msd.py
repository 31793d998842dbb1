r"""Mean-squared displacements: pure numerics on arrays (no estimator, no settings), pymbar style.

The MSD of one series of positions :math:`\mathbf r_t` (t = 0 … F−1, unwrapped, frames equally spaced) at
lag m is averaged over every time origin,

.. math:: \mathrm{MSD}(m) = \frac{1}{F-m} \sum_{t=0}^{F-1-m} |\mathbf r_{t+m} - \mathbf r_t|^2
          = \frac{1}{F-m}\Big(\sum_{t=0}^{F-1-m}|\mathbf r_t|^2 + \sum_{t=m}^{F-1}|\mathbf r_t|^2\Big)
            - \frac{2}{F-m} \sum_{t=0}^{F-1-m} \mathbf r_t\cdot\mathbf r_{t+m},

the last sum an autocorrelation computed by FFT (zero-padded to 2F) in :func:`msd_fft` / :func:`msd_fft_windows`
(Kneller et al., Comput. Phys. Commun. 91, 191 (1995), doi:10.1016/0010-4655(95)00048-K; the algorithm of
MDAnalysis' ``EinsteinMSD(fft=True)`` and tidynamics). **Coordinates must be unwrapped** (a wrapped
trajectory gives an MSD that saturates at the box size). :func:`local_slope` gives the log–log exponent β(t),
:func:`fit_slope` the least-squares slope of a window (D = slope / 6 in three dimensions).

Examples
--------
Constant velocity 0.1 nm/frame along x: MSD(m) = (0.1 m)^2 exactly, and β = 2:

>>> import numpy as np
>>> x = np.zeros((50, 1, 3))  # 50 frames of one molecule
>>> x[:, 0, 0] = 0.1 * np.arange(50)
>>> msd = msd_fft(x, max_lag_frames=5)
>>> np.allclose(msd, (0.1 * np.arange(6)) ** 2)
True
>>> lag = np.arange(50.0)
>>> full = msd_fft(x)
>>> round(float(np.median(local_slope(lag, full)[1])), 6)
2.0
>>> fit_slope(np.arange(5.0), 3.0 * np.arange(5.0) + 1.0, 0.0, 4.0)
3.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mdbench.analysis.concurrency import ranges_in_threads
from mdbench.analysis.reduce.series import as_positions
from mdbench.analysis.units import as_float64
from mdbench.errors import InputError

#: Frames per block of the cache-friendly transposed copy in :func:`msd_fft_windows`, and the fewest molecules
#: copied at once (measured for 1,080 molecules × 6,401 frames: 0.05–0.07 s against 0.2 s for one strided
#: copy of 5-molecule chunks).
TRANSPOSE_BLOCK_FRAMES = 256
GATHER_MIN_MOLECULES = 16
#: A window's MSD is summed directly (exact, no FFT set-up) when it has at most this many lags ...
DIRECT_MSD_MAX_LAGS = 32
#: ... and lags × frames × molecules stays below this: above it the FFT is faster (measured for 25 lags:
#: FFT 1.6–2.2× faster from 4 molecules × 100 frames on, 4–6× for 1,024 molecules × 200–400 frames)
DIRECT_MSD_MAX_WORK = 4_000


def _default_threads() -> int:
    """The project's CPU thread cap (usable cores or ``$MDBENCH_THREAD_CAP``), at most 4 (the FFT sums
    stop scaling there)."""
    from mdbench.threads import default_thread_cap

    return max(1, min(default_thread_cap(), 4))


def msd_fft(positions_nm: Any, max_lag_frames: int | None = None, chunk_bytes: int = 2 ** 20,
            reference_nm: Any | None = None, threads: int | None = None) -> np.ndarray:
    r"""Mean-squared displacement averaged over molecules and time origins (FFT, O(F log F)).

    The fast correlation algorithm of ``tidynamics.msd`` (Calandrini et al. 2011), vectorised over
    molecules with ``scipy.fft.rfft`` and checked against ``tidynamics.msd`` in the tests:

    .. math:: \mathrm{MSD}(m) = \frac{1}{F-m}\sum_{t=0}^{F-1-m}\left(|x_t|^2 + |x_{t+m}|^2\right)
              - \frac{2}{F-m}\sum_{t=0}^{F-1-m} x_t\cdot x_{t+m}

    Parameters
    ----------
    positions_nm : array_like, shape (F, N, 3) or (F, 3)
        Unwrapped positions [nm] (cast to float64; displacements from the first frame are used).
    max_lag_frames : int, optional
        Return lags 0..max_lag_frames (inclusive); default all.
    reference_nm : array_like, shape (F, 3), optional
        A moving origin subtracted from every position first (e.g. the system's centre of mass for the
        barycentric frame), chunk by chunk, without a copy of the whole positions array.
    chunk_bytes : int
        Memory bound of one FFT chunk of molecules (1 MiB: cache-sized work arrays that the allocator
        reuses were 1.5–1.8× faster than 64 MiB ones for 1,350 molecules × 1,601 frames).
    threads : int, optional
        Threads sharing the molecules (at least two chunks each); None: one per core, at most 4. The
        per-molecule sums are added in a fixed order, so the result does not depend on the timing.

    Returns
    -------
    numpy.ndarray, shape (L,)
        MSD [nm^2] for lags 0, 1, ... frames; ``MSD[0] = 0``.
    """
    x = as_positions(positions_nm, "positions_nm")
    return msd_fft_windows(x, [slice(0, x.shape[0])], max_lag_frames, chunk_bytes=chunk_bytes,
                           reference_nm=reference_nm, threads=threads)[0]


def msd_fft_windows(positions_nm: Any, windows: Sequence[slice], max_lag_frames: int | None = None, *,
                    chunk_bytes: int = 2 ** 20, reference_nm: Any | None = None,
                    threads: int | None = None) -> list[np.ndarray]:
    """:func:`msd_fft` of several frame windows of one trajectory (e.g. the whole interval and its blocks).

    Each window's MSD equals ``msd_fft(positions_nm[w], ..., reference_nm=reference_nm[w])``; the
    positions are transposed into per-coordinate rows once for all windows (the costliest memory pass).

    Parameters
    ----------
    positions_nm : array_like, shape (F, N, 3) or (F, 3)
        Unwrapped positions [nm].
    windows : sequence of slice
        Contiguous frame windows (step 1) inside 0..F.
    max_lag_frames, chunk_bytes, reference_nm, threads
        As for :func:`msd_fft`; the lag limit applies to every window.

    Returns
    -------
    list of numpy.ndarray
        One MSD [nm^2] per window, lags 0, 1, ... frames.
    """
    x = as_positions(positions_nm, "positions_nm")
    if x.ndim == 2:
        x = x[:, None, :]
    n_frames, n_mol = x.shape[0], x.shape[1]
    spans = []
    for w in windows:
        a, b, st = w.indices(n_frames)
        if st != 1:
            raise InputError(f"MSD windows must be contiguous frame ranges, got {w}")
        spans.append((a, max(a, b)))
    ref = None
    if reference_nm is not None:
        ref = as_float64(reference_nm, "reference_nm")
        if ref.shape != (n_frames, 3):
            raise InputError(f"reference_nm has shape {ref.shape}, expected ({n_frames}, 3)")
    lags = [(b - a) if max_lag_frames is None else min(b - a, max_lag_frames + 1) for a, b in spans]
    results: list[np.ndarray | None] = [None] * len(spans)
    fft_w = []
    for k, ((a, b), L) in enumerate(zip(spans, lags)):
        if b - a == 0:
            results[k] = np.zeros(0)
        elif L <= DIRECT_MSD_MAX_LAGS and L * (b - a) * n_mol <= DIRECT_MSD_MAX_WORK:  # cheaper, exact
            xw = x[a:b] - x[a]  # displacements from t0 keep float64 precision (trap 5)
            if ref is not None:
                xw -= (ref[a:b] - ref[a])[:, None, :]
            out = np.zeros(L)
            for m in range(1, L):
                d = xw[m:] - xw[:-m]
                out[m] = np.einsum("fmk,fmk->", d, d) / (d.shape[0] * n_mol)
            results[k] = out
        else:
            fft_w.append(k)
    if not fft_w:
        return results  # type: ignore[return-value]
    from scipy.fft import irfft, next_fast_len, rfft

    # zero padding to F + L - 1 points keeps the circular correlation exact for lags 0..L-1 (a product
    # x_t·x_(t+m) wraps only for t + m >= nfft, i.e. t >= F, where x is zero); 5-smooth lengths are fast
    nfft = {k: next_fast_len(spans[k][1] - spans[k][0] + lags[k] - 1, real=True) for k in fft_w}
    lo, hi = min(spans[k][0] for k in fft_w), max(spans[k][1] for k in fft_w)
    span = hi - lo
    per_mol = (max(nfft.values()) // 2 + 1) * 3 * 16
    step = max(1, int(chunk_bytes // max(per_mol, 1)))   # molecules per FFT
    gather = max(step, GATHER_MIN_MOLECULES)               # molecules per transposed copy
    ref_rows = (None if ref is None else
                np.tile(np.ascontiguousarray((ref[lo:hi] - ref[lo]).T), (min(gather, n_mol), 1)))

    def partial_sums(a0: int, a1: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per window: Σ|X(ω)|² and Σ|x(t)|² over the molecules a0..a1-1 (both additive over molecules)."""
        sums = {k: (np.zeros(nfft[k] // 2 + 1), np.zeros(spans[k][1] - spans[k][0])) for k in fft_w}
        for a in range(a0, a1, gather):
            b = min(a + gather, a1)
            rows = 3 * (b - a)
            # one contiguous row per molecule coordinate (the FFT runs along contiguous memory and |X|²
            # needs no reshaping copy), copied in blocks of frames: a cache-friendly transpose, 4× faster
            # than one strided copy for long trajectories; the moving origin is subtracted on the way
            y = np.empty((rows, span))
            for f0 in range(0, span, TRANSPOSE_BLOCK_FRAMES):
                f1 = min(f0 + TRANSPOSE_BLOCK_FRAMES, span)
                block = x[lo + f0:lo + f1, a:b, :].reshape(f1 - f0, rows).T
                if ref_rows is None:
                    y[:, f0:f1] = block
                else:
                    np.subtract(block, ref_rows[:rows, f0:f1], out=y[:, f0:f1])
            for k in fft_w:
                wa, wb = spans[k][0] - lo, spans[k][1] - lo
                yw = y[:, wa:wb] - y[:, wa:wa + 1]  # displacements from the window's t0 (trap 5)
                power, rsq = sums[k]
                rsq += np.einsum("rf,rf->f", yw, yw)
                for r in range(0, rows, 3 * step):
                    X = rfft(yw[r:r + 3 * step], n=nfft[k], axis=1)
                    Xv = X.view(np.float64)  # real, imag interleaved: |X|² over rows in one contiguous pass
                    sq = np.einsum("rj,rj->j", Xv, Xv)
                    power += sq[0::2] + sq[1::2]
        return sums

    n_chunks = -(-n_mol // gather)
    n_threads = max(1, min(_default_threads() if threads is None else int(threads), n_chunks // 2 or 1))
    # the FFT, einsum and ufuncs release the GIL: threads share the molecules
    parts = ranges_in_threads(partial_sums, n_mol, n_threads, "mdbench-msd")
    for k in fft_w:
        power, rsq = sum(p[k][0] for p in parts), sum(p[k][1] for p in parts)
        L, n_w = lags[k], spans[k][1] - spans[k][0]
        S2 = irfft(power, n=nfft[k])[:L]
        cs = np.concatenate([[0.0], np.cumsum(rsq)])
        m = np.arange(L)
        head = cs[n_w - m]              # sum_{t=0}^{F-1-m} rsq(t)
        tail = cs[n_w] - cs[m]          # sum_{t=m}^{F-1} rsq(t)
        out = (head + tail - 2.0 * S2) / (n_w - m) / n_mol
        out[0] = 0.0  # exact by definition
        results[k] = out
    return results  # type: ignore[return-value]


def msd_each_series(series_nm: Any, max_lag_frames: int | None = None) -> np.ndarray:
    """MSD of each of K independent 3-D series at once (averaged over time origins only), e.g. the collective
    coordinates of the Onsager estimator: row k equals ``msd_fft(series_nm[:, k])``.

    One call for the K series of a window instead of K calls of :func:`msd_fft` (whose fixed cost per call
    dominates for (F, 3) inputs). Small inputs (:data:`DIRECT_MSD_MAX_LAGS`, :data:`DIRECT_MSD_MAX_WORK`):
    the direct sum, exact; larger: the same zero-padded FFT correlation as :func:`msd_fft`.

    Parameters
    ----------
    series_nm : array_like, shape (F, K, 3)
        Unwrapped positions or collective displacements [nm].
    max_lag_frames : int, optional
        Lags 0..max_lag_frames (inclusive); default all.

    Returns
    -------
    numpy.ndarray, shape (K, L)
        MSD [nm^2] of each series for lags 0, 1, ... frames; column 0 is 0.
    """
    x = as_float64(series_nm, "series_nm")
    if x.ndim != 3 or x.shape[2] != 3:
        raise InputError(f"series_nm must have shape (n_frames, n_series, 3), got {x.shape}")
    n_frames, n_series = x.shape[0], x.shape[1]
    n_lags = n_frames if max_lag_frames is None else min(n_frames, int(max_lag_frames) + 1)
    out = np.zeros((n_series, n_lags))
    if n_frames == 0 or n_series == 0:
        return out
    y = x - x[0]  # displacements from t0 keep float64 precision (trap 5)
    if n_lags <= DIRECT_MSD_MAX_LAGS and n_lags * n_frames * n_series <= DIRECT_MSD_MAX_WORK:
        for m in range(1, n_lags):
            d = y[m:] - y[:-m]
            out[:, m] = np.einsum("fkc,fkc->k", d, d) / (n_frames - m)
        return out
    from scipy.fft import irfft, next_fast_len, rfft

    nfft = next_fast_len(n_frames + n_lags - 1, real=True)
    rows = np.ascontiguousarray(y.reshape(n_frames, 3 * n_series).T)  # row 3k + c: coordinate c of series k
    spec = rfft(rows, n=nfft, axis=1)
    power = (spec.real ** 2 + spec.imag ** 2).reshape(n_series, 3, -1).sum(axis=1)
    s2 = irfft(power, n=nfft, axis=1)[:, :n_lags]
    rsq = np.einsum("fkc,fkc->kf", y, y)
    cs = np.concatenate([np.zeros((n_series, 1)), np.cumsum(rsq, axis=1)], axis=1)
    m = np.arange(n_lags)
    head = cs[:, n_frames - m]          # sum_{t=0}^{F-1-m} |y_t|^2
    tail = cs[:, [n_frames]] - cs[:, m]  # sum_{t=m}^{F-1} |y_t|^2
    out = (head + tail - 2.0 * s2) / (n_frames - m)
    out[:, 0] = 0.0
    return out


def local_slope(lag_ps: np.ndarray, msd_nm2: np.ndarray, points_per_decade: int = 10
                ) -> tuple[np.ndarray, np.ndarray]:
    """β(t) = d ln MSD / d ln t on a log-spaced lag grid (central differences).

    Parameters
    ----------
    lag_ps : numpy.ndarray
        Linear lag grid [ps]; ``lag_ps[0]`` = 0 is skipped.
    msd_nm2 : numpy.ndarray
        MSD on that grid [nm^2].
    points_per_decade : int
        Density of the log grid.

    Returns
    -------
    grid_lag_ps, beta : numpy.ndarray
        Interior points of the log grid [ps] and β there.
    """
    lag = np.asarray(lag_ps, dtype=np.float64)
    msd = np.asarray(msd_nm2, dtype=np.float64)
    if lag.size < 4:
        return np.zeros(0), np.zeros(0)
    lo, hi = lag[1], lag[-1]
    n = max(3, int(math.ceil(math.log10(hi / lo) * points_per_decade)) + 1)
    idx = np.unique(np.clip(np.round(np.geomspace(1, lag.size - 1, n)).astype(int), 1, lag.size - 1))
    if idx.size < 3:
        return np.zeros(0), np.zeros(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        lnm = np.log(msd[idx])
        lnt = np.log(lag[idx])
        beta = (lnm[2:] - lnm[:-2]) / (lnt[2:] - lnt[:-2])
    return lag[idx[1:-1]], beta


def fit_slope(lag_ps: np.ndarray, y: np.ndarray, lo_ps: float, hi_ps: float) -> float:
    """Least-squares slope of ``y`` vs ``lag_ps`` over ``lo_ps <= lag <= hi_ps`` (linear; cross terms may be
    negative). Returns nan when fewer than 2 points are in the window."""
    lag = np.asarray(lag_ps, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    sel = (lag >= lo_ps * (1 - 1e-12)) & (lag <= hi_ps * (1 + 1e-12))
    if sel.sum() < 2 or not np.all(np.isfinite(y[sel])):
        return float("nan")
    # ordinary least squares in closed form (= np.polyfit(x, y, 1)[0], which costs ≈ 50 µs of SVD a call
    # and is called ≈ 90 times per case)
    x = lag[sel] - lag[sel].mean()
    sxx = float(np.dot(x, x))
    return float(np.dot(x, y[sel]) / sxx) if sxx > 0 else float("nan")
