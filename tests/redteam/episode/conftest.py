"""Cheating agents against ``mdbench episode run`` (issue 31): helpers from tests/episode, the agent toolchain."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "episode"))
from _episode_helpers import ensure_agent_env, oracle_episode_in  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def agent_env() -> None:
    """Evaluated agents run on the agent toolchain (``make agent-env``)."""
    ensure_agent_env()


@pytest.fixture(scope="session")
def oracle_episode(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished honest run to replay (the oracle on the micro preset, real GROMACS): do not modify."""
    return oracle_episode_in(tmp_path_factory.mktemp("oracle"))
