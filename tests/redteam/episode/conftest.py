"""Cheating agents against ``mdbench episode run`` (issue 31): helpers from tests/episode, the agent toolchain."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "episode"))
from _episode_helpers import ensure_agent_env  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def agent_env() -> None:
    """Evaluated agents run on the agent toolchain (``make agent-env``)."""
    ensure_agent_env()
