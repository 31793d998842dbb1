"""One MD segment under budget and lineage: reserve → mdrun → charge, resumable from checkpoints.

A *segment* is one ``mdrun`` output set (``<deffnm>.tpr/.log/.edr/.xtc/.cpt``) in one directory, with a
target final step. :func:`run_segment` is idempotent:

* a segment already completed is not run again;
* an attempt left open (its process died) or interrupted (mdrun killed) is closed as ``interrupted``,
  charged with the steps its log shows it completed, and the segment resumes from ``<deffnm>.cpt``
  (``-cpi … -append``) as a ``continuation`` whose reservation covers only the remaining steps;
* each ledger row names its segment, the step it started from and the step mdrun reached (checkpoint, log,
  energy file), so it is charged exactly what it computed; a continuation's row names the steps of the
  killed attempt it computes again (checkpoint → kill), kept once in the trajectory
  (:mod:`mdbench.record.steps`, checked by ``mdbench record validate``);
* an unreadable checkpoint falls back to ``<deffnm>_prev.cpt``; when neither is usable the old output
  is moved to ``discarded/`` (each moved file re-pointed in the artifact inventory, see
  :meth:`~mdbench.record.RunRecord.set_aside`) and the segment restarts (relation ``restart``), with the
  reason recorded;
* checkpoints are written at the registered cadence (:mod:`mdbench.engine.cadence`), scaled to the
  attempt's length, so a kill loses at most about a tenth of a segment.

Every attempt is reserved in the run record *before* mdrun starts, so a
:class:`~mdbench.record.BudgetExceeded` refuses the segment before anything runs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mdbench.engine.cadence import CheckpointCadence, measured_speed, register_cadence
from mdbench.engine.recovery import set_aside_outputs
from mdbench.engine.runner import FOLLOW_THE_WORK, EngineError, Runner
from mdbench.record.atomic import atomic_write_text
from mdbench.record.steps import superseded_by

log = logging.getLogger(__name__)

_STEP_RE = re.compile(r"^\s+Step\s+Time\s*\n\s+(\d+)\s+[-+0-9.eE]+", re.M)
_CPT_RE = re.compile(r"Writing checkpoint, step (\d+)")


def log_last_step(log_path: str | Path) -> int | None:
    """Last MD step whose energies the log printed (``Step Time`` blocks), or ``None``."""
    path = Path(log_path)
    if not path.is_file():
        return None
    steps = [int(s) for s in _STEP_RE.findall(path.read_text(errors="replace"))]
    return max(steps) if steps else None


def edr_last_step(edr_path: str | Path, dt_ps: float, tinit_ps: float = 0.0) -> int | None:
    """Step of the last complete frame of an energy file, :math:`\\mathrm{round}((t - t_0)/\\Delta t)`.

    Energy frames are denser than log blocks, so after a crash this bounds the computed steps more
    tightly than the log. ``None`` if the file is missing or unreadable.
    """
    path = Path(edr_path)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        from mdbench.analysis.thermo import read_energy_file  # noqa: PLC0415

        times = read_energy_file(path).time_ps
    except Exception:  # a torn last frame after SIGKILL: fall back to the log  # noqa: BLE001
        return None
    if times is None or len(times) == 0:
        return None
    return int(round((float(times[-1]) - tinit_ps) / dt_ps))


def _steps_done(runner: Runner, seg_dir: Path, deffnm: str, dt_ps: float) -> tuple[int, dict]:
    """Last step a segment's files show it reached: max over checkpoint, log and energy file."""
    found = {"checkpoint": checkpoint_step(runner, seg_dir / f"{deffnm}.cpt"),
             "log": log_last_step(seg_dir / f"{deffnm}.log"),
             "edr": edr_last_step(seg_dir / f"{deffnm}.edr", dt_ps)}
    return max(v for v in (*found.values(), 0) if v is not None), found


