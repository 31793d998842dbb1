"""Fault injection for the kill-anywhere suite: run ``mdbench study run``, kill its whole process tree at a
point found by polling the run directory, and measure what GROMACS really computed.

Kill points are conditions on the run (a record event, a log step, a live ``mdrun`` or ``packmol``), never
sleeps tuned to one machine. Step counts are read with GROMACS' own ``gmx check`` and the log, independently
of the engine's accounting they are compared with.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil  # ships with ipykernel, a dependency of the project

from _testseed import seed_for
from engine_helpers import GMX

#: The study seed of the suite (packing and velocities), drawn like every test seed (``MDBENCH_TEST_SEED``).
STUDY_SEED = seed_for("engine/micro-DE")
#: The micro DE study as a user types it (one thread, the CLI engine).
STUDY = ("study", "run", "--preset", "micro", "--systems", "DE", "--engine", "cli", "--threads", "1", "--quiet",
         "--seed", str(STUDY_SEED))


def study_argv(run: Path, *extra: str) -> list[str]:
    """``python -m mdbench.cli study run … --out RUN`` with ``extra`` options."""
    return [sys.executable, "-m", "mdbench.cli", *STUDY, "--out", str(run), *extra]


def tree(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and all its descendants (empty when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_tree(pid: int, sig: int, timeout_s: float = 180.0) -> list[str]:
    """Send ``sig`` to the process ``pid`` and every descendant at once; wait until all have exited.

    SIGKILL: the tree is frozen first (SIGSTOP, re-scanned until no new child appears), so no process reacts
    to another's death — the effect of a power cut. SIGTERM: every process gets it together, as on a shutdown;
    ``mdrun`` then writes a checkpoint and exits. Returns the names of the processes signalled.
    """
    procs = tree(pid)
    if sig == signal.SIGKILL:
        seen: set[int] = set()
        while {p.pid for p in procs} - seen:
            for p in procs:
                if p.pid not in seen:
                    seen.add(p.pid)
                    try:
                        p.send_signal(signal.SIGSTOP)
                    except psutil.NoSuchProcess:
                        pass
            procs = list({p.pid: p for p in procs + tree(pid)}.values())
    names = []
    for p in procs:
        try:
            names.append(p.name())
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    assert not alive, f"processes still alive {timeout_s} s after {signal.Signals(sig).name}: {alive}"
    return names


@dataclass
class KillPoint:
    """Where to kill: ``reached(run, procs)`` returns a description once the run is there, else None."""

    stage: str
    reached: Callable[[Path, list[psutil.Process]], str | None]
    label: str = ""


@dataclass
class Kill:
    """What one kill did."""

    stage: str
    signal: str
    at: str
    processes: list[str] = field(default_factory=list)


def run_and_kill(argv: list[str], run: Path, point: KillPoint, sig: int, timeout_s: float = 1800.0) -> Kill:
    """Start ``argv``, poll until ``point`` is reached, then kill the whole process tree with ``sig``.

    Fails if the command ends before the kill point is reached (the point was missed).
    """
    log = open(run.parent / f"{run.name}.driver.log", "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            procs = tree(proc.pid)
            at = point.reached(run, procs)
            if at is not None:
                break
            if proc.poll() is not None:
                raise AssertionError(f"{point.stage}: the command ended (exit {proc.returncode}) before the kill "
                                     f"point was reached; see {log.name}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{point.stage}: kill point not reached within {timeout_s:.0f} s")
            time.sleep(0.1)
        names = kill_tree(proc.pid, sig)  # reaps the driver too
    finally:
        if proc.poll() is None:  # a failed assertion above: leave nothing running
            kill_tree(proc.pid, signal.SIGKILL)
        log.close()
    return Kill(point.stage, signal.Signals(sig).name, at, sorted(set(names)))


def run_to_end(argv: list[str], run: Path, timeout_s: float = 3600.0) -> subprocess.CompletedProcess:
    """Run ``argv`` to its end (the resume), output appended to the driver log."""
    with open(run.parent / f"{run.name}.driver.log", "ab") as log:
        return subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)


# ----------------------------------------------------------------------------- kill points
def _events(run: Path) -> list[dict]:
    path = run / "run_record" / "events.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def _open_stage(run: Path, stage: str) -> bool:
    """True when ``stage`` has started (its latest stage_started is not followed by its end)."""
    state = False
    for e in _events(run):
        if (e.get("payload") or {}).get("stage") != stage:
            continue
        if e["type"] == "stage_started":
            state = True
        elif e["type"] in ("stage_finished", "stage_failed"):
            state = False
    return state


def named(procs: list[psutil.Process], word: str, *args: str) -> psutil.Process | None:
    for p in procs:
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if any(word in c for c in cmd[:2]) and all(a in cmd for a in args):
            return p
    return None


def log_step(log: Path) -> int | None:
    """Last step of the ``Step Time`` blocks of an mdrun log (the test's own reading)."""
    if not log.is_file():
        return None
    steps = re.findall(r"^\s+Step\s+Time\s*\n\s+(\d+)\s", log.read_text(errors="replace"), re.M)
    return int(steps[-1]) if steps else None


def in_stage(stage: str, system: str = "DE") -> KillPoint:
    """Inside a template's execution: started, its kernel alive, its executed notebook written."""
    name = stage.rsplit("/", 1)[-1]

    def reached(run: Path, procs: list[psutil.Process]) -> str | None:
        nb = run / "notebooks" / system / f"{name}.ipynb"
        if _open_stage(run, stage) and nb.is_file() and named(procs, "python", "-m", "ipykernel_launcher"):
            return f"{name} executing (kernel alive, notebook written)"
        return None
    return KillPoint(stage, reached)


def packmol_running() -> KillPoint:
    """Inside the setup: packmol is packing the box."""
    def reached(run: Path, procs: list[psutil.Process]) -> str | None:
        for p in procs:
            try:
                if p.name().startswith("packmol"):
                    return "packmol packing the box"
            except psutil.Error:
                pass
        return None
    return KillPoint("study/10_setup", reached)


def mdrun_at(folder: str, deffnm: str, fraction: float, target_step: int, stage: str) -> KillPoint:
    """Inside an MD segment: its mdrun alive and its log past ``fraction`` of ``target_step``."""
    def reached(run: Path, procs: list[psutil.Process]) -> str | None:
        if named(procs, "gmx", "mdrun", deffnm) is None:
            return None
        step = log_step(run / "cases" / "DE" / folder / f"{deffnm}.log")
        if step is not None and step >= fraction * target_step:
            return f"{deffnm}.log at step {step} of {target_step}"
        return None
    return KillPoint(stage, reached)


def minimizing() -> KillPoint:
    """Inside the minimisation: ``mdrun -deffnm em`` alive (a micro minimisation lasts a second or two, so
    the process itself, not a log line, marks the point)."""
    def reached(run: Path, procs: list[psutil.Process]) -> str | None:
        if named(procs, "gmx", "mdrun", "em") is None:
            return None
        log = run / "cases" / "DE" / "em" / "em.log"
        started = log.is_file() and "Started Steepest Descents" in log.read_text(errors="replace")
        return "mdrun -deffnm em running" + (", minimising" if started else ", starting")
    return KillPoint("study/20_minimize", reached)


# ----------------------------------------------------------------------------- what GROMACS computed
def gmx_check_last_time(path: Path) -> float | None:
    """Time of the last frame ``gmx check`` reads from an .edr (``-e``) or .xtc (``-f``) [ps]."""
    flag = "-e" if path.suffix == ".edr" else "-f"
    res = subprocess.run([GMX, "-quiet", "check", flag, str(path)], capture_output=True, text=True, timeout=300)
    found = re.findall(r"Last (?:energy )?frame\s+(?:read\s+)?(-?\d+)\s+time\s+([-\d.eE+]+)", res.stdout + res.stderr)
    return float(found[-1][1]) if found else None


def gmx_check_frames(xtc: Path) -> int | None:
    """Number of coordinate frames ``gmx check -f`` counts in a trajectory."""
    res = subprocess.run([GMX, "-quiet", "check", "-f", str(xtc)], capture_output=True, text=True, timeout=300)
    m = re.search(r"^Coords\s+(\d+)", res.stdout + res.stderr, re.M)
    return int(m.group(1)) if m else None


def steps_reached(seg: Path, deffnm: str, dt_ps: float) -> int:
    """Last step the files of a segment show, read by the log and by ``gmx check -e`` (not by the engine)."""
    found = [log_step(seg / f"{deffnm}.log") or 0]
    edr = seg / f"{deffnm}.edr"
    if edr.is_file() and edr.stat().st_size:
        t = gmx_check_last_time(edr)
        if t is not None:
            found.append(int(round(t / dt_ps)))
    return max(found)


def checkpoint_step(cpt: Path) -> int | None:
    """Step stored in a checkpoint, from ``gmx dump -cp`` (None when missing or unreadable)."""
    if not cpt.is_file():
        return None
    res = subprocess.run([GMX, "-quiet", "dump", "-cp", str(cpt)], capture_output=True, text=True, timeout=300)
    m = re.search(r"^step = (\d+)", res.stdout, re.M)
    return int(m.group(1)) if res.returncode == 0 and m else None


