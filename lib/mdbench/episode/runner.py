"""Run one agent on a prepared episode, confined by the OS, then audit what it left.

:func:`run_episode` launches the agent command with ``EP/workspace`` as its working directory (the run
directory it must write) through :mod:`mdbench.sandbox`: an unprivileged user (when the runner is root),
mount/PID/network namespaces, everything of ``EP/`` but the workspace hidden, ``agent_input/`` and
``PROMPT.md`` read-only, a CPU set of ``threads`` cores, a complete environment built here (nothing of the
caller's leaks in but what ``env`` names), and a wall-clock timeout that ends the whole process tree (SIGTERM,
then SIGKILL after the grace period). Afterwards: the input-integrity check, the cost files, the ledger, the
SAEO audit of the workspace (:func:`mdbench.audit.audit_run`, against the evaluator's pristine bundle) and
``result.json``.

Statuses: ``completed`` (the agent exited 0), ``agent_error`` (non-zero exit, or it could not start),
``timeout``, ``infrastructure_blocked`` (GROMACS or packmol missing: the agent is not started, the audit still
runs and the score is not counted as a candidate's), ``interrupted`` (the runner was stopped).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mdbench.episode import collect
from mdbench.episode.workspace import RESULT_JSON, Episode, check_integrity, load_episode
from mdbench.errors import InputError, MdbenchError
from mdbench.paths import OUTPUTS_DIR, PROJECT_ROOT

log = logging.getLogger(__name__)

RESULT_SCHEMA = "mdbench-episode-result/1"
#: The unprivileged account agents run as when the runner is root.
AGENT_USER = "mdbench-episode-agent"
#: Tools the study cannot do without; missing → infrastructure_blocked.
REQUIRED_TOOLS = (("gmx", "gmx_mpi"), ("packmol",))
STATUSES = ("completed", "agent_error", "timeout", "infrastructure_blocked", "interrupted")
#: Shorthands of the reference agents (module :mod:`mdbench.episode.agents`) → console script.
REFERENCE_AGENTS = {"oracle": "mdbench-oracle", "null": "mdbench-null-agent", "buggy": "mdbench-buggy-agent"}


@dataclass
class RunOptions:
    """How to run an episode's agent (limits default to the episode's, resources to this machine's)."""

    timeout_min: float | None = None
    grace_s: float | None = None
    threads: int | None = None
    gpus: str = ""
    env: dict[str, str] = field(default_factory=dict)
    expose: tuple[Path, ...] = ()
    hide: tuple[Path, ...] = ()
    network: bool = False
    as_caller: bool = False
    allow_unconfined: bool = False
    force: bool = False
    reanalysis: bool = True
    adjudication: Path | None = None
    progress_s: float | None = None  # print a progress line every so many seconds (None: silent)
    cpus: tuple[int, ...] | None = None  # explicit cores (concurrent episodes on one machine); default the first N
    user: str = AGENT_USER  # the agent's account when the runner is root (one per concurrent episode)


def resolve_agent(spec: str) -> list[str]:
    """The argv of an agent: a reference shorthand (``oracle``, ``null``, ``buggy:<kind>``) or a command line.

    Raises
    ------
    InputError
        An empty command, or an unknown ``buggy:`` kind.
    """
    spec = spec.strip()
    if not spec:
        raise InputError("--agent is empty; give a command line or oracle | null | buggy:<kind>")
    name, _, arg = spec.partition(":")
    if name in REFERENCE_AGENTS and " " not in spec:
        if name == "buggy":
            from mdbench.episode.defects import DEFECTS  # noqa: PLC0415

            if arg not in DEFECTS:
                raise InputError(f"unknown buggy kind {arg!r}; choose one of {', '.join(sorted(DEFECTS))}")
        elif arg:
            raise InputError(f"agent {name!r} takes no ':{arg}'")
        script = Path(sys.executable).parent / REFERENCE_AGENTS[name]
        argv = [str(script)] if script.is_file() else [sys.executable, "-m", "mdbench.episode.agents", name]
        return argv + ([arg] if arg else [])
    try:
        argv = shlex.split(spec)
    except ValueError as exc:
        raise InputError(f"--agent is not a valid command line: {exc}") from None
    return argv


