"""The audit's canonical reanalysis: the project's own analysis of each valid production, beside the checks.

:func:`_reanalyse` runs :func:`mdbench.analysis.pipeline.analyze_files` (numbers only) on links to the
run's production ``.tpr``/``.xtc``/``.edr`` placed in the audit directory, so nothing is written into the run.

:class:`Reanalyses` runs them for all cases. Where the machine has a second CPU, one forked child process
analyses the cases in order while the audit's own checks (equilibration energy files, the record validator,
provenance hashes, the per-case assessment of cases already analysed) run in the parent; each case's result is
then read from the ``results.json`` the child wrote. Otherwise, or when the parent runs threads other than
tqdm's monitor (a fork would copy their locks), each reanalysis runs in the parent when its result is first
asked for. Both give the same
numbers: the child runs the same function on the same files, and the parent reads its output file.
``MDBENCH_AUDIT_SERIAL=1`` forces the serial path.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mdbench.audit.model import Finding
from mdbench.audit.safeio import RunFS

#: Environment variable that makes the audit run its reanalyses in its own process, one after the other.
SERIAL_ENV = "MDBENCH_AUDIT_SERIAL"


def _reanalyse(run_fs: RunFS, case: str, files: tuple[str, str, str], out: Path, guard_ps: float | None,
               findings: list[Finding], overrides: dict[str, Any] | None = None
               ) -> tuple[Any | None, dict[str, Any], bool]:
    """Canonical reanalysis of one case's production ``files`` (run-relative tpr, xtc, edr).

    Returns the results document (``None`` when the analysis is unavailable or fails, with a finding appended
    to ``findings``), a short record of what ran (status, seconds, output folder), and whether the document is
    the ``results.json`` the analysis wrote (the child then sends only that it is there).
    """
    info: dict[str, Any] = {"case": case, "status": "skipped"}
    try:
        from mdbench.analysis.pipeline import analyze_files  # noqa: PLC0415
    except ImportError as exc:
        findings.append(Finding("reanalysis_unavailable", f"canonical reanalysis not available ({exc}); A2/A3 "
                                "judged from the run's own results", item="A3", case=case))
        info["status"] = "unavailable"
        return None, info, False
    work = out / "reanalysis" / case
    links = work / "inputs"
    links.mkdir(parents=True, exist_ok=True)
    args = []
    for rel in files:
        real = run_fs.resolve(rel)
        dst = links / Path(rel).name
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        os.symlink(os.path.realpath(real), dst)  # offsets caches land here, not in the run directory
        args.append(str(dst))
    t0 = time.perf_counter()
    try:
        # numbers only: the audit compares values and diagnostics, it draws no figures (most of an analysis' time)
        settings = None
        if overrides:  # the run's registered definitions (mdbench.audit.registered.settings_overrides)
            import dataclasses  # noqa: PLC0415

            from mdbench.analysis.settings import AnalysisSettings  # noqa: PLC0415

            settings = dataclasses.replace(AnalysisSettings(), **overrides)
            info["registered_settings"] = overrides
        from mdbench.analysis.reduce.centres import CENTRES_FILE  # noqa: PLC0415

        ret = analyze_files(args[0], args[1], args[2], str(work), guard_ps=guard_ps, settings=settings,
                            figures=False, keep_centres=work / CENTRES_FILE)  # for the window re-fits
    except Exception as exc:  # noqa: BLE001 - a failing reanalysis is a finding, not a crash
        findings.append(Finding("reanalysis_failed", f"canonical reanalysis failed: {type(exc).__name__}: {exc}"[:300],
                                item="A3", case=case))
        info.update(status="failed", error=str(exc)[:300])
        return None, info, False
    info.update(status="ok", seconds=round(time.perf_counter() - t0, 2), out=str(work.relative_to(out)))
    canon = _results_document(work)
    if canon is not None:
        return canon, info, True
    if isinstance(ret, dict):
        return ret, info, False
    to_dict = getattr(ret, "to_dict", None)
    return (to_dict() if callable(to_dict) else None), info, False


def _results_document(work: Path) -> dict[str, Any] | None:
    """The ``results.json`` an analysis wrote into ``work``, if it is there and parses."""
    res_path = work / "results.json"
    if res_path.is_file():
        try:
            return json.loads(res_path.read_text())
        except ValueError:
            return None
    return None


def _tqdm_thread_lock() -> Any:
    """tqdm's process-local write lock, if tqdm is loaded (its monitor thread takes it every few seconds)."""
    std = sys.modules.get("tqdm.std")
    return getattr(getattr(std, "TqdmDefaultWriteLock", None), "th_lock", None)


def _only_harmless_threads() -> bool:
    """True when the only threads besides this one are tqdm's monitor (it holds no lock but tqdm's own,
    which :meth:`Reanalyses._start_child` takes across the fork)."""
    monitor = getattr(sys.modules.get("tqdm._monitor"), "TMonitor", None)
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    return all(monitor is not None and isinstance(t, monitor) for t in others)


