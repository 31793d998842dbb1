"""Fixtures of the episode tests: one real oracle micro episode per session, and buggy replays of it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _episode_helpers import BIN, ensure_agent_env, oracle_episode_in, prepare, run  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def agent_env() -> None:
    """Evaluated agents run on the agent toolchain (``make agent-env``), never on this installation."""
    ensure_agent_env()


@pytest.fixture(scope="session")
def oracle_episode(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished oracle episode (micro preset, 2 threads); do not modify — copy what you change."""
    return oracle_episode_in(tmp_path_factory.mktemp("oracle"))


@pytest.fixture(scope="session")
def buggy_episodes(oracle_episode: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One finished episode per defect kind, each replaying the oracle's run and then breaking it."""
    from mdbench.episode.defects import DEFECTS

    ws = oracle_episode / "workspace"
    base = tmp_path_factory.mktemp("buggy")
    out = {}
    for kind in DEFECTS:
        ep = prepare(base / kind, "harness=reference", f"model=buggy-{kind}", "repeat=1")
        # under another account than the oracle's: a reference run must replay under any --user
        run(ep, f"{BIN / 'mdbench-buggy-agent'} {kind} --from-run {ws}", "--expose", str(ws), "--no-reanalysis",
            "--user", "mdbench-episode-replay")
        out[kind] = ep
    return out
