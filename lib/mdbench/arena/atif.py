"""ATIF trajectories (Harbor's Agent Trajectory Interchange Format): read them, and record one.

The process judge reads what MDArena's judge reads: the agent's ``trajectory.json`` in ATIF
(specification: Harbor's ``rfcs/0001-trajectory-format.md``, ATIF-v1.7; validated in the tests with
Harbor's ``Trajectory`` model). Nobody writes a trajectory *for* an agent — a run that recorded none
has none. The reference solutions record their own, as a real agent does: :class:`Recorder` logs the
steps a ``solve.py`` takes (what it decided and why, the call it made, what came back) and writes
``$ARENA_AGENT_DIR/trajectory.json`` (``/logs/agent/trajectory.json`` in a container).
"""

from __future__ import annotations

import datetime as _dt
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdbench.arena.folders import agent_dir

from mdbench.atif import KNOWN_VERSIONS, SCHEMA_VERSION, check_trajectory, load_trajectory  # noqa: F401 — re-exported


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Recorder:
    """Builds an ATIF trajectory step by step; :meth:`save` writes it.

    Examples
    --------
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> rec = Recorder("oracle")
    >>> rec.step("The first minimum after the peak bounds the shell.", call=("python", {"code": "argrelmin(g)"}),
    ...          result="r_min = 0.300 nm")
    >>> path = rec.save(Path(tempfile.mkdtemp()) / "trajectory.json")
    >>> len(json.loads(path.read_text())["steps"]) >= 1
    True
    """

    agent_name: str
    agent_version: str = "1.0.0"
    model_name: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    session_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def __post_init__(self) -> None:
        instruction = agent_dir() / "instruction.md"
        if instruction.is_file():
            self.user(instruction.read_text(encoding="utf-8"))

    def user(self, message: str) -> None:
        """A user message (the task instruction)."""
        self.steps.append({"step_id": len(self.steps) + 1, "timestamp": _now(), "source": "user", "message": message})

    def step(self, message: str, *, call: tuple[str, dict[str, Any]] | None = None, result: Any = None) -> None:
        """An agent step: its message, optionally one tool call ``(function, arguments)`` and what it returned.

        A ``result`` without a call is what the step printed; it is appended to the message.
        """
        content = None if result is None else (result if isinstance(result, str) else json.dumps(result, default=str))
        if call is None and content is not None:
            message = f"{message}\n{content}"
        s: dict[str, Any] = {"step_id": len(self.steps) + 1, "timestamp": _now(), "source": "agent",
                             "message": message}
        if self.model_name:
            s["model_name"] = self.model_name
        if call is not None:
            cid = f"call_{len(self.steps) + 1}"
            s["tool_calls"] = [{"tool_call_id": cid, "function_name": call[0], "arguments": call[1]}]
            s["observation"] = {"results": [{"source_call_id": cid, "content": content}]}
        self.steps.append(s)

    def to_json(self) -> dict[str, Any]:
        agent = {"name": self.agent_name, "version": self.agent_version}
        if self.model_name:
            agent["model_name"] = self.model_name
        return {"schema_version": SCHEMA_VERSION, "session_id": self.session_id, "agent": agent,
                "steps": self.steps}

    def save(self, path: Path | None = None) -> Path:
        path = Path(path) if path is not None else agent_dir() / "trajectory.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        return path