def _machine_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def effective_threads(requested: int | None, cap: int) -> int:
    """Threads for the agent: ``requested`` or min(cap, usable cores); refused above either."""
    cores = len(_machine_cpus())
    n = requested if requested is not None else min(cap, cores)
    if not 1 <= n <= cap:
        raise InputError(f"--threads {n} outside 1..{cap} (the seed's cap on the candidate's CPU threads)")
    if n > cores:
        raise InputError(f"--threads {n} but only {cores} cores are usable here")
    return n


def agent_path() -> str:
    """PATH for the agent: this installation's bin, the folders of gmx and packmol, the system folders."""
    dirs = [str(Path(sys.executable).parent)]
    for names in REQUIRED_TOOLS:
        for n in names:
            exe = shutil.which(n)
            if exe:
                dirs.append(str(Path(exe).parent))
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d in ("/usr/local/bin", "/usr/bin", "/bin"):
            dirs.append(d)
    return os.pathsep.join(dict.fromkeys(dirs))


def missing_tools(path: str) -> list[str]:
    """Required tools not found on ``path``."""
    return [names[0] for names in REQUIRED_TOOLS if not any(shutil.which(n, path=path) for n in names)]


def agent_env(ep: Episode, threads: int, gpus: str, extra: dict[str, str], path: str) -> dict[str, str]:
    """The agent's complete environment (the caller's is not inherited)."""
    env = {
        "PATH": path, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "MDBENCH_PROMPT": str(ep.prompt.resolve()), "MDBENCH_AGENT_INPUT": str(ep.agent_input.resolve()),
        "MDBENCH_EPISODE_ID": ep.episode_id,
        "OMP_NUM_THREADS": str(threads), "MDBENCH_THREAD_CAP": str(threads), "MDBENCH_THREADS": str(threads),
        "MDBENCH_LOCK_DIR": "/tmp/mdbench-threads", "CUDA_VISIBLE_DEVICES": gpus,
        "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1", "JUPYTER_PLATFORM_DIRS": "1",
    }
    if not gpus:
        env["GMX_DISABLE_GPU_DETECTION"] = "1"
    env.update(extra)
    return env


