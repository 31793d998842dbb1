"""How long a study will take on this machine: ns per case, the schedule of the thread policy, the wall time.

:func:`estimate_study` is what ``mdbench study run --dry-run`` (and the first line of ``make demo``) prints.
Per case it needs the MD speed at each thread count and the cost of the work around the MD:

* **Speeds** come from this machine's history (``$MDBENCH_CACHE_DIR/md_speed.jsonl``, default
  ``~/.cache/mdbench``): the steps/s of every mdrun slice of earlier runs of the same preset and case, on the
  same CPU model and GROMACS version (:func:`record_run_history`, called after each ``study run``). Where there is
  none, a **short benchmark of the case's own system** measures them: the setup and minimisation stages in a
  scratch folder, then ``mdrun -nsteps`` :data:`BENCH_STEPS` of the case's NVT input at one thread (the cases
  side by side, as the study runs them, none alone) and :data:`BENCH_STEPS_CAP` at the thread cap (one at a
  time) (:func:`benchmark_cases`), scaled to the density the NPT and production will run at
  (:func:`density_speed_factor`: the packed box is ~20 % less dense); the
  result joins the history.
* **Setup and minimisation** wall times come from the same benchmark; **analysis** from
  :data:`ANALYSIS_S_PER_STAGE` plus :data:`ANALYSIS_S_PER_FRAME_ATOM` × frames × atoms (measured on the tiny demo:
  ~60 s a case for 401 frames of ~2,000 atoms); each MD stage adds its :data:`STAGE_OVERHEAD_S` (kernel
  start, grompp, the gate, the production's file checks).

:func:`simulate` then plays the schedule event by event, for the policy the study runs:

* ``follow`` (``--threads auto``): every case starts at once; an MD stage gets the fair share
  ``cap // cases with MD ahead`` of the thread slots (at least one, at most what is free) and is re-balanced when
  a case's MD ends; the analysis runs niced on what the MD leaves.
* ``fixed`` (``--threads N``): ``cap // N`` cases at a time, ``N`` threads each, each case to its end.

Work that is not MD (setup, overheads, un-niced analysis) takes one core; when more is asked than there are
cores, everything slows by ``cap / demand``. The speed at ``k`` threads is measured where it was, else
:math:`s_k = s_1\\,k\\,e^{\\log_2 k}` with the efficiency :math:`e` per doubling measured between 1 and the cap
(default :data:`DEFAULT_EFFICIENCY`; where more threads ran slower than one — other load on the machine — that
measurement is not used). Equilibration gate extensions are not foreseeable and are not planned: a
case the gate extends runs longer than planned (the progress bar's plan grows with each reserved extension).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from mdbench.build.stage import setup_case
from mdbench.engine import stages
from mdbench.engine.gpu import build_info
from mdbench.engine.hardware import cpu_model
from mdbench.engine.protocols import load_protocol, write_mdp
from mdbench.engine.runner import EngineError, find_gmx, get_runner
from mdbench.engine.stages import case_dir, cutoff_overrides, load_preset, preset_timing
from mdbench.errors import InputError
from mdbench.inputs.cases import load_case
from mdbench.record import RunRecord

log = logging.getLogger(__name__)

#: MD steps of the benchmark of one case at one thread, the cases side by side, as two mdruns of a study share
#: caches and memory bandwidth: at 5,000 steps the tiny demo's NVT stages then ran at the benchmark's speed
#: (DE 71.4 ns/day in the study, 71.2 measured; 2026-12-05). The rest of the gap was density (below).
BENCH_STEPS = 5000
#: MD steps of the benchmark at the thread cap (one case at a time; the speed-up per thread, not the cache).
BENCH_STEPS_CAP = 1500
#: How the MD speed falls with density: speed ∝ ρ^-PAIR_COST_EXPONENT. The benchmark runs the packed box at the
#: case's initial density; NPT and production (92 % of a study's steps) run at the force field's density, ~20 %
#: higher, with ~20 % more pairs within the cut-off. Measured in the tiny demo of 2026-12-05 (same mdp, one
#: thread, side by side): DE NVT 71.4 ns/day at the packed box, production 62.4 ns/day in a box 1.214 x denser
#: (0.874 = 1.214^-0.70); LHCE 77.7 → 69.7 ns/day. The expected density of params/systems stands in for the
#: force field's, unknown before the NPT has run.
PAIR_COST_EXPONENT = 0.7
#: Efficiency per doubling of threads when only one thread count was measured (2 threads on the tiny LHCE box
#: ran 1.85 × one thread on the 2-core development machine, 2026-12-05).
DEFAULT_EFFICIENCY = 0.9
#: Wall time each MD stage adds around its mdrun: kernel start, grompp, gate, records, and for the production the
#: NPT mean-volume box and the consistency checks of its files [s] (the tiny demo of 2026-12-05: NVT 7, NPT 7,
#: production 20 before + 9 after its mdrun).
STAGE_OVERHEAD_S = {"nvt": 7.0, "npt": 7.0, "production": 29.0}
#: Analysis of one case: per analysis stage (kernel start, records) [s] …
ANALYSIS_S_PER_STAGE = 4.0
#: … plus this per trajectory frame and atom [s] (tiny demo: ~32 s for 401 frames × ~2,000 atoms).
ANALYSIS_S_PER_FRAME_ATOM = 4.0e-5
#: The cross-case comparison at the end [s].
COMPARE_S = 6.0
#: The MD stages of a case, in order: (name, the preset's length key, the protocol).
MD_STAGES = (("nvt", "equilibration_nvt_ps", "nvt"), ("npt", "equilibration_npt_ps", "npt"),
             ("production", "production_ps", "production"))
#: Analysis templates a case runs (``analysis/5x_*``).
N_ANALYSIS_STAGES = 7

_PERF_RE = re.compile(r"^Performance:\s+([0-9.]+)", re.M)


# ------------------------------------------------------------------------------------------- what one case costs
@dataclass
class CaseCost:
    """What one case asks of the machine.

    Attributes
    ----------
    case : str
    natoms : int
    md_steps : dict
        Steps per MD stage (``nvt``, ``npt``, ``production``).
    dt_ps : float
        Time step [ps].
    steps_per_s : dict
        Measured MD speed [steps/s] by thread count (keys are thread counts as strings).
    setup_s, minimize_s, analysis_s : float
        Wall time of the setup, the minimisation and the whole analysis of the case on one core [s].
    source : str
        Where the speeds came from: ``history`` (earlier runs on this machine) or ``benchmark``.
    """

    case: str
    natoms: int
    md_steps: dict
    dt_ps: float
    steps_per_s: dict
    setup_s: float
    minimize_s: float
    analysis_s: float
    source: str

    @property
    def md_ns(self) -> float:
        """MD the preset plans for the case [ns]."""
        return sum(self.md_steps.values()) * self.dt_ps / 1000.0

    def speed(self, threads: int) -> float:
        """MD speed at ``threads`` threads [steps/s] (measured, else scaled from the measured ones)."""
        measured = {int(k): float(v) for k, v in self.steps_per_s.items() if float(v) > 0}
        if 1 in measured:  # more threads slower than one: measured beside other load, not this machine's scaling
            measured = {k: v for k, v in measured.items() if k == 1 or v > measured[1]}
        if threads in measured:
            return measured[threads]
        s1 = measured.get(1) or min(measured.values())
        top = max(measured)
        eff = DEFAULT_EFFICIENCY
        if top > 1 and 1 in measured:
            eff = (measured[top] / (top * s1)) ** (1.0 / math.log2(top))
        return s1 * threads * eff ** math.log2(max(threads, 1))


# ------------------------------------------------------------------------------------------------ the schedule
@dataclass
class Schedule:
    """One simulated run of the study.

    Attributes
    ----------
    policy : str
        ``follow`` or ``fixed``.
    cap : int
        Thread slots (cores) assumed.
    finish_s : dict
        Per case: when its last stage ends [s from the start].
    md_end_s : float
        When the last MD step ends [s].
    total_s : float
        Wall time of the whole study, comparison included [s].
    idle_core_s_during_md : float
        Core-seconds no work used between the first mdrun and the last MD step [core·s].
    threads_used : dict
        Per case: the thread counts its MD ran with.
    md_start_s : float
        When the first mdrun starts (the setups before it are single-threaded packing) [s].
    """

    policy: str
    cap: int
    finish_s: dict
    md_end_s: float
    total_s: float
    idle_core_s_during_md: float
    threads_used: dict
    md_start_s: float = 0.0

    @property
    def busy_fraction_during_md(self) -> float:
        """Share of the cores' time used from the first mdrun to the last MD step (1 = no idle core)."""
        return 1.0 - self.idle_core_s_during_md / max(self.cap * (self.md_end_s - self.md_start_s), 1e-9)


