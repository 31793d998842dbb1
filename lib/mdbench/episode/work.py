"""Work accounting: was the MD an episode's run claims computed in the episode, with the resources it had?

An agent can bring a finished run (an exposed folder, a sibling episode it could read) and copy it into its
workspace: every file is then genuine GROMACS output and the audit cannot tell it from the agent's own. The
evaluator can: it measured the agent's tree (cgroup CPU seconds, wall time) and it can measure this machine.
:func:`account` compares

* the MD the run claims — per case, the longest of the trajectory time on disk (:func:`collect.ns_on_disk`,
  every complete xtc outside ``agent_input/``) and the ledger's charged ns — at
* this machine's speed on the case's own run input: two short benchmark ``mdrun`` of the ``.tpr`` beside the
  case's longest trajectory (one thread; the difference of their CPU seconds over the difference of their steps,
  :func:`benchmark`), giving ns per core-second,

with the CPU seconds the agent's tree used (``cpu_s``; ``wall_s`` × threads where no CPU time was measured).
The run *needs* :math:`\\sum_c \\mathrm{ns}_c / r_c` core-seconds; more than :data:`SLACK` × what the tree used
(plus :data:`FLOOR_CORE_S`) could not have been computed here. Independently, a GROMACS log whose ``Started
mdrun`` time stamp lies before the episode started (by more than :data:`CLOCK_SLACK_S`) was not written by it.
Either way the verdict is ``work_not_done_here``; the runner then rates Sim4 and E1 = 0 through the audit's
adjudication (the figures in the reason) and every other item 0 too (it rests on that MD: a replayed run gains
nothing over doing nothing), and the aggregate flags the episode. Reference agents (the evaluator's calibration
agents, whose buggy replays copy the oracle's run by design) get the verdict recorded, not applied.

What the agent brought (``--expose`` folders) is never read here: only the workspace, through
:mod:`mdbench.untrusted`; the benchmark copies the ``.tpr`` after :func:`mdbench.trajcheck.check_tpr` passed and
runs the evaluator's own ``gmx`` on it in a private temporary folder with a time limit (a ``.tpr`` is data, not
code). GPU episodes are compared by their time window only (a GPU's speed is not measured here).
"""

from __future__ import annotations

import calendar
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mdbench import untrusted
from mdbench.audit.model import ITEMS
from mdbench.episode import collect
from mdbench.trajcheck import TrajectoryError, check_tpr
from mdbench.yamlio import load_yaml

#: Verdicts of :func:`account`.
CREDITED, NOT_DONE_HERE, NO_MD, NOT_ASSESSED = "credited", "work_not_done_here", "no_md_claimed", "not_assessed"
#: Steps of the two benchmark mdruns (their CPU difference is measured: start-up excluded) and each one's time
#: limit [s]; a benchmark past its limit gives an upper bound of the speed (its steps of :data:`MAX_DT_PS` in the
#: limit) — in the agent's favour, and the evaluator's time stays bounded whatever the input.
BENCH_SHORT_STEPS = 100
BENCH_STEPS = 1100
BENCH_TIMEOUT_S = 20.0
MAX_DT_PS = 0.005
#: Most cases benchmarked (those claiming the most MD); the others are costed at the fastest measured speed.
MAX_BENCHMARKS = 3
#: How much more MD than the measured resources could produce is still credited, and an absolute allowance
#: [core-s] below which nothing is flagged. A benchmark on a loaded machine (shared cores, a virtual machine's
#: stolen time) measured up to ~3 × the CPU per step the agent's own mdruns needed; an honest micro oracle
#: needs ~0.45 × what its tree used, a replay ~10^4 ×.
SLACK = 4.0
FLOOR_CORE_S = 60.0
#: A log may start this long before the runner's clock says the agent started [s] (clock granularity).
CLOCK_SLACK_S = 120.0
#: Items that carry the verdict's figures (production; canonical lineage). Every other item is lowered too: what
#: the run shows rests on MD the episode did not compute, so an episode that brings a finished run gains nothing
#: over one that did nothing.
FIGURE_ITEMS = ("Sim4", "E1")
#: Most logs read for the time window.
MAX_LOGS = 2_000

_DT = re.compile(rb"^\s*dt\s*=\s*([0-9.eE+-]{1,30})\s*$", re.M)
_STARTED = re.compile(rb"Started mdrun on rank \d+ (\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})")


