"""Run one agent on a prepared episode, confined by the OS, then audit what it left.

:func:`run_episode` launches the agent command with ``EP/workspace`` as its working directory (the run
directory it must write) through :mod:`mdbench.sandbox`: an unprivileged user (when the runner is root),
mount/PID/network/IPC/UTS namespaces, everything of ``EP/`` but the workspace hidden, ``agent_input/`` and
``PROMPT.md`` read-only, private ``/tmp``, ``/dev/shm``, ``/var/tmp`` and ``/run/lock``, a CPU set of
``threads`` cores, memory and process limits, a hard disk quota on the workspace (a sparse ext4 image
``EP/.workspace.img`` mounted in the agent's namespace only, copied back afterwards), a complete environment built here (nothing of the caller's leaks
in but what ``env`` names), and a wall-clock timeout that ends the whole process tree (SIGTERM, then SIGKILL
after the grace period). The agent sees the *agent toolchain* (:mod:`mdbench.episode.toolchain`), never this
installation; the reference agents get the installation through an explicit, recorded exposure.

Afterwards: the input-integrity check, the cost files, the ledger and the trajectories on disk (every read
through :mod:`mdbench.untrusted`), the work accounting (:mod:`mdbench.episode.work`: was the MD the run claims
computed in this episode?), the SAEO audit of the workspace (:func:`mdbench.audit.audit_run`, against
the evaluator's pristine bundle) and ``result.json``.

``result.json`` exists for every episode that started, whatever the agent left: it is written first with
status ``interrupted`` (so a runner killed by SIGKILL leaves that) and replaced at the end. Statuses:
``completed`` (the agent exited 0), ``agent_error`` (non-zero exit, or it could not start), ``timeout``,
``infrastructure_blocked`` (GROMACS, packmol, the agent toolchain or the harness missing: the agent is not
started, the audit still runs and the score is not counted as a candidate's), ``interrupted`` (the runner was
stopped: SIGTERM, SIGHUP or Ctrl-C end the agent's tree and the result says so; no audit).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mdbench import untrusted
from mdbench.episode import collect, work
from mdbench.episode.toolchain import Toolchain, agent_toolchain
from mdbench.episode.workspace import RESULT_JSON, Episode, check_integrity, fresh_workspace, load_episode
from mdbench.errors import InputError
from mdbench.paths import OUTPUTS_DIR, PROJECT_ROOT

log = logging.getLogger(__name__)

RESULT_SCHEMA = "mdbench-episode-result/2"
#: The unprivileged account agents run as when the runner is root.
AGENT_USER = "mdbench-episode-agent"
#: Tools the study cannot do without; missing → infrastructure_blocked.
REQUIRED_TOOLS = (("gmx", "gmx_mpi"), ("packmol",))
STATUSES = ("completed", "agent_error", "timeout", "infrastructure_blocked", "interrupted")
#: Shorthands of the reference agents (module :mod:`mdbench.episode.agents`) → console script.
REFERENCE_AGENTS = {"oracle": "mdbench-oracle", "null": "mdbench-null-agent", "buggy": "mdbench-buggy-agent"}
#: Network modes: none (loopback only), model-only (loopback plus the harness's model port), host.
NETWORK_MODES = ("none", "model-only", "host")
#: Files of an earlier run moved to ``previous/<n>/`` by ``--force`` (the workspace too).
RUN_FILES = (RESULT_JSON, "agent", "audit", "integrity", "home", "workspace", ".workspace.img", "llm",
             "trajectory.json")
#: Default limits of the agent's tree (the sandbox records what it applied).
DEFAULT_PIDS_MAX = 4096
DEFAULT_TMP_SIZE_MIB = 2048
DEFAULT_OUTPUT_CAP_BYTES = 8 * 1024 * 1024
#: The workspace's hard byte quota [MiB] (a sparse image: only what the agent writes takes host disk).
DEFAULT_WORKSPACE_QUOTA_MIB = 32 * 1024
#: Where the workspace's quota image lives while the agent runs (``EP/``, hidden from the agent).
WORKSPACE_IMAGE = ".workspace.img"
HARNESS_INSTALL_HINT = "bash scripts/agent_harnesses.sh   (installs the harness CLIs; lib/mdbench/episode/harnesses.py)"


def default_memory_mib() -> int:
    """The seed's task environment has 32 GiB; never more than 3/4 of this machine's memory [MiB]."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError):
        return 32768
    return int(min(32768, total * 3 // 4))


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
    network: str | bool | None = None  # none | model-only | host (True = host); default model-only with endpoint
    as_caller: bool = False
    allow_unconfined: bool = False
    force: bool = False
    reanalysis: bool = True
    adjudication: Path | None = None
    progress_s: float | None = None  # print a progress line every so many seconds (None: silent)
    cpus: tuple[int, ...] | None = None  # explicit cores (concurrent episodes on one machine); default the first N
    user: str = AGENT_USER  # the agent's account when the runner is root (one per concurrent episode)
    memory_mib: int | None = None  # None: default_memory_mib(); 0: no limit
    pids_max: int = DEFAULT_PIDS_MAX
    tmp_size_mib: int = DEFAULT_TMP_SIZE_MIB
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES
    workspace_quota_mib: int = DEFAULT_WORKSPACE_QUOTA_MIB  # 0: no quota
    harness: str | None = None
    model: str | None = None
    endpoint: str | None = None
    reasoning: str | None = None
    max_tokens: int | None = None     # harness caps and endpoint API (None: $MDBENCH_LLM_* or the defaults)
    max_usd: float | None = None
    endpoint_api: str | None = None


def network_mode(opts: RunOptions) -> str:
    """``none`` | ``model-only`` | ``host`` from the options (``model-only`` by default with an endpoint)."""
    n = opts.network
    if n is True:
        return "host"
    if n in (None, False, ""):
        return "model-only" if (opts.endpoint and n is None) else "none"
    if n not in NETWORK_MODES:
        raise InputError(f"--network {n!r}: choose one of {', '.join(NETWORK_MODES)}")
    return str(n)


class EpisodeInterrupted(Exception):
    """The runner received SIGTERM/SIGHUP (or Ctrl-C) while the agent ran."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"runner received {signal.Signals(signum).name}")


def resolve_agent(spec: str) -> list[str]:
    """The argv of an agent: a reference shorthand (``oracle``, ``oracle:earned`` — the oracle with ``--until
    earned`` —, ``null``, ``buggy:<kind>``) or a command line.

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
        options: list[str] = []
        if name == "buggy":
            from mdbench.episode.defects import DEFECTS  # noqa: PLC0415

            if arg not in DEFECTS:
                raise InputError(f"unknown buggy kind {arg!r}; choose one of {', '.join(sorted(DEFECTS))}")
            options = [arg]
        elif name == "oracle" and arg == "earned":  # the oracle producing until earned (issue 46)
            options = ["--until", "earned"]
        elif arg:
            raise InputError(f"agent {name!r} takes no ':{arg}'"
                             + ("; the oracle takes ':earned' (production until earned)" if name == "oracle" else ""))
        script = Path(sys.executable).parent / REFERENCE_AGENTS[name]
        argv = [str(script)] if script.is_file() else [sys.executable, "-m", "mdbench.episode.agents", name]
        return argv + options
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


def is_reference(spec: str) -> bool:
    """True for the reference agents, which run this installation: the shorthands (``oracle``, ``null``,
    ``buggy:<kind>``) or a command line whose program is one of their console scripts of this installation
    (e.g. ``…/.venv/bin/mdbench-oracle --seed 7``)."""
    spec = spec.strip()
    if " " not in spec and spec.partition(":")[0] in REFERENCE_AGENTS:
        return True
    try:
        argv = shlex.split(spec)
    except ValueError:
        return False
    if not argv:
        return False
    scripts = {str((Path(sys.executable).parent / name).absolute()) for name in REFERENCE_AGENTS.values()}
    return str(Path(argv[0]).absolute()) in scripts


def missing_tools(path: str) -> list[str]:
    """Required tools not found on ``path``."""
    return [names[0] for names in REQUIRED_TOOLS if not any(shutil.which(n, path=path) for n in names)]


def agent_path() -> str:
    """PATH of an evaluated agent: the agent toolchain's bin, the folders of gmx, packmol and node, the system."""
    return agent_toolchain().path


def agent_env(ep: Episode, threads: int, gpus: str, extra: dict[str, str], path: str,
              home: str = "/tmp") -> dict[str, str]:
    """The agent's complete environment (the caller's is not inherited)."""
    env = {
        "PATH": path, "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
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


def _archive_previous(ep: Episode) -> int:
    """Move an earlier run's files — the workspace included — to ``EP/previous/<n>/`` (nothing is deleted), then
    prepare a fresh workspace from the pristine bundle; returns n."""
    prev = ep.root / "previous"
    n = 1
    while (prev / str(n)).exists():
        n += 1
    dest = prev / str(n)
    dest.mkdir(parents=True)
    for name in RUN_FILES:
        if os.path.lexists(ep.root / name):
            os.replace(ep.root / name, dest / name)
    fresh_workspace(ep)
    return n


def _status(sandbox_status: str, exit_code: int | None) -> str:
    if sandbox_status == "timeout":
        return "timeout"
    if sandbox_status == "terminated":
        return "interrupted"
    if sandbox_status == "exited" and exit_code == 0:
        return "completed"
    return "agent_error"


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


def audit_workspace(workspace: Path, bundle: Path, out: Path, integrity: dict[str, Any], *, reanalysis: bool = True,
                    adjudication: Path | None = None, work_dir: Path | None = None,
                    entries: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The SAEO audit of an agent's workspace into ``out`` (the audit is a black box here); never raises.

    A changed ``agent_input/`` becomes an E2 = 0 entry and ``entries`` (the work accounting's, see
    :mod:`mdbench.episode.work`) follow it (:func:`runner_adjudication`, written into ``work_dir``), applied
    after any expert ``adjudication``. Returns the composite, the four dimension means, the 21 item ratings, the
    claims and a count of observable states (or ``error`` when the audit failed).
    """
    from mdbench.audit import audit_run  # noqa: PLC0415

    own = ([] if integrity["intact"] else [integrity_entry(integrity)]) + list(entries or [])
    if own:
        adjudication = runner_adjudication(own, adjudication, work_dir or out.parent)
    started = time.perf_counter()
    try:
        # an agent's workspace is scored whatever it left: a missing run_record/ scores 0 where it is needed
        res = audit_run(workspace, bundle, out, reanalysis=reanalysis, adjudication=adjudication, force=True)
    except Exception as exc:  # noqa: BLE001 — an audit that fails on what the agent left is recorded
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


def integrity_entry(integrity: dict[str, Any]) -> dict[str, Any]:
    """The input-integrity finding as an E2 = 0 adjudication entry."""
    listed = "; ".join(integrity["findings"][:10])
    return {"item": "E2", "rating": 0, "reviewer": "mdbench episode runner (automatic input-integrity check)",
            "reason": f"agent_input/ differs from the frozen bundle after the run: {listed}",
            "evidence": integrity.get("evidence")}


def runner_adjudication(own: list[dict[str, Any]], expert: Path | None, work_dir: Path) -> Path:
    """``work_dir/adjudication.yaml``: any expert entries, then the runner's own (``own``).

    The audit takes evaluator-held evidence only through adjudication; each entry names its source.
    """
    import yaml  # noqa: PLC0415

    entries: list[dict[str, Any]] = []
    if expert is not None:
        from mdbench.yamlio import load_yaml  # noqa: PLC0415

        data = load_yaml(expert) or []
        entries = list(data["entries"] if isinstance(data, dict) and "entries" in data else data)
    entries += own
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / "adjudication.yaml"
    path.write_text(yaml.safe_dump(entries, sort_keys=False), encoding="utf-8")
    return path


def _supported(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def confinement_for(ep: Episode, opts: RunOptions, env: dict[str, str], cpus: list[int], timeout_s: float,
                    grace_s: float, tools: Toolchain | None = None, *, extra_readonly: tuple[Path, ...] = (),
                    writable: tuple[Path, ...] = (), loopback_listen: tuple[int, ...] = ()) -> Any:
    """The :class:`~mdbench.sandbox.Confinement` of an episode's agent (what it may see, write and use).

    Visible: the system folders, the agent toolchain (read-only), the workspace (``agent_input/`` and
    ``PROMPT.md`` read-only), what ``--expose`` names and, for reference agents only, this installation. Hidden:
    ``EP/`` (episode.json, the pristine bundle, logs, audit), the folder holding it (other episodes),
    ``outputs/``, this checkout, homes and ``/work``-like trees. Limits the sandbox does not support yet are
    left out (the result records what was asked and what the sandbox applied).
    """
    from mdbench.sandbox import Confinement  # noqa: PLC0415

    tools = tools or agent_toolchain()
    ws = ep.workspace.resolve()
    readonly = [*tools.readonly, *tools.reference_exposure]
    if not opts.as_caller:
        readonly += [ep.agent_input.resolve(), ep.prompt.resolve()]
    readonly += [Path(p).resolve() for p in (*opts.expose, *extra_readonly)]
    root = ep.root.resolve()
    hidden = [root, *([root.parent] if root.parent != Path(root.anchor) else []), OUTPUTS_DIR.resolve(),
              PROJECT_ROOT.resolve(), *tools.hidden, *(Path(p).resolve() for p in opts.hide)]
    hidden = list(dict.fromkeys(hidden))
    mode = network_mode(opts)
    memory = default_memory_mib() if opts.memory_mib is None else (opts.memory_mib or None)
    kwargs: dict[str, Any] = dict(
        workdir=ws, env=env, readonly=tuple(dict.fromkeys(p for p in readonly if p.exists())),
        writable=(ws, *writable), hidden=tuple(hidden), network=mode == "host", cpus=tuple(cpus),
        user=None if opts.as_caller else opts.user, private_tmp=True, minimal_root=True,
        timeout_s=timeout_s, grace_s=grace_s, tag="episode",
        private_ipc=True, memory_mib=memory, pids_max=opts.pids_max or None, tmp_size_mib=opts.tmp_size_mib,
        output_cap_bytes=opts.output_cap_bytes, loopback_listen=tuple(loopback_listen),
        workdir_quota_mib=opts.workspace_quota_mib or None,
        workdir_image=(ep.root.resolve() / WORKSPACE_IMAGE) if opts.workspace_quota_mib else None)
    supported = _supported(Confinement)
    unsupported = sorted(k for k, v in kwargs.items() if k not in supported and v not in (None, (), False))
    if "loopback_listen" in unsupported:
        raise InputError("this installation's sandbox cannot hand a loopback port to a harness (no "
                         "Confinement.loopback_listen); update mdbench")
    if unsupported:
        log.warning("sandbox does not support %s yet; not enforced", ", ".join(unsupported))
    conf = Confinement(**{k: v for k, v in kwargs.items() if k in supported})
    return conf


def requested_limits(opts: RunOptions) -> dict[str, Any]:
    """The limits the runner asks the sandbox for (``result.json`` ``limits``)."""
    from mdbench.sandbox import Confinement  # noqa: PLC0415

    supported = _supported(Confinement)
    memory = default_memory_mib() if opts.memory_mib is None else (opts.memory_mib or None)
    asked = {"memory_mib": memory, "pids_max": opts.pids_max or None, "tmp_size_mib": opts.tmp_size_mib,
             "output_cap_bytes": opts.output_cap_bytes, "private_ipc": True,
             "workspace_quota_mib": opts.workspace_quota_mib or None}
    return {**asked, "not_supported_by_sandbox": sorted(k for k in asked if k not in supported)}


def _safe_rel(rel: str) -> Path:
    p = Path(rel)
    if p.is_absolute() or not p.parts or any(part in ("..", "") for part in p.parts):
        raise InputError(f"harness home file {rel!r} is not a plain relative path")
    return p


def _prepare_home(home: Path, files: dict[str, str], uid_gid: tuple[int, int] | None) -> None:
    """The agent's private HOME (``EP/home``, bound into its view writable) with the harness's files."""
    home.mkdir(mode=0o700)
    for rel, text in (files or {}).items():
        target = home / _safe_rel(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        untrusted.write_new(target, text, mode=0o600)
    if uid_gid:
        for folder, dirs, names in os.walk(home):
            for n in [*dirs, *names]:
                os.chown(Path(folder) / n, *uid_gid, follow_symlinks=False)
        os.chown(home, *uid_gid)


def _harness(opts: RunOptions, ep: Episode, home: Path) -> tuple[Any | None, str | None]:
    """``(launch, None)`` from ``mdbench.episode.harnesses.harness_launch``, or ``(None, why it is blocked)``."""
    try:
        from mdbench.episode.harnesses import harness_launch  # noqa: PLC0415
    except ImportError as exc:
        return None, f"harness support is not installed ({exc}); install it with: {HARNESS_INSTALL_HINT}"
    try:
        prompt = untrusted.read_text(ep.bundle / "PROMPT_TEMPLATE.md")
        launch = harness_launch(name=opts.harness, model=opts.model, endpoint=opts.endpoint,
                                reasoning=opts.reasoning, workspace=ep.workspace.resolve(), home=home,
                                prompt=prompt, episode_dir=ep.root.resolve(), max_tokens=opts.max_tokens,
                                max_usd=opts.max_usd, endpoint_api=opts.endpoint_api)
    except Exception as exc:  # noqa: BLE001 — a harness that cannot start blocks the episode, never crashes it
        return None, (f"harness {opts.harness!r} cannot start: {type(exc).__name__}: {str(exc)[:300]} — install it "
                      f"with: {HARNESS_INSTALL_HINT}")
    return launch, None


def _blocked(logs: Path, msg: str) -> dict[str, Any]:
    untrusted.write_new(logs / "stdout.log", "")
    untrusted.write_new(logs / "stderr.log", msg + "\n")
    return {"status": "not_started", "exit_code": None, "wall_s": 0.0, "cpu_s": 0.0, "peak_memory_mib": 0.0,
            "stragglers_killed": 0, "method": {}, "reason": msg, "episode_status": "infrastructure_blocked"}


class _Ticker(threading.Thread):
    """Progress lines from a daemon thread: a tick that blocks (a slow terminal, a huge ledger) never delays
    the wall-clock limit, which the main thread enforces."""

    def __init__(self, workspace: Path, every_s: float, timeout_min: float):
        super().__init__(daemon=True, name="episode-progress")
        self.workspace, self.every_s, self.timeout_min = workspace, every_s, timeout_min
        self.stop = threading.Event()
        self.started_at = time.monotonic()

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                ns = collect.ns_charged(self.workspace, max_bytes=4 * 1024 * 1024)["total_ns"]
            except Exception:  # noqa: BLE001 — a progress line is never worth an error
                ns = None
            elapsed = time.monotonic() - self.started_at
            try:
                print(f"  agent running: {int(elapsed // 60)}:{int(elapsed % 60):02d} of {self.timeout_min:g} min, "
                      f"{'no ledger yet' if ns is None else f'{ns:.4f} ns charged (self-reported)'}",
                      file=sys.stderr, flush=True)
            except (OSError, ValueError):
                return


def _launch(ep: Episode, argv: list[str], opts: RunOptions, env: dict[str, str], tools: Toolchain, cpus: list[int],
            timeout_min: float, grace_s: float, logs: Path, harness: Any = None,
            writable: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Start the agent confined and wait for its tree to end (or do not start it: infrastructure blocked).

    Returns the sandbox's account (:class:`~mdbench.sandbox.SandboxResult` as JSON) with ``episode_status``.
    :class:`EpisodeInterrupted` (SIGTERM/SIGHUP of the runner) or Ctrl-C end the tree first and give
    ``interrupted``.
    """
    from mdbench.sandbox import spawn_confined  # noqa: PLC0415

    t0 = time.perf_counter()
    missing = missing_tools(tools.path)
    if missing:
        return _blocked(logs, f"infrastructure blocked: {', '.join(missing)} not found on the agent's PATH "
                              f"({tools.path}); the agent was not started")
    if not shutil.which(argv[0], path=env["PATH"]) and not (os.path.isabs(argv[0]) and os.path.exists(argv[0])):
        if harness is not None:
            return _blocked(logs, f"infrastructure blocked: the harness CLI {argv[0]!r} is not installed; install "
                                  f"it with: {HARNESS_INSTALL_HINT}")
    conf = confinement_for(ep, opts, env, cpus, timeout_min * 60.0, grace_s, tools,
                           extra_readonly=tuple(Path(p) for p in getattr(harness, "readonly", ()) or ()),
                           writable=writable, loopback_listen=tuple(getattr(harness, "loopback_listen", ()) or ()))
    prepared_s = time.perf_counter() - t0
    proc = spawn_confined(argv, conf, stdout=logs / "stdout.log", stderr=logs / "stderr.log")
    view = getattr(proc, "workdir_view", ep.workspace)  # the quota image is mounted in the sandbox only
    ticker = _Ticker(view, opts.progress_s, timeout_min) if opts.progress_s else None
    interrupted: str | None = None
    try:
        if harness is not None:
            harness.start(getattr(proc, "listeners", {}))
        if ticker:
            ticker.start()
        res = proc.wait()
    except (EpisodeInterrupted, KeyboardInterrupt) as exc:
        interrupted = str(exc) or "KeyboardInterrupt"
        _ignore_signals()
        res = proc.terminate()
    except BaseException:
        proc.terminate()
        raise
    finally:
        if ticker:
            ticker.stop.set()
    out = res.to_json()
    out["method"] = {k: v for k, v in out["method"].items() if not k.startswith("_")}
    if res.status == "failed_to_start":
        out["reason"] = out["method"].get("setup_error")
    out["episode_status"] = "interrupted" if interrupted else _status(res.status, res.exit_code)
    if interrupted:
        out["reason"] = f"the runner was stopped ({interrupted}); the agent's tree was ended"
    out["prepared_s"] = prepared_s
    return out


_HANDLED = (signal.SIGTERM, signal.SIGHUP)


def _raise_interrupted(signum: int, _frame: Any) -> None:
    raise EpisodeInterrupted(signum)


def _ignore_signals() -> None:
    """After the first SIGTERM/SIGHUP: finish ending the tree and writing the result undisturbed."""
    if threading.current_thread() is threading.main_thread():
        for s in _HANDLED:
            signal.signal(s, signal.SIG_IGN)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class _Plan:
    """What :func:`run_episode` checked before anything is written: the agent, its limits and the machine's."""

    spec: str
    argv: list[str]
    reference: bool
    mode: str
    caps: dict[str, Any]
    threads: int
    cpus: list[int]
    timeout_min: float
    grace_s: float


def _agent_of(agent: str | None, opts: RunOptions) -> tuple[str, list[str], bool]:
    """(spec, argv, reference) of the agent, or of the harness (its argv comes when it launches)."""
    if opts.harness:
        return agent or f"harness:{opts.harness}", [], False
    if not agent:
        raise InputError("give --agent (a command line, oracle, null or buggy:<kind>) or --harness NAME")
    return agent, resolve_agent(agent), is_reference(agent)


def _plan(ep: Episode, agent: str | None, opts: RunOptions) -> _Plan:
    """Every check that refuses a run before its folder is touched (InputError, one line)."""
    from mdbench.sandbox import capabilities  # noqa: PLC0415

    if os.path.lexists(ep.root / RESULT_JSON) or os.path.lexists(ep.root / "agent"):
        if not opts.force:
            raise InputError("this episode has already run; pass --force to run it again (the earlier run's "
                             "files and workspace move to previous/<n>/, nothing is deleted)", str(ep.root / RESULT_JSON))
    spec, argv, reference = _agent_of(agent, opts)
    mode = network_mode(opts)
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
    if opts.memory_mib is not None and opts.memory_mib < 0 or opts.pids_max < 0 or opts.tmp_size_mib <= 0:
        raise InputError("--memory-mib and --pids-max must be >= 0 (0: no limit) and --tmp-size-mib > 0")
    if opts.workspace_quota_mib < 0 or 0 < opts.workspace_quota_mib < 16:
        raise InputError(f"--workspace-quota-gib: at least 16 MiB, or 0 for none (got {opts.workspace_quota_mib} MiB)")
    return _Plan(spec, argv, reference, mode, caps, threads, cpus, timeout_min, grace_s)


def _initial_result(ep: Episode, opts: RunOptions, plan: _Plan, tools: Toolchain, previous: int) -> dict[str, Any]:
    """``result.json`` as written before the agent starts: status ``interrupted`` until the runner finishes."""
    return {
        "schema": RESULT_SCHEMA, "episode_id": ep.episode_id, "preset": ep.preset,
        "configuration": ep.configuration, "status": "interrupted", "exit_code": None,
        "reason": "the runner ended before the episode finished (killed); the agent's tree died with it",
        "scored_as_candidate": True, "agent": {"spec": plan.spec, "argv": plan.argv, "reference": plan.reference},
        "started_at": _now(), "finished_at": None, "wall_s": None, "cpu_s": None, "peak_memory_mib": None,
        "score": None, "dimensions": None, "audit": {"error": "not audited: the runner did not finish"},
        "agent_input_intact": None, "input_integrity": None, "stragglers_killed": None,
        "previous_runs": previous, "toolchain": tools.to_json(),
        "limits": {"timeout_min": plan.timeout_min, "grace_s": plan.grace_s, "threads": plan.threads,
                   "cpus": plan.cpus, "md_budget_ns_per_case": ep.limits.md_budget_ns_per_case,
                   "md_budget_ns_total": ep.limits.md_budget_ns_total, "network": plan.mode,
                   "env_passed": sorted(opts.env), **requested_limits(opts)},
    }


def run_episode(path: str | Path, agent: str | None, opts: RunOptions | None = None) -> dict[str, Any]:
    """Run ``agent`` (or the harness of ``opts.harness``) on the episode at ``path``; write and return
    ``result.json`` (see the module docstring).

    Raises
    ------
    InputError
        Not an episode folder; a finished run without ``force``; bad limits; isolation unavailable without
        ``allow_unconfined``. Nothing is written then. Once the agent's folder exists, every outcome is a
        ``result.json``.
    """
    from mdbench.sandbox import ensure_user  # noqa: PLC0415

    t0 = time.perf_counter()
    opts = opts or RunOptions()
    ep = load_episode(path)
    plan = _plan(ep, agent, opts)
    previous = _archive_previous(ep) if opts.force and (os.path.lexists(ep.root / RESULT_JSON)
                                                         or os.path.lexists(ep.root / "agent")) else 0
    logs = ep.root / "agent"
    logs.mkdir()
    tools = agent_toolchain(reference=plan.reference)
    result = _initial_result(ep, opts, plan, tools, previous)
    if opts.harness:   # what was asked (flags; None = $MDBENCH_LLM_* or the default); result["harness"] has what applied
        result["limits"]["harness_requested"] = {"max_tokens": opts.max_tokens, "max_usd": opts.max_usd,
                                                 "endpoint_api": opts.endpoint_api}
    write_result(ep.root / RESULT_JSON, result)
    old = {}
    if threading.current_thread() is threading.main_thread():
        old = {s: signal.signal(s, _raise_interrupted) for s in _HANDLED}
    try:
        _run_and_collect(ep, opts, plan.spec, plan.argv, plan.reference, tools, plan.threads, plan.cpus,
                         plan.timeout_min, plan.grace_s, logs, result, t0, ensure_user, plan.caps)
    except (EpisodeInterrupted, KeyboardInterrupt) as exc:
        _ignore_signals()
        result.update(status="interrupted", reason=f"the runner was stopped ({exc or 'KeyboardInterrupt'}) after "
                      "the agent ended; not audited")
    except Exception as exc:  # noqa: BLE001 — whatever the agent left, the episode gets its result
        log.exception("episode %s: the runner failed after starting", ep.episode_id)
        result["runner_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    finally:
        harness = result.pop("_harness", None)
        if harness is not None:
            _stop_harness(harness, result)
        result["finished_at"] = _now()
        write_result(ep.root / RESULT_JSON, result)
        for s, h in old.items():
            signal.signal(s, h)
    return result


def _stop_harness(harness: Any, result: dict[str, Any]) -> None:
    """``launch.stop()`` (always: also on timeout and interrupt); its metered figures become ``measured``."""
    try:
        summary = harness.stop() or {}
    except Exception as exc:  # noqa: BLE001
        summary = {}
        result.setdefault("cost", {}).setdefault("findings", []).append(
            collect.finding("harness_stop_failed", None, f"{type(exc).__name__}: {exc}"))
    measured = result.setdefault("cost", {}).setdefault("measured", {})
    findings = result["cost"].setdefault("findings", [])
    for key in ("tokens_in", "tokens_cached", "tokens_out", "calls"):
        measured[key] = collect.checked(summary.get(key), f"harness {key}", collect.MAX_TOKENS, findings, None)
    measured["usd"] = collect.checked(summary.get("usd"), "harness usd", collect.MAX_USD, findings, None)
    measured["capped"] = None if summary.get("capped") is None else str(summary.get("capped"))[:300]
    tin, tout = measured.get("tokens_in"), measured.get("tokens_out")
    measured["tokens"] = None if tin is None and tout is None else (tin or 0) + (tout or 0)
    measured["tokens_source"] = "harness proxy (metered by the runner)"
    traj = summary.get("trajectory_path")
    result["trajectory_path"] = None if traj is None else str(traj)
    result["tokens"], result["tokens_label"] = measured["tokens"], collect.MEASURED
    result["cost_usd"], result["cost_usd_label"] = measured["usd"], collect.MEASURED


def _run_and_collect(ep: Episode, opts: RunOptions, spec: str, argv: list[str], reference: bool, tools: Toolchain,
                     threads: int, cpus: list[int], timeout_min: float, grace_s: float, logs: Path,
                     result: dict[str, Any], t0: float, ensure_user: Any, caps: dict[str, Any]) -> None:
    """Launch, wait, collect, audit; fills ``result`` in place (the caller writes it whatever happens)."""
    uid_gid = ensure_user(opts.user) if (caps.get("root") and not opts.as_caller and opts.user) else None
    home = "/tmp"
    writable: tuple[Path, ...] = ()
    harness = None
    blocked: str | None = None
    if tools.problems and not reference:
        blocked = "infrastructure blocked: " + "; ".join(tools.problems)
    elif opts.harness:
        home_dir = ep.root / "home"
        harness, blocked = _harness(opts, ep, home_dir.resolve())
        if harness is not None:
            result["_harness"] = harness
            argv[:] = [str(a) for a in harness.argv]
            result["agent"]["argv"] = argv
            result["harness"] = {"name": opts.harness, "model": opts.model, "endpoint": opts.endpoint,
                                 "reasoning": opts.reasoning, **dict(getattr(harness, "info", {}) or {})}
            _prepare_home(home_dir, dict(getattr(harness, "home_files", {}) or {}), uid_gid)
            home, writable = str(home_dir.resolve()), (home_dir.resolve(),)
    env = agent_env(ep, threads, opts.gpus, opts.env, tools.path, home)
    if harness is not None:
        env.update({str(k): str(v) for k, v in (getattr(harness, "env", {}) or {}).items()})
    t_launch = time.perf_counter()
    launched_epoch = time.time()
    if blocked:
        sandbox = _blocked(logs, blocked)
    else:
        sandbox = _launch(ep, argv, opts, env, tools, cpus, timeout_min, grace_s, logs, harness, writable)
    t_end = time.perf_counter()
    if harness is not None:
        _trajectory_before_audit(harness)
    status = sandbox.pop("episode_status")
    before_agent = t_launch - t0 + sandbox.pop("prepared_s", 0.0)
    (logs / "sandbox.json").write_text(json.dumps(sandbox, indent=1, sort_keys=True, default=str) + "\n")
    result.update(status=status, exit_code=sandbox["exit_code"], reason=sandbox.get("reason"),
                  scored_as_candidate=status != "infrastructure_blocked",
                  wall_s=sandbox["wall_s"], cpu_s=sandbox["cpu_s"], peak_memory_mib=sandbox["peak_memory_mib"],
                  isolation=sandbox.get("method") or {"isolation": "not_started"},
                  sandbox_limits=(sandbox.get("method") or {}).get("limits"),
                  stragglers_killed=sandbox["stragglers_killed"], sandbox_status=sandbox["status"])
    _note_quota(result, (sandbox.get("method") or {}).get("limits") or {})
    integrity = check_integrity(ep)
    result.update(input_integrity=integrity, agent_input_intact=integrity["intact"])
    result.update(_costs(ep, opts, sandbox, logs, grace_s))
    work_entries: list[dict[str, Any]] = []
    if status not in ("interrupted", "infrastructure_blocked"):
        result["work"] = _work(ep, sandbox, threads, launched_epoch, opts)
        # the reference agents' replays copy the oracle's run by design: their verdict is recorded, not applied
        result["work"]["applied"] = not reference
        work_entries = [] if reference else work.adjudication_entries(result["work"])
        result["work_not_done_here"] = bool(work_entries)
    t_collected = time.perf_counter()
    if status == "interrupted":
        audit: dict[str, Any] = {"error": "not audited: the runner was stopped; run the episode again (--force) or "
                                          "audit the workspace"}
    else:
        audit = audit_workspace(ep.workspace, ep.bundle, ep.root / "audit", integrity, reanalysis=opts.reanalysis,
                                adjudication=opts.adjudication, work_dir=ep.root / "integrity", entries=work_entries)
    if harness is not None and status != "interrupted":   # the process judge's evidence: the evaluator's trajectory
        audit["process_evidence"] = _process_evidence(ep)
    t_audited = time.perf_counter()
    result.update(score=audit.get("composite"), dimensions=audit.get("dimensions"), audit=audit,
                  harness_s={"before_agent": round(before_agent, 3), "after_agent": round(t_collected - t_end, 3),
                             "audit": round(t_audited - t_collected, 3)})


def _work(ep: Episode, sandbox: dict[str, Any], threads: int, launched_epoch: float,
          opts: RunOptions) -> dict[str, Any]:
    """The work accounting of the workspace against what the sandbox measured (:func:`mdbench.episode.work.account`);
    a failure of the accounting itself is recorded (verdict ``not_assessed``, the failure named), never fatal."""
    n_gpus = len([g for g in opts.gpus.split(",") if g.strip()]) if opts.gpus else 0
    try:
        return work.account(ep.workspace, cpu_s=sandbox.get("cpu_s"), wall_s=sandbox.get("wall_s"), threads=threads,
                            started_epoch=launched_epoch, gpus=n_gpus, bundle=ep.bundle)
    except Exception as exc:  # noqa: BLE001 — the accounting of a hostile workspace never stops the episode
        log.exception("episode %s: the work accounting failed", ep.episode_id)
        return {"verdict": work.NOT_ASSESSED, "reason": f"the work accounting failed: {type(exc).__name__}: {exc}"[:300],
                "items_lowered": {}}


def _trajectory_before_audit(harness: Any) -> None:
    """Stop the harness's proxy now: its log becomes ``EP/trajectory.json`` before the audit (``launch.stop()`` is
    idempotent; :func:`_stop_harness` takes the metered figures from the same summary at the end)."""
    try:
        harness.stop()
    except Exception:  # noqa: BLE001 — _stop_harness records the failure
        log.exception("the harness proxy did not stop cleanly")


def _process_evidence(ep: Episode) -> dict[str, Any] | None:
    """The tool calls of ``EP/trajectory.json`` as process evidence, in ``EP/audit/process_evidence.json``."""
    from mdbench.llm.process import write_process_evidence  # noqa: PLC0415

    try:
        return write_process_evidence(ep.root, ep.root / "audit")
    except Exception as exc:  # noqa: BLE001 — evidence that cannot be read is recorded, never fatal
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def _note_quota(result: dict[str, Any], applied: dict[str, Any]) -> None:
    """``workspace_quota`` of the result (what the sandbox applied and used); a full workspace is named in
    ``reason`` (``workspace_quota_exceeded``) and ``limits_reached``, a failed copy-back in ``runner_error``."""
    quota = applied.get("workspace_quota")
    result["workspace_quota"] = quota
    if not quota:
        return
    if quota.get("quota_reached"):
        result["limits_reached"] = [*result.get("limits_reached", []), "workspace_quota"]
        used = quota.get("used_bytes", 0) / 2**20
        note = (f"workspace_quota_exceeded: the workspace reached its {quota['quota_mib']} MiB quota ({used:.0f} MiB "
                f"used, {quota.get('inodes_free')} inodes free); writes past it failed")
        result["reason"] = note if not result.get("reason") else f"{note}; {result['reason']}"
    if quota.get("error"):
        result["runner_error"] = quota["error"]


def _costs(ep: Episode, opts: RunOptions, sandbox: dict[str, Any], logs: Path, grace_s: float) -> dict[str, Any]:
    """The cost block of ``result.json``: ``self_reported`` (validated agent files) and ``measured``."""
    ws = ep.workspace
    listing = collect.workspace_walk(ws)
    costs = collect.agent_costs(ws)
    if costs["source"]:
        path = collect.within(ws, costs["source"])
        try:
            raw = untrusted.read_bytes(path, max_bytes=collect.MAX_JSON_BYTES) if path else None
        except untrusted.Refused:
            raw = None
        if raw is not None:
            (logs / Path(costs["source"]).name).write_bytes(raw)
    ledger = collect.ns_charged(ws)
    disk = collect.ns_on_disk(ws, listing)
    wall_s = float(sandbox.get("wall_s") or 0.0)
    gpu_logs = collect.gpu_hours(ws, listing, max_wall_s=wall_s + grace_s + 60.0)
    n_gpus = len([g for g in opts.gpus.split(",") if g.strip()]) if opts.gpus else 0
    findings = [*costs.pop("findings"), *ledger["findings"], *disk["findings"], *gpu_logs["findings"],
                *collect.cross_check_ledger(ledger, disk)]
    if listing.truncated:
        findings.append(collect.finding("workspace_walk_truncated", None, listing.reason or "truncated"))
    workspace_bytes = sum(e.size for e in listing.entries if e.kind == "file")
    self_reported = {"tokens": costs["total_tokens"], "prompt_tokens": costs["prompt_tokens"],
                     "completion_tokens": costs["completion_tokens"], "cached_tokens": costs["cached_tokens"],
                     "usd": costs["usd"], "gpu_hours": gpu_logs["gpu_hours"], "ns_charged": ledger["total_ns"],
                     "source": costs["source"], "ledger": ledger["source"], "gpu_logs": gpu_logs["gpu_logs"]}
    measured = {"wall_s": sandbox.get("wall_s"), "cpu_s": sandbox.get("cpu_s"),
                "peak_memory_mib": sandbox.get("peak_memory_mib"),
                "gpu_hours": round(wall_s * n_gpus / 3600.0, 6), "gpus_allotted": n_gpus,
                "ns_on_disk": disk["total_ns"], "ns_on_disk_per_case": disk["per_case_ns"],
                "xtc_files": disk["xtc_files"], "workspace_bytes": workspace_bytes,
                "workspace_entries": len(listing.entries), "tokens": None, "usd": None, "tokens_source": None}
    ns_self = ledger["total_ns"]
    ns_budget = max(x for x in (ns_self, disk["total_ns"], 0.0) if x is not None)
    per_case = dict(ledger["per_case_ns"])
    for case, v in disk["per_case_ns"].items():
        per_case[case] = max(per_case.get(case, 0.0), v)
    return {
        "gpu_hours": measured["gpu_hours"], "gpus": opts.gpus or None, "gpu_detail": gpu_logs,
        "ns_charged": ns_self, "ns_charged_per_case": ledger["per_case_ns"], "ledger": ledger,
        "ns_on_disk": disk["total_ns"], "ns_label": collect.SELF_REPORTED,
        "budget_exceeded": bool(ns_budget > ep.limits.md_budget_ns_total
                                or any(v > ep.limits.md_budget_ns_per_case for v in per_case.values())),
        "tokens": costs["total_tokens"], "tokens_label": collect.SELF_REPORTED,
        "cost_usd": costs["usd"], "cost_usd_label": collect.SELF_REPORTED,
        "cost": {**costs, "self_reported": self_reported, "measured": measured, "findings": findings},
        "cost_findings": len(findings),
    }


def write_result(path: Path, doc: dict[str, Any]) -> None:
    """``result.json`` written to a temporary name and renamed (strict JSON: no NaN)."""
    doc = {k: v for k, v in doc.items() if not k.startswith("_")}
    text = json.dumps(doc, indent=1, sort_keys=True, allow_nan=False, default=str) + "\n"
    tmp = path.with_suffix(".json.tmp")
    untrusted.write_new(tmp, text)
    os.replace(tmp, path)