def parse_env(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` (given value) or ``--env KEY`` (the caller's value)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not key or not key.replace("_", "a").isalnum():
            raise InputError(f"--env expects KEY=VALUE or KEY, got {item!r}")
        if not sep:
            if key not in os.environ:
                raise InputError(f"--env {key}: not set in this shell")
            value = os.environ[key]
        out[key] = value
    return out


def parse_cpus(text: str) -> tuple[int, ...]:
    """``"0-3,8"`` → (0, 1, 2, 3, 8)."""
    cores: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            cores += list(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise InputError(f"--cpus expects core ids like 0-7 or 0,2,4, got {text!r}") from None
    if not cores:
        raise InputError(f"--cpus {text!r} names no core")
    return tuple(dict.fromkeys(cores))


def _archive_previous(ep: Episode) -> int:
    """Move a finished run's files to ``EP/previous/<n>/`` (nothing is deleted); returns n."""
    prev = ep.root / "previous"
    n = 1
    while (prev / str(n)).exists():
        n += 1
    dest = prev / str(n)
    dest.mkdir(parents=True)
    for name in (RESULT_JSON, "agent", "audit", "integrity"):
        if (ep.root / name).exists():
            os.replace(ep.root / name, dest / name)
    return n


def _status(sandbox_status: str, exit_code: int | None) -> str:
    if sandbox_status == "timeout":
        return "timeout"
    if sandbox_status == "terminated":
        return "interrupted"
    if sandbox_status == "exited" and exit_code == 0:
        return "completed"
    return "agent_error"


def audit_workspace(workspace: Path, bundle: Path, out: Path, integrity: dict[str, Any], *, reanalysis: bool = True,
                    adjudication: Path | None = None, work_dir: Path | None = None) -> dict[str, Any]:
    """The SAEO audit of an agent's workspace into ``out`` (the audit is a black box here); never raises.

    A changed ``agent_input/`` becomes an E2 = 0 entry (:func:`integrity_adjudication`, written into
    ``work_dir``) applied after any expert ``adjudication``. Returns the composite, the four dimension means,
    the 21 item ratings, the claims and a count of observable states (or ``error`` when the audit failed).
    """
    from mdbench.audit import audit_run  # noqa: PLC0415

    if not integrity["intact"]:
        adjudication = integrity_adjudication(integrity, adjudication, work_dir or out.parent)
    started = time.perf_counter()
    try:
        res = audit_run(workspace, bundle, out, reanalysis=reanalysis, adjudication=adjudication)
    except (MdbenchError, OSError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:500], "seconds": round(time.perf_counter() - started, 3)}
    states: dict[str, int] = {}
    for o in res.observables:
        states[o.state] = states.get(o.state, 0) + 1
    return {"composite": round(res.composite_final, 3), "composite_preliminary": round(res.composite_preliminary, 3),
            "dimensions": {k: round(v, 4) for k, v in res.dimension_means_final.items()},
            "items": {i: s.final for i, s in res.episode_items.items()},
            "claimed_outcome": res.claimed_outcome, "expected_outcome": res.expected_outcome,
            "observable_states": dict(sorted(states.items())), "findings": len(res.findings),
            "saeo_json": f"{out.name}/saeo.json", "findings_md": f"{out.name}/findings.md",
            "seconds": round(time.perf_counter() - started, 3)}


def integrity_adjudication(integrity: dict[str, Any], expert: Path | None, work_dir: Path) -> Path:
    """``work_dir/adjudication.yaml``: any expert entries, then the input-integrity finding as E2 = 0.

    The audit takes evaluator-held evidence only through adjudication; the entry names its source.
    """
    import yaml  # noqa: PLC0415

    entries: list[dict[str, Any]] = []
    if expert is not None:
        from mdbench.yamlio import load_yaml  # noqa: PLC0415

        data = load_yaml(expert) or []
        entries = list(data["entries"] if isinstance(data, dict) and "entries" in data else data)
    listed = "; ".join(integrity["findings"][:10])
    entries.append({"item": "E2", "rating": 0,
                    "reviewer": "mdbench episode runner (automatic input-integrity check)",
                    "reason": f"agent_input/ differs from the frozen bundle after the run: {listed}",
                    "evidence": integrity.get("evidence")})
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / "adjudication.yaml"
    path.write_text(yaml.safe_dump(entries, sort_keys=False), encoding="utf-8")
    return path


def confinement_for(ep: Episode, opts: RunOptions, env: dict[str, str], cpus: list[int], timeout_s: float,
                    grace_s: float) -> Any:
    """The :class:`~mdbench.sandbox.Confinement` of an episode's agent (what it may see, write and use)."""
    from mdbench.sandbox import Confinement, runtime_paths  # noqa: PLC0415

    ws = ep.workspace.resolve()
    readonly = [*runtime_paths(), *(PROJECT_ROOT / d for d in ("lib", "params", "templates"))]
    if not opts.as_caller:
        readonly += [ep.agent_input.resolve(), ep.prompt.resolve()]
    readonly += [Path(p).resolve() for p in opts.expose]
    # Only the system folders stay visible (minimal_root: homes, /work, /srv, … are hidden). Of what is
    # re-exposed, EP/ (episode.json, the pristine bundle, logs, audit), the folder holding it (other episodes) and
    # outputs/ (audits) are the evaluator's and hidden again; the workspace is bound back inside them (exposed
    # paths nest in hidden ones), and so are the runtime folders above
    root = ep.root.resolve()
    hidden = [root, *([root.parent] if root.parent != Path(root.anchor) else []), OUTPUTS_DIR.resolve(),
              *(Path(p).resolve() for p in opts.hide)]
    hidden = list(dict.fromkeys(hidden))
    return Confinement(workdir=ws, env=env, readonly=tuple(dict.fromkeys(p for p in readonly if p.exists())),
                       writable=(ws,), hidden=tuple(hidden), network=opts.network, cpus=tuple(cpus),
                       user=None if opts.as_caller else opts.user, private_tmp=True, minimal_root=True,
                       timeout_s=timeout_s, grace_s=grace_s, tag="episode")


def _launch(ep: Episode, argv: list[str], opts: RunOptions, env: dict[str, str], path_env: str, cpus: list[int],
            timeout_min: float, grace_s: float, logs: Path) -> dict[str, Any]:
    """Start the agent confined (or not at all when a required tool is missing) and wait for its tree to end.

    Returns the sandbox's account (:class:`~mdbench.sandbox.SandboxResult` as JSON) with ``episode_status``.
    """
    from mdbench.sandbox import spawn_confined  # noqa: PLC0415

    t0 = time.perf_counter()
    missing = missing_tools(path_env)
    if missing:
        msg = (f"infrastructure blocked: {', '.join(missing)} not found on the agent's PATH ({path_env}); "
               "the agent was not started")
        (logs / "stdout.log").write_text("")
        (logs / "stderr.log").write_text(msg + "\n")
        return {"status": "not_started", "exit_code": None, "wall_s": 0.0, "cpu_s": 0.0, "peak_memory_mib": 0.0,
                "stragglers_killed": 0, "method": {}, "reason": msg, "episode_status": "infrastructure_blocked"}
    conf = confinement_for(ep, opts, env, cpus, timeout_min * 60.0, grace_s)
    prepared_s = time.perf_counter() - t0
    proc = spawn_confined(argv, conf, stdout=logs / "stdout.log", stderr=logs / "stderr.log")
    try:
        res = _wait(proc, ep, opts.progress_s, timeout_min)
    except KeyboardInterrupt:
        res = proc.terminate()
    out = res.to_json()
    out["method"] = {k: v for k, v in out["method"].items() if not k.startswith("_")}
    if res.status == "failed_to_start":
        out["reason"] = out["method"].get("setup_error")
    out["episode_status"] = _status(res.status, res.exit_code)
    out["prepared_s"] = prepared_s
    return out


def _wait(proc: Any, ep: Episode, every_s: float | None, timeout_min: float) -> Any:
    """Wait for the confined tree; every ``every_s`` print elapsed time and the ns the agent's ledger charged."""
    import subprocess  # noqa: PLC0415

    if not every_s:
        return proc.wait()
    started = time.monotonic()
    while True:
        try:
            return proc.wait(timeout=every_s)
        except subprocess.TimeoutExpired:
            ns = collect.ns_charged(ep.workspace)["total_ns"]
            elapsed = time.monotonic() - started
            print(f"  agent running: {int(elapsed // 60)}:{int(elapsed % 60):02d} of {timeout_min:g} min, "
                  f"{'no ledger yet' if ns is None else f'{ns:.4f} ns charged'}", file=sys.stderr, flush=True)


def run_episode(path: str | Path, agent: str, opts: RunOptions | None = None) -> dict[str, Any]:
    """Run ``agent`` on the episode at ``path``; write and return ``result.json`` (see the module docstring).

    Raises
    ------
    InputError
        Not an episode folder; a finished run without ``force``; bad limits; isolation unavailable without
        ``allow_unconfined``.
    """
    from mdbench.sandbox import capabilities  # noqa: PLC0415

    t0 = time.perf_counter()
    opts = opts or RunOptions()
    ep = load_episode(path)
    if (ep.root / RESULT_JSON).exists() or (ep.root / "agent").exists():
        if not opts.force:
            raise InputError("this episode has already run; pass --force to run it again (the earlier run's "
                             "files move to previous/<n>/, nothing is deleted)", str(ep.root / RESULT_JSON))
    argv = resolve_agent(agent)
    caps = capabilities()
    if not caps.get("namespaces") and not opts.allow_unconfined:
        why = caps.get("namespace_error", "no namespaces")
        raise InputError(f"the operating system cannot confine the agent here ({why}); run as root or where user "
                         "namespaces are allowed, or pass --allow-unconfined to record an unconfined episode")
    threads = effective_threads(opts.threads if opts.cpus is None else len(opts.cpus), ep.limits.cpu_threads_max)
    cpus = list(opts.cpus) if opts.cpus is not None else _machine_cpus()[:threads]
    if not set(cpus) <= set(_machine_cpus()):
        raise InputError(f"--cpus {cpus}: only cores {_machine_cpus()} are usable here")
    timeout_min = ep.limits.timeout_min if opts.timeout_min is None else opts.timeout_min
    grace_s = ep.limits.grace_s if opts.grace_s is None else opts.grace_s
    if not timeout_min > 0 or grace_s < 0:
        raise InputError(f"--timeout must be > 0 min and the grace period >= 0 s (got {timeout_min}, {grace_s})")
    previous = _archive_previous(ep) if opts.force and ((ep.root / RESULT_JSON).exists()
                                                         or (ep.root / "agent").exists()) else 0
    logs = ep.root / "agent"
    logs.mkdir()
    path_env = agent_path()
    env = agent_env(ep, threads, opts.gpus, opts.env, path_env)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t_launch = time.perf_counter()
    sandbox = _launch(ep, argv, opts, env, path_env, cpus, timeout_min, grace_s, logs)
    t_end = time.perf_counter()
    status = sandbox.pop("episode_status")
    exit_code = sandbox["exit_code"]
    before_agent = t_launch - t0 + sandbox.pop("prepared_s", 0.0)
    (logs / "sandbox.json").write_text(json.dumps(sandbox, indent=1, sort_keys=True) + "\n")
    integrity = check_integrity(ep)
    costs = collect.agent_costs(ep.workspace)
    if costs["source"]:
        raw = collect.read_bounded(collect.within(ep.workspace, costs["source"]), collect.MAX_JSON_BYTES)
        if raw is not None:
            (logs / Path(costs["source"]).name).write_bytes(raw)
    ledger = collect.ns_charged(ep.workspace)
    gpu = collect.gpu_hours(ep.workspace)
    t_collected = time.perf_counter()
    audit = audit_workspace(ep.workspace, ep.bundle, ep.root / "audit", integrity, reanalysis=opts.reanalysis,
                            adjudication=opts.adjudication, work_dir=ep.root / "integrity")
    t_audited = time.perf_counter()
    result = {
        "schema": RESULT_SCHEMA, "episode_id": ep.episode_id, "preset": ep.preset,
        "configuration": ep.configuration, "status": status, "exit_code": exit_code,
        "scored_as_candidate": status != "infrastructure_blocked",
        "agent": {"spec": agent, "argv": argv}, "started_at": started_at,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": sandbox["wall_s"], "cpu_s": sandbox["cpu_s"], "peak_memory_mib": sandbox["peak_memory_mib"],
        "gpu_hours": gpu["gpu_hours"], "gpus": opts.gpus or None, "gpu_detail": gpu,
        "ns_charged": ledger["total_ns"], "ns_charged_per_case": ledger["per_case_ns"], "ledger": ledger,
        "budget_exceeded": bool(ledger["total_ns"] is not None and (
            ledger["total_ns"] > ep.limits.md_budget_ns_total
            or any(v > ep.limits.md_budget_ns_per_case for v in ledger["per_case_ns"].values()))),
        "tokens": costs["total_tokens"], "cost_usd": costs["usd"], "cost": costs,
        "score": audit.get("composite"), "dimensions": audit.get("dimensions"), "audit": audit,
        "input_integrity": integrity, "agent_input_intact": integrity["intact"],
        "limits": {"timeout_min": timeout_min, "grace_s": grace_s, "threads": threads, "cpus": cpus,
                   "md_budget_ns_per_case": ep.limits.md_budget_ns_per_case,
                   "md_budget_ns_total": ep.limits.md_budget_ns_total, "network": opts.network,
                   "env_passed": sorted(opts.env)},
        "isolation": sandbox.get("method") or {"isolation": "not_started"},
        "stragglers_killed": sandbox["stragglers_killed"], "sandbox_status": sandbox["status"],
        "previous_runs": previous,
        "harness_s": {"before_agent": round(before_agent, 3), "after_agent": round(t_collected - t_end, 3),
                      "audit": round(t_audited - t_collected, 3)},
    }
    write_result(ep.root / RESULT_JSON, result)
    return result


def write_result(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True, allow_nan=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
