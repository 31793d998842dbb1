"""A machine-wide cap on the CPU threads that concurrent GROMACS jobs (and the analysis' workers) may use.

The cap is a counting semaphore made of ``cap`` lock files (``slot_00.lock`` …) in a shared directory:
a job that needs ``n`` threads holds ``n`` slot locks while it runs. Because the locks are OS file
locks (:mod:`filelock`), they work across the processes of a local pool and the workers of a Dask
``LocalCluster`` alike, and a killed holder releases its slots automatically.
"""

from __future__ import annotations

import hashlib
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


def lock_is_held(lock: FileLock) -> bool:
    """Whether someone holds ``lock`` now (one try without waiting; released again at once if it was free)."""
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


def _grab(locks: list[FileLock], want: int) -> list[int]:
    """Take up to ``want`` of the free ``locks`` without waiting, in random order (two waiting jobs never keep
    picking the same ones); returns the indices taken."""
    held: list[int] = []
    order = list(range(len(locks)))
    random.shuffle(order)
    for i in order:
        try:
            locks[i].acquire(timeout=0)
        except Timeout:
            continue
        held.append(i)
        if len(held) == want:
            break
    return held


class IdleCpus:
    """Idle CPUs of the whole machine between two readings of ``/proc/stat`` (idle + iowait time over all time).

    The thread slots know only mdbench's own jobs; another user's work (or our own niced analysis) shows here.
    A job takes more threads only where this many CPUs are idle, so a grown mdrun never shares its cores (an
    OpenMP mdrun whose threads wait on a busy core runs slower with more threads than with fewer).
    ``None`` where ``/proc/stat`` cannot be read (then the slots alone decide).
    """

    def __init__(self) -> None:
        self._last = self._read()

    @staticmethod
    def _read() -> tuple[float, float] | None:
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
            values = [float(v) for v in fields]
        except (OSError, ValueError, IndexError):
            return None
        return values[3] + (values[4] if len(values) > 4 else 0.0), sum(values[:8])

    def sample(self) -> float | None:
        """Idle CPUs (e.g. 0.9) since the previous sample (or since construction)."""
        now = self._read()
        last, self._last = self._last, now
        if now is None or last is None or now[1] <= last[1]:
            return None
        ncpu = os.cpu_count() or 1
        return ncpu * (now[0] - last[0]) / (now[1] - last[1])


def idle_cpus(interval_s: float = 0.5) -> float | None:
    """Idle CPUs of the machine measured over ``interval_s`` [s] (:class:`IdleCpus`)."""
    probe = IdleCpus()
    time.sleep(interval_s)
    return probe.sample()


