"""Harbor environment plug-in that runs a task on this machine instead of in a container.

Use it with Harbor's own CLI (Python ≥ 3.12, ``make harbor-env``)::

    .venv-harbor/bin/harbor run -p templates/arena/tasks -a oracle -e mdbench.arena.harbor_env:HostEnvironment

A trial gets a private workspace that stands in for the container (:mod:`mdbench.arena.staging`,
the same mapping as ``mdbench arena run``): the task's ``environment/Dockerfile`` is replayed in it
(``COPY``, ``RUN``, ``ENV``, ``WORKDIR``; ``FROM`` must be the suite's base image, whose contents this
machine provides), container paths in commands and uploaded files are rewritten to the workspace,
and commands run with ``bash -c``. As root, commands run as the task's ``[agent] user`` run as the
unprivileged host account ``mdbench-arena-agent`` in their own mount/PID namespaces with the task
folder and the job folder hidden, and in a network namespace of their own for
``network_mode = "no-network"`` (``unshare -n``). Without root the network cut is used where the
kernel permits it; otherwise the environment declares it cannot disable the network, and Harbor
refuses no-network tasks unless ``--ek allow_unenforced_network=true`` is given.

Options (``--ek key=value``): ``python`` (interpreter given to task scripts as ``MDBENCH_PYTHON``;
default: the one running Harbor), ``agent_user`` (host account for non-root task users),
``keep_workspace``, ``workspace_root``, ``allow_unenforced_network``.

This module imports Harbor and is only importable in the Harbor environment.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path
from typing import Any

from pydantic import Field

from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.options import EnvironmentOptions

from mdbench.arena import staging
from mdbench.errors import InputError

#: Environment type name recorded in Harbor's config and logs.
TYPE_NAME = "mdbench-host"


class HostOptions(EnvironmentOptions):
    """``--ek`` options of :class:`HostEnvironment`."""

    python: str | None = Field(default=None, description="Interpreter for task scripts (MDBENCH_PYTHON).")
    agent_user: str = Field(default=staging.HOST_AGENT_USER,
                            description="Host account that runs commands of a non-root task user (root only).")
    keep_workspace: bool = Field(default=False, description="Keep the trial workspace after the trial.")
    workspace_root: str | None = Field(default=None, description="Folder for trial workspaces (default: $TMPDIR/mdbench-arena-workspaces).")
    allow_unenforced_network: bool = Field(
        default=False, description="Run no-network tasks even where the network cannot be cut (recorded in the log).")


class HostEnvironment(BaseEnvironment):
    """Runs a Harbor task in a workspace on this machine (see the module docstring)."""

    options_model = HostOptions

    def __init__(self, *args: Any, **kwargs: Any):
        self._ws: staging.Workspace | None = None
        super().__init__(*args, **kwargs)
        self._python = self.options.python or staging.default_python()
        self.logger.debug("mdbench host environment for %s (python %s)", self.environment_name, self._python)

    # --- Harbor's contract -------------------------------------------------------------------
    @staticmethod
    def type() -> str:
        return TYPE_NAME

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        cut = staging.network_cut_available()
        options = getattr(self, "options", None)
        return EnvironmentCapabilities(disable_internet=cut or bool(options and options.allow_unenforced_network))

    def _validate_definition(self) -> None:
        if not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(
                f"{self.environment_dir}: no Dockerfile; the mdbench host environment builds a task by replaying "
                "environment/Dockerfile (a prebuilt docker_image alone needs Docker)")
        image = staging.base_image(self.environment_dir / "Dockerfile")
        if image is None or image.split(":")[0].split("/")[-1] != staging.BASE_IMAGE_REPO:
            raise ValueError(f"{self.environment_dir / 'Dockerfile'}: FROM {image}; the mdbench host environment "
                             f"provides only {staging.BASE_IMAGE_REPO}")

    async def start(self, force_build: bool) -> None:
        self._ws = staging.Workspace.create(prefix=f"harbor-{self.environment_name[:40]}-",
                                            parent=self.options.workspace_root)
        build_log = self.trial_paths.trial_dir / "environment-build.txt"
        try:
            await asyncio.to_thread(staging.build_workspace, self.environment_dir, self._ws, env=self._base_env(),
                                    log_path=build_log, timeout_s=float(self.task_env_config.build_timeout_sec),
                                    no_network=self._network_disabled)
        except InputError as exc:
            raise SandboxBuildFailedError(f"environment build failed: {exc} (log: {build_log})") from exc
        if self.task_env_config.workdir:
            self._ws.workdir = self.task_env_config.workdir
        if self._network_disabled and not staging.network_cut_available():
            self.logger.warning("%s: network_mode is no-network but unshare is not permitted here; the network "
                                "stays on (allow_unenforced_network)", self.environment_name)

    async def stop(self, delete: bool) -> None:
        if self._ws is None:
            return
        if delete and not self.options.keep_workspace:
            await asyncio.to_thread(self._ws.remove)
        else:
            self.logger.info("workspace kept at %s", self._ws.root)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        self._workspace().copy_in(Path(source_path), target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        self._workspace().copy_in(Path(source_dir), target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        src = self._workspace().host(source_path)
        if not src.is_file():
            raise FileNotFoundError(f"{source_path} (workspace {src}) does not exist")
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        src = self._workspace().host(source_dir)
        if not src.is_dir():
            raise FileNotFoundError(f"{source_dir} (workspace {src}) is not a folder")
        shutil.copytree(src, target_dir, dirs_exist_ok=True, symlinks=True)

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        ws = self._workspace()
        user = self._resolve_user(user)
        full_env = {**self._base_env(), **{k: ws.rewrite(v) for k, v in (self._merge_env(env) or {}).items()}}
        host_cwd = ws.host(cwd or self.task_env_config.workdir or ws.workdir)
        box = self._sandbox(user)
        argv = staging.sandbox_argv(ws.rewrite(command), box)
        proc = await asyncio.create_subprocess_exec(*argv, cwd=host_cwd, env=full_env, start_new_session=True,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_sec)
        except asyncio.TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds") from None
        except asyncio.CancelledError:
            _kill_group(proc.pid)
            raise
        _kill_group(proc.pid)   # nothing the command left behind in its group outlives it
        return ExecResult(stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"),
                          return_code=proc.returncode if proc.returncode is not None else -1)

    # --- helpers ---------------------------------------------------------------------------------
    def _workspace(self) -> staging.Workspace:
        if self._ws is None:
            raise RuntimeError("the host environment has not been started")
        return self._ws

    def _base_env(self) -> dict[str, str]:
        return staging.command_env(self._workspace(), self._python, task=self.environment_name)

    def _sandbox(self, user: str | int | None) -> staging.Sandbox:
        hide = staging.hidden_folders(self.environment_dir.parent, self.trial_paths.trial_dir.parent)
        return staging.make_sandbox(self._workspace(), user=user, no_network=self._network_disabled,
                                    python=self._python, hide=hide, host_user=self.options.agent_user)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


__all__ = ["HostEnvironment", "HostOptions", "TYPE_NAME"]
