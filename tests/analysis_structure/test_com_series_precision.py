"""The file-backed float32 COM series (issue 23): reading it back, and its precision for MSD, D and Onsager.

The bound used throughout. The series stores ``d(t) = r_u(t) − r_u(a)`` (float64 unwrapping, one float32
rounding, ``a`` the first frame of the pass range), so every coordinate read back is off by at most
``δ = 2**-24 · max|d|`` (round to nearest), with no accumulation over frames. For one molecule and lag m the
squared displacement changes by ``2 Δ·(e' − e) + |e' − e|²`` with ``|e' − e| ≤ 2√3 δ``, so averaged over
molecules and origins (Cauchy–Schwarz: ``<|Δ|> ≤ sqrt(MSD)``)

    |MSD32(m) − MSD64(m)| ≤ 4√3 δ sqrt(MSD64(m)) + 12 δ²  (+ float64 FFT rounding, ≤ 1e-12 · max|d|²),

and a least-squares slope over the lags ``x_i`` of a fixed window moves by at most
``Σ|x_i − x̄| · bound_i / Σ(x_i − x̄)²``. The collective coordinates of the Onsager estimator are float64
sums made by the pass (never rounded to float32): the L matrix may differ by float64 summation order only.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mdbench.analysis.diffusion import fit_slope, msd_fft_windows, self_diffusion
from mdbench.analysis.onsager import onsager_transport
from mdbench.analysis.reduce import reduce_files
from mdbench.analysis.reduce.series import COM_DTYPE, BlockWriter, ComSeries, ComSeriesFile
from mdbench.analysis.units import NM2_PER_PS_TO_M2_PER_S

EPS32 = 2.0 ** -24  # unit roundoff of float32 (round to nearest)
FFT_REL = 1e-12     # float64 rounding of the FFT correlation, relative to max|d|²


def msd_bound(msd64: np.ndarray, delta: float, scale2: float) -> np.ndarray:
    """The MSD bound of the module docstring for a float32 rounding error ``delta`` [nm]."""
    return 4.0 * math.sqrt(3.0) * delta * np.sqrt(np.maximum(msd64, 0.0)) + 12.0 * delta ** 2 + FFT_REL * scale2


def slope_bound(lag: np.ndarray, bound: np.ndarray, lo: float, hi: float) -> float:
    """Largest change of the least-squares slope over lags [lo, hi] when each point moves by ``bound``."""
    sel = (lag >= lo * (1 - 1e-12)) & (lag <= hi * (1 + 1e-12))
    x = lag[sel] - lag[sel].mean()
    return float(np.sum(np.abs(x) * bound[sel]) / np.dot(x, x))


def series_of(com64: np.ndarray, tmp_path, mol_species: np.ndarray | None = None,
              cuts: tuple[int, ...] = (0,)) -> ComSeries:
    """A ComSeries holding ``com64`` (F, M, 3), written as the pass writes it by ranges starting at ``cuts``
    (each range's displacements from its own first frame, as a worker writes them)."""
    F, M, _ = com64.shape
    store = ComSeriesFile(tmp_path, F, M)
    bounds = [*cuts, F]
    for a, b in zip(bounds[:-1], bounds[1:]):
        w = BlockWriter(store, a)
        for f0 in range(a, b, 7):  # chunks of 7 frames: not aligned with the time blocks
            w.write(f0, com64[f0:min(f0 + 7, b)])
        w.flush()
    species = np.array(["X"] * M) if mol_species is None else mol_species
    sums = {sp: com64[:, species == sp].sum(axis=1) for sp in dict.fromkeys(species.tolist())}
    return ComSeries(store, np.array(cuts), np.stack([com64[a] for a in cuts]), sums, species)


def brownian_walk(rng: np.random.Generator, n_frames: int, n_mol: int, D_nm2_ps: float, dt_ps: float,
                  start_nm: float) -> np.ndarray:
    """Unwrapped float64 Brownian trajectories (F, N, 3) starting at ``start_nm`` from the origin."""
    steps = rng.normal(0.0, math.sqrt(2.0 * D_nm2_ps * dt_ps), size=(n_frames, n_mol, 3))
    steps[0] = start_nm + rng.uniform(0.0, 3.0, size=(n_mol, 3))
    return np.cumsum(steps, axis=0)


def test_series_reads_back_what_was_written(tmp_path):
    """Indexing, views and sums of the series equal the float64 array to the float32 rounding bound,
    across pass ranges (three writers) and time blocks."""
    rng = np.random.default_rng(3)
    com = brownian_walk(rng, 700, 9, 1e-3, 1.0, 5.0)
    species = np.array(["A"] * 4 + ["B"] * 3 + ["A"] * 2)
    s = series_of(com, tmp_path, species, cuts=(0, 256, 512))
    assert s.shape == com.shape and s.stored_bytes_per_frame == 9 * 3 * np.dtype(COM_DTYPE).itemsize
    disp = np.max(np.abs(com - com[[0] * 256 + [256] * 256 + [512] * 188]))
    tol = EPS32 * disp * 1.0001 + 1e-13
    assert np.max(np.abs(np.asarray(s) - com)) <= tol
    assert np.max(np.abs(s[300:310, 2:6, :] - com[300:310, 2:6])) <= tol
    assert np.max(np.abs(s[511] - com[511])) <= tol and s[5, 3].shape == (3,)
    a = s.species("A")
    assert a.shape == (700, 6, 3)
    assert np.max(np.abs(np.asarray(a) - com[:, species == "A"])) <= tol
    np.testing.assert_array_equal(a.molecule_sum_nm(), com[:, species == "A"].sum(axis=1))  # the pass's float64
    view = s.take_frames(np.arange(0, 700, 5))
    assert np.max(np.abs(np.asarray(view) - com[::5])) <= tol
    assert np.max(np.abs(view[1:] - com[5::5])) <= tol
    sub = s.species("B").take_frames(slice(100, 600))
    assert np.max(np.abs(sub.molecule_sum_nm() - com[100:600, 4:7].sum(axis=1))) <= 3 * tol


def test_long_brownian_walk_msd_and_D_within_the_float32_bound(tmp_path):
    """60,000 frames (60 ns every 1 ps) of a Brownian walk far from the origin (displacements to ≈ 9 nm,
    positions ≈ 1,000 nm: where float32 unwrapping error grows): the float32 series gives the float64 MSD
    and D within the stated bound (measured: ≈ 1e-4 of it); an unwrapping *in* float32 (the steps summed
    in float32, rounding accumulated frame by frame; measured ≈ 14× the bound) and a float16 storage of the
    same displacements (≈ 20×) break it — the check can fail."""
    rng = np.random.default_rng(11)
    F, M, D, dt = 60_000, 12, 1e-4, 1.0  # 1e-4 nm²/ps = 1e-10 m²/s; 60 ns every 1 ps
    com = brownian_walk(rng, F, M, D, dt, 1000.0)
    s = series_of(com, tmp_path, cuts=(0, 30_208))
    windows = [slice(0, F), slice(0, F // 2), slice(F // 2, F)]
    max_lag = 3_000
    ref = msd_fft_windows(com, windows, max_lag)
    got = msd_fft_windows(s, windows, max_lag)
    disp = float(np.max(np.abs(com - com[np.where(np.arange(F) < 30_208, 0, 30_208)])))
    delta = EPS32 * disp
    lag = np.arange(max_lag + 1) * dt
    worst = 0.0
    for r, g in zip(ref, got):
        bound = msd_bound(r, delta, disp ** 2)
        assert np.all(np.abs(g - r) <= bound)
        worst = max(worst, float(np.max(np.abs(g - r) / bound)))
    # D over a fixed window, float32 series vs float64 array: the slope bound
    lo, hi = 10.0, 1000.0
    d64 = fit_slope(lag, ref[0], lo, hi) / 6.0
    d32 = fit_slope(lag, got[0], lo, hi) / 6.0
    assert abs(d32 - d64) <= slope_bound(lag, msd_bound(ref[0], delta, disp ** 2), lo, hi) / 6.0
    assert d64 == pytest.approx(D, rel=0.15)  # and the walk is the walk it claims to be
    # the same bound fails for an unwrapping in float32 (rounding accumulated frame by frame) ...
    bound = msd_bound(ref[0], delta, disp ** 2)
    acc = np.cumsum(np.diff(com, axis=0, prepend=0.0).astype(np.float32), axis=0, dtype=np.float32)
    accumulated = msd_fft_windows(acc.astype(np.float64), windows[:1], max_lag)[0]
    assert np.max(np.abs(accumulated - ref[0]) / bound) > 2.0
    # ... and for displacements stored with fewer bits (float16: the bound is sharp enough to see it)
    d16 = (com - com[0]).astype(np.float16).astype(np.float64) + com[0]
    assert np.max(np.abs(msd_fft_windows(d16, windows[:1], max_lag)[0] - ref[0]) / bound) > 2.0
    assert worst < 1.0


@pytest.mark.gromacs
def test_real_trajectory_float32_series_gives_the_float64_transport(water_nacl, tmp_path):
    """The real GROMACS fixture reduced twice, in memory (float64, the previous implementation) and into the
    float32 series with two pass workers: same MSD per species (whole interval and blocks) within the bound,
    same D over a fixed window (0.5–3 ps: the fixture's 30 ps are too short for a β-selected window of
    every species) within the slope bound, same Onsager L and σ to float64 summation order (1e-9), and the
    self terms within the D bound."""
    ref = reduce_files(water_nacl["tpr"], water_nacl["xtc"], workers=1)
    rd = reduce_files(water_nacl["tpr"], water_nacl["xtc"], workers=2, series_dir=tmp_path)
    assert isinstance(rd.com_nm, ComSeries) and not isinstance(ref.com_nm, ComSeries)
    assert list(tmp_path.iterdir()) == []  # the scratch file is anonymous: nothing left in the folder
    np.testing.assert_allclose(rd.system_com_nm, ref.system_com_nm, rtol=0, atol=1e-12)
    starts = rd.com_nm.range_starts
    first = starts[np.searchsorted(starts, np.arange(ref.n_frames), side="right") - 1]
    disp = float(np.max(np.abs(ref.com_nm - ref.com_nm[first])))
    delta = EPS32 * disp
    t = ref.time_ps
    dt = float(t[1] - t[0])
    results64 = {}
    lo, hi = 0.5, 3.0
    for sp in ref.species:
        r32 = self_diffusion(rd.species_com_nm(sp), t, system_com_nm=rd.system_com_nm, species=sp,
                             fit_window_ps=(lo, hi))
        r64f = self_diffusion(ref.species_com_nm(sp), t, system_com_nm=ref.system_com_nm, species=sp,
                              fit_window_ps=(lo, hi))
        lag = np.arange(r64f.msd_nm2.size) * dt
        bound = msd_bound(r64f.msd_nm2, delta, disp ** 2)
        assert np.all(np.abs(r32.msd_nm2 - r64f.msd_nm2) <= bound), sp
        for b32, b64 in zip(r32.msd_blocks_nm2, r64f.msd_blocks_nm2):
            assert np.all(np.abs(b32 - b64) <= msd_bound(b64, delta, disp ** 2)), sp
        tol_D = slope_bound(lag, bound, lo, hi) / 6.0 * NM2_PER_PS_TO_M2_PER_S
        assert math.isfinite(r64f.D_m2_s) and abs(r32.D_m2_s - r64f.D_m2_s) <= tol_D, sp
        results64[sp] = r64f
    charges = dict(ref.species_charge_e)
    kw = dict(system_com_nm=ref.system_com_nm, reference_species="SOL", fit_window_ps=(lo, hi))
    o64 = onsager_transport({sp: ref.species_com_nm(sp) for sp in ref.species}, charges, t, ref.volume_nm3, 300.0,
                            **kw)
    for given in (None, {sp: [r.msd_nm2, *r.msd_blocks_nm2] for sp, r in results64.items()}):
        o32 = onsager_transport({sp: rd.species_com_nm(sp) for sp in rd.species}, charges, t, rd.volume_nm3, 300.0,
                                **dict(kw, system_com_nm=rd.system_com_nm), self_msd_nm2=given)
        assert not o32.failures
        scale = np.max(np.abs(o64.L_matrix))
        np.testing.assert_allclose(o32.L_matrix, o64.L_matrix, rtol=0, atol=1e-9 * scale)
        assert o32.sigma.whole == pytest.approx(o64.sigma.whole, rel=1e-9)
        n_lag = int(math.ceil(hi / dt)) + 1
        lag = np.arange(n_lag + 1) * dt
        for sp in ref.species:  # self terms from the float32 series (or the given float64 MSDs): the D bound
            m64 = msd_fft_windows(ref.species_com_nm(sp), [slice(0, ref.n_frames)], n_lag,
                                  reference_nm=ref.system_com_nm)[0]
            tol = slope_bound(lag, msd_bound(m64, delta, disp ** 2), lo, hi) / 6.0 * NM2_PER_PS_TO_M2_PER_S
            assert abs(o32.self_diffusion_m2_s[sp] - o64.self_diffusion_m2_s[sp]) <= tol, sp


@pytest.mark.gromacs
def test_strided_reduction_keeps_histogram_rows_of_structure_frames_only(water_nacl):
    """The per-frame RDF counts of a strided reduction hold one row per structure frame (they do not grow with
    the frames between), read as per-frame rows with zeros between structure frames."""
    from mdbench.analysis.reduce.model import StructureRows

    strided = reduce_files(water_nacl["tpr"], water_nacl["xtc"], stop=90, structure_max_frames=30)
    counts = strided.rdf_counts["SOL:O"]
    assert isinstance(counts, StructureRows) and counts.rows.shape[0] == 30 and counts.shape[0] == 90
    dense = np.asarray(counts)
    assert dense.shape == counts.shape and np.all(dense[1::3] == 0) and np.all(dense[2::3] == 0)
    np.testing.assert_array_equal(dense[::3], counts.rows)
    np.testing.assert_array_equal(counts.sum(axis=0), dense.sum(axis=0))
    np.testing.assert_array_equal(counts[3:10, 5:9], dense[3:10, 5:9])
    assert isinstance(strided.structure_view().rdf_counts["SOL:O"], np.ndarray)


@pytest.mark.gromacs
def test_analysis_keeps_the_com_series_on_disk_and_leaves_nothing(water_nacl, tmp_path, monkeypatch):
    """``analyze_files`` reduces into the float32 series and leaves only its results in the analysis folder
    (the scratch file is anonymous)."""
    from mdbench.analysis.pipeline import analyze_files
    from mdbench.analysis.reduce import onepass

    made = []

    class Recorded(ComSeriesFile):
        def __init__(self, directory, *args, **kwargs):
            super().__init__(directory, *args, **kwargs)
            made.append(Path(directory))

    monkeypatch.setattr(onepass, "ComSeriesFile", Recorded)
    out = tmp_path / "analysis"
    doc = analyze_files(water_nacl["tpr"], water_nacl["xtc"], water_nacl["edr"], out, figures=False, workers=1)
    assert made == [out]  # the series went to a scratch file in the analysis folder ...
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]  # ... which left nothing behind
    assert "self_diffusion/SOL" in doc["observables"] and doc["system"]["n_frames"] > 256
