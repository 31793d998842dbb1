"""ATIF, Harbor's Agent Trajectory Interchange Format: the version this project writes and the check of a
trajectory (specification: Harbor's ``rfcs/0001-trajectory-format.md``; validated in the tests with Harbor's
``Trajectory`` model). Below the rooms that read or write trajectories: the metering proxy (``mdbench.llm``)
converts its log into one, the arena's process judge (``mdbench.arena``) reads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_VERSION", "KNOWN_VERSIONS", "check_trajectory", "load_trajectory"]

SCHEMA_VERSION = "ATIF-v1.6"
#: Every ATIF version a trajectory may declare (Harbor 0.26 reads v1.0 … v1.8).
KNOWN_VERSIONS = tuple(f"ATIF-v1.{i}" for i in range(9))


def check_trajectory(data: Any) -> str | None:
    """Why ``data`` is not a usable ATIF trajectory (``None`` when it is).

    Checked: an object with a known ``schema_version``, an ``agent`` with ``name`` and ``version``, and
    a non-empty ``steps`` list of objects with ``step_id`` 1, 2, … and ``source`` system|user|agent.
    """
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("schema_version") not in KNOWN_VERSIONS:
        return (f"schema_version {data.get('schema_version')!r} is not an ATIF version "
                f"({KNOWN_VERSIONS[0]} … {KNOWN_VERSIONS[-1]})")
    agent = data.get("agent")
    if not isinstance(agent, dict) or not agent.get("name") or not agent.get("version"):
        return "agent.name and agent.version are required"
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        return "no steps"
    for i, s in enumerate(steps, 1):
        if not isinstance(s, dict) or s.get("step_id") != i or s.get("source") not in ("system", "user", "agent"):
            return f"step {i}: needs step_id {i} and source system|user|agent"
    return None


def load_trajectory(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(trajectory, None) for a usable ATIF file, else (None, reason) — missing, unreadable or not ATIF."""
    from mdbench import untrusted

    path = Path(path)
    data, refused = untrusted.try_read_json(path, max_bytes=64 * 1024 * 1024)
    if refused is not None and refused.reason == "missing":
        return None, f"no trajectory at {path}"
    if refused is not None:
        return None, f"{path}: refused ({refused.reason}: {refused.detail})"
    reason = check_trajectory(data)
    return (None, f"{path}: {reason}") if reason else (data, None)
