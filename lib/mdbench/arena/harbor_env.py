"""Harbor environment plug-in that runs a task on this machine instead of in a container.

Use it with Harbor's own CLI (Python ≥ 3.12, ``make harbor-env``)::

    .venv-harbor/bin/harbor run -p templates/arena/tasks -a oracle -e mdbench.arena.harbor_env:HostEnvironment

A trial gets a private workspace that stands in for the container (:mod:`mdbench.arena.staging`,
the same mapping as ``mdbench arena run``): the task's ``environment/Dockerfile`` is replayed in it
(``COPY``, ``RUN``, ``ENV``, ``WORKDIR``; ``FROM`` must be the suite's base image, whose contents this
machine provides), container paths in commands and uploaded files are rewritten to the workspace,
and commands run with ``bash -c``.

**Agent commands** (the task's non-root ``[agent] user``) run through :func:`mdbench.sandbox.spawn_confined`
as the unprivileged host account ``mdbench-arena-agent`` (root only): own PID, mount and network
namespaces, only the system folders, the workspace's ``/app`` and agent log folders, the agent toolchain
(``MDBENCH_AGENT_PYTHON`` / ``.agent-env``: GROMACS, packmol, scientific Python, no mdbench) and the
agent's own install (``--ek expose=…``) visible — the project checkout with ``.git``, tests and
templates, every other checkout, the task and dataset folders, the whole jobs tree and the host's
``/tmp`` are not. Harbor's oracle (the only caller that uploads ``/solution``) gets the project's
interpreter instead, for its ATIF recorder.

**Separate verifier** (``[verifier] environment_mode = "separate"``, every task of the suite): Harbor
starts a second environment for the verifier; this plug-in gives it a fresh workspace holding ``/app``
as the build left it (kept aside, root-only, before the agent ran), then Harbor uploads the agent's
declared artifacts and the tests. The agent's trajectory (``trajectory.json``, which Harbor downloaded
to the trial's ``agent/`` folder) is copied in as a regular file for the process judge. Nothing the
agent left elsewhere — a link at a name the grader writes, a process — reaches the grader, which runs as
root only in that fresh workspace. Every download copies folders and regular files only
(:func:`mdbench.arena.staging.copy_untrusted`: no link followed, sizes capped) and writes workspace paths
back as container paths (``/app/…``), so kept artifacts are self-contained.

**Allow-list** (``network_mode = "allowlist"``; Harbor asks for one for every installed agent, such as its own
``codex`` and ``opencode``, naming the model endpoint's host): supported for loopback hosts (``127.0.0.1``,
``localhost``, ``::1``), i.e. a model endpoint or metering proxy on this machine. Every command of the trial then
runs in its own network namespace with the network cut; the endpoint's ports (from the URLs in the trial's
agent configuration — ``--ak base_url=http://127.0.0.1:PORT/v1`` — and ``*_BASE_URL`` of this environment, or
``--ek allow_ports=PORT,…``) are opened on the namespace's own ``127.0.0.1`` and each connection is relayed to
the endpoint from the host side (:mod:`mdbench.arena.relay`). Nothing else is reachable. Another host is
refused before the trial starts. The pinned CLIs of ``make agent-harnesses`` (``.agent-harnesses``, or
``$MDBENCH_AGENT_HARNESSES``) are first on every command's ``PATH`` and visible read-only, so Harbor's
``codex --version`` check finds them (or pass ``--ak skip_install=true``).

Options (``--ek key=value``): ``python`` (interpreter of root steps and the oracle; default: the
project's ``.venv``), ``agent_python`` (the agent toolchain's interpreter), ``expose`` (comma-separated
folders of the agent's own install, read-only), ``agent_user``, ``keep_workspace``, ``workspace_root``,
``allow_unenforced_network``, ``allow_ports``.

This module imports Harbor and is only importable in the Harbor environment.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import shutil
import urllib.parse
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.options import EnvironmentOptions

from mdbench.arena import staging
from mdbench.arena.relay import LoopbackRelay
from mdbench.errors import InputError

#: Environment type name recorded in Harbor's config and logs.
TYPE_NAME = "mdbench-host"
#: Marker in the session id Harbor gives a separate verifier environment (``<trial>__verifier__<key>``).
VERIFIER_SESSION = "__verifier__"
#: Top-level system folders never hidden as a whole (a jobs tree directly below one is hidden by name).
_SYSTEM = {"/", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/dev", "/proc", "/sys", "/opt", "/var", "/tmp"}


class HostOptions(EnvironmentOptions):
    """``--ek`` options of :class:`HostEnvironment`."""

    python: str | None = Field(default=None, description="Interpreter of root steps and the oracle (MDBENCH_PYTHON).")
    agent_python: str | None = Field(default=None, description="Agent toolchain interpreter (no mdbench).")
    expose: str | None = Field(default=None, description="Comma-separated folders of the agent's own install, "
                                                         "shown read-only in the sandbox.")
    agent_user: str = Field(default=staging.HOST_AGENT_USER,
                            description="Host account that runs commands of a non-root task user (root only).")
    keep_workspace: bool = Field(default=False, description="Keep the trial workspace after the trial.")
    workspace_root: str | None = Field(default=None, description="Folder for trial workspaces (default: $TMPDIR/mdbench-arena-workspaces).")
    allow_unenforced_network: bool = Field(
        default=False, description="Run no-network tasks even where the network cannot be cut (recorded in the log).")
    allow_ports: str | None = Field(
        default=None, description="Comma-separated ports of the allow-listed loopback host(s) to relay, where the "
                                  "agent's base URL does not name them.")


class HostEnvironment(BaseEnvironment):
    """Runs a Harbor task in a workspace on this machine (see the module docstring)."""

    options_model = HostOptions
    #: Agent workspaces by trial folder, so that the trial's separate verifier starts from the same build (kept
    #: in :mod:`mdbench.arena.staging`: Harbor may load this plug-in module more than once).
    _agent_workspaces: ClassVar[dict[str, staging.Workspace]] = staging.AGENT_WORKSPACES

    def __init__(self, *args: Any, **kwargs: Any):
        self._ws: staging.Workspace | None = None
        self._oracle = False
        self._relay_targets: dict[int, tuple[str, int]] | None = None
        super().__init__(*args, **kwargs)
        self._python = self.options.python or staging.default_python()
        self._agent_python = self.options.agent_python or staging.agent_python()
        self.logger.debug("mdbench host environment for %s (python %s, agent toolchain %s)",
                          self.environment_name, self._python, self._agent_python)

    # --- Harbor's contract -------------------------------------------------------------------
    @staticmethod
    def type() -> str:
        return TYPE_NAME

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        cut = staging.network_cut_available()
        options = getattr(self, "options", None)
        return EnvironmentCapabilities(disable_internet=cut or bool(options and options.allow_unenforced_network),
                                       network_allowlist=cut, network_allowlist_hostnames=cut,
                                       network_allowlist_ipv4_addresses=cut, network_allowlist_ipv6_addresses=cut)

    def validate_network_policy_support(self, network_policy: Any = None) -> None:
        super().validate_network_policy_support(network_policy)
        policy = network_policy or self.network_policy
        if getattr(policy.network_mode, "value", policy.network_mode) != "allowlist":
            return
        other = [h for h in policy.allowed_hosts if not _is_loopback(h)]
        if other:
            raise ValueError(
                f"network_mode='allowlist' with {', '.join(other)} is not supported by {TYPE_NAME} environment: it "
                "relays loopback endpoints only; run the model endpoint (or `python -m mdbench.llm.proxy "
                "--endpoint URL`) on this machine and give its http://127.0.0.1:PORT/v1 as the agent's base URL")

    @property
    def is_verifier(self) -> bool:
        """Whether Harbor started this environment as a trial's separate verifier."""
        return VERIFIER_SESSION in str(getattr(self, "session_id", ""))

    def _validate_definition(self) -> None:
        if not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(
                f"{self.environment_dir}: no Dockerfile; the mdbench host environment builds a task by replaying "
                "environment/Dockerfile (a prebuilt docker_image alone needs Docker)")
        image = staging.base_image(self.environment_dir / "Dockerfile")
        if image is None or staging.image_repo(image) != staging.BASE_IMAGE_REPO:
            raise ValueError(f"{self.environment_dir / 'Dockerfile'}: FROM {image}; the mdbench host environment "
                             f"provides only {staging.BASE_IMAGE_REPO}")

    async def start(self, force_build: bool) -> None:
        key = str(self.trial_paths.trial_dir.resolve())
        agent_ws = self._agent_workspaces.get(key)
        if self.is_verifier and agent_ws is not None and agent_ws.pristine.is_dir():
            try:
                self._ws = await asyncio.to_thread(agent_ws.fresh_copy,
                                                   f"harbor-verifier-{self.environment_name[:32]}-")
            finally:
                self._agent_workspaces.pop(key, None)
                await asyncio.to_thread(agent_ws.remove_pristine)
            await asyncio.to_thread(self._copy_trajectory)
            return
        self._ws = staging.Workspace.create(prefix=f"harbor-{self.environment_name[:40]}-",
                                            parent=self.options.workspace_root)
        build_log = self.trial_paths.trial_dir / ("verifier-environment-build.txt" if self.is_verifier
                                                  else "environment-build.txt")
        try:
            await asyncio.to_thread(staging.build_workspace, self.environment_dir, self._ws, env=self._base_env(),
                                    log_path=build_log, timeout_s=float(self.task_env_config.build_timeout_sec),
                                    no_network=self._network_disabled or self._network_is_allowlist)
        except InputError as exc:
            raise SandboxBuildFailedError(f"environment build failed: {exc} (log: {build_log})") from exc
        if self.task_env_config.workdir:
            self._ws.workdir = self.task_env_config.workdir
        if self.is_verifier:
            await asyncio.to_thread(self._copy_trajectory)
        else:
            self._sweep_pristine()
            await asyncio.to_thread(self._ws.keep_pristine)
            self._agent_workspaces[key] = self._ws
        if self._network_disabled and not staging.network_cut_available():
            self.logger.warning("%s: network_mode is no-network but namespaces are not permitted here; the "
                                "network stays on (allow_unenforced_network)", self.environment_name)

    async def stop(self, delete: bool) -> None:
        if self._ws is None:
            return
        # the agent's environment ends before the separate verifier starts (Harbor stops it once artifacts are
        # collected): its pristine /app stays, registered, until that verifier took it (one left by a trial that
        # ended without verification is removed by the next start, see _sweep_pristine)
        if delete and not self.options.keep_workspace:
            await asyncio.to_thread(self._ws.remove)
        else:
            self.logger.info("workspace kept at %s", self._ws.root)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        self._note_upload(target_path)
        self._workspace().copy_in(Path(source_path), target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        self._note_upload(target_dir)
        self._workspace().copy_in(Path(source_dir), target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        ws = self._workspace()
        src = ws.host(source_path)
        if os.path.islink(src) or not src.is_file():
            raise FileNotFoundError(f"{source_path} (workspace {src}) is not a regular file")
        target = Path(target_path)
        skipped = await asyncio.to_thread(staging.copy_untrusted, src, target.parent / ".mdbench-download",
                                          rewrite=ws.unrewrite)
        tmp = target.parent / ".mdbench-download" / src.name
        try:
            if skipped or not tmp.is_file():
                raise FileNotFoundError(f"{source_path}: not copied ({'; '.join(skipped) or 'missing'})")
            os.replace(tmp, target)
        finally:
            shutil.rmtree(target.parent / ".mdbench-download", ignore_errors=True)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        ws = self._workspace()
        src = ws.host(source_dir)
        if os.path.islink(src) or not src.is_dir():
            raise FileNotFoundError(f"{source_dir} (workspace {src}) is not a folder")
        skipped = await asyncio.to_thread(staging.copy_untrusted, src, Path(target_dir), rewrite=ws.unrewrite)
        if skipped:
            self.logger.warning("%s: left out of the download (not regular files or too large): %s", source_dir,
                                "; ".join(skipped[:20]))

    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        p = self._workspace().host(path)
        return not os.path.islink(p) and p.is_dir()

    async def is_file(self, path: str, user: str | int | None = None) -> bool:
        p = self._workspace().host(path)
        return not os.path.islink(p) and p.is_file()

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        ws = self._workspace()
        user = self._resolve_user(user)
        command = _persistent_tmp(command)
        full_env = {**self._base_env(), **{k: ws.rewrite(_persistent_tmp(v))
                                           for k, v in (self._merge_env(env) or {}).items()}}
        host_cwd = ws.host(cwd or self.task_env_config.workdir or ws.workdir)
        box = self._sandbox(user)
        if not box.confined:
            command = self._host_owner(command)
        proc, out = await asyncio.to_thread(staging.start, ws.rewrite(command), box, cwd=host_cwd, env=full_env,
                                            timeout_s=float(timeout_sec) if timeout_sec else None)
        relay = LoopbackRelay(dict(getattr(proc, "listeners", {}) or {}), dict(self._relay_targets or {})).start()
        try:
            rc, timed_out, text = await asyncio.to_thread(staging.finish, proc, out)
        except asyncio.CancelledError:
            # an interrupt (SIGINT/SIGTERM to harbor) ends the whole confined tree, not only this wait
            await asyncio.shield(asyncio.to_thread(proc.terminate))
            raise
        finally:
            await asyncio.to_thread(relay.close)
        if relay.connections or relay.failed:
            self.logger.debug("relayed %d connection(s) to the allow-listed endpoint (%d failed)",
                              relay.connections, relay.failed)
        if timed_out:
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        return ExecResult(stdout=text, stderr="", return_code=rc if rc is not None else -1)

    # --- helpers ---------------------------------------------------------------------------------
    def _workspace(self) -> staging.Workspace:
        if self._ws is None:
            raise RuntimeError("the host environment has not been started")
        return self._ws

    def _note_upload(self, target: str) -> None:
        # Harbor's oracle is the only caller that uploads the reference solution; it gets the project's
        # interpreter (its solve.py records an ATIF trajectory with mdbench.arena.atif)
        if str(target).rstrip("/") == "/solution" or str(target).startswith("/solution/"):
            self._oracle = True

    def _host_owner(self, command: str) -> str:
        """``chown TASKUSER[:GROUP] …`` in a root step → the host account that runs the task user's commands.

        Harbor's installed agents hand their config files to the task's ``[agent] user`` (``chown agent FILE``);
        on this machine that user's commands run as ``agent_user`` (``mdbench-arena-agent``), and the task's
        name is no host account.
        """
        task_user = self.default_user
        host = self.options.agent_user
        if task_user in (None, "root", 0) or not staging.is_root() or str(task_user) == host:
            return command
        name = re.escape(str(task_user))
        return re.sub(rf"(\bchown\s+(?:-R\s+)?){name}(?=[\s:])", lambda m: m.group(1) + host, command)

    def _allowlist_targets(self) -> dict[int, tuple[str, int]]:
        """Port inside the sandbox → (host, port) the evaluator connects to, for an ``allowlist`` policy.

        Ports come from ``--ek allow_ports`` and from every ``http(s)://HOST[:PORT]`` URL whose host is allow-listed
        in the trial's agent configuration (``config.json``: ``--ak base_url=…``, ``--ae``) and in this
        environment's ``*_BASE_URL`` variables. Raises :class:`ValueError` when no port is known.
        """
        if self._relay_targets is not None:
            return self._relay_targets
        if not self._network_is_allowlist:
            self._relay_targets = {}
            return self._relay_targets
        from mdbench import untrusted

        hosts = {_host_key(h) for h in self.network_policy.allowed_hosts}
        first = sorted(self.network_policy.allowed_hosts)[0] if self.network_policy.allowed_hosts else "127.0.0.1"
        urls: list[str] = []
        cfg, _ = untrusted.try_read_json(self.trial_paths.trial_dir / "config.json")
        agent = cfg.get("agent") if isinstance(cfg, dict) else None
        _strings(agent, urls)
        urls += [v for k, v in os.environ.items() if k.endswith("_BASE_URL")]
        targets: dict[int, tuple[str, int]] = {}
        for text in urls:
            for url in re.findall(r"https?://[^\s\"'<>]+", text)[:100]:
                try:
                    parts = urllib.parse.urlsplit(url)
                    port = parts.port or (443 if parts.scheme == "https" else 80)
                except ValueError:
                    continue
                if parts.hostname and _host_key(parts.hostname) in hosts and _is_loopback(parts.hostname):
                    targets.setdefault(port, (parts.hostname, port))
        for item in (self.options.allow_ports or "").split(","):
            if item.strip():
                port = int(item)
                if not 0 < port < 65536:
                    raise ValueError(f"--ek allow_ports={self.options.allow_ports}: {port} is not a TCP port")
                targets.setdefault(port, (first, port))
        if not targets:
            raise ValueError(f"network_mode='allowlist' ({', '.join(sorted(hosts))}): no port of the endpoint known "
                             "to the mdbench host environment; give the agent a base URL with its port "
                             "(--ak base_url=http://127.0.0.1:PORT/v1) or pass --ek allow_ports=PORT")
        self._relay_targets = targets
        self.logger.info("allow-list: relaying 127.0.0.1:%s inside the sandbox to %s",
                         ",".join(map(str, targets)), ", ".join(f"{h}:{p}" for h, p in targets.values()))
        return targets

    def _sweep_pristine(self) -> None:
        """Remove pristine copies of trials that finished (their ``result.json`` is written) unverified."""
        for key, ws in list(self._agent_workspaces.items()):
            if (Path(key) / "result.json").is_file():
                self._agent_workspaces.pop(key, None)
                ws.remove_pristine()

    def _copy_trajectory(self) -> None:
        """The agent's trajectory (downloaded by Harbor to the trial's agent/) into the verifier's /logs/agent."""
        src = self.trial_paths.agent_dir / "trajectory.json"
        if os.path.lexists(src):
            staging.copy_untrusted(src, self._workspace().host("/logs/agent"))

    def _base_env(self) -> dict[str, str]:
        env = staging.command_env(self._workspace(), self._python, task=self.environment_name)
        if self.is_verifier:
            env.update(self._scored_identity())
        return env

    def _scored_identity(self) -> dict[str, str]:
        """``ARENA_TRIAL_NAME`` / ``ARENA_AGENT_NAME`` for the verifier, from Harbor's own trial ``config.json``."""
        from mdbench import untrusted

        out = {"ARENA_TRIAL_NAME": self.trial_paths.trial_dir.name}
        cfg, _ = untrusted.try_read_json(self.trial_paths.trial_dir / "config.json")
        agent = (cfg or {}).get("agent") if isinstance(cfg, dict) else None
        if isinstance(agent, dict):
            kwargs = agent.get("kwargs") if isinstance(agent.get("kwargs"), dict) else {}
            name = kwargs.get("agent_name") or agent.get("name") or agent.get("import_path")
            if name:
                out["ARENA_AGENT_NAME"] = str(name)
        return out

    def _sandbox(self, user: str | int | None) -> staging.Sandbox:
        jobs = self.trial_paths.trial_dir.resolve().parent.parent
        extra = [jobs] if str(jobs) not in _SYSTEM else [self.trial_paths.trial_dir.resolve().parent]
        if self.options.workspace_root:
            extra.append(Path(self.options.workspace_root).resolve())
        hide = staging.hidden_folders(self.environment_dir.parent, *extra)
        expose = tuple(Path(e.strip()) for e in (self.options.expose or "").split(",") if e.strip())
        agent_step = user not in (None, "root", 0)
        python = self._agent_python if (agent_step and not self._oracle and not self.is_verifier) else self._python
        clis = _agent_clis()
        if clis is not None:    # the CLIs' packages (.bin holds links into node_modules), read-only
            expose = (*expose, clis.parent.parent)
        return staging.make_sandbox(self._workspace(), user=user, no_network=self._network_disabled,
                                    python=python, hide=hide, host_user=self.options.agent_user,
                                    oracle=self._oracle, expose=expose,
                                    loopback_listen=tuple(self._allowlist_targets()),
                                    path_prepend=(clis,) if clis is not None else ())


def _persistent_tmp(text: str) -> str:
    """Harbor's agent ``/tmp`` folders (:data:`staging.HARBOR_TMP_PATHS`) → under ``/installed-agent/tmp``.

    Each command here gets a private ``/tmp``; a container keeps one across commands, and Harbor's codex agent
    writes ``auth.json`` there in one command and reads it in the next.
    """
    for p in staging.HARBOR_TMP_PATHS:
        text = re.sub(rf"(?<![\w./-]){re.escape(p)}(?![\w.-])", staging.AGENT_TMP + p[len("/tmp"):], text)
    return text


def _agent_clis() -> Path | None:
    """``node_modules/.bin`` of the pinned agent CLIs (``make agent-harnesses``), when installed."""
    from mdbench.paths import PROJECT_ROOT

    root = Path(os.environ.get("MDBENCH_AGENT_HARNESSES") or PROJECT_ROOT / ".agent-harnesses")
    bins = root / "node_modules" / ".bin"
    return bins.resolve() if bins.is_dir() else None


def _host_key(host: str) -> str:
    return host.strip().strip("[]").lower().rstrip(".")


def _is_loopback(host: str) -> bool:
    h = _host_key(host)
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _strings(value: Any, out: list[str], depth: int = 0) -> None:
    """Every string in a JSON value (bounded depth and count)."""
    if depth > 8 or len(out) > 1000:
        return
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out, depth + 1)


__all__ = ["HostEnvironment", "HostOptions", "TYPE_NAME"]