def checkpoint_step(runner: Runner, cpt: str | Path) -> int | None:
    """Step stored in a checkpoint (``gmx dump -cp``); ``None`` if the file is missing or unreadable."""
    cpt = Path(cpt)
    if not cpt.is_file() or cpt.stat().st_size == 0:
        return None
    res = runner.tool(["dump", "-cp", cpt.name], cwd=cpt.parent, name=cpt.stem + ".dump")
    text = Path(res.console_path).read_text(errors="replace")
    # the console log accumulates; read the block of the last command only
    text = text[text.rfind("$ "):]
    m = re.search(r"^step = (\d+)", text, re.M)
    if res.returncode != 0 or m is None:
        return None
    return int(m.group(1))


@dataclass
class SegmentResult:
    """Outcome of :func:`run_segment`.

    Attributes
    ----------
    status : str
        ``completed``, ``skipped`` (already complete), ``interrupted`` or ``failed``.
    attempt_id : str
        The last attempt of the segment.
    final_step : int
        Last step reached (from the checkpoint or log).
    target_step : int
    wall_s : float
        mdrun wall time of this call [s].
    reason : str
    """

    status: str
    attempt_id: str
    final_step: int
    target_step: int
    wall_s: float = 0.0
    reason: str = ""
    files: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("completed", "skipped")


def _state_path(seg_dir: Path, deffnm: str) -> Path:
    return seg_dir / f"{deffnm}.segment.json"


def _load_state(seg_dir: Path, deffnm: str) -> dict:
    path = _state_path(seg_dir, deffnm)
    if path.is_file():
        return json.loads(path.read_text())
    return {"deffnm": deffnm, "attempts": []}


def _save_state(seg_dir: Path, deffnm: str, state: dict) -> None:
    atomic_write_text(_state_path(seg_dir, deffnm), json.dumps(state, indent=2))


#: Extensions of the files ``mdrun -deffnm`` writes.
_MDRUN_OUTPUTS = ("log", "edr", "xtc", "cpt", "gro", "trr")


def segment_files(seg_dir: Path, deffnm: str) -> dict[str, str]:
    """Existing output files of a segment, by extension."""
    out = {}
    for ext in ("tpr", "log", "edr", "xtc", "cpt", "gro"):
        p = seg_dir / f"{deffnm}.{ext}"
        if p.is_file():
            out[ext] = str(p)
    return out


def output_names(deffnm: str) -> list[str]:
    """What ``mdrun -deffnm`` writes in a segment (not its tpr, not the console logs of our commands)."""
    return [f"{deffnm}.{ext}" for ext in _MDRUN_OUTPUTS] + [f"{deffnm}_prev.cpt"]


def _rel(rec, path: str | Path) -> str:
    """``path`` relative to the run directory when inside it, so a run directory can be moved."""
    try:
        return str(Path(path).resolve().relative_to(Path(rec.run_dir).resolve()))
    except ValueError:
        return str(path)


def _ledger_paths(rec, files: dict[str, str]) -> dict[str, str]:
    """Segment files as paths relative to the run directory, so a run directory can be moved."""
    return {key: _rel(rec, path) for key, path in files.items()}


def _wait_for_orphan(pid: int | None, deffnm: str, seg_dir: Path, timeout_s: float = 120.0) -> None:
    """Wait until the mdrun ``pid`` of this segment has exited (it checkpoints on the SIGTERM it got).

    Raises
    ------
    EngineError
        It still runs after ``timeout_s``; a second mdrun must not write the same files.
    """
    if not pid:
        return
    deadline = time.monotonic() + timeout_s
    while _is_mdrun_of(pid, deffnm, seg_dir):
        if time.monotonic() > deadline:
            raise EngineError(f"mdrun (pid {pid}) of the interrupted segment {seg_dir / deffnm} is still running; "
                              f"stop it (kill {pid}) or let it finish, then rerun the stage")
        time.sleep(0.2)


def _is_mdrun_of(pid: int, deffnm: str, seg_dir: Path) -> bool:
    """True when process ``pid`` is alive and is ``mdrun -deffnm deffnm`` running in ``seg_dir`` (Linux /proc)."""
    proc = Path("/proc") / str(pid)
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
        cwd = os.readlink(proc / "cwd")
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return (state != "Z" and b"mdrun" in argv and deffnm.encode() in argv
            and Path(cwd).resolve() == seg_dir.resolve())