def _tpr_for(workspace: Path, xtc_rel: str) -> str | None:
    """The run input beside a trajectory: ``<stem>.tpr``, else the only ``.tpr`` of its folder."""
    rel = Path(xtc_rel)
    stem = rel.name[:-4]
    for cand in (stem, re.sub(r"\.part\d{4}$", "", stem)):
        p = collect.within(workspace, (rel.parent / f"{cand}.tpr").as_posix())
        if p is not None and p.is_file() and not p.is_symlink():
            return (rel.parent / f"{cand}.tpr").as_posix()
    folder = collect.within(workspace, (rel.parent / "x").as_posix())
    if folder is None:
        return None
    tprs = [e for e in sorted(os.listdir(folder.parent)) if e.endswith(".tpr")][:2] if folder.parent.is_dir() else []
    return (rel.parent / tprs[0]).as_posix() if len(tprs) == 1 else None


def bundle_molecules(bundle: Path | None, case: str) -> dict[str, int] | None:
    """Molecule type → count of ``case`` in the evaluator's frozen bundle (``cases/<case>.yaml``), or None."""
    if bundle is None or not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", case):
        return None

    try:
        doc = load_yaml(bundle / "cases" / f"{case}.yaml")
        return {str(m["molecule_type"]): int(m["count"]) for m in doc["molecules"].values()}
    except Exception:  # noqa: BLE001 — a case the bundle does not have: no composition to compare
        return None


def benchmark(tpr: Path, *, steps: int = BENCH_STEPS, timeout_s: float = BENCH_TIMEOUT_S,
              gmx: str | None = None, expected_molecules: dict[str, int] | None = None) -> dict[str, Any]:
    """This machine's speed on ``tpr``: ``{"ns_per_core_s", "core_s", "steps", "dt_ps"}`` or ``{"error"}``.

    Runs ``gmx mdrun`` (the evaluator's own) on one thread twice, for :data:`BENCH_SHORT_STEPS` and ``steps``
    steps, in a private temporary folder; the difference of the two processes' CPU time (``wait4``: user +
    system, not the log's ``Core t``, which is wall time × threads and grows with the machine's load) over the
    difference of steps is the CPU time per step, start-up excluded. Past ``timeout_s`` (wall) the speed is an
    upper bound (``bound`` says so). The ``.tpr`` is checked (:func:`mdbench.trajcheck.check_tpr`, against
    ``expected_molecules`` of the bundle) and copied first.
    """

    gmx = gmx or shutil.which("gmx") or shutil.which("gmx_mpi")
    if gmx is None:
        return {"error": "gmx not found on the evaluator's PATH"}
    try:
        check_tpr(tpr, expected_molecules=expected_molecules)
        raw = untrusted.read_bytes(tpr, max_bytes=256 * 1024 * 1024)
    except (TrajectoryError, untrusted.Refused) as exc:
        return {"error": f"run input refused: {exc}"[:300]}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mdbench-work-") as tmp:
        (Path(tmp) / "bench.tpr").write_bytes(raw)
        runs = []
        for n in (BENCH_SHORT_STEPS, steps):
            r = _mdrun_cpu(gmx, Path(tmp), n, timeout_s)
            if "error" in r:
                return r
            if r.get("timeout"):
                return {"ns_per_core_s": n * MAX_DT_PS / 1000.0 / timeout_s, "bound": "upper: timed out",
                        "note": f"benchmark mdrun did not finish {n} steps in {timeout_s:g} s",
                        "wall_s": round(time.perf_counter() - t0, 3)}
            runs.append(r)
    core_s = runs[1]["cpu_s"] - runs[0]["cpu_s"]
    dt_ps = runs[1]["dt_ps"]
    measured = steps - BENCH_SHORT_STEPS
    if not (core_s > 0 and dt_ps > 0):
        core_s = max(runs[1]["cpu_s"], 1e-3)  # timer granularity: the whole run's CPU (in the agent's favour)
        measured = steps
    ns = measured * dt_ps / 1000.0
    return {"ns_per_core_s": ns / core_s, "core_s": round(core_s, 4), "steps": measured, "dt_ps": dt_ps,
            "ns_per_core_day": round(ns / core_s * 86400.0, 4), "wall_s": round(time.perf_counter() - t0, 3)}


