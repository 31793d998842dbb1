"""Shared fixtures of the arena tests: one oracle job and one do-nothing job over the whole suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mdbench.arena.grading import load_process_criteria
from mdbench.arena.runner import AgentSpec, run_job
from mdbench.arena.task import TASKS_DIR, list_tasks


def expert_scores(best: bool) -> dict[str, dict[str, int]]:
    """An expert score file for every task: top marks (best=True) or bottom marks on every criterion."""
    out = {}
    for t in list_tasks(TASKS_DIR):
        crits = load_process_criteria(t.path / "tests" / "process.toml")
        out[t.name] = {c.name: ((c.points if c.type == "likert" else 1) if best else (1 if c.type == "likert" else 0))
                       for c in crits}
    return out


@pytest.fixture(scope="session")
def suite_jobs(tmp_path_factory) -> dict[str, tuple[Path, list]]:
    """Run the oracle and a null agent (``true``) on every task; process scored from expert files."""
    root = tmp_path_factory.mktemp("arena_jobs")
    jobs = {}
    tasks = [t.path for t in list_tasks(TASKS_DIR)]
    for label, agent, best in (("oracle", AgentSpec(name="oracle"), True),
                               ("null", AgentSpec(name="null", command="true", model_name="none/none"), False)):
        scores = root / f"{label}_scores.json"
        scores.write_text(json.dumps(expert_scores(best)), encoding="utf-8")
        jobs[label] = run_job(tasks, agent, root / "jobs", job_name=label, process_scores=scores)
    return jobs
