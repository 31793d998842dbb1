"""Progress of a study run per system: ns done / ns planned and the current stage, read from the record.

The numbers come from the run record's ledger (charged ns of closed attempts) plus, for an attempt still
running, the steps its ``mdrun`` log has printed since the attempt started — so a watcher in another
process (the CLI) sees the same progress as the workers, without any shared memory.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from mdbench.engine.estimate import simulate
from mdbench.engine.segments import log_last_step

_SEGMENT_OF_KIND = {"nvt": ("equil", "nvt"), "npt": ("equil", "npt"), "production": ("prod", "prod")}


@dataclass
class SystemProgress:
    """Progress of one system.

    Attributes
    ----------
    done_ns : float
        MD computed so far [ns] (charged ns of closed attempts + steps of running ones).
    planned_ns : float
        The preset's plan plus every gate extension reserved so far [ns]; never below ``done_ns``.
    stage, state : str
        Last stage with a recorded state and that state (the record's ``stage_states.json``).
    status : str
        ``queued`` (no stage started yet), ``running <stage>``, ``failed at <stage>`` or ``done``.
    """

    system: str
    done_ns: float
    planned_ns: float
    stage: str
    state: str
    status: str = "queued"


def planned_ns(preset: dict) -> float:
    """ns a preset plans per system before any extension: NVT + NPT + production [ns]."""
    block = preset.get("protocol") or {}
    return sum(float(block.get(k, 0.0)) for k in ("equilibration_nvt_ps", "equilibration_npt_ps",
                                                   "production_ps")) / 1000.0


def _short(stage: str) -> str:
    """``study/30_equilibrate`` → ``equilibrate``."""
    name = str(stage).rsplit("/", 1)[-1]
    head, _, tail = name.partition("_")
    return tail if head.isdigit() and tail else name


def _statuses(rec, systems: list[str], last_stage: dict[str, str]) -> dict[str, str]:
    """queued / running <stage> / failed at <stage> / done per system, from the stage events."""
    status = {s: "queued" for s in systems}
    for event in rec.events():
        payload = event.get("payload") or {}
        system, stage = payload.get("system"), payload.get("stage")
        if system not in status or not stage:
            continue
        kind = event.get("type")
        if kind == "stage_started":
            status[system] = f"running {_short(stage)}"
        elif kind == "stage_failed":
            status[system] = f"failed at {_short(stage)}"
        elif kind == "stage_finished":
            status[system] = "done" if stage == last_stage.get(system) else f"finished {_short(stage)}"
    return status


def system_progress(run_dir: str | Path, system: str, planned: float, *, last_stage: str | None = None
                    ) -> SystemProgress:
    """Read the record of ``run_dir`` and return the progress of ``system``.

    ``last_stage`` (e.g. ``study/40_production``) is the stage after which the system counts as ``done``.
    """
    return all_progress(run_dir, [system], planned, last_stage=last_stage)[system]


def all_progress(run_dir: str | Path, systems: list[str], planned: float, *, last_stage: str | None = None
                 ) -> dict[str, SystemProgress]:
    """:class:`SystemProgress` of every system in one pass over the record."""
    from mdbench.record import RunRecord  # noqa: PLC0415

    run_dir = Path(run_dir)
    if not (run_dir / "run_record").is_dir():
        return {s: SystemProgress(s, 0.0, planned, "setup", "not_reached", "queued") for s in systems}
    rec = RunRecord(run_dir)
    done = {s: 0.0 for s in systems}
    extra = {s: 0.0 for s in systems}
    for a in rec.attempts():
        system = a.get("case")
        if system not in done:
            continue
        done[system] += float(a.get("ns_charged", 0.0))
        if a.get("relation") == "extension":  # a gate extension adds to the plan
            extra[system] += int(a.get("planned_steps", 0)) * float(a.get("dt_ps", 0.0)) / 1000.0
        if a.get("status") == "reserved" and a.get("kind") in _SEGMENT_OF_KIND:
            sub, stem = _SEGMENT_OF_KIND[a["kind"]]
            seg = run_dir / "cases" / system / sub
            start = 0
            state_file = seg / f"{stem}.segment.json"
            if state_file.is_file():
                for item in json.loads(state_file.read_text()).get("attempts", []):
                    if item["id"] == a["id"]:
                        start = int(item.get("start_step", 0))
            step = log_last_step(seg / f"{stem}.log") or start
            done[system] += max(0, step - start) * float(a["dt_ps"]) / 1000.0
    all_states = rec.stage_states()
    statuses = _statuses(rec, systems, {s: last_stage for s in systems} if last_stage else {})
    out = {}
    for s in systems:
        states = all_states.get(s, {})
        stage, state = "setup", "not_reached"
        for name in ("setup", "minimization", "equilibration", "production"):
            if name in states:
                stage, state = name, states[name]["state"]
        out[s] = SystemProgress(s, done[s], max(planned + extra[s], done[s]), stage, state, statuses[s])
    return out


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 86400:
        return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Rate:
    """ns/day measured over this session's MD and the ETA of what remains.

    Parameters
    ----------
    min_elapsed_s : float
        No rate before this much wall time and some MD has passed [s].
    """

    def __init__(self, min_elapsed_s: float = 20.0, clock=time.monotonic):
        self.clock, self.min_elapsed_s = clock, min_elapsed_s
        self.t0: float | None = None
        self.ns0 = 0.0

    def update(self, done_ns: float) -> float | None:
        """ns/day since the first call, or None while too little is measured."""
        now = self.clock()
        if self.t0 is None:
            self.t0, self.ns0 = now, done_ns
            return None
        elapsed, gained = now - self.t0, done_ns - self.ns0
        if elapsed < self.min_elapsed_s or gained <= 0:
            return None
        return gained / elapsed * 86400.0

    @staticmethod
    def eta_s(remaining_ns: float, ns_per_day: float | None) -> float | None:
        """Seconds to compute ``remaining_ns`` at ``ns_per_day`` (None when unknown)."""
        if not ns_per_day or ns_per_day <= 0:
            return None
        return max(0.0, remaining_ns) / ns_per_day * 86400.0


def overall_line(progress: dict[str, SystemProgress], ns_per_day: float | None, plan=None
                 ) -> tuple[float, float, str]:
    """(done ns, total ns, postfix) of the overall bar: every system's MD, extensions included.

    With the study's ``plan`` (:class:`mdbench.engine.estimate.StudyPlan`) the ETA is the plan's schedule of
    what remains (:func:`plan_eta_s`): it knows that a case's cores go to the others when it finishes, so it
    stays honest when threads change; without one it is the remaining ns at the measured ns/day."""
    done = sum(p.done_ns for p in progress.values())
    total = sum(p.planned_ns for p in progress.values())
    eta = plan_eta_s(plan, progress, ns_per_day) if plan is not None else None
    if eta is None:
        eta = Rate.eta_s(total - done, ns_per_day)
    rate = f"{ns_per_day:.2f} ns/day" if ns_per_day else "measuring ns/day"
    return done, total, f"{rate}, ETA {_duration(eta) if eta is not None else '—'}"


def plan_eta_s(plan, progress: dict[str, SystemProgress], ns_per_day: float | None) -> float | None:
    """Seconds left by the plan's model: each case's remaining MD (planned − done, extensions included) and
    its analysis, scheduled by the plan's policy, at the plan's speeds scaled by the measured ÷ planned
    ns/day of the whole study (no scaling before a tenth of the MD is done: until then the measured rate is
    mostly the setup's)."""
    planned_rate = sum(c.md_ns for c in plan.costs) / max(plan.schedule.md_end_s, 1e-9) * 86400.0
    done = sum(p.done_ns for p in progress.values()) / max(sum(p.planned_ns for p in progress.values()), 1e-12)
    # the measured rate includes the setup before any MD: trust it once a tenth of the MD is done
    scale = (min(4.0, max(0.25, ns_per_day / planned_rate)) if ns_per_day and planned_rate > 0 and done >= 0.1
             else 1.0)
    left = []
    for cost in plan.costs:
        p = progress.get(cost.case)
        if p is None or p.status == "done":
            continue
        steps = max(0.0, p.planned_ns - p.done_ns) * 1000.0 / cost.dt_ps
        started = p.done_ns > 0 or not (p.status == "queued" or "setup" in p.status or "minimize" in p.status)
        left.append(replace(cost, md_steps={"production": steps} if p.done_ns > 0 else cost.md_steps,
                            steps_per_s={k: float(v) * scale for k, v in cost.steps_per_s.items()},
                            setup_s=0.0 if started else cost.setup_s, minimize_s=0.0 if started else cost.minimize_s))
    if not left:
        return 0.0
    return simulate(left, plan.cap, policy=plan.policy, analysis=plan.analysis).total_s


class ProgressWatcher:
    """Background thread drawing the study's progress from the record: one overall bar in ns of MD (the
    plan plus every reserved extension) with an ETA from the measured ns/day, and one line per system
    (ns done / ns planned, queued | running <stage> | failed at <stage> | done).

    Parameters
    ----------
    run_dir : path
    systems : list of str
    planned : float
        ns planned per system before extensions.
    verbose : bool
        No bars when False.
    interval_s : float
        Polling interval [s].
    last_stage : str or None
        The stage after which a system is ``done``.
    plan : mdbench.engine.estimate.StudyPlan, optional
        The study's plan; its schedule gives the ETA (:func:`plan_eta_s`).
    """

    def __init__(self, run_dir: str | Path, systems: list[str], planned: float, verbose: bool = True,
                 interval_s: float = 2.0, last_stage: str | None = None, plan=None):
        self.run_dir, self.systems, self.planned, self.plan = Path(run_dir), systems, planned, plan
        self.verbose, self.interval_s, self.last_stage = verbose, interval_s, last_stage
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bars: dict = {}
        self._rate = Rate()

    def _draw(self) -> None:
        progress = all_progress(self.run_dir, self.systems, self.planned, last_stage=self.last_stage)
        done, total, postfix = overall_line(progress, self._rate.update(sum(p.done_ns for p in progress.values())),
                                            self.plan)
        self._set(self._bars["__all__"], done, total, postfix)
        for s in self.systems:
            p = progress[s]
            self._set(self._bars[s], p.done_ns, p.planned_ns, p.status)

    @staticmethod
    def _set(bar, n: float, total: float, postfix: str) -> None:
        bar.total = max(total, n, 1e-9)  # never n > total: no clamping, no bar past 100 %
        bar.n = round(min(n, bar.total), 4)
        bar.set_postfix_str(postfix, refresh=False)
        bar.refresh()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._draw()
            except (OSError, ValueError, KeyError):  # a file being replaced; next poll reads it
                continue

    def __enter__(self) -> "ProgressWatcher":
        if self.verbose:
            from tqdm.auto import tqdm  # noqa: PLC0415

            fmt = "{desc} {n:.3f}/{total:.3f} ns |{bar}| {postfix}"
            total = self.planned * len(self.systems)
            self._bars["__all__"] = tqdm(total=total, desc="all MD", unit="ns", position=0, bar_format=fmt)
            for i, s in enumerate(self.systems):
                self._bars[s] = tqdm(total=self.planned, desc=f"{s:6s}", unit="ns", position=i + 1, bar_format=fmt)
            try:
                self._draw()
            except (OSError, ValueError, KeyError):
                pass
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            try:
                self._draw()
            except (OSError, ValueError, KeyError):
                pass
            for bar in self._bars.values():
                bar.close()