def _phases(cost: CaseCost, analysis: bool) -> list[list]:
    # the minimisation is an mdrun too (threads from the same slots): its one-thread time as steps
    phases: list[list] = [["cpu", cost.setup_s], ["md", cost.minimize_s * cost.speed(1)]]
    for name, _key, _prot in MD_STAGES:
        phases += [["cpu", STAGE_OVERHEAD_S[name]], ["md", float(cost.md_steps.get(name, 0))]]
    if analysis:
        phases.append(["analysis", cost.analysis_s])
    return [p for p in phases if p[1] > 0]


def simulate(costs: list[CaseCost], cap: int, *, policy: str = "follow", threads: int = 1,
             workers: int | None = None, analysis: bool = True) -> Schedule:
    """Play the schedule of ``costs`` on ``cap`` cores under ``policy`` (see the module docstring)."""
    if policy not in ("follow", "fixed"):
        raise ValueError(f"policy {policy!r}: follow or fixed")
    todo = {c.case: _phases(c, analysis) for c in costs}
    by_case = {c.case: c for c in costs}
    order = [c.case for c in costs]
    workers = len(order) if policy == "follow" else max(1, workers or min(len(order), cap // max(threads, 1)))
    used: dict[str, set] = {c: set() for c in order}
    finish: dict[str, float] = {}
    now = idle = md_end = 0.0
    md_start: float | None = None
    for _ in range(100000):
        open_cases = [c for c in order if todo[c]]
        if not open_cases:
            break
        running = open_cases[:workers]  # a fixed-policy chain keeps its worker to its end
        if policy == "follow":
            demand = sum(1 for c in running if any(p[0] == "md" for p in todo[c]))
            share = max(1, cap // max(1, demand))
        else:
            share = threads
        slots, alloc = cap, {}
        for c in running:
            if todo[c][0][0] == "md":
                k = min(share, slots) if policy == "follow" else (share if slots >= share else 0)
                alloc[c], slots = k, slots - k
        cpu = [c for c in running if todo[c][0][0] == "cpu" or (todo[c][0][0] == "analysis" and policy == "fixed")]
        niced = [c for c in running if todo[c][0][0] == "analysis" and policy == "follow"]
        load = sum(alloc.values()) + len(cpu)
        slow = min(1.0, cap / load) if load else 1.0
        spare = max(0.0, cap - load)
        rates = {c: by_case[c].speed(k) * slow for c, k in alloc.items() if k > 0}
        rates.update({c: slow for c in cpu})
        rates.update({c: min(1.0, spare / len(niced)) for c in niced} if niced else {})
        rates = {c: r for c, r in rates.items() if r > 0}
        if not rates:
            break
        dt = min(todo[c][0][1] / r for c, r in rates.items())
        any_md = any(p[0] == "md" for c in order for p in todo[c])
        if alloc and md_start is None:
            md_start = now
        if any_md and md_start is not None:
            busy = min(cap, load + min(spare, len(niced)))
            idle += (cap - busy) * dt
        now += dt
        for c, r in rates.items():
            todo[c][0][1] -= r * dt
            if c in alloc:
                used[c].add(alloc[c])
            if todo[c][0][1] <= 1e-9 * max(1.0, r):
                todo[c].pop(0)
                if not todo[c]:
                    finish[c] = now
        if any_md and not any(p[0] == "md" for c in order for p in todo[c]):
            md_end = now
    total = now + (COMPARE_S if analysis and len(order) > 1 else 0.0)
    return Schedule(policy, cap, finish, md_end or now, total, idle, {c: sorted(v) for c, v in used.items()},
                    md_start or 0.0)


# ---------------------------------------------------------------------------------------------------- history
def history_path() -> Path:
    """This machine's MD speed history (``$MDBENCH_CACHE_DIR`` or ``~/.cache/mdbench``, ``md_speed.jsonl``)."""
    root = os.environ.get("MDBENCH_CACHE_DIR") or Path.home() / ".cache" / "mdbench"
    return Path(root) / "md_speed.jsonl"


def machine_key(gmx: str) -> dict:
    """What makes speeds comparable: CPU model, logical CPUs and the GROMACS version and SIMD."""

    build = build_info(gmx)
    return {"cpu_model": cpu_model(), "logical_cpus": os.cpu_count() or 1,
            "gromacs": build.get("version"), "simd": build.get("simd")}


def _bundle_key(bundle: str) -> str:
    return hashlib.sha256(str(Path(bundle).resolve()).encode()).hexdigest()[:12] if bundle else ""


def read_history(machine: dict, preset: str, bundle: str = "") -> dict[str, dict]:
    """Per case, the latest history entries for this machine, preset and bundle merged (later fields win;
    speeds merge per thread count). A line that is not a JSON object is skipped."""
    path = history_path()
    out: dict[str, dict] = {}
    if not path.is_file():
        return out
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if (not isinstance(entry, dict) or entry.get("machine") != machine or entry.get("preset") != preset
                or entry.get("bundle", "") != _bundle_key(bundle)):
            continue
        case = str(entry.get("case"))
        merged = out.setdefault(case, {"steps_per_s": {}})
        merged["steps_per_s"].update(entry.get("steps_per_s") or {})
        merged.update({k: v for k, v in entry.items() if k != "steps_per_s" and v is not None})
    return out


def _append_history(entries: list[dict]) -> None:
    if not entries:
        return
    path = history_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            for entry in entries:
                fh.write(json.dumps(entry) + "\n")
    except OSError as exc:  # a read-only home: the next estimate benchmarks again
        log.warning("could not write the MD speed history %s (%s); estimates will benchmark again", path, exc)


def record_run_history(run_dir: str | Path, cases: list[str], preset: str, bundle: str = "",
                       gmx: str | None = None) -> list[dict]:
    """Append the MD speeds of a finished run to this machine's history: per case and thread count, the steps
    of its mdrun slices over their wall time [steps/s]. Returns the entries written."""

    rec = RunRecord(run_dir)
    machine = machine_key(gmx or find_gmx())
    attempts = {a["id"]: a for a in rec.attempts()}
    totals: dict[str, dict[int, list[float]]] = {}
    per_attempt: dict[str, list[dict]] = {}
    for event in rec.events():
        if event.get("type") == "mdrun_finished":
            per_attempt.setdefault(event["payload"].get("attempt_id"), []).append(event["payload"])
    for attempt_id, slices in per_attempt.items():
        attempt = attempts.get(attempt_id) or {}
        if attempt.get("status") != "completed" or attempt.get("case") not in cases:
            continue
        steps_of = (attempt.get("resources") or {}).get("slices")
        if not steps_of:
            steps_of = [{"threads": slices[-1].get("threads"), "wall_s": slices[-1].get("wall_s"),
                         "steps": attempt.get("completed_steps", 0)}]
        else:
            steps_of = [dict(s, steps=(s.get("end_step") if s.get("end_step") is not None
                                       else attempt.get("end_step", 0)) - s.get("start_step", 0)) for s in steps_of]
        for s in steps_of:
            if s.get("threads") and s.get("wall_s") and s.get("steps", 0) > 0:
                acc = totals.setdefault(attempt["case"], {}).setdefault(int(s["threads"]), [0.0, 0.0])
                acc[0] += s["steps"]
                acc[1] += float(s["wall_s"])
    stamp = datetime.now(timezone.utc).isoformat()
    entries = [{"machine": machine, "preset": preset, "bundle": _bundle_key(bundle), "case": case,
                "steps_per_s": {str(k): round(v[0] / v[1], 3) for k, v in by_threads.items() if v[1] > 0},
                "source": "run", "run_dir": str(Path(run_dir).resolve()), "time_utc": stamp}
               for case, by_threads in totals.items()]
    _append_history(entries)
    return entries


# -------------------------------------------------------------------------------------------------- benchmark
def _mdrun_speed(runner, tpr: Path, deffnm: str, threads: int, dt_ps: float, nsteps: int = BENCH_STEPS) -> float:
    """steps/s of ``nsteps`` steps of ``tpr`` at ``threads`` threads (GROMACS' own Performance line, which
    leaves out the start-up; the wall time when the line is missing)."""
    res = runner.mdrun(tpr, deffnm, threads=threads, nsteps=nsteps, extra=["-notunepme"])
    if not res.ok:
        raise EngineError(f"benchmark mdrun of {tpr} failed", res.argv, res.returncode, res.console_path)
    found = _PERF_RE.findall((tpr.parent / f"{deffnm}.log").read_text(errors="replace"))
    if found:
        return float(found[-1]) * 1000.0 / dt_ps / 86400.0
    return nsteps / max(res.wall_s, 1e-6)


def side_by_side_order(cases: list[str], width: int) -> list[tuple[str, bool]]:
    """The one-thread benchmark's runs, ``width`` at a time: every case once (``True``: its measurement), padded
    with repeats of the first cases (``False``: a partner only) so that no case runs alone in the last round —
    a case alone has the caches to itself and runs faster than it will in the study."""
    width = max(1, min(width, len(cases)))
    runs = [(c, True) for c in cases]
    pad = (-len(cases)) % width
    return runs + [(cases[i % len(cases)], False) for i in range(pad)]


def _expected_density(case: str) -> float:
    """The case's expected density [g/cm^3] from params/systems; 0 (no scaling) where it has none."""
    try:
        return float(load_case(case).expected_density_g_cm3)
    except InputError:  # a case outside params/systems: the benchmark's density stands
        return 0.0


def density_speed_factor(benchmark_density: float, study_density: float) -> float:
    """The MD speed at ``study_density`` over the speed measured at ``benchmark_density`` [g/cm^3]:
    (ρ_bench / ρ_study)^:data:`PAIR_COST_EXPONENT` (1 where either is not a positive number); the tiny DE,
    packed at 1.00 and expected at 1.15 g/cm^3, runs at 0.907 of its benchmark speed."""
    if not (benchmark_density > 0 and study_density > 0):
        return 1.0
    return round((benchmark_density / study_density) ** PAIR_COST_EXPONENT, 4)


def benchmark_cases(cases: list[str], preset: str, *, cap: int, bundle: str = "", seed: int = 2026,
                    echo: Callable[[str], None] = print) -> dict[str, dict]:
    """Measure each case on this machine in a scratch folder: setup and minimisation wall times, and the MD
    speed of its NVT input at one thread (side by side, :data:`BENCH_STEPS`) and at ``cap`` threads. The
    scratch folder is removed; the numbers are returned and appended to the history."""

    runner = get_runner("cli")
    pre = load_preset(preset)
    nvt = load_protocol("nvt")
    timing = preset_timing(nvt, pre, "equilibration_nvt_ps", max(BENCH_STEPS, BENCH_STEPS_CAP) * nvt.timing.dt_ps)
    scratch = Path(tempfile.mkdtemp(prefix="mdbench-estimate-"))
    out: dict[str, dict] = {}
    try:
        def build(case: str) -> dict:
            t0 = time.monotonic()
            built = setup_case(scratch, case, preset=preset, seed=seed, bundle=bundle or None)
            t1 = time.monotonic()
            stages.minimize(scratch, case, preset=preset, engine=runner, threads=1)
            return {"natoms": int(built.n_atoms), "setup_s": round(t1 - t0, 2),
                    "minimize_s": round(time.monotonic() - t1, 2),
                    "density_factor": density_speed_factor(float(built.density_g_cm3), _expected_density(case))}

        echo(f"estimate: no MD speed of {', '.join(cases)} ({preset}) on this machine yet; measuring each case "
             f"(setup, minimisation, {BENCH_STEPS} MD steps at 1 thread side by side and {BENCH_STEPS_CAP} at "
             f"{cap}) …")
        t_start = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(1, min(cap, len(cases)))) as pool:
            built = dict(zip(cases, pool.map(build, cases)))
        tprs = {}
        for case in cases:
            wd = case_dir(scratch, case) / "bench"
            wd.mkdir(parents=True, exist_ok=True)
            gro, top = stages.find_setup(scratch, case)
            write_mdp(nvt, wd / "bench.mdp", cutoff_overrides(pre), timing=timing, seed=seed)
            runner.grompp(wd / "bench.mdp", (case_dir(scratch, case) / "em" / "em.gro").resolve(), top.resolve(),
                          wd / "bench.tpr")
            tprs[case] = wd / "bench.tpr"
        # one thread: the cases side by side, as the study runs them (two one-thread mdruns on two cores share
        # caches and memory bandwidth: each ran ~10 % slower than alone in the tiny demo), none alone
        width = max(1, min(cap, len(cases)))
        order = side_by_side_order(cases, width)
        with ThreadPoolExecutor(max_workers=width) as pool:
            speeds_1 = list(pool.map(lambda run: _mdrun_speed(runner, tprs[run[0]], "bench1" if run[1] else
                                                              "bench1_partner", 1, timing.dt_ps), order))
        one = {case: v for (case, measured), v in zip(order, speeds_1) if measured}
        for case in cases:  # the whole cap: one case at a time, as the last case of a study runs
            measured = {"1": round(one[case], 3)}
            if cap > 1:
                measured[str(cap)] = round(_mdrun_speed(runner, tprs[case], f"bench{cap}", cap, timing.dt_ps,
                                                        BENCH_STEPS_CAP), 3)
            factor = built[case]["density_factor"]
            out[case] = {**built[case], "steps_per_s_measured": measured,
                         "steps_per_s": {k: round(v * factor, 3) for k, v in measured.items()}}
        echo(f"estimate: measured in {time.monotonic() - t_start:.0f} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    machine = machine_key(runner.gmx)
    stamp = datetime.now(timezone.utc).isoformat()
    _append_history([{"machine": machine, "preset": preset, "bundle": _bundle_key(bundle), "case": case,
                      **values, "source": "benchmark", "time_utc": stamp} for case, values in out.items()])
    return out


# ------------------------------------------------------------------------------------------------------- plan
@dataclass
class StudyPlan:
    """The estimate ``study run --dry-run`` prints: the costs, the schedule of the policy that will run and,
    for comparison, the other policy's."""

    preset: str
    cap: int
    policy: str
    costs: list[CaseCost]
    schedule: Schedule
    alternative: Schedule
    analysis: bool = True
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"preset": self.preset, "cap": self.cap, "policy": self.policy, "analysis": self.analysis,
                "costs": [asdict(c) for c in self.costs], "schedule": asdict(self.schedule),
                "alternative": asdict(self.alternative), "notes": self.notes}


def plan_costs(cases: list[str], preset: str, cap: int, *, history: dict[str, dict], bundle: str = ""
               ) -> list[CaseCost]:
    """:class:`CaseCost` of every case from its history entry (which must hold natoms, setup and
    minimisation times and at least one speed)."""

    pre = load_preset(preset)
    steps, dt_ps = {}, 0.002
    xtc_ps = 1.0
    for name, key, prot in MD_STAGES:
        tm = preset_timing(load_protocol(prot), pre, key, None)
        steps[name], dt_ps = tm.nsteps, tm.dt_ps
        if name == "production":
            xtc_ps = tm.xtc_interval_ps or 1.0
            frames = int(round(tm.length_ps / xtc_ps)) + 1
    costs = []
    for case in cases:
        h = history[case]
        natoms = int(h.get("natoms") or 0)
        analysis_s = N_ANALYSIS_STAGES * ANALYSIS_S_PER_STAGE + ANALYSIS_S_PER_FRAME_ATOM * frames * natoms
        costs.append(CaseCost(case, natoms, dict(steps), dt_ps, dict(h["steps_per_s"]), float(h.get("setup_s", 0)),
                              float(h.get("minimize_s", 0)), round(analysis_s, 1),
                              "history" if h.get("source") == "run" else "benchmark"))
    return costs


def estimate_study(cases: list[str], preset: str, *, cap: int, threads: int = 0, bundle: str = "",
                   analysis: bool = True, benchmark: bool = True, seed: int = 2026,
                   echo: Callable[[str], None] = print) -> StudyPlan | None:
    """The plan of a study: costs from the history, else (``benchmark``) measured now; the schedule of the
    policy ``threads`` selects (0: threads follow the work) and of the other one. ``None`` when a case has no
    history and ``benchmark`` is False."""

    machine = machine_key(find_gmx())
    history = read_history(machine, preset, bundle)
    missing = [c for c in cases if not _complete(history.get(c))]
    if missing:
        if not benchmark:
            return None
        benchmark_cases(missing, preset, cap=cap, bundle=bundle, seed=seed, echo=echo)
        history = read_history(machine, preset, bundle)
    costs = plan_costs(cases, preset, cap, history=history, bundle=bundle)
    follow = simulate(costs, cap, policy="follow", analysis=analysis)
    fixed = simulate(costs, cap, policy="fixed", threads=max(1, threads or 1), analysis=analysis)
    policy = "follow" if threads == 0 else "fixed"
    notes = ["equilibration gate extensions are not planned: a case the gate extends takes longer"]
    return StudyPlan(preset, cap, policy, costs, follow if policy == "follow" else fixed,
                     fixed if policy == "follow" else follow, analysis, notes)


def _complete(entry: dict | None) -> bool:
    return bool(entry and entry.get("natoms") and entry.get("steps_per_s") and "setup_s" in entry)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 60} min {seconds % 60:02d} s"


def format_plan(plan: StudyPlan | None) -> str:
    """The plan as the lines the CLI prints (units on every number)."""
    if plan is None:
        return "estimate: no measured MD speed for this study on this machine yet (run with --dry-run to measure)"
    s = plan.schedule
    name = {"follow": "threads follow the work", "fixed": "fixed threads per case"}
    lines = [f"Plan ({plan.preset}, {plan.cap} cores, {name[plan.policy]}):",
             f"  {'case':6s} {'atoms':>7s} {'MD [ns]':>8s} {'ns/day at 1 thread':>19s} "
             f"{'threads':>8s} {'done after':>12s}  speeds from"]
    for c in plan.costs:
        ns_day = c.speed(1) * c.dt_ps * 86400.0 / 1000.0
        used = s.threads_used.get(c.case) or []
        threads = (f"{used[0]}–{used[-1]}" if len(used) > 1 else str(used[0])) if used else "-"
        lines.append(f"  {c.case:6s} {c.natoms:7d} {c.md_ns:8.3f} {ns_day:19.1f} {threads:>8s} "
                     f"{_duration(s.finish_s.get(c.case, s.total_s)):>12s}  {c.source}")
    total_ns = sum(c.md_ns for c in plan.costs)
    lines.append(f"  total  {total_ns:.3f} ns of MD; expected wall time {_duration(s.total_s)} "
                 f"(MD ends after {_duration(s.md_end_s)}; cores busy {100 * s.busy_fraction_during_md:.0f} % "
                 f"while MD runs)")
    other = plan.alternative
    lines.append(f"  with {name[other.policy]} it would take {_duration(other.total_s)} "
                 f"(cores busy {100 * other.busy_fraction_during_md:.0f} % while MD runs)")
    lines += [f"  note: {n}" for n in plan.notes]
    return "\n".join(lines)