def run_segment(rec, runner: Runner, case: str, tpr: str | Path, deffnm: str, *, target_step: int,
                dt_ps: float, stage: str, kind: str, parent: str | None, relation: str | None,
                threads: int = 1, cpt_min: float | None = None, cadence: CheckpointCadence | None = None,
                on_start: Callable | None = None) -> SegmentResult:
    """Run (or resume) the segment ``deffnm`` from ``tpr`` until step ``target_step``.

    Parameters
    ----------
    rec : mdbench.record.RunRecord
    runner : Runner
    case : str
        Case (system) name, charged in the ledger.
    tpr : path
        Run input; its directory holds the outputs.
    deffnm : str
        Output file stem.
    target_step : int
        Final step of the segment (the tpr's ``init-step + nsteps``).
    dt_ps : float
        Time step [ps].
    stage, kind : str
        Ledger labels (e.g. ``"equilibration"``, ``"npt"``).
    parent, relation : str or None
        Lineage of the first attempt (later attempts of the same segment name their predecessor).
    threads : int
        Threads for mdrun (held against the machine-wide cap); ``0``: threads follow the work (slices of one
        attempt, :func:`_run_slices`; each slice's threads in the ledger row's ``resources.slices``).
    cpt_min : float, optional
        Checkpoint wall interval [min]; by default the registered ``cadence`` sets it per attempt.
    cadence : CheckpointCadence, optional
        The checkpoint cadence (default: :class:`~mdbench.engine.cadence.CheckpointCadence` defaults).

    Raises
    ------
    mdbench.record.BudgetExceeded
        The reservation would exceed the case or study budget; nothing was run.
    """
    tpr = Path(tpr)
    seg_dir = tpr.parent
    state = _load_state(seg_dir, deffnm)
    last = state["attempts"][-1] if state["attempts"] else None
    cpi: Path | None = None
    start_step = 0
    if last is not None:
        follow = _after(rec, runner, seg_dir, deffnm, dt_ps, last, state.get("target_step") == target_step)
        if follow is None:
            return SegmentResult("skipped", last["id"], target_step, target_step,
                                 reason="segment already completed", files=segment_files(seg_dir, deffnm))
        cpi, start_step = _resume_point(rec, runner, case, seg_dir, deffnm, last["id"])
        parent, relation = last["id"], (follow if cpi is not None else "restart")
    planned = max(0, target_step - start_step)
    cpt_min, cpt_rule = _checkpoint_interval(rec, case, planned, cpt_min, cadence)
    attempt_id = rec.reserve(case, planned_steps=planned, dt_ps=dt_ps, kind=kind, stage=stage,
                             parent=parent, relation=relation, segment=_rel(rec, seg_dir / deffnm),
                             start_step=start_step, target_step=target_step,
                             supersedes=_supersedes(rec, state, start_step))
    state["target_step"] = target_step
    entry = {"id": attempt_id, "start_step": start_step, "cpi": cpi.name if cpi else None,
             "relation": relation, "parent": parent, "checkpoint_interval_min": cpt_min}
    state["attempts"].append(entry)
    _save_state(seg_dir, deffnm, state)

    def started(proc) -> None:  # the pid lets a later resume wait for an mdrun its dead driver left running
        entry["pid"] = proc.pid
        _save_state(seg_dir, deffnm, state)
        if on_start is not None:
            on_start(proc)

    try:
        res, slices = _run_slices(rec, runner, case, tpr, deffnm, attempt_id, cpi, start_step, target_step,
                                  dt_ps=dt_ps, threads=threads, cpt_min=cpt_min, cpt_rule=cpt_rule, on_start=started)
    except BaseException as exc:
        done, found = _steps_done(runner, seg_dir, deffnm, dt_ps)
        rec.complete(attempt_id, completed_steps=max(0, done - start_step), status="interrupted",
                     end_step=max(done, start_step), end_step_evidence=found,
                     reason=f"mdrun call aborted in the driver ({type(exc).__name__}: {exc})")
        raise
    return _close_attempt(rec, runner, _joined(res, slices), attempt_id, seg_dir, deffnm, dt_ps, start_step,
                          target_step)


