"""One :class:`Runner` interface for GROMACS, with a command-line adapter and a gmxapi adapter.

Every call is made with explicit thread counts, and every command line, its working directory, its
return code, its wall time and its full console output are kept (``<name>.cmd.json`` and
``<name>.console.log`` beside the outputs) so that an audit can replay it.

Adapters are kept in the :data:`RUNNERS` registry, filled explicitly below; :func:`get_runner`
selects one from ``"auto" | "cli" | "gmxapi"``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from mdbench.engine.gpu import MdrunOffload
from mdbench.engine.threads import IdleCpus, ThreadSlots
from mdbench.errors import MdbenchError

log = logging.getLogger(__name__)


class EngineError(MdbenchError):
    """A GROMACS command failed; ``argv``, ``returncode`` and ``console`` (log path) say how."""

    def __init__(self, message: str, argv: Sequence[str] | None = None, returncode: int | None = None,
                 console: str | None = None):
        self.argv = list(argv) if argv is not None else None
        self.returncode = returncode
        self.console = console
        extra = f" (exit {returncode}; full output in {console})" if console else ""
        super().__init__(message + extra)


class EngineUnavailable(MdbenchError):
    """The requested engine adapter cannot be used on this machine; the message says why and what to do."""


@dataclass
class CommandResult:
    """What one GROMACS invocation did.

    Attributes
    ----------
    argv : list of str
        The full command line.
    cwd : str
        Working directory.
    returncode : int
        Exit status (negative: killed by that signal).
    wall_s : float
        Wall-clock time of the command [s].
    console_path : str
        File holding the command's stdout and stderr.
    threads : int
        Threads granted to the command by the concurrency cap.
    """

    argv: list[str]
    cwd: str
    returncode: int
    wall_s: float
    console_path: str
    threads: int = 1
    engine: str = "cli"
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.returncode == 0


def find_gmx() -> str:
    """Return the GROMACS driver on PATH (``$MDBENCH_GMX``, ``gmx``, ``gmx_mpi``, ``gmx_d``)."""
    candidates = [os.environ.get("MDBENCH_GMX", ""), "gmx", "gmx_mpi", "gmx_d"]
    for name in candidates:
        if name and shutil.which(name):
            return shutil.which(name)  # type: ignore[return-value]
    raise EngineUnavailable("GROMACS not found: put `gmx` on PATH or set MDBENCH_GMX to the gmx binary")


#: ``threads`` value meaning "follow the work": the fair share of the machine-wide cap, re-balanced at
#: checkpoint boundaries (:meth:`Runner.mdrun`).
FOLLOW_THE_WORK = 0
#: A running mdrun checks every this many seconds whether its share changed [s] (``$MDBENCH_REBALANCE_POLL_S``) …
REBALANCE_POLL_S = 5.0
#: … and is never stopped for a re-balance before it has run this long [s] (a restart costs ~1 s;
#: ``$MDBENCH_MIN_SLICE_S``).
MIN_SLICE_S = 20.0


class Runner(ABC):
    """The GROMACS operations the stages need.

    Parameters
    ----------
    slots : ThreadSlots, optional
        The machine-wide thread cap; ``mdrun`` blocks until its threads are free.
    """

    name = "abstract"

    def __init__(self, slots: ThreadSlots | None = None):
        self.slots = slots or ThreadSlots()
        self.gmx = find_gmx()

    @abstractmethod
    def grompp(self, mdp: Path, coords: Path, top: Path, tpr: Path, *, checkpoint: Path | None = None,
               index: Path | None = None, maxwarn: int = 0, mdout: Path | None = None) -> CommandResult:
        """Preprocess ``mdp`` + ``coords`` + ``top`` into ``tpr`` (``gmx grompp``); never hides warnings."""

    @abstractmethod
    def mdrun(self, tpr: Path, deffnm: str, *, threads: int = 1, cpi: Path | None = None,
              cpt_min: float = 15.0, extra: Sequence[str] = (), nsteps: int | None = None,
              on_start: Callable[[subprocess.Popen], None] | None = None, rebalance: bool = False
              ) -> CommandResult:
        """Run ``tpr`` with output names ``deffnm`` using ``threads`` threads (``-nt``/``-ntomp``).

        ``threads=0`` (:data:`FOLLOW_THE_WORK`): the fair share of the machine-wide cap at the start
        (:meth:`~mdbench.threads.ThreadSlots.acquire_share`); with ``rebalance`` the call also stops mdrun at
        its next checkpoint (SIGTERM) when that share has changed (a case finished or arrived) and returns with
        ``extra["rebalance"]`` = the thread count to continue with — the caller continues from the checkpoint.

        ``cpi`` resumes from a checkpoint with ``-append``; ``cpt_min`` is the checkpoint wall interval
        [min]. The call waits for its slots of the machine-wide cap before starting.
        """

    def tool(self, args: Sequence[str], cwd: Path, name: str, stdin: str | None = None) -> CommandResult:
        """Run a GROMACS tool (``editconf``, ``convert-tpr``, ``dump``, ``check``, …) as a subprocess."""
        return run_logged([self.gmx, *args], cwd=cwd, name=name, stdin=stdin, engine=self.name)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: deliver SIGTERM to the child when the driver dies, so mdrun checkpoints and stops."""
    try:
        import ctypes  # noqa: PLC0415

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_logged(argv: Sequence[str], cwd: Path, name: str, *, stdin: str | None = None, threads: int = 1,
               engine: str = "cli", env: dict | None = None,
               on_start: Callable[[subprocess.Popen], None] | None = None) -> CommandResult:
    """Run ``argv`` in ``cwd``, writing ``<name>.console.log`` and ``<name>.cmd.json`` there.

    The process runs in its own session so that a signal sent to it reaches GROMACS only. A
    ``KeyboardInterrupt`` forwards SIGTERM to GROMACS (which then writes a checkpoint) before re-raising, and
    on Linux the child gets SIGTERM if the driver dies (``PR_SET_PDEATHSIG``), so no orphaned mdrun keeps
    writing into a segment that a rerun will resume.
    """
    cwd = Path(cwd)
    cwd.mkdir(parents=True, exist_ok=True)
    console = cwd / f"{name}.console.log"
    argv = [str(a) for a in argv]
    log.info("running %s (in %s)", " ".join(argv), cwd)
    start = time.monotonic()
    with open(console, "ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                env=env, start_new_session=True,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        if on_start is not None:
            on_start(proc)
        try:
            proc.communicate(input=stdin.encode() if stdin is not None else None)
        except KeyboardInterrupt:  # pragma: no cover - interactive only
            proc.send_signal(signal.SIGTERM)
            proc.wait()
            raise
    result = CommandResult(argv=argv, cwd=str(cwd), returncode=proc.returncode,
                           wall_s=time.monotonic() - start, console_path=str(console), threads=threads,
                           engine=engine)
    with open(cwd / f"{name}.cmd.json", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(asdict(result)) + "\n")
    return result


class _Rebalancer:
    """Watches a running mdrun for a change of its fair share and stops it at its next checkpoint.

    GROMACS on SIGTERM finishes the current step block, writes a checkpoint and exits, so the caller can
    continue the segment from that checkpoint (``-cpi … -append``) with the new thread count.
    """

    def __init__(self, slots, threads: int):
        self.slots, self.threads = slots, threads
        self.requested: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def chain(self, on_start: Callable[[subprocess.Popen], None] | None) -> Callable[[subprocess.Popen], None]:
        def started(proc: subprocess.Popen) -> None:
            if on_start is not None:
                on_start(proc)
            self._thread = threading.Thread(target=self._watch, args=(proc,), daemon=True)
            self._thread.start()
        return started

    def _watch(self, proc: subprocess.Popen) -> None:
        start = time.monotonic()
        poll_s = float(os.environ.get("MDBENCH_REBALANCE_POLL_S", REBALANCE_POLL_S))
        min_slice_s = float(os.environ.get("MDBENCH_MIN_SLICE_S", MIN_SLICE_S))
        cpus = IdleCpus()
        while not self._stop.wait(poll_s):
            idle = cpus.sample()
            if proc.poll() is not None:
                return
            if time.monotonic() - start < min_slice_s:
                continue
            try:
                wanted = self.slots.rebalance_due(self.threads, idle)
            except OSError:  # a lock folder being cleaned: ask again at the next poll
                continue
            if wanted is not None:
                log.info("threads follow the work: stopping mdrun (pid %s) at its next checkpoint to continue "
                         "with %d threads instead of %d", proc.pid, wanted, self.threads)
                self.requested = wanted
                proc.send_signal(signal.SIGTERM)
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class CliRunner(Runner):
    """GROMACS through the ``gmx`` command line (subprocesses)."""

    name = "cli"

    def grompp(self, mdp: Path, coords: Path, top: Path, tpr: Path, *, checkpoint: Path | None = None,
               index: Path | None = None, maxwarn: int = 0, mdout: Path | None = None) -> CommandResult:
        tpr = Path(tpr)
        partial = tpr.with_name(f".{tpr.stem}.partial.tpr")  # renamed when complete: a kill leaves no torn tpr
        argv = [self.gmx, "grompp", "-f", mdp, "-c", coords, "-p", top, "-o", partial,
                "-po", mdout or tpr.with_suffix(".mdout.mdp"), "-maxwarn", str(maxwarn)]
        if checkpoint is not None:
            argv += ["-t", checkpoint]
        if index is not None:
            argv += ["-n", index]
        res = run_logged(argv, cwd=tpr.parent, name=tpr.stem + ".grompp", engine=self.name)
        if not res.ok:
            partial.unlink(missing_ok=True)
            raise EngineError(f"gmx grompp failed for {mdp}", res.argv, res.returncode, res.console_path)
        os.replace(partial, tpr)
        return res

    def mdrun(self, tpr: Path, deffnm: str, *, threads: int = 1, cpi: Path | None = None,
              cpt_min: float = 15.0, extra: Sequence[str] = (), nsteps: int | None = None,
              on_start: Callable[[subprocess.Popen], None] | None = None, rebalance: bool = False
              ) -> CommandResult:
        tpr = Path(tpr)
        offload = MdrunOffload(self.gmx, tpr)  # GPU tasks, the study-wide GPU lock, pinning (engine/gpu.py)
        follow = threads == FOLLOW_THE_WORK
        with offload.exclusive(), self._hold(threads) as held:
            threads = len(held)
            argv = [self.gmx, "mdrun", "-s", tpr.name, "-deffnm", deffnm, *offload.thread_args(held),
                    "-cpt", f"{cpt_min:g}"]
            if cpi is not None:
                argv += ["-cpi", str(cpi), "-append"]
            if nsteps is not None:
                argv += ["-nsteps", str(nsteps)]
            argv += offload.mdrun_args() + list(extra)
            watch = _Rebalancer(self.slots, threads) if follow and rebalance else None
            res = run_logged(argv, cwd=tpr.parent, name=deffnm + ".mdrun", threads=threads,
                             engine=self.name, env=dict(os.environ, OMP_NUM_THREADS=str(threads)),
                             on_start=watch.chain(on_start) if watch else on_start)
            if watch is not None:
                watch.stop()
                if watch.requested is not None:
                    res.extra["rebalance"] = watch.requested
        res.extra["resources"] = offload.resources(res.wall_s, threads, tpr.parent / f"{deffnm}.log")
        return res

    def _hold(self, threads: int):
        """The slots of one mdrun: exactly ``threads``, or the fair share for :data:`FOLLOW_THE_WORK`."""
        return self.slots.acquire_share() if threads == FOLLOW_THE_WORK else self.slots.acquire(threads)


class GmxapiRunner(CliRunner):
    """GROMACS through gmxapi (``gmxapi.commandline_operation`` / ``gmxapi.mdrun``).

    Usable only when ``import gmxapi`` works *and* its GROMACS installation provides libgmxapi;
    otherwise construction raises :class:`EngineUnavailable` saying what is missing.
    """

    name = "gmxapi"

    def __init__(self, slots: ThreadSlots | None = None):
        reason = gmxapi_unavailable_reason()
        if reason:
            raise EngineUnavailable(f"--engine gmxapi is not usable here: {reason}. "
                                    "Use --engine cli (or auto), or install gmxapi against a GROMACS "
                                    "built with -DGMXAPI=ON.")
        super().__init__(slots)

    def mdrun(self, tpr: Path, deffnm: str, *, threads: int = 1, cpi: Path | None = None,
              cpt_min: float = 15.0, extra: Sequence[str] = (), nsteps: int | None = None,
              on_start: Callable[[subprocess.Popen], None] | None = None, rebalance: bool = False
              ) -> CommandResult:  # pragma: no cover
        """As :meth:`CliRunner.mdrun`; gmxapi gives no process to stop, so a call never re-balances."""
        import gmxapi  # noqa: PLC0415 - optional dependency

        tpr = Path(tpr)
        runtime = {"-pin": "off", "-cpt": f"{cpt_min:g}", "-deffnm": deffnm}
        if cpi is not None:
            runtime.update({"-cpi": str(cpi), "-append": ""})
        if nsteps is not None:
            runtime["-nsteps"] = str(nsteps)
        offload = MdrunOffload(self.gmx, tpr)
        start = time.monotonic()
        cwd = os.getcwd()
        with offload.exclusive(), self._hold(threads) as held:
            threads = len(held)
            pairs = offload.thread_args(held) + offload.mdrun_args()
            runtime.update(dict(zip(pairs[::2], pairs[1::2])))
            try:
                os.chdir(tpr.parent)
                md = gmxapi.mdrun(gmxapi.read_tpr(tpr.name), runtime_args=runtime)
                md.run()
                rc = 0
            except Exception as exc:  # gmxapi raises its own hierarchy
                log.error("gmxapi mdrun failed: %s", exc)
                rc = 1
            finally:
                os.chdir(cwd)
        wall_s = time.monotonic() - start
        return CommandResult(argv=["gmxapi.mdrun", tpr.name, json.dumps(runtime)], cwd=str(tpr.parent),
                             returncode=rc, wall_s=wall_s, console_path=str(tpr.parent / f"{deffnm}.log"),
                             threads=threads, engine=self.name,
                             extra={"resources": offload.resources(wall_s, threads, tpr.parent / f"{deffnm}.log")})


def gmxapi_unavailable_reason() -> str | None:
    """Why gmxapi cannot be used (``None`` when it can)."""
    try:
        import gmxapi  # noqa: F401, PLC0415
    except ImportError as exc:
        return f"`import gmxapi` failed ({exc})"
    try:
        from gmxapi import _gmxapi  # noqa: F401, PLC0415
    except ImportError as exc:  # pragma: no cover - needs a broken gmxapi
        return f"gmxapi is installed but its GROMACS has no libgmxapi ({exc})"
    return None


#: Engine name → adapter class; filled explicitly (no import-time discovery).
RUNNERS: dict[str, type[Runner]] = {}


def register_runner(name: str, cls: type[Runner]) -> None:
    """Add an adapter to :data:`RUNNERS`."""
    RUNNERS[name] = cls


register_runner("cli", CliRunner)
register_runner("gmxapi", GmxapiRunner)


def get_runner(engine: str = "auto", slots: ThreadSlots | None = None) -> Runner:
    """Return a runner: ``"cli"``, ``"gmxapi"`` or ``"auto"`` (gmxapi when usable, else the CLI).

    Raises
    ------
    EngineUnavailable
        ``engine`` names an adapter this machine cannot use, or an unknown adapter.
    """
    if engine == "auto":
        engine = "gmxapi" if gmxapi_unavailable_reason() is None else "cli"
    if engine not in RUNNERS:
        raise EngineUnavailable(f"unknown engine {engine!r}: choose one of auto, {', '.join(sorted(RUNNERS))}")
    return RUNNERS[engine](slots)
