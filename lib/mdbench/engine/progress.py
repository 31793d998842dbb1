"""Progress of a study run per system: ns done / ns planned and the current stage, read from the record.

The numbers come from the run record's ledger (charged ns of closed attempts) plus, for an attempt still
running, the steps its ``mdrun`` log has printed since the attempt started — so a watcher in another
process (the CLI) sees the same progress as the workers, without any shared memory.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from mdbench.engine.segments import log_last_step

_SEGMENT_OF_KIND = {"nvt": ("equil", "nvt"), "npt": ("equil", "npt"), "production": ("prod", "prod")}


@dataclass
class SystemProgress:
    """Progress of one system: ``done_ns`` of ``planned_ns`` [ns], current ``stage`` and its state."""

    system: str
    done_ns: float
    planned_ns: float
    stage: str
    state: str


def planned_ns(preset: dict) -> float:
    """ns a preset plans per system before any extension: NVT + NPT + production [ns]."""
    block = preset.get("protocol") or {}
    return sum(float(block.get(k, 0.0)) for k in ("equilibration_nvt_ps", "equilibration_npt_ps",
                                                   "production_ps")) / 1000.0


def system_progress(run_dir: str | Path, system: str, planned: float) -> SystemProgress:
    """Read the record of ``run_dir`` and return the progress of ``system``."""
    from mdbench.record import RunRecord  # noqa: PLC0415

    run_dir = Path(run_dir)
    if not (run_dir / "run_record").is_dir():
        return SystemProgress(system, 0.0, planned, "setup", "not_reached")
    rec = RunRecord(run_dir)
    done = 0.0
    for a in rec.attempts():
        if a.get("case") != system:
            continue
        done += float(a.get("ns_charged", 0.0))
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
            done += max(0, step - start) * float(a["dt_ps"]) / 1000.0
    states = rec.stage_states().get(system, {})
    stage, state = "setup", "not_reached"
    for name in ("setup", "minimization", "equilibration", "production"):
        if name in states:
            stage, state = name, states[name]["state"]
    return SystemProgress(system, done, planned, stage, state)


class ProgressWatcher:
    """Background thread drawing one tqdm bar per system (ns done / ns planned, stage: state).

    Parameters
    ----------
    run_dir : path
    systems : list of str
    planned : float
        ns planned per system.
    verbose : bool
        No bars when False.
    interval_s : float
        Polling interval [s].
    """

    def __init__(self, run_dir: str | Path, systems: list[str], planned: float, verbose: bool = True,
                 interval_s: float = 2.0):
        self.run_dir, self.systems, self.planned = Path(run_dir), systems, planned
        self.verbose, self.interval_s = verbose, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bars: dict = {}

    def _draw(self) -> None:
        for s in self.systems:
            p = system_progress(self.run_dir, s, self.planned)
            bar = self._bars[s]
            bar.total = max(self.planned, p.done_ns)
            bar.n = round(p.done_ns, 4)
            bar.set_postfix_str(f"{p.stage}: {p.state}", refresh=False)
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

            for i, s in enumerate(self.systems):
                self._bars[s] = tqdm(total=self.planned, desc=f"{s:5s}", unit="ns", position=i + 1,
                                     bar_format="{desc} {n:.4f}/{total:.4f} ns |{bar}| {postfix}")
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