def _mdrun_cpu(gmx: str, tmp: Path, steps: int, timeout_s: float) -> dict[str, Any]:
    """CPU seconds (user + system) of one ``mdrun`` of ``tmp/bench.tpr`` for ``steps`` steps, and its dt [ps]."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1", "LC_ALL": "C",
           "GMX_DISABLE_GPU_DETECTION": "1", "HOME": str(tmp)}
    cmd = [gmx, "-quiet", "mdrun", "-s", "bench.tpr", "-deffnm", f"bench{steps}", "-nsteps", str(int(steps)),
           "-ntmpi", "1", "-ntomp", "1", "-nb", "cpu", "-notunepme", "-noconfout"]
    proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        err = proc.stderr.read(1 << 16) if proc.stderr else b""
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status) if "status" in locals() else -9
        if proc.stderr:
            proc.stderr.close()
    if proc.returncode == -signal.SIGKILL:
        return {"timeout": True}
    log = tmp / f"bench{steps}.log"
    head = log.read_bytes()[:1 << 20] if log.is_file() else b""
    dts = _DT.findall(head)
    if proc.returncode != 0 or not dts:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no log"]
        return {"error": f"benchmark mdrun failed (exit {proc.returncode}): {tail[0]}"[:300]}
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "dt_ps": float(dts[0])}


def logs_before(workspace: Path, started_epoch: float, listing: untrusted.Walk | None = None,
                *, slack_s: float = CLOCK_SLACK_S) -> list[dict[str, Any]]:
    """GROMACS logs of the workspace whose ``Started mdrun`` time stamp (this machine's local time, or UTC if
    that is later) lies more than ``slack_s`` before the episode started: ``[{"path", "started", "before_s"}]``."""
    listing = listing or collect.workspace_walk(workspace)
    out = []
    read = 0
    for e in listing.entries:
        if e.kind != "file" or not e.relpath.endswith(".log") or e.relpath.split("/", 1)[0] in collect.SKIP_DIRS:
            continue
        if read >= MAX_LOGS:
            break
        read += 1
        head = collect.head_bytes(workspace / e.relpath, collect.LOG_HEAD_BYTES, [], e.relpath)
        for stamp in _STARTED.findall(head)[:8]:
            try:
                parsed = time.strptime(stamp.decode("ascii", "replace"), "%a %b %d %H:%M:%S %Y")
                # the agent's local time (/etc/localtime) or UTC, whichever is later: in the agent's favour
                t = max(time.mktime(parsed), calendar.timegm(parsed))
            except (ValueError, OverflowError):
                continue
            if t < started_epoch - slack_s:
                out.append({"path": e.relpath[:300], "started": stamp.decode("ascii", "replace"),
                            "before_s": round(started_epoch - t, 1)})
                break
    return out


def claimed_md(workspace: Path, listing: untrusted.Walk | None = None) -> dict[str, Any]:
    """The MD the workspace claims per case [ns]: the longest of its trajectories on disk and its ledger's
    charge, with the ``.tpr`` of the case's longest trajectory (the system the benchmark measures)."""
    listing = listing or collect.workspace_walk(workspace)
    disk = collect.ns_on_disk(workspace, listing)
    ledger = collect.ns_charged(workspace)
    cases = sorted(set(disk["per_case_ns"]) | set(ledger["per_case_ns"]))
    per_case = {c: max(disk["per_case_ns"].get(c, 0.0), ledger["per_case_ns"].get(c, 0.0)) for c in cases}
    return {"ns_per_case": {c: round(v, 6) for c, v in per_case.items()},
            "ns_on_disk_per_case": disk["per_case_ns"], "ns_charged_per_case": ledger["per_case_ns"],
            "tpr_per_case": {c: _tpr_for(workspace, rel) for c, rel in disk["longest_per_case"].items()},
            "source": "max(trajectory time on disk, ledger charge) per case"}


