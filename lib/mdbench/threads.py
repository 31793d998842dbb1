"""A machine-wide cap on the CPU threads that concurrent GROMACS jobs (and the analysis' workers) may use.

The cap is a counting semaphore made of ``cap`` lock files (``slot_00.lock`` …) in a shared directory:
a job that needs ``n`` threads holds ``n`` slot locks while it runs. Because the locks are OS file
locks (:mod:`filelock`), they work across the processes of a local pool and the workers of a Dask
``LocalCluster`` alike, and a killed holder releases its slots automatically.
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

from mdbench.errors import MdbenchError

log = logging.getLogger(__name__)

#: The contract's limit on logical CPU threads used concurrently by one candidate.
CONTRACT_THREAD_CAP = 16


def default_thread_cap() -> int:
    """``$MDBENCH_THREAD_CAP`` if set, else the number of usable cores, never above 16."""
    env = os.environ.get("MDBENCH_THREAD_CAP")
    if env:
        try:
            cap = int(env)
        except ValueError as exc:
            raise MdbenchError(f"MDBENCH_THREAD_CAP={env!r} is not an integer; set it to e.g. 4") from exc
    else:
        cap = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cap, CONTRACT_THREAD_CAP))


class ThreadSlots:
    """Counting semaphore of CPU threads shared by all processes using the same ``lock_dir``.

    Parameters
    ----------
    cap : int, optional
        Total threads allowed at once (default :func:`default_thread_cap`).
    lock_dir : path, optional
        Directory of the slot lock files (default ``$MDBENCH_LOCK_DIR`` or ``<tmp>/mdbench-threads``).
    poll_s : float
        Wait between attempts when not enough slots are free [s].
    """

    def __init__(self, cap: int | None = None, lock_dir: str | Path | None = None, poll_s: float = 0.2):
        self.cap = default_thread_cap() if cap is None else int(cap)
        if not 1 <= self.cap <= CONTRACT_THREAD_CAP:
            raise MdbenchError(f"thread cap {self.cap} outside 1..{CONTRACT_THREAD_CAP}")
        self.lock_dir = Path(lock_dir or os.environ.get("MDBENCH_LOCK_DIR")
                             or Path(tempfile.gettempdir()) / "mdbench-threads")
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        self.poll_s = poll_s

    def _locks(self) -> list[FileLock]:
        return [FileLock(str(self.lock_dir / f"slot_{i:02d}.lock")) for i in range(self.cap)]

    def in_use(self) -> int:
        """How many slots other holders hold right now (probing each lock without waiting)."""
        busy = 0
        for lock in self._locks():
            try:
                lock.acquire(timeout=0)
            except Timeout:
                busy += 1
            else:
                lock.release()
        return busy

    @contextmanager
    def acquire(self, threads: int, timeout_s: float | None = None) -> Iterator[list[int]]:
        """Hold ``threads`` slots for the duration of the ``with`` block; yields their indices.

        All-or-nothing: if fewer than ``threads`` slots are free, the partial set is released and the
        call retries after a short random wait, so two waiting jobs cannot deadlock each other.

        Raises
        ------
        MdbenchError
            ``threads`` exceeds the cap, or ``timeout_s`` elapsed.
        """
        if threads < 1 or threads > self.cap:
            raise MdbenchError(f"a job asked for {threads} threads but the cap is {self.cap}; "
                               f"lower the job's threads or raise MDBENCH_THREAD_CAP (max {CONTRACT_THREAD_CAP})")
        locks = self._locks()
        start = time.monotonic()
        held: list[int] = []
        while True:
            order = list(range(self.cap))
            random.shuffle(order)
            for i in order:
                try:
                    locks[i].acquire(timeout=0)
                except Timeout:
                    continue
                held.append(i)
                if len(held) == threads:
                    break
            if len(held) == threads:
                break
            for i in held:
                locks[i].release()
            held = []
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                raise MdbenchError(f"waited {timeout_s} s for {threads} free threads of {self.cap}")
            time.sleep(self.poll_s * (1 + random.random()))
        log.debug("holding thread slots %s", held)
        try:
            yield sorted(held)
        finally:
            for i in held:
                locks[i].release()
