"""Every process and thread the analysis starts, and the order they must start in.

The rules (tested in ``tests/analysis_structure/test_structure_concurrency.py``):

1. **No thread is alive when the analysis forks.** A fork copies only the forking thread; a lock held by
   another thread at that moment stays locked in the child for ever. So the energy reader
   (:class:`ForkedCall`) and the trajectory workers (:func:`run_forked_ranges`) are forked before the one
   thread (:func:`hash_in_background`) starts, and that thread starts only after the last fork; the
   estimators' threads (:func:`ranges_in_threads`) are joined before they return. tqdm's
   stall monitor (a thread that any progress bar, even a hidden one, starts) is stopped and switched off
   before each fork (:func:`before_fork`); the bars work without it.
2. **A forked child never decides the result alone.** When a child fails or dies, the parent computes the
   same thing itself (:meth:`ForkedCall.result`) or redoes the pass in one process
   (:func:`run_forked_ranges` returns None), so any error surfaces with its own message, in this process.
3. **Children share memory only through anonymous maps** (:func:`shared_zeros`) that they write row-wise;
   the job they run is handed over by inheritance at fork time (:data:`_FORKED`), never pickled.
4. **Where the platform cannot fork, everything runs in this process** (the same results).
"""

from __future__ import annotations

import logging
import mmap
import multiprocessing
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

log = logging.getLogger(__name__)


def can_fork() -> bool:
    """True when this platform offers the ``fork`` start method."""
    return "fork" in multiprocessing.get_all_start_methods()


def before_fork() -> None:
    """Stop the threads this process may have started that a fork must not copy (rule 1): tqdm's monitor.

    Other threads alive at this point belong to the caller (the analysis itself starts none before its last
    fork); they are named in a warning, since a lock one of them holds would stay locked in the child.
    """
    from tqdm import std

    std.tqdm.monitor_interval = 0  # no new monitor thread
    classes, k = [std.tqdm], 0
    while k < len(classes):  # the monitor is kept on the bar class that started it (tqdm.auto's, say)
        classes += [c for c in classes[k].__subclasses__() if c not in classes]
        k += 1
    for cls in classes:
        monitor = cls.__dict__.get("monitor")
        if monitor is not None:
            monitor.exit()
            cls.monitor = None
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread() and t.is_alive()]
    if others:
        log.warning("forking while other threads run (%s): a lock they hold stays locked in the child",
                    ", ".join(others))


class ForkedCall:
    """``fn(*args)`` in a forked child process (arguments inherited, result pickled back through a pipe).

    No thread is started in this process, so later forks (the trajectory workers) stay safe. When the child
    fails or dies, :meth:`result` computes ``fn(*args)`` here instead, so any error surfaces with its own
    message from this process.
    """

    def __init__(self, fn: Any, args: tuple[Any, ...], process: Any, conn: Any) -> None:
        self.fn, self.args, self.process, self.conn = fn, args, process, conn

    @classmethod
    def start(cls, fn: Any, *args: Any) -> ForkedCall | None:
        """Fork the child; None where the platform cannot fork (the caller then runs ``fn`` itself)."""
        if not can_fork():
            return None
        before_fork()
        ctx = multiprocessing.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_forked_call_body, args=(send, fn, args), daemon=True)
        proc.start()
        send.close()
        return cls(fn, args, proc, recv)

    def cancel(self) -> None:
        """Stop the child and forget its answer (the caller is failing anyway)."""
        self.process.terminate()
        self.process.join()
        self.conn.close()

    def ready(self) -> bool:
        """True when the child's answer (or its death) can be received without waiting."""
        try:
            return bool(self.conn.poll(0))
        except (EOFError, OSError):
            return True

    def result(self) -> Any:
        """The child's result, or ``fn(*args)`` computed here when the child failed or died."""
        try:
            ok, value = self.conn.recv()
        except (EOFError, OSError):  # the child died without an answer
            ok, value = False, "no answer"
        finally:
            self.conn.close()
            self.process.join()
        if ok:
            return value
        log.info("forked %s did not deliver (%s); running it in this process", self.fn.__name__, value)
        return self.fn(*self.args)


