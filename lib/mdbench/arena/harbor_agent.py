"""Harbor agent plug-in that runs one shell command in the task environment.

The same contract as ``mdbench arena run --agent CMD``, inside Harbor::

    .venv-harbor/bin/harbor run -p templates/arena/tasks -e mdbench.arena.harbor_env:HostEnvironment \\
        -a mdbench.arena.harbor_agent:CommandAgent --ak command='my-agent "$(cat $ARENA_INSTRUCTION)"'

The command runs in the task's working directory (``/app``) as the task's agent user, with the
instruction in ``/logs/agent/instruction.md`` (``$ARENA_INSTRUCTION``). It may write
``/logs/agent/trajectory.json`` (ATIF) and ``/logs/agent/usage.json``
(``{n_input_tokens, n_output_tokens, n_cache_tokens, cost_usd}``; each figure must be finite and ≥ 0, a forged
one is left out and flagged, :mod:`mdbench.arena.usage`); nothing is written for it — a
command that records no trajectory has none, and its process reward is unscorable. Its output goes
to ``/logs/agent/command-output.txt``; a non-zero exit raises ``NonZeroAgentExitCodeError`` (Harbor
still grades the trial). With no ``command`` (or ``command=true``) it is the null agent.

This module imports Harbor and is only importable in the Harbor environment.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from harbor.agents.base import BaseAgent
from harbor.agents.installed.base import NonZeroAgentExitCodeError
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext
from harbor.models.trial.paths import EnvironmentPaths

from mdbench.arena.usage import FINDINGS_KEY, read_usage
from mdbench.untrusted import write_new

OUTPUT_FILE = "command-output.txt"
INSTRUCTION_FILE = "instruction.md"
USAGE_FILE = "usage.json"


class CommandAgent(BaseAgent):
    """Runs ``command`` (an ``--ak`` kwarg) once; ``agent_name`` and ``agent_version`` name it."""

    def __init__(self, logs_dir: Path, model_name: str | None = None, command: str = "true",
                 agent_name: str = "command", agent_version: str = "1.0.0", **kwargs: Any):
        super().__init__(logs_dir=logs_dir, model_name=model_name, **kwargs)
        # --ak values are parsed as YAML: "null", "true", numbers arrive as None, True, 1 — keep them as text
        self.command = "true" if command in (None, True) else str(command)
        self._name = "command" if agent_name is None else str(agent_name)
        self._version = str(agent_version)

    @staticmethod
    def name() -> str:
        return "command"

    def to_agent_info(self):
        info = super().to_agent_info()
        info.name = self._name
        return info

    def version(self) -> str:
        return self._version

    async def setup(self, environment: BaseEnvironment) -> None:
        return

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        agent_dir = EnvironmentPaths.agent_dir
        instruction_path = agent_dir / INSTRUCTION_FILE
        local = self.logs_dir / INSTRUCTION_FILE
        local.write_text(instruction, encoding="utf-8")
        await environment.upload_file(local, str(instruction_path))
        command = f"{{ {self.command}\n}} > {shlex.quote(str(agent_dir / OUTPUT_FILE))} 2>&1"
        result = await environment.exec(command, env={"ARENA_INSTRUCTION": str(instruction_path)})
        usage = self.logs_dir / USAGE_FILE
        try:
            await environment.download_file(str(agent_dir / USAGE_FILE), usage)
        except (FileNotFoundError, RuntimeError):
            pass
        self._read_usage(usage, context)
        if result.return_code != 0:
            raise NonZeroAgentExitCodeError(f"Agent command exited with code {result.return_code}")

    @staticmethod
    def _read_usage(path: Path, context: AgentContext) -> None:
        """Usage the agent reported, each figure checked (:mod:`mdbench.arena.usage`); forged ones are left out
        and listed under ``context.metadata["mdbench_usage_findings"]`` (and in ``usage-findings.txt``)."""
        fields, findings = read_usage(path)
        for key, value in fields.items():
            if value is not None:
                setattr(context, key, value)
        if findings:
            context.metadata = {**(context.metadata or {}), FINDINGS_KEY: findings}
            write_new(path.with_name("usage-findings.txt"), "\n".join(findings) + "\n")
