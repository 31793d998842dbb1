"""``blocks.pymbar_detect_equilibration`` returns exactly what ``pymbar.timeseries.detect_equilibration`` returns.

The engine's equilibration gate and the audit's re-evaluation of a run's registered gate both call it; if it
differed from pymbar in a single start, a gate verdict recorded with pymbar could be contradicted by the audit.
The series are the shapes energy files take: a relaxation into a correlated plateau (density of a box still
densifying), white noise, a slow random walk, a step, a constant tail, float32 values, a few frames.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from mdbench.analysis.blocks import _pymbar_timeseries, pymbar_detect_equilibration

import _testseed


def _ar1(rng: np.random.Generator, n: int, tau: float) -> np.ndarray:
    phi = np.exp(-1.0 / tau)
    x = np.empty(n)
    x[0] = rng.normal()
    eps = rng.normal(scale=np.sqrt(1 - phi * phi), size=n)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + eps[i]
    return x


def _series(rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = int(rng.integers(150, 600))
    t = np.arange(n)
    tau = float(rng.uniform(1, 40))
    return {
        "densifying box": 1000.0 + 30.0 * np.exp(-t / (0.15 * n)) + 2.0 * _ar1(rng, n, tau),
        "potential energy": -4.2e5 + 800.0 * np.exp(-t / (0.1 * n)) + 150.0 * _ar1(rng, n, tau),
        "white noise": rng.normal(size=n),
        "random walk": np.cumsum(rng.normal(size=n)),
        "step": np.where(t < n // 3, 5.0, 0.0) + 0.1 * rng.normal(size=n),
        "constant tail": np.concatenate([rng.normal(size=n // 2), np.full(n - n // 2, 1.5)]),
        "float32": (300.0 + _ar1(rng, n, tau)).astype(np.float32),
        "few frames": rng.normal(size=int(rng.integers(3, 12))),
        "quantised": np.round(rng.normal(size=n) * 3.0),
    }


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("nskip", [1, 7])
def test_same_three_numbers_as_pymbar(fast: bool, nskip: int) -> None:
    ts = _pymbar_timeseries()
    rng = np.random.default_rng(_testseed.seed_for(f"pymbar_equilibration/{fast}/{nskip}"))
    for trial in range(2):
        for name, x in _series(rng).items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = ts.detect_equilibration(x, fast=fast, nskip=nskip)
            got = pymbar_detect_equilibration(x, fast=fast, nskip=nskip)
            assert (int(got[0]), float(got[1]), float(got[2])) == (int(want[0]), float(want[1]), float(want[2])), \
                (trial, name, got, want)


def test_constant_and_non_finite_series_are_pymbar_s() -> None:
    ts = _pymbar_timeseries()
    assert pymbar_detect_equilibration(np.full(50, 3.0)) == ts.detect_equilibration(np.full(50, 3.0))
    x = np.random.default_rng(1).normal(size=60)
    x[10] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ts.detect_equilibration(x)
        got = pymbar_detect_equilibration(x)
    assert int(got[0]) == int(want[0])


def test_a_start_whose_tail_has_no_variance_is_counted_as_pymbar_counts_it() -> None:
    # the last third constant: pymbar's ParameterError path (g = T - t + 1) for those starts
    x = np.concatenate([np.linspace(0.0, 1.0, 40) ** 2, np.random.default_rng(2).normal(size=40), np.zeros(40)])
    ts = _pymbar_timeseries()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ts.detect_equilibration(x)
    got = pymbar_detect_equilibration(x)
    assert (int(got[0]), float(got[1]), float(got[2])) == (int(want[0]), float(want[1]), float(want[2]))