def _forked_call_body(conn: Any, fn: Any, args: tuple[Any, ...]) -> None:
    """Child side of :class:`ForkedCall`: send (True, result) or (False, error text)."""
    try:
        conn.send((True, fn(*args)))
    except BaseException as exc:  # noqa: BLE001 — reported to the parent, which recomputes
        conn.send((False, f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def hash_in_background(fn: Callable[[Any], str], items: dict[str, Any]) -> dict[str, Future]:
    """``fn(item)`` for every item in one background thread (hashlib releases the GIL): key → future.

    Rule 1: call it only after the last fork of the analysis (the trajectory pass forks its workers).
    """
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mdbench-sha256")
    futures = {k: pool.submit(fn, v) for k, v in items.items()}
    pool.shutdown(wait=False)
    return futures


def ranges_in_threads(fn: Callable[[int, int], Any], n: int, n_threads: int, name: str) -> list[Any]:
    """``fn(a, b)`` on ``n_threads`` contiguous ranges of ``0..n-1`` in threads (for work that releases the
    GIL: FFTs, einsum), in order; here when ``n_threads`` is 1. The threads are joined before it returns,
    so none is alive at the next fork (rule 1)."""
    if n_threads <= 1:
        return [fn(0, n)]
    cuts = [round(i * n / n_threads) for i in range(n_threads + 1)]
    with ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix=name) as pool:
        return list(pool.map(fn, cuts[:-1], cuts[1:]))


def shared_zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Zeroed array in anonymous shared memory: what a forked worker writes, the parent sees."""
    count = int(np.prod(shape))
    buf = mmap.mmap(-1, max(1, count * np.dtype(dtype).itemsize))
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


#: The job the forked workers run (set by the parent just before it forks them; never pickled), and the
#: lock that keeps two threads of one process from forking workers for different jobs at once.
_FORKED: dict[str, Any] = {}
_FORK_LOCK = threading.Lock()


def _run_range_in_worker(slot: int, a: int, b: int) -> Any:
    """Worker body: ``job(slot, a, b, progress)`` of the job inherited at fork time."""
    return _FORKED["job"](slot, a, b, _FORKED["progress"])


def run_forked_ranges(job: Callable[[int, int, int, np.ndarray], Any], n: int, n_workers: int,
                      on_progress: Callable[[int], None]) -> list[Any] | None:
    """``job(slot, a, b, progress)`` on ``n_workers`` contiguous ranges of ``0..n-1``, one forked process each.

    ``progress`` is a shared int64 array with one counter per slot that the job advances; ``on_progress``
    is called with its total a few times a second. Returns the ranges' results in order, or None when the
    pool broke (a worker killed, e.g. for memory): the caller then redoes the work in one process (rule 2).
    Errors raised inside a worker propagate.
    """
    import concurrent.futures as cf
    from concurrent.futures.process import BrokenProcessPool

    cuts = [round(i * n / n_workers) for i in range(n_workers + 1)]
    progress = shared_zeros((n_workers,), np.int64)
    try:
        with _FORK_LOCK:  # the workers fork at the first submit and inherit _FORKED
            before_fork()
            _FORKED.update(job=job, progress=progress)
            try:
                ex = cf.ProcessPoolExecutor(max_workers=n_workers, mp_context=multiprocessing.get_context("fork"))
                futures = [ex.submit(_run_range_in_worker, j, cuts[j], cuts[j + 1]) for j in range(n_workers)]
            finally:
                _FORKED.clear()
        with ex:
            pending = set(futures)
            while pending:
                _, pending = cf.wait(pending, timeout=0.25)
                on_progress(int(progress.sum()))
            return [f.result() for f in futures]
    except BrokenProcessPool as exc:
        log.warning("the worker pool broke (%s); redoing the work in one process", exc)
        return None