def _die_with(parent: int) -> None:
    """End this (child) process when the audit ends, however it ends: a killed audit leaves no analysis
    running for hours at paper size (:func:`mdbench.sandbox.die_with_parent`)."""
    from mdbench.sandbox import die_with_parent  # noqa: PLC0415

    try:
        die_with_parent(signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent ended before the request took effect
        os._exit(1)


def _can_fork() -> bool:
    """True where a forked child can analyse beside the parent: a second CPU, no thread whose locks a fork
    could copy held, not disabled by ``MDBENCH_AUDIT_SERIAL``."""
    if os.environ.get(SERIAL_ENV, "").strip() not in ("", "0") or not hasattr(os, "fork"):
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return cpus >= 2 and _only_harmless_threads()


class Reanalyses:
    """The canonical reanalyses of an audit's valid cases, in a child process where that runs beside the checks.

    Parameters
    ----------
    run_fs : RunFS
        The audited run (read only).
    jobs : dict
        Case → ((tpr, xtc, edr) run-relative paths, guard interval [ps] or None[, settings overrides: the run's
        registered definitions, :func:`mdbench.audit.registered.settings_overrides`]), in audit order.
    out : Path
        The audit directory; each case's reanalysis goes to ``out/reanalysis/<case>``.
    background : bool or None
        Force (True) or forbid (False) the child process; None decides by :func:`_can_fork`.
    """

    def __init__(self, run_fs: RunFS, jobs: dict[str, tuple[tuple[str, str, str], float | None]], out: Path,
                 background: bool | None = None):
        self.run_fs, self.jobs, self.out = run_fs, dict(jobs), out
        self._done: dict[str, tuple[Any | None, dict[str, Any], list[Finding]]] = {}
        self._pid: int | None = None
        self._reader: Any = None
        use_child = _can_fork() if background is None else background
        if use_child and len(self.jobs) > 0:
            self._start_child()

    @property
    def in_background(self) -> bool:
        """True while a child process analyses the cases."""
        return self._pid is not None

    def _start_child(self) -> None:
        r, w = os.pipe()
        parent = os.getpid()
        lock = _tqdm_thread_lock()  # held across the fork: the child must not inherit it taken by the monitor
        if lock is not None:
            lock.acquire()
        try:
            pid = os.fork()
        finally:  # in the parent and in the child (the forking thread is the child's main thread)
            if lock is not None:
                lock.release()
        if pid == 0:  # the child: analyse every case in order, one JSON line per case, then leave at once
            code = 0
            try:
                os.close(r)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _die_with(parent)
                with os.fdopen(w, "w", encoding="utf-8") as pipe:
                    for case, (files, guard, *more) in self.jobs.items():
                        findings: list[Finding] = []
                        canon, info, from_file = _reanalyse(self.run_fs, case, files, self.out, guard, findings,
                                                            *[m for m in more[:1] if m])
                        msg = {"case": case, "info": info, "findings": [asdict(f) for f in findings],
                               "from_file": from_file, "canon": None if from_file else canon}
                        pipe.write(json.dumps(msg, default=str) + "\n")
                        pipe.flush()
            except BaseException:  # noqa: BLE001 - the parent sees the missing lines and analyses those cases itself
                code = 1
            finally:
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:  # noqa: BLE001
                        pass
                os._exit(code)
        os.close(w)
        self._pid = pid
        self._reader = os.fdopen(r, "r", encoding="utf-8")

    def result(self, case: str) -> tuple[Any | None, dict[str, Any], list[Finding]]:
        """The results document, run record and findings of ``case``'s reanalysis (waits for the child)."""
        while case not in self._done and self._pid is not None:
            line = self._reader.readline()
            if not line:  # the child ended without this case: analyse what is missing here
                self.close()
                break
            msg = json.loads(line)
            canon = _results_document(self.out / "reanalysis" / msg["case"]) if msg["from_file"] else msg["canon"]
            self._done[msg["case"]] = (canon, msg["info"], [Finding(**f) for f in msg["findings"]])
        if case not in self._done:
            files, guard, *more = self.jobs[case]
            findings: list[Finding] = []
            canon, info, _from_file = _reanalyse(self.run_fs, case, files, self.out, guard, findings,
                                                 *[m for m in more[:1] if m])
            self._done[case] = (canon, info, findings)
        return self._done[case]

    def close(self) -> None:
        """Reap the child; one still analysing (the audit was interrupted) is killed first. Idempotent."""
        if self._pid is None:
            return
        pid, self._pid = self._pid, None
        try:
            self._reader.close()
        except OSError:
            pass
        try:
            if len(self._done) < len(self.jobs):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass

    def __enter__(self) -> Reanalyses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
