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
