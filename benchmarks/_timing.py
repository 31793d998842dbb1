"""Timing helper shared by the benchmark scripts (imported as a sibling module when a script runs)."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Smallest wall time of ``repeat`` calls of ``fn`` [s]: the least disturbed by other load."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def interleaved_times(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, list[float]]:
    """Wall times [s] of each function over ``repeat`` rounds, the functions run in turn in each round.

    Interleaving exposes every measurement to the same slow drifts of a shared machine's load: compare
    the best of each, or the ratios within a round (:func:`round_ratio`).
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def round_ratio(times: dict[str, list[float]], num: str, den: str) -> float:
    """Median over rounds of time[num] / time[den] measured in the same round."""
    return round_ratio_quartiles(times, num, den)[1]


def round_ratio_quartiles(times: dict[str, list[float]], num: str, den: str) -> tuple[float, float, float]:
    """(lower quartile, median, upper quartile) over rounds of time[num] / time[den] in the same round: the
    spread says how far one run's ratio can be trusted on a shared machine."""
    import numpy as np

    ratios = np.array([a / b for a, b in zip(times[num], times[den])])
    q1, q2, q3 = np.percentile(ratios, [25, 50, 75])
    return float(q1), float(q2), float(q3)