def _run_slices(rec, runner: Runner, case: str, tpr: Path, deffnm: str, attempt_id: str, cpi: Path | None,
                start_step: int, target_step: int, *, dt_ps: float, threads: int, cpt_min: float, cpt_rule: str,
                on_start: Callable) -> tuple:
    """Run one attempt as mdrun slices: one slice, unless threads follow the work and the share changes —
    then each slice continues from the last one's checkpoint with the new thread count. Returns the last
    mdrun's result and the slices (start and end step, threads, wall time), each also an ``mdrun_finished``."""
    seg_dir = tpr.parent
    slices: list[dict] = []
    while True:
        slice_start = start_step if not slices else slices[-1]["end_step"]
        res = runner.mdrun(tpr, deffnm, threads=threads, cpi=cpi.name if cpi else None, cpt_min=cpt_min,
                           on_start=on_start, rebalance=threads == FOLLOW_THE_WORK)
        rebalanced = res.extra.get("rebalance")
        done = _steps_done(runner, seg_dir, deffnm, dt_ps)[0] if rebalanced else None
        slices.append({"start_step": slice_start, "end_step": done, "threads": res.threads,
                       "wall_s": round(res.wall_s, 3)})
        rec.append_event("mdrun_finished", {"case": case, "attempt_id": attempt_id, **_mdrun_summary(rec, res),
                                             "slice": len(slices), "checkpoint_interval_min": cpt_min,
                                             "checkpoint_rule": cpt_rule,
                                             **({"rebalance_to_threads": rebalanced} if rebalanced else {})})
        if not rebalanced or done is None or done >= target_step or done <= slice_start:
            if len(slices) > 1 and slices[-1]["end_step"] is None:  # the ledger's resources.slices: every end
                slices[-1]["end_step"] = _steps_done(runner, seg_dir, deffnm, dt_ps)[0]
            return res, slices
        cpi = seg_dir / f"{deffnm}.cpt"  # continue the same attempt with the new share


def _joined(last, slices: list[dict]):
    """The attempt's result over all its slices: the last mdrun's, with the wall time of all and, in the
    ledger's ``resources``, each slice's steps and threads. A slice stopped for a re-balance exits non-zero
    (GROMACS after SIGTERM); the attempt is judged by the last slice and the steps its files show."""
    if len(slices) == 1:
        return last
    last.wall_s = sum(s["wall_s"] for s in slices)
    resources = dict(last.extra.get("resources") or {})
    resources["cpu_hours"] = round(sum(s["wall_s"] * s["threads"] for s in slices) / 3600.0, 6)
    resources["threads"] = max(s["threads"] for s in slices)
    resources["slices"] = slices
    last.extra["resources"] = resources
    if last.extra.get("rebalance"):  # the last slice itself was stopped after reaching the target
        last.returncode = 0
    return last



def _after(rec, runner: Runner, seg_dir: Path, deffnm: str, dt_ps: float, last: dict,
           same_target: bool) -> str | None:
    """How the next attempt follows the segment's ``last`` one: None when that one completed the same target
    (nothing to run), ``extension`` when it completed and the segment goes further, else ``continuation`` (an
    attempt left ``reserved`` by a dead process is closed first, :func:`_close_open_attempt`)."""
    status = {a["id"]: a for a in rec.attempts()}.get(last["id"], {}).get("status")
    if status == "completed" and same_target:
        return None
    if status == "reserved":
        _close_open_attempt(rec, runner, seg_dir, deffnm, dt_ps, last)
    return "extension" if status == "completed" else "continuation"


def _mdrun_summary(rec, res) -> dict:
    """What the ``mdrun_finished`` event records of one mdrun call (its console path relative to the run)."""
    return {"argv": res.argv, "cwd": res.cwd, "returncode": res.returncode, "wall_s": res.wall_s,
            "threads": res.threads, "engine": res.engine, "console": _rel(rec, res.console_path)}


