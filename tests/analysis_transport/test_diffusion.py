"""Self-diffusion against Brownian walkers with known D (fixed and fluctuating box), rest, precision."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mdbench.analysis import reduce
from mdbench.analysis.diffusion import (fit_slope, local_slope, msd_each_series, msd_fft, select_diffusive_window,
                                        self_diffusion, yeh_hummer_correction)
from mdbench.analysis.states import classify_result
from mdbench.errors import InputError

from .conftest import brownian

D_TRUE = 2.0e-3  # nm^2/ps = 2e-9 m^2/s


def test_brownian_fixed_box_D_within_5_percent(rng):
    x = brownian(rng, 4000, 100, D_TRUE, 1.0)
    sys_com = x.mean(axis=1)  # equal masses: barycentre of the walkers
    r = self_diffusion(x, np.arange(4000) * 1.0, system_com_nm=sys_com, species="W", guard_ps=100.0)
    # barycentric frame of N independent equal-mass walkers: D (1 - 1/N)
    assert r.D_m2_s == pytest.approx(D_TRUE * 1e-6 * (1 - 1 / 100), rel=0.05)
    assert r.frame == "barycentric"
    assert r.window.found and 0.9 <= r.window.beta_min and r.window.beta_max <= 1.1
    assert r.window.decades >= 0.9
    assert len(r.D.blocks) == 4 and all(b == pytest.approx(D_TRUE * 1e-6, rel=0.15) for b in r.D.blocks)
    assert classify_result(r).state == "C"
    d = r.to_dict(include_curves=True)
    assert d["unit"] == "m^2/s" and d["window"]["found"] and len(d["blocks"]) == 4
    import json

    json.dumps(d, allow_nan=False)
    assert r.msd_nm2.dtype == np.float64


def test_msd_known_constant_velocity():
    # constant velocity v: MSD(t) = |v|^2 t^2 exactly, beta = 2 (ballistic)
    t = np.arange(200) * 0.5
    v = np.array([0.1, -0.2, 0.05])
    x = t[:, None, None] * v[None, None, :] + np.zeros((1, 3, 1))
    m = msd_fft(x)
    np.testing.assert_allclose(m, (v @ v) * t ** 2, rtol=1e-9, atol=1e-12)
    g, beta = local_slope(t, m)
    np.testing.assert_allclose(beta, 2.0, rtol=1e-6)
    w = select_diffusive_window(t, m)
    assert not w.found  # ballistic everywhere: no diffusive window


def test_ballistic_trajectory_is_SI_not_F():
    t = np.arange(400) * 1.0
    x = t[:, None, None] * np.array([0.01, 0.0, 0.0]) + np.zeros((1, 5, 1))
    r = self_diffusion(x, t)
    assert not r.sampling_checks["diffusive_window"]
    assert np.isfinite(r.D_m2_s)
    assert classify_result(r).state == "SI"


def test_particle_at_rest_msd_zero(rng):
    x = np.broadcast_to(rng.uniform(0, 3, (1, 10, 3)), (500, 10, 3)).copy()
    m = msd_fft(x)
    assert np.max(np.abs(m)) < 1e-20


def test_float32_input_gives_float64(rng):
    x = brownian(rng, 2000, 50, D_TRUE, 1.0) + 1000.0  # far from the origin: float32 loses digits
    r64 = self_diffusion(x, np.arange(2000.0))
    r32 = self_diffusion(x.astype(np.float32), np.arange(2000, dtype=np.float32))
    assert isinstance(r32.D_m2_s, float) and r32.msd_nm2.dtype == np.float64
    assert r32.D_m2_s == pytest.approx(r64.D_m2_s, rel=0.05)


def test_non_finite_input_is_F_with_reason(rng):
    x = brownian(rng, 400, 5, D_TRUE, 1.0)
    x[10, 2, 1] = np.nan
    r = self_diffusion(x, np.arange(400.0))
    st = classify_result(r)
    assert st.state == "F" and "non-finite" in st.reason
    assert r.to_dict()["value"] is None


def test_yeh_hummer_correction():
    # D_inf - D_pbc = 2.837297 kB T / (6 pi eta L)
    d = yeh_hummer_correction(1e-9, 300.0, 1.0, 5.0)
    assert d - 1e-9 == pytest.approx(2.837297 * 1.380649e-23 * 300 / (6 * math.pi * 1e-3 * 5e-9), rel=1e-12)


# ---------------------------------------------------------------- fluctuating box (NPT) via reduce
def _npt_universe(rng, n_frames, n_part, D_nm2_ps, dt_ps, at_rest=False):
    """Single-atom molecules in a cubic box whose edge fluctuates (±3 %). Each step the barostat scales the
    wrapped coordinates with the box (as GROMACS does), then a Brownian displacement is added and the
    coordinates are wrapped. Returns the Universe and the accumulated Brownian displacements (truth)."""
    import MDAnalysis as mda
    from MDAnalysis.coordinates.memory import MemoryReader

    L = 3.0 * (1 + 0.03 * np.sin(np.arange(n_frames) * 2 * np.pi / 97.0)
               + 0.01 * rng.standard_normal(n_frames))
    w = np.empty((n_frames, n_part, 3))
    w[0] = rng.uniform(0, L[0], (n_part, 3))
    for f in range(1, n_frames):
        y = w[f - 1] * (L[f] / L[f - 1])
        if not at_rest:
            y = y + rng.normal(0, math.sqrt(2 * D_nm2_ps * dt_ps), (n_part, 3))
        w[f] = y - L[f] * np.floor(y / L[f])
    if at_rest:  # at rest: no barostat scaling of this particle, wrapped coordinates constant
        w[:] = w[0]
    u = mda.Universe.empty(n_part, n_residues=n_part, atom_resindex=np.arange(n_part), trajectory=False)
    u.add_TopologyAttr("masses", np.full(n_part, 18.0))
    u.add_TopologyAttr("charges", np.zeros(n_part))
    u.add_TopologyAttr("resnames", ["W"] * n_part)
    u.add_TopologyAttr("names", ["OW"] * n_part)
    u.add_TopologyAttr("elements", ["O"] * n_part)
    dims = np.zeros((n_frames, 6), dtype=np.float32)
    dims[:, :3] = (L * 10.0)[:, None]
    dims[:, 3:] = 90.0
    u.load_new((w * 10.0).astype(np.float32), format=MemoryReader, order="fac", dimensions=dims, dt=dt_ps)
    return u


def test_brownian_in_fluctuating_box_through_reduce(rng):
    n_frames, dt = 3000, 1.0
    u = _npt_universe(rng, n_frames, 60, D_TRUE, dt)
    red = reduce.reduce_universe(u, centre_species=[])
    assert np.ptp(red.volume_nm3) > 0.05 * red.volume_nm3.mean()  # the box really fluctuates
    r = self_diffusion(red.com_nm, red.time_ps, system_com_nm=red.system_com_nm, species="W")
    assert r.D_m2_s == pytest.approx(D_TRUE * 1e-6 * (1 - 1 / 60), rel=0.05)
    assert r.window.found


def test_particle_at_rest_in_fluctuating_box_through_reduce(rng):
    u = _npt_universe(rng, 400, 8, D_TRUE, 1.0, at_rest=True)
    red = reduce.reduce_universe(u, centre_species=[])
    assert np.ptp(red.volume_nm3) > 0.05 * red.volume_nm3.mean()
    m = msd_fft(red.com_nm)
    assert np.max(m) < 1e-10  # nm^2 (float32 input rounding only)


def test_msd_fft_matches_tidynamics_reference(rng):
    import tidynamics

    x = brownian(rng, 1500, 7, D_TRUE, 1.0) + 500.0
    ref = np.mean([tidynamics.msd(x[:, a] - x[0, a]) for a in range(7)], axis=0)
    np.testing.assert_allclose(msd_fft(x, chunk_bytes=1)[1:], ref[1:], rtol=1e-9)  # chunked FFT path
    np.testing.assert_allclose(msd_fft(x, max_lag_frames=20)[1:], ref[1:21], rtol=1e-9)  # few lags, FFT
    np.testing.assert_allclose(msd_fft(x[:60, :3], max_lag_frames=20)[1:],  # small: the direct sum
                               np.mean([tidynamics.msd(x[:60, a] - x[0, a]) for a in range(3)], axis=0)[1:21],
                               rtol=1e-9)
    # FFT padded only to F + L - 1 points for L lags: still exact up to the longest lag asked for
    for lag in (40, 375, 1499):
        np.testing.assert_allclose(msd_fft(x, max_lag_frames=lag)[1:], ref[1:lag + 1], rtol=1e-9)


def test_msd_fft_threads_and_moving_reference_match_the_reference(rng):
    """Molecules shared among threads, and a moving origin subtracted chunk by chunk, change nothing."""
    import tidynamics

    x = brownian(rng, 800, 60, D_TRUE, 1.0) + 500.0
    origin = np.cumsum(rng.normal(0.0, 0.05, size=(800, 3)), axis=0)  # a drifting barycentre
    rel = x - origin[:, None, :]
    ref = np.mean([tidynamics.msd(rel[:, a] - rel[0, a]) for a in range(60)], axis=0)
    one = msd_fft(rel, chunk_bytes=20_000, threads=1)  # 20 kB: one molecule per chunk, 60 chunks
    three = msd_fft(x, chunk_bytes=20_000, threads=3, reference_nm=origin)
    np.testing.assert_allclose(one[1:], ref[1:], rtol=1e-9)
    np.testing.assert_allclose(three[1:], ref[1:], rtol=1e-9)
    np.testing.assert_allclose(msd_fft(x, max_lag_frames=10, reference_nm=origin)[1:], ref[1:11], rtol=1e-9)
    with pytest.raises(InputError, match="reference_nm"):
        msd_fft(x, reference_nm=origin[:-1])


def test_registered_fixed_window(rng):
    x = brownian(rng, 3000, 40, D_TRUE, 1.0)
    r = self_diffusion(x, np.arange(3000.0), fit_window_ps=(10.0, 100.0))
    assert (r.window.lo_ps, r.window.hi_ps) == (10.0, 100.0) and r.window.found
    assert r.D_m2_s == pytest.approx(D_TRUE * 1e-6, rel=0.05)
    far = self_diffusion(x, np.arange(3000.0), fit_window_ps=(10.0, 5000.0))  # beyond the max lag
    assert not far.window.found


def test_too_short_trajectory_is_sampling_insufficient_not_failure():
    """A run too short for any MSD fit window is a sampling shortfall (SI), never F."""
    import numpy as np

    from mdbench.analysis.diffusion import self_diffusion
    from mdbench.analysis.states import SI, classify_result

    rng = np.random.default_rng(7)
    com = np.cumsum(rng.normal(0.0, 0.05, size=(9, 20, 3)), axis=0)
    result = self_diffusion(com, np.arange(9) * 0.5)
    decision = classify_result(result)
    assert result.too_short is not None and result.failures == []
    assert decision.state == SI and "too short" in decision.reason


def test_msd_of_several_windows_equals_one_call_per_window(rng):
    """msd_fft_windows (one transposition for all windows) = msd_fft on each window's own slice, with a
    moving reference, for the whole interval, blocks, an offset window and a short (direct-sum) one."""
    from mdbench.analysis.diffusion import msd_fft_windows

    x = brownian(rng, 900, 40, D_TRUE, 1.0) + 300.0
    origin = np.cumsum(rng.normal(0.0, 0.05, (900, 3)), axis=0)
    windows = [slice(0, 900), slice(0, 225), slice(225, 450), slice(450, 675), slice(675, 900),
               slice(100, 700), slice(880, 900)]
    got = msd_fft_windows(x, windows, 110, reference_nm=origin, chunk_bytes=20_000, threads=3)
    for w, m in zip(windows, got):
        expect = msd_fft(x[w], 110, reference_nm=origin[w], threads=1)
        assert m.size == expect.size == min(w.stop - w.start, 111)
        np.testing.assert_allclose(m[1:], expect[1:], rtol=1e-10)
    with pytest.raises(InputError, match="contiguous"):
        msd_fft_windows(x, [slice(0, 900, 2)])


def test_count_non_finite_is_exact():
    """The one-sum shortcut counts NaN / inf exactly, and a float overflow of the sum is no false alarm."""
    from mdbench.analysis.units import count_non_finite

    x = np.zeros((50, 7, 3))
    assert count_non_finite(x) == 0
    x[3, 2, 1], x[10, 0, 0], x[11, 0, 0] = np.nan, np.inf, -np.inf
    assert count_non_finite(x) == 3
    big = np.full(4, np.finfo(np.float64).max)  # finite entries whose sum overflows
    assert count_non_finite(big) == 0


def test_fit_slope_is_the_least_squares_slope_over_the_window():
    """Closed-form slope = np.polyfit's degree-1 slope on the window's points only; < 2 points → nan."""
    rng = np.random.default_rng(3)
    lag = np.arange(200) * 0.5
    y = 0.37 * lag + 4.0 + rng.normal(0, 2.0, lag.size)
    y[lag > 60] += 1e3  # outside the window: must not count
    sel = (lag >= 10.0) & (lag <= 60.0)
    expect = np.polyfit(lag[sel], y[sel], 1)[0]
    assert fit_slope(lag, y, 10.0, 60.0) == pytest.approx(expect, rel=1e-12)
    assert abs(fit_slope(lag, y, 10.0, 60.0) - 0.37) < 0.02
    assert fit_slope(lag, -2.5 * lag, 1.0, 3.0) == pytest.approx(-2.5, rel=1e-12)  # cross terms may be < 0
    assert math.isnan(fit_slope(lag, y, 10.2, 10.4))  # no point in the window
    assert math.isnan(fit_slope(lag, np.where(sel, np.nan, y), 10.0, 60.0))  # a non-finite point


def test_direct_sum_and_fft_give_the_same_msd(rng, monkeypatch):
    """Whichever path the size rule picks (DIRECT_MSD_MAX_LAGS / _WORK), the MSDs agree to rounding."""
    import mdbench.analysis.diffusion as dm

    x = brownian(rng, 240, 12, D_TRUE, 1.0) + 80.0
    windows = [slice(0, 240), slice(0, 60), slice(180, 240)]
    results = {}
    for work in (0, 10**12):  # always the FFT, then always the direct sum (≤ 32 lags)
        monkeypatch.setattr(dm, "DIRECT_MSD_MAX_WORK", work)
        results[work] = (dm.msd_fft_windows(x, windows, 25, reference_nm=x[:, 0], threads=1),
                         dm.msd_each_series(x, 25))
    for a, b in zip(results[0][0], results[10**12][0]):
        np.testing.assert_allclose(a[1:], b[1:], rtol=1e-10)
    np.testing.assert_allclose(results[0][1][:, 1:], results[10**12][1][:, 1:], rtol=1e-10)


@pytest.mark.parametrize("n_frames,max_lag", [(300, 20), (300, None), (1000, 200), (40, 10)])
def test_msd_of_each_series_equals_one_msd_per_series(n_frames, max_lag):
    """Row k = msd_fft of series k alone (direct sum for small inputs, FFT above), and = tidynamics.msd."""
    import tidynamics

    rng = np.random.default_rng(4)
    x = np.cumsum(rng.normal(0, 0.1, (n_frames, 4, 3)), axis=0) + 50.0  # far from the origin (trap 5)
    got = msd_each_series(x, max_lag)
    n_lags = n_frames if max_lag is None else max_lag + 1
    assert got.shape == (4, n_lags)
    for k in range(4):
        np.testing.assert_allclose(got[k], msd_fft(x[:, k], max_lag), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got[k], tidynamics.msd(x[:, k] - x[0, k])[:n_lags], rtol=1e-8, atol=1e-10)
    with pytest.raises(InputError):
        msd_each_series(x[:, :, :2])


def test_a_window_of_one_grid_point_falls_back_to_a_fittable_window():
    """An MSD whose exponent crosses the band in less than one log-grid step (beta = 1 + 2c ln(t/t0), c = 0.6):
    the longest run in the band is at most one grid point; the window must still hold lags to fit (it fell
    to [106, 106] ps on the tiny DE's DMC at 2.14 ns, and D had no value), flagged not found."""
    t = np.arange(0, 2001) * 0.1
    singles = 0
    for t0 in np.geomspace(5.0, 50.0, 12):
        x = np.log(np.maximum(t, 1e-12) / t0)
        m = np.where(t > 0, np.exp(0.6 * x ** 2 + x), 0.0)
        g, beta = local_slope(t, m, 10)
        singles += int(np.sum((beta >= 0.9) & (beta <= 1.1)) == 1)
        w = select_diffusive_window(t, m, beta_range=(0.9, 1.1), min_window_decades=0.9, max_lag_ps=200.0)
        assert not w.found
        inside = (t >= w.lo_ps) & (t <= w.hi_ps)
        assert w.hi_ps > w.lo_ps and inside.sum() >= 2, (t0, w)
        assert np.isfinite(fit_slope(t, m, w.lo_ps, w.hi_ps))
    assert singles >= 3  # the case is exercised, not avoided by the grid
