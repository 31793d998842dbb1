"""The audit's canonical reanalysis: the project's own analysis of each valid production, beside the checks.

:func:`_reanalyse` runs :func:`mdbench.analysis.pipeline.analyze_files` (numbers only) on links to the
run's production ``.tpr``/``.xtc``/``.edr`` placed in the audit directory, so nothing is written into the run.

:class:`Reanalyses` runs them for all cases. Where the machine has a second CPU, one forked child process
analyses the cases in order while the audit's own checks (Sim1–Sim4, equilibration energy files, the record
validator, provenance hashes, the per-case assessment of cases already analysed) run in the parent; each case's
result is then read from the ``results.json`` the child wrote. The child starts as soon as the record is read:
it forms each case's job itself (a job may be a callable the child evaluates), and the parent takes a child's
result only for the job it decides on after Sim4 (:meth:`Reanalyses.restrict`, :meth:`Reanalyses.result`).
Once its own checks are done, the parent analyses the cases the child has not reached (one claim file per case,
created exclusively: each case is analysed by one process). Otherwise, or when the parent runs threads other
than tqdm's monitor (a fork would copy their locks), each reanalysis runs in the parent when its result is first
asked for. All paths give the same numbers: the same function on the same files.
``MDBENCH_AUDIT_SERIAL=1`` forces the serial path.

A child that has worked through its cases then runs the audit's *tasks* (checks that need only the run
directory, e.g. the record validator): the parent, left with the assessments of the last cases, takes their
values from the child (:meth:`Reanalyses.task`), or computes them itself where no child ran them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Union

from mdbench.audit.model import Finding
from mdbench.audit.safeio import RunFS

#: Environment variable that makes the audit run its reanalyses in its own process, one after the other.
SERIAL_ENV = "MDBENCH_AUDIT_SERIAL"

#: One case's reanalysis: ((tpr, xtc, edr) run-relative paths, guard [ps] or None[, settings overrides]).
Job = tuple
#: A job, or a callable that returns it (None: nothing to analyse), evaluated where the analysis runs.
JobSpec = Union[Job, Callable[[], Union[Job, None]]]


def _resolve_job(spec: JobSpec) -> Job | None:
    """The job a spec stands for; None when it names none or cannot be formed (a run's unreadable files)."""
    if not callable(spec):
        return spec
    try:
        return spec()
    except Exception:  # noqa: BLE001 - hostile files: the parent's Sim4 reports them
        return None


def job_key(job: Job | None) -> str:
    """A canonical text of a job (files, guard, registered settings): the child's job and the parent's must
    be the same for the child's result to stand."""
    if job is None:
        return "null"
    files, guard, *more = job
    return json.dumps([list(files), guard, more[0] if more else None], sort_keys=True, default=str)


#: A case name used as it is for its reanalysis folder; any other (a record's ``../x``, ``/abs``, ``a/b``) gets
#: a digest name.
_PLAIN_CASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def case_dir(out: Path, case: str) -> Path:
    """``out/reanalysis/<case>``: the folder of a case's reanalysis, always inside ``out`` — a case name is the
    run's (its record's) and is used as the folder name only when it is a plain name, otherwise
    ``case-<sha256 prefix>``."""
    name = case if _PLAIN_CASE.fullmatch(case) else "case-" + hashlib.sha256(case.encode("utf-8", "replace"))\
        .hexdigest()[:16]
    return out / "reanalysis" / name


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
    work = case_dir(out, case)
    links = work / "inputs"
    links.mkdir(parents=True, exist_ok=True)
    args = []
    for rel in files:
        real = run_fs.resolve(rel)
        dst = links / Path(rel).name
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        os.symlink(os.path.realpath(real), dst)  # offsets caches land here, not in the run directory
        # the tpr is read as a run input, which never follows a link: give it the run's own (checked) file
        args.append(os.path.realpath(real) if dst.suffix == ".tpr" else str(dst))
    t0 = time.perf_counter()
    try:
        # numbers only: the audit compares values and diagnostics, it draws no figures (most of an analysis' time)
        settings = None
        if overrides:  # the run's registered definitions (mdbench.audit.registered_definitions.settings_overrides)
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


def _run_job(run_fs: RunFS, case: str, job: Job, out: Path) -> tuple[Any | None, dict[str, Any], list[Finding], bool]:
    """:func:`_reanalyse` of one job: (results, record, findings, whether the results are the file written)."""
    files, guard, *more = job
    findings: list[Finding] = []
    canon, info, from_file = _reanalyse(run_fs, case, files, out, guard, findings, *[m for m in more[:1] if m])
    return canon, info, findings, from_file


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
    """The canonical reanalyses of an audit's valid cases, shared with a child process where one runs beside
    the checks.

    The child works through the cases in order; the parent, when it needs a case's result, analyses it itself
    if the child has not reached it, and while it waits it takes the cases from the back of the child's queue
    that nobody has taken (one claim file per case in the audit directory, created exclusively: the first
    taker analyses it). So the two CPUs share the analyses once the parent's own checks are done.

    Parameters
    ----------
    run_fs : RunFS
        The audited run (read only).
    jobs : dict
        Case → ((tpr, xtc, edr) run-relative paths, guard interval [ps] or None[, settings overrides: the run's
        registered definitions, :func:`mdbench.audit.registered_definitions.settings_overrides`]), in audit order; or a
        callable returning that tuple or None, which the child evaluates (a speculative start, before the
        parent's Sim4 has decided: :meth:`restrict` then names the jobs the audit takes).
    out : Path
        The audit directory; each case's reanalysis goes to ``out/reanalysis/<case>`` (:func:`case_dir`).
    background : bool or None
        Force (True) or forbid (False) the child process; None decides by :func:`_can_fork`.
    tasks : dict, optional
        Name → callable returning a JSON value, from the run directory alone: a child runs them after its
        cases; :meth:`task` gives the value.
    """

    def __init__(self, run_fs: RunFS, jobs: dict[str, JobSpec], out: Path, background: bool | None = None,
                 tasks: dict[str, Callable[[], Any]] | None = None):
        self.run_fs, self.jobs, self.out = run_fs, dict(jobs), out
        self.tasks = dict(tasks or {})
        self._task_values: dict[str, Any] = {}   # task → the value a child sent
        # case → (results, record, findings, key of the job it was analysed for)
        self._done: dict[str, tuple[Any | None, dict[str, Any], list[Finding], str]] = {}
        self._pid: int | None = None
        self._rfd: int | None = None
        self._buf = b""
        self._queue: list[str] = []   # the cases the running child works through, in order
        self._spec: dict[str, JobSpec] = {}
        self._generation = 0
        self._claims = out / "reanalysis" / ".claims"
        use_child = _can_fork() if background is None else background
        if use_child and len(self.jobs) > 0:
            shutil.rmtree(self._claims, ignore_errors=True)
            self._claims.mkdir(parents=True, exist_ok=True)
            self._start_child(list(self.jobs))

    @property
    def in_background(self) -> bool:
        """True while a child process analyses the cases."""
        return self._pid is not None

    # ------------------------------------------------------------------------------------------ claims
    def _claim(self, case: str) -> bool:
        """Take ``case`` of the running child's queue for this process; False when the other one has it."""
        try:
            i = self._queue.index(case)
        except ValueError:
            return True
        try:
            os.close(os.open(self._claims / f"{self._generation}.{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        return True

    def restrict(self, jobs: dict[str, Job]) -> None:
        """The jobs the audit takes, once Sim4 has decided; the cases left out are claimed so that the child
        skips them. A child already at one of them is replaced by a child with the remaining jobs (or by the
        parent, where a fork is no longer safe)."""
        self.jobs = dict(jobs)
        if self._pid is None:
            return
        busy = [c for c in self._queue if c not in self.jobs and c not in self._done and not self._claim(c)]
        if not busy:
            return
        self._drain_ready()
        if not all(c in self._done for c in busy):
            left = [c for c in self.jobs if c not in self._done]
            self._kill_child()
            if left and _can_fork():
                self._start_child(left)
        for c in busy:  # the audit keeps no reanalysis of a case it left out (whole or cut short)
            self._done.pop(c, None)
            shutil.rmtree(case_dir(self.out, c), ignore_errors=True)

    # ------------------------------------------------------------------------------------------- child
    def _start_child(self, cases: list[str]) -> None:
        self._generation += 1
        self._spec = {c: self.jobs[c] for c in cases}
        self._queue = list(cases)
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
        if pid == 0:  # the child: analyse every case nobody took, in order, one JSON line each, then leave
            code = 0
            try:
                os.close(r)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _die_with(parent)
                with os.fdopen(w, "w", encoding="utf-8") as pipe:
                    for case in cases:
                        if not self._claim(case):
                            continue  # the parent analyses it (or left it out)
                        job = _resolve_job(self._spec[case])
                        if job is None:
                            pipe.write(json.dumps({"case": case, "job": job_key(None)}) + "\n")
                            pipe.flush()
                            continue
                        canon, info, findings, from_file = _run_job(self.run_fs, case, job, self.out)
                        msg = {"case": case, "info": info, "findings": [asdict(f) for f in findings],
                               "from_file": from_file, "canon": None if from_file else canon, "job": job_key(job)}
                        pipe.write(json.dumps(msg, default=str) + "\n")
                        pipe.flush()
                    for name, fn in self.tasks.items():  # its cases done: the audit's tasks
                        pipe.write(json.dumps({"task": name, "value": fn()}) + "\n")
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
        self._pid, self._rfd, self._buf = pid, r, b""

    def _read_line(self, block: bool = True) -> bool:
        """Take one line of the child into ``_done``. False when there is none (``block`` False: none yet;
        otherwise the child ended, and is reaped)."""
        while b"\n" not in self._buf:
            if self._rfd is None:
                return False
            if not block:
                if not select.select([self._rfd], [], [], 0)[0]:
                    return False
            chunk = os.read(self._rfd, 1 << 16)
            if not chunk:  # the child ended: the parent analyses what is missing
                self.close()
                return False
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        msg = json.loads(line)
        if "task" in msg:
            self._task_values[msg["task"]] = msg["value"]
            return True
        if msg.get("job") == job_key(None):
            self._done[msg["case"]] = (None, {"case": msg["case"], "status": "skipped"}, [], msg["job"])
            return True
        canon = _results_document(case_dir(self.out, msg["case"])) if msg["from_file"] else msg["canon"]
        self._done[msg["case"]] = (canon, msg["info"], [Finding(**f) for f in msg["findings"]], msg["job"])
        return True

    def _drain_ready(self) -> None:
        """Take every line the child has already written, without waiting."""
        while self._pid is not None and self._read_line(block=False):
            pass

    # ------------------------------------------------------------------------------------------ parent
    def _analyse_here(self, case: str, job: Job | None) -> None:
        """Analyse ``case`` in this process (``job`` None: nothing to analyse)."""
        if job is None:
            self._done[case] = (None, {"case": case, "status": "skipped"}, [], job_key(None))
            return
        canon, info, findings, _from_file = _run_job(self.run_fs, case, job, self.out)
        self._done[case] = (canon, info, findings, job_key(job))

    def _help(self, case: str) -> None:
        """While the child works on ``case``: analyse here the last case of its queue that nobody took."""
        while self._pid is not None and case not in self._done:
            self._drain_ready()
            if case in self._done or self._pid is None:
                return
            take = next((c for c in reversed(self._queue) if c in self.jobs and c not in self._done
                         and c != case and self._claim(c)), None)
            if take is None:
                return
            self._analyse_here(take, _resolve_job(self.jobs[take]))

    def result(self, case: str) -> tuple[Any | None, dict[str, Any], list[Finding]]:
        """The results document, run record and findings of ``case``'s reanalysis: analysed here when the
        child has not reached it (or ended without it), else the child's, once written (the parent takes
        other cases meanwhile). The child's result stands only for the job the audit decided on
        (``jobs[case]``); another is analysed here again."""
        job = _resolve_job(self.jobs[case])
        if case not in self._done and self._pid is not None and case in self._queue:
            if self._claim(case):
                self._analyse_here(case, job)
            else:
                self._help(case)
                while case not in self._done and self._pid is not None:
                    if not self._read_line():
                        break
        got = self._done.get(case)
        if got is None or got[3] != job_key(job):
            self._analyse_here(case, job)
            got = self._done[case]
        return got[:3]

    def task(self, name: str) -> Any:
        """The value of the task ``name``: the child's, once it has sent it (the parent waits for a child that
        is still running), else computed here."""
        while name not in self._task_values and self._pid is not None:
            if not self._read_line():
                break
        if name in self._task_values:
            return self._task_values[name]
        return self.tasks[name]()

    def _kill_child(self) -> None:
        """End the child now, whatever it is doing, and reap it."""
        if self._pid is None:
            return
        pid, self._pid = self._pid, None
        self._close_pipe()
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass

    def _close_pipe(self) -> None:
        if self._rfd is not None:
            try:
                os.close(self._rfd)
            except OSError:
                pass
            self._rfd, self._buf = None, b""

    def close(self) -> None:
        """Reap the child; one still analysing (the audit was interrupted, or it works on a case the audit
        has no use for) is killed first. Idempotent."""
        if self._pid is None:
            return
        pid, self._pid = self._pid, None
        self._close_pipe()
        try:
            if any(c not in self._done for c in self._queue) or any(t not in self._task_values for t in self.tasks):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass
        shutil.rmtree(self._claims, ignore_errors=True)  # nobody claims any more: the audit folder keeps results only

    def __enter__(self) -> Reanalyses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
