"""Shared fixtures of the arena tests: the whole suite run locally (oracle and null agent), Harbor's venv."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mdbench.arena.harbor_compat import HARBOR_VENV, harbor_python
from mdbench.arena.judge import load_process_criteria
from mdbench.arena.runner import AgentSpec, run_job
from mdbench.arena.task import TASKS_DIR, list_tasks

FIXTURES = Path(__file__).parent / "fixtures"


#: Agents the test suite runs (their names key the expert score files: scores belong to an agent, not a task).
BEST_AGENTS = ("oracle",)
WORST_AGENTS = ("null", "null-agent", "hostile", "peek", "lazy", "slow", "cheater")


def per_task_scores(best: bool) -> dict[str, dict[str, int]]:
    """Raw marks for every task: top marks (best=True) or bottom marks on every criterion."""
    out = {}
    for t in list_tasks(TASKS_DIR):
        crits = load_process_criteria(t.path / "tests" / "process.toml")
        out[t.name] = {c.name: ((c.points if c.type == "likert" else 1) if best else (1 if c.type == "likert" else 0))
                       for c in crits}
    return out


def expert_scores(best: bool) -> dict[str, dict]:
    """An expert score file keyed by agent: the agents of :data:`BEST_AGENTS` (best) or :data:`WORST_AGENTS`."""
    marks = per_task_scores(best)
    return {"agents": {a: marks for a in (BEST_AGENTS if best else WORST_AGENTS)}}


@pytest.fixture(scope="session")
def expert_score_files(tmp_path_factory) -> dict[str, Path]:
    """Expert score files: ``best`` (top marks everywhere) and ``worst``."""
    root = tmp_path_factory.mktemp("expert_scores")
    out = {}
    for label, best in (("best", True), ("worst", False)):
        out[label] = root / f"{label}.json"
        out[label].write_text(json.dumps(expert_scores(best)), encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def suite_jobs(tmp_path_factory) -> dict[str, tuple[Path, list]]:
    """The oracle and a null agent (``true``) on every task, locally; process scored from expert files."""
    root = tmp_path_factory.mktemp("arena_jobs")
    jobs = {}
    tasks = [t.path for t in list_tasks(TASKS_DIR)]
    for label, agent, best in (("oracle", AgentSpec(name="oracle"), True),
                               ("null", AgentSpec(name="null", command="true", model_name="none/none"), False)):
        scores = root / f"{label}_scores.json"
        scores.write_text(json.dumps(expert_scores(best)), encoding="utf-8")
        jobs[label] = run_job(tasks, agent, root / "jobs", job_name=label, process_scores=scores, dataset=TASKS_DIR)
    return jobs


@pytest.fixture(scope="session")
def harbor_env() -> Path:
    """The Harbor environment's interpreter (``make harbor-env``); the test is skipped, saying why, without it."""
    py = harbor_python()
    if py is None:
        pytest.skip(f"no Harbor environment at {HARBOR_VENV}: run `make harbor-env` (needs python3.12)")
    return py


@pytest.fixture(scope="session")
def harbor_task_copies(tmp_path_factory) -> list[Path]:
    """The 11 real third-party Harbor tasks, with their uncopied code files stubbed (fixtures/harbor_tasks)."""
    src = FIXTURES / "harbor_tasks"
    dst = tmp_path_factory.mktemp("harbor_tasks") / "tasks"
    shutil.copytree(src, dst)
    for line in (src / "STUBS.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            p = dst / line.strip()
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("FROM ubuntu:24.04\n" if p.name == "Dockerfile" else "#!/bin/bash\nexit 0\n", encoding="utf-8")
    return sorted(p.parent for p in dst.rglob("task.toml"))
