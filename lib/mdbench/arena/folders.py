"""Harbor's in-container folders, and where the local runner maps them (``$ARENA_*_DIR``).

Read by the verifier (:mod:`mdbench.arena.grading`), the process judge (:mod:`mdbench.arena.judge`) and the
trajectory writer (:mod:`mdbench.arena.atif`) inside a task's container or workspace.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Harbor's in-container paths and the environment variables the local runner maps them with.
HARBOR_PATHS: dict[str, str] = {
    "ARENA_APP_DIR": "/app",
    "ARENA_TESTS_DIR": "/tests",
    "ARENA_SOLUTION_DIR": "/solution",
    "ARENA_VERIFIER_DIR": "/logs/verifier",
    "ARENA_AGENT_DIR": "/logs/agent",
}


def harbor_path(var: str) -> Path:
    """Return the folder a Harbor path maps to: ``$VAR`` when set (local runner), else the container path.

    Parameters
    ----------
    var : str
        One of :data:`HARBOR_PATHS` (``ARENA_APP_DIR``, ``ARENA_TESTS_DIR``, ...).
    """
    return Path(os.environ.get(var, HARBOR_PATHS[var]))


def app_dir() -> Path:
    """The agent's working directory (``/app`` in the container)."""
    return harbor_path("ARENA_APP_DIR")


def tests_dir() -> Path:
    """The task's ``tests/`` folder (``/tests`` in the container)."""
    return harbor_path("ARENA_TESTS_DIR")


def verifier_dir() -> Path:
    """Where rewards go (``/logs/verifier`` in the container)."""
    return harbor_path("ARENA_VERIFIER_DIR")


def agent_dir() -> Path:
    """Where agent logs and the trajectory go (``/logs/agent`` in the container)."""
    return harbor_path("ARENA_AGENT_DIR")
