"""Fixtures of the episode tests: one real oracle micro episode per session, and buggy replays of it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _episode_helpers import BIN, CAPS, ORACLE_TIMEOUT_MIN, ensure_agent_env, prepare, run  # noqa: E402
from _testseed import seed_for  # noqa: E402  (tests/conftest.py puts tests/ on the path)


@pytest.fixture(scope="session", autouse=True)
def agent_env() -> None:
    """Evaluated agents run on the agent toolchain (``make agent-env``), never on this installation."""
    ensure_agent_env()


@pytest.fixture(scope="session")
def oracle_episode(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished oracle episode (micro preset, 2 threads); do not modify — copy what you change."""
    if shutil.which("gmx") is None or shutil.which("packmol") is None:
        pytest.skip("needs gmx and packmol on PATH")
    if not CAPS.get("namespaces"):
        pytest.skip(f"the OS cannot confine processes here: {CAPS.get('namespace_error')}")
    ep = prepare(tmp_path_factory.mktemp("oracle") / "ep", "harness=reference", "model=oracle", "repeat=1")
    oracle = f"{BIN / 'mdbench-oracle'} --seed {seed_for('episode/oracle')}"  # seeds from MDBENCH_TEST_SEED
    run(ep, oracle, "--threads", "2", "--timeout", str(ORACLE_TIMEOUT_MIN), timeout=ORACLE_TIMEOUT_MIN * 60 + 900)
    return ep


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