def _checkpoint_interval(rec, case: str, planned: int, cpt_min: float | None,
                         cadence: CheckpointCadence | None) -> tuple[float, str]:
    """(checkpoint interval [min], its rule): ``cpt_min`` when given (``explicit``), else the registered cadence
    scaled to the ``planned`` steps of the attempt and the case's measured speed."""
    if cpt_min is not None:
        return cpt_min, "explicit"
    cadence = cadence or CheckpointCadence()
    cpt_rule = register_cadence(rec, cadence)
    return cadence.interval_min(planned, measured_speed(rec, case)), cpt_rule


def _close_attempt(rec, runner: Runner, res, attempt_id: str, seg_dir: Path, deffnm: str, dt_ps: float,
                   start_step: int, target_step: int) -> SegmentResult:
    """Close the attempt after its mdrun returned: charged the steps its files show it reached, ``completed``
    at ``target_step``, else interrupted or failed (:func:`_unfinished_outcome`)."""
    done, found = _steps_done(runner, seg_dir, deffnm, dt_ps)
    steps = max(0, done - start_step)
    reached = {"end_step": start_step + steps, "end_step_evidence": found}
    files = segment_files(seg_dir, deffnm)
    if res.ok and done >= target_step:
        rec.complete(attempt_id, completed_steps=steps, status="completed", artifacts=_ledger_paths(rec, files),
                     reason=f"reached step {done}", resources=res.extra.get("resources"), **reached)
        return SegmentResult("completed", attempt_id, done, target_step, res.wall_s, f"reached step {done}", files)
    status, reason = _unfinished_outcome(res, done, found, target_step, seg_dir / f"{deffnm}.log", start_step)
    rec.complete(attempt_id, completed_steps=steps, status=status, artifacts=_ledger_paths(rec, files), reason=reason,
                 resources=res.extra.get("resources"), **reached)
    return SegmentResult(status, attempt_id, done, target_step, res.wall_s, reason, files)


def _close_open_attempt(rec, runner: Runner, seg_dir: Path, deffnm: str, dt_ps: float, last: dict) -> None:
    """Close the attempt ``last`` left ``reserved``: the process running it died without closing it. Charge what
    its files show, once its mdrun (told to stop when its driver died) has written its last checkpoint and exited."""
    _wait_for_orphan(last.get("pid"), deffnm, seg_dir)
    done, found = _steps_done(runner, seg_dir, deffnm, dt_ps)
    steps = max(0, done - last["start_step"])
    rec.complete(last["id"], completed_steps=steps, status="interrupted",
                 end_step=last["start_step"] + steps, end_step_evidence=found,
                 reason=f"attempt left open (its process ended without closing it); files show step "
                        f"{done} ({found}); charged {steps} steps")


def _resume_point(rec, runner: Runner, case: str, seg_dir: Path, deffnm: str,
                  last_id: str) -> tuple[Path | None, int]:
    """(checkpoint to resume from, its step) for the next attempt of a segment that has run before: its
    ``.cpt``, else its ``_prev.cpt`` (a ``checkpoint_fallback`` event), else (None, 0) after moving the old
    outputs aside (a ``segment_restart`` event: the segment restarts from its tpr)."""
    cpt = seg_dir / f"{deffnm}.cpt"
    prev_cpt = seg_dir / f"{deffnm}_prev.cpt"
    step = checkpoint_step(runner, cpt)
    if step is not None:
        return cpt, step
    pstep = checkpoint_step(runner, prev_cpt)
    if pstep is not None:
        rec.append_event("checkpoint_fallback", {
            "case": case, "segment": str(seg_dir / deffnm), "unreadable": str(cpt),
            "used": str(prev_cpt), "step": pstep,
            "reason": f"{cpt.name} missing or unreadable (gmx dump -cp failed); resuming from "
                      f"{prev_cpt.name} at step {pstep}"})
        return prev_cpt, pstep
    reason = "no readable checkpoint (neither .cpt nor _prev.cpt); restarting the segment from its tpr"
    moved = set_aside_outputs(rec, seg_dir, output_names(deffnm), deffnm, reason, case=case, attempt_id=last_id)
    rec.append_event("segment_restart", {
        "case": case, "segment": _rel(rec, seg_dir / deffnm), "moved_to": moved.get("payload", {}).get(
            "dest"), "attempt_id": last_id, "reason": reason})
    return None, 0