def account(workspace: Path, *, cpu_s: float | None, wall_s: float | None, threads: int,
            started_epoch: float | None, gpus: int = 0, bench: Any = benchmark, slack: float = SLACK,
            floor_core_s: float = FLOOR_CORE_S, bundle: Path | None = None) -> dict[str, Any]:
    """The work verdict of an episode's workspace (see the module docstring); never raises for what it holds.

    Returns ``{"verdict", "reason", "claimed", "required_core_s", "available_core_s", "benchmarks",
    "logs_before_episode", "items_lowered"}``; ``verdict`` is one of :data:`CREDITED`, :data:`NOT_DONE_HERE`,
    :data:`NO_MD` (nothing claimed), :data:`NOT_ASSESSED` (no speed could be measured; the time window still
    applies). ``slack`` and ``floor_core_s`` default to :data:`SLACK` and :data:`FLOOR_CORE_S`; ``bundle`` (the
    evaluator's frozen bundle) gives each case's composition, which a benchmarked ``.tpr`` may not exceed.
    """
    listing = collect.workspace_walk(workspace)
    claimed = claimed_md(workspace, listing)
    early = logs_before(workspace, started_epoch, listing) if started_epoch is not None else []
    available = cpu_s if cpu_s is not None else (wall_s or 0.0) * max(1, threads)
    out: dict[str, Any] = {"claimed": claimed, "available_core_s": round(float(available), 3),
                           "wall_s": wall_s, "threads": threads, "gpus": gpus, "logs_before_episode": early[:20],
                           "slack": slack, "floor_core_s": floor_core_s, "required_core_s": None,
                           "benchmarks": {}, "items_lowered": {}}
    ns = claimed["ns_per_case"]
    required = 0.0
    unmeasured = []
    if gpus == 0:
        rates: dict[str, float] = {}
        for case, v in sorted(ns.items(), key=lambda kv: -kv[1])[:MAX_BENCHMARKS]:
            if v <= 0:
                continue
            rel = claimed["tpr_per_case"].get(case)
            path = collect.within(workspace, rel) if rel else None
            b = (bench(path, expected_molecules=bundle_molecules(bundle, case)) if path is not None
                 else {"error": "no run input (.tpr) beside the case's trajectory"})
            out["benchmarks"][case] = {"tpr": rel, **b}
            if b.get("ns_per_core_s"):
                rates[case] = b["ns_per_core_s"]
        fastest = max(rates.values(), default=None)
        for case, v in ns.items():
            if v <= 0:
                continue
            rate = rates.get(case, fastest)  # a case whose input cannot be measured: the fastest measured case
            if rate is None:
                unmeasured.append(case)
                continue
            required += v / rate
        out["required_core_s"] = round(required, 3)
    figures = (f"the run claims {sum(ns.values()):.4f} ns of MD, which needs {required:.0f} core-s at this "
               f"machine's measured speed on its own inputs; the agent's tree used {available:.1f} core-s")
    if early:
        out.update(verdict=NOT_DONE_HERE, reason=f"{len(early)} GROMACS log(s) started before the episode did "
                   f"(e.g. {early[0]['path']}: {early[0]['started']}, {early[0]['before_s']:.0f} s earlier); "
                   + figures)
    elif not any(v > 0 for v in ns.values()):
        out.update(verdict=NO_MD, reason="no MD claimed (no trajectory on disk, no ledger charge)")
    elif gpus:
        out.update(verdict=CREDITED, reason="GPU episode: judged by its time window only")
    elif unmeasured and required == 0.0:
        out.update(verdict=NOT_ASSESSED, reason="this machine's speed could not be measured on the run's inputs: "
                   + "; ".join(f"{c}: {out['benchmarks'].get(c, {}).get('error', 'no input')}" for c in unmeasured))
    elif required > slack * available + floor_core_s:
        out.update(verdict=NOT_DONE_HERE, reason=figures + f" — more than {slack:g} × that (+{floor_core_s:g} "
                   "core-s): this MD was not computed in the episode")
    else:
        out.update(verdict=CREDITED, reason=figures)
    if out["verdict"] == NOT_DONE_HERE:
        out["items_lowered"] = dict.fromkeys(ITEMS, 0.0)
    return out


def adjudication_entries(work: dict[str, Any]) -> list[dict[str, Any]]:
    """Episode-level adjudication entries for a ``work_not_done_here`` verdict (none otherwise): Sim4 and E1 = 0
    with both figures, every other item = 0 as resting on that MD."""
    if work.get("verdict") != NOT_DONE_HERE:
        return []
    evidence = {"required_core_s": work.get("required_core_s"), "available_core_s": work.get("available_core_s"),
                "claimed_ns_per_case": work["claimed"]["ns_per_case"],
                "logs_before_episode": [x["path"] for x in work.get("logs_before_episode", [])][:5]}
    reviewer = "mdbench episode runner (automatic work accounting)"
    figures = f"work_not_done_here: {work['reason']}"[:1000]
    rests = "work_not_done_here: rests on MD this episode did not compute (figures under Sim4 and E1)"
    return [{"item": item, "rating": rating, "reviewer": reviewer,
             "reason": figures if item in FIGURE_ITEMS else rests, "evidence": evidence}
            for item, rating in work["items_lowered"].items()]