#: Part of a CPU that may be busy and still count as free when a job grows (timer ticks, the driver itself).
IDLE_MARGIN_CPUS = 0.25


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

    # -------------------------------------------------------------------------------- demand and fair share
    @contextmanager
    def demand(self, key: str) -> Iterator[None]:
        """Register one case's demand for MD threads while the ``with`` block runs (a held lock file
        ``demand/<hash>.lock``; a killed holder releases it). ``key`` names the case, e.g. ``run_dir:case``."""
        folder = self.lock_dir / "demand"
        folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(key.encode()).hexdigest()[:16]
        lock = FileLock(str(folder / f"{name}.lock"))
        lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def active_demands(self) -> int:
        """How many cases hold a demand right now (probing each demand lock without waiting)."""
        folder = self.lock_dir / "demand"
        if not folder.is_dir():
            return 0
        return sum(lock_is_held(FileLock(str(path))) for path in folder.glob("*.lock"))

    def fair_share(self) -> int:
        """Threads one case may use now: ``cap // active demands``, at least 1 (the whole cap with no demand)."""
        return max(1, self.cap // max(1, self.active_demands()))

    @contextmanager
    def _ticket(self) -> Iterator[Path]:
        """A place in the queue of jobs asking for their share: a held lock file ``queue/<ns>-<pid>-<rand>.lock``
        (the name orders the queue; a killed holder's file is found unheld and removed by the next reader)."""
        folder = self.lock_dir / "queue"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{time.time_ns():020d}-{os.getpid()}-{random.randrange(1 << 30):09d}.lock"
        lock = FileLock(str(path))
        lock.acquire()
        try:
            yield path
        finally:
            lock.release()
            path.unlink(missing_ok=True)

    def _ahead_of(self, ticket: Path) -> int:
        """Jobs still waiting that asked before ``ticket``."""
        ahead = 0
        for path in sorted(ticket.parent.glob("*.lock")):
            if path.name >= ticket.name:
                break
            if lock_is_held(FileLock(str(path))):
                ahead += 1
            else:  # its holder is gone
                path.unlink(missing_ok=True)
        return ahead

    @contextmanager
    def acquire_share(self, timeout_s: float | None = None) -> Iterator[list[int]]:
        """Hold the fair share of slots (or as many as are free, at least one) for the ``with`` block.

        Waits while no slot is free, first come first served: a job that asked earlier and still waits goes
        first (a job that just released its slots cannot take them back before a case that has waited). Yields
        the held slot indices; their number is the thread count to use.
        """
        with self._ticket() as ticket:
            held_now = self._take_share(ticket, timeout_s)
        try:
            yield held_now[1]
        finally:
            for i in held_now[1]:
                held_now[0][i].release()

    def _take_share(self, ticket: Path, timeout_s: float | None) -> tuple[list[FileLock], list[int]]:
        locks = self._locks()
        start = time.monotonic()
        while True:
            ahead = self._ahead_of(ticket)
            free = self.cap - self.in_use() if ahead else self.cap
            if ahead and free <= ahead:  # the free slots go to those who asked first
                if timeout_s is not None and time.monotonic() - start > timeout_s:
                    raise MdbenchError(f"waited {timeout_s} s for a free thread of {self.cap}")
                time.sleep(self.poll_s * (1 + random.random()))
                continue
            want = self.fair_share()
            if want > 1:  # more than one thread only onto CPUs that are really idle
                idle = idle_cpus()
                if idle is not None:
                    want = max(1, min(want, int(idle + IDLE_MARGIN_CPUS)))
            if ahead:  # leave one slot for each job ahead
                want = max(1, min(want, free - ahead))
            held = _grab(locks, want)
            if held:
                log.debug("holding thread slots %s (fair share %d)", held, want)
                return locks, sorted(held)
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                raise MdbenchError(f"waited {timeout_s} s for a free thread of {self.cap}")
            time.sleep(self.poll_s * (1 + random.random()))

    def rebalance_due(self, holding: int, idle: float | None = None) -> int | None:
        """The thread count a job holding ``holding`` slots should continue with, when it differs from what it
        holds and it can get it now: more when the fair share grew and slots are free (a case finished), fewer
        when the fair share fell below what it holds and no slot is free (a case arrived and waits). ``None``
        when it should go on as it is. ``idle`` (idle CPUs of the machine lately, :class:`IdleCpus`) bounds a
        growth: only onto CPUs nobody else uses."""
        share = self.fair_share()
        if share == holding:
            return None
        free = self.cap - self.in_use()
        if share > holding:
            grow = min(share, holding + free)
            if idle is not None:
                grow = min(grow, holding + int(idle + IDLE_MARGIN_CPUS))
            return grow if grow > holding else None
        return share if free == 0 else None

    def in_use(self) -> int:
        """How many slots other holders hold right now (probing each lock without waiting)."""
        return sum(lock_is_held(lock) for lock in self._locks())

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
        while True:
            held = _grab(locks, threads)
            if len(held) == threads:
                break
            for i in held:
                locks[i].release()
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                raise MdbenchError(f"waited {timeout_s} s for {threads} free threads of {self.cap}")
            time.sleep(self.poll_s * (1 + random.random()))
        log.debug("holding thread slots %s", held)
        try:
            yield sorted(held)
        finally:
            for i in held:
                locks[i].release()