def _unfinished_outcome(res, done: int, found: dict, target_step: int, log_path: Path,
                        start_step: int) -> tuple[str, str]:
    """(status, reason) of an mdrun that did not reach ``target_step``: ``interrupted`` when it was killed by a
    signal, stopped on one (its log says so) or exited early without an error; ``failed`` otherwise."""
    cstep, lstep = found["checkpoint"], found["log"]
    if res.returncode < 0 or res.returncode in (128 + signal.SIGTERM, 128 + signal.SIGKILL, 128 + signal.SIGINT):
        sig = -res.returncode if res.returncode < 0 else res.returncode - 128
        return "interrupted", (f"mdrun killed by signal {signal.Signals(sig).name} at step ~{done} (log {lstep}, "
                               f"energy file {found['edr']}, checkpoint {cstep}); rerun the stage to resume from "
                               f"the checkpoint")
    received = _received_signal(log_path, start_step)
    if received:
        return "interrupted", (f"mdrun stopped on a {received} signal at step {done} and wrote its "
                               f"checkpoint (step {cstep}); rerun the stage to continue")
    if res.ok:
        return "interrupted", f"mdrun exited at step {done} before the target {target_step} without an error"
    return "failed", f"mdrun exited with status {res.returncode} at step {done}; see {res.console_path}"

def _supersedes(rec, state: dict, start_step: int) -> list[dict]:
    """The steps of the segment's earlier attempts that an attempt starting at ``start_step`` computes again
    (their start steps from the segment state, for ledger rows written before rows carried them)."""
    ledger = {a["id"]: a for a in rec.attempts()}
    prior = [dict(ledger[e["id"]], start_step=e["start_step"]) for e in state["attempts"] if e["id"] in ledger]
    return superseded_by(prior, start_step)


def segment_history(rec, seg_dir: Path, deffnm: str) -> list[dict]:
    """The attempts of one segment in order: id, ledger status, relation, start step, steps charged."""
    ledger = {a["id"]: a for a in rec.attempts()}
    out = []
    for entry in _load_state(Path(seg_dir), deffnm)["attempts"]:
        row = ledger.get(entry["id"], {})
        out.append({"attempt_id": entry["id"], "status": row.get("status"), "relation": entry.get("relation"),
                    "start_step": entry.get("start_step"), "completed_steps": row.get("completed_steps"),
                    "end_step": row.get("end_step"),
                    "recomputed_steps": sum(s.get("steps", 0) for s in row.get("supersedes") or []),
                    "checkpoint_interval_min": entry.get("checkpoint_interval_min")})
    return out


def recovery_note(history: list[dict]) -> str | None:
    """How a segment recovered from interruptions or failures, in one line (None when none occurred)."""
    steps = []
    for before, after in zip(history, history[1:]):
        if before["status"] == "completed":
            continue  # an extension of a finished segment is no recovery
        how = ("restart from step 0 (no readable checkpoint)" if after["relation"] == "restart" else
               f"{after['relation']} from checkpoint step {after['start_step']}")
        if after.get("recomputed_steps"):
            how += f", {after['recomputed_steps']} step(s) computed again"
        steps.append(f"{before['attempt_id']} {before['status']} ({before['completed_steps']} steps charged) → "
                     f"{after['attempt_id']} {how}")
    return f"recovered: {'; '.join(steps)}" if steps else None


def _received_signal(log_path: Path, start_step: int) -> str | None:
    """Name of the signal (TERM, INT, …) GROMACS says it received in this attempt's part of the log."""
    if not log_path.is_file():
        return None
    text = log_path.read_text(errors="replace")
    text = text[text.rfind("Started mdrun"):]  # only the latest run appended to this log
    found = re.findall(r"Received the (\w+) signal", text)
    return found[-1] if found else None
