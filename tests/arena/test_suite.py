"""The task suite: structure, every oracle passes, a do-nothing agent fails every task."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mdbench.arena.aggregate import load_trials, summarize
from mdbench.arena.task import TASKS_DIR, list_tasks, validate_task

def needs_gmx(test):
    """GROMACS-dependent (micro-box-grompp runs gmx solvate/grompp/genion with the oracle)."""
    return pytest.mark.gromacs(pytest.mark.skipif(shutil.which("gmx") is None, reason="GROMACS (gmx) not on PATH")(test))

TASKS = list_tasks(TASKS_DIR)


def test_suite_size_and_mix():
    assert len(TASKS) >= 15
    diffs = {t.metadata["difficulty"] for t in TASKS}
    kinds = [t.metadata.get("kind") for t in TASKS]
    assert diffs == {"easy", "medium", "hard"}
    assert kinds.count("negative") >= 2 and kinds.count("underspecified") >= 1
    assert len({t.metadata["category"] for t in TASKS}) >= 5


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.short_name)
def test_task_validates(task):
    assert validate_task(task.path) == []
    assert task.config["schema_version"] == "1.3"


@needs_gmx
def test_every_oracle_scores_one(suite_jobs):
    job_dir, outcomes = suite_jobs["oracle"]
    assert len(outcomes) == len(TASKS)
    bad = {o.task_name: (o.rewards, o.exception_type) for o in outcomes
           if o.exception_type or o.rewards != {"correctness": 1.0, "process": 1.0}}
    assert bad == {}
    trials = load_trials([job_dir])
    assert trials["strict_pass"].all()


@needs_gmx
def test_null_agent_scores_zero_everywhere(suite_jobs):
    job_dir, outcomes = suite_jobs["null"]
    assert len(outcomes) == len(TASKS)
    assert {o.task_name: o.rewards for o in outcomes} == {o.task_name: {"correctness": 0.0, "process": 0.0} for o in outcomes}
    s = summarize(load_trials([job_dir]))
    assert s.loc[0, "strict_pass"] == f"0/{len(TASKS)}" and s.loc[0, "n_verifier_failures"] == len(TASKS)


@needs_gmx
def test_trial_and_job_folders_are_harbor_shaped(suite_jobs):
    job_dir, outcomes = suite_jobs["oracle"]
    job = json.loads((job_dir / "result.json").read_text())
    assert job["n_total_trials"] == len(TASKS)
    ev = job["stats"]["evals"]["oracle__None__mdbench"]
    assert ev["n_trials"] == len(TASKS) and ev["n_errors"] == 0 and ev["metrics"] == [{"mean": 1.0}]
    assert len(ev["reward_stats"]["correctness"]["1.0"]) == len(TASKS)
    assert json.loads((job_dir / "config.json").read_text())["agents"][0]["name"] == "oracle"
    t = outcomes[0].trial_dir
    assert t.name.startswith(outcomes[0].task_name.split("/")[1][:32] + "__")
    res = json.loads((t / "result.json").read_text())
    for key in ("id", "task_name", "trial_name", "trial_uri", "task_id", "task_checksum", "config", "agent_info",
                "agent_result", "verifier_result", "exception_info", "started_at", "finished_at",
                "environment_setup", "agent_execution", "verifier"):
        assert key in res
    assert res["agent_info"]["name"] == "oracle"
    assert set(res["agent_result"]) >= {"n_input_tokens", "n_cache_tokens", "n_output_tokens", "cost_usd"}
    assert json.loads((t / "verifier" / "reward.json").read_text()) == res["verifier_result"]["rewards"]
    details = json.loads((t / "verifier" / "reward-details.json").read_text())
    assert details["correctness"]["kind"] == "programmatic" and details["process"]["kind"] == "agent"
    crit = details["correctness"]["criteria"][0]
    assert set(crit) == {"name", "value", "raw", "weight", "description", "reasoning", "error"}
    traj = json.loads((t / "agent" / "trajectory.json").read_text())
    assert traj["schema_version"].startswith("ATIF") and traj["steps"]
    assert (t / "verifier" / "test-stdout.txt").is_file() and (t / "config.json").is_file()


# --- task data against analytic truth ----------------------------------------------------------

def _stage_and_solve(task_name: str, tmp_path: Path, *, seed: str | None = None) -> Path:
    """Build a task's inputs and run its reference solution in ``tmp_path``; return the app folder."""
    src = TASKS_DIR / task_name
    app = tmp_path / "app"
    shutil.copytree(src / "environment" / "app", app) if (src / "environment" / "app").is_dir() else app.mkdir()
    env = dict(os.environ, MDBENCH_PYTHON=sys.executable, ARENA_APP_DIR=str(app),
               ARENA_SOLUTION_DIR=str(src / "solution"))
    if seed is not None:
        env["ARENA_SEED"] = seed
    if (src / "environment" / "build.sh").is_file():
        subprocess.run(["bash", str(src / "environment" / "build.sh")], env=env, check=True, cwd=app)
    subprocess.run(["bash", str(src / "solution" / "solve.sh")], env=env, check=True, cwd=app)
    return app


def test_green_kubo_matches_ou_analytic(tmp_path):
    """OU pressure with variance s^2 and time tau: eta = V s^2 tau / (kB T) (1.68 mPa s for the task data)."""
    app = _stage_and_solve("green-kubo-viscosity", tmp_path)
    eta = json.loads((app / "output" / "viscosity.json").read_text())["viscosity_mPa_s"]
    V, T, s_bar, tau_ps = 27.0e-27, 298.15, 320.0, 0.25
    analytic = V / (1.380649e-23 * T) * (s_bar * 1e5) ** 2 * tau_ps * 1e-12 * (1 - np.exp(-1.5 / tau_ps)) * 1e3
    assert eta == pytest.approx(analytic, rel=0.15)


def test_diffusion_matches_generating_coefficient(tmp_path):
    app = _stage_and_solve("li-diffusion-window", tmp_path)
    res = json.loads((app / "output" / "diffusion.json").read_text())
    assert res["D_1e-5_cm2_s"] == pytest.approx(0.2, rel=0.05)   # D = 2.0e-4 nm^2/ps in make_inputs.py
    assert res["window_ps"][0] >= 100.0                            # sub-diffusive part (cage plateau 0.02 nm^2) excluded


def test_conductivity_matches_onsager_coefficients(tmp_path):
    app = _stage_and_solve("conductivity-onsager", tmp_path)
    res = json.loads((app / "output" / "conductivity.json").read_text())
    Lpp, Lmm, Lpm = 4.0e-3, 3.0e-3, 1.2e-3                         # nm^2/ps in make_inputs.py
    sigma = 1.602176634e-19 ** 2 / (64e-27 * 1.380649e-23 * 298.15) * (Lpp + Lmm - 2 * Lpm) * 1e-6
    assert res["sigma_S_m"] == pytest.approx(sigma, rel=0.03)
    assert res["t_plus"] == pytest.approx((Lpp - Lpm) / (Lpp + Lmm - 2 * Lpm), abs=0.02)


def test_salt_count_both_conventions(tmp_path):
    app = _stage_and_solve("salt-count-underspecified", tmp_path)
    res = json.loads((app / "output" / "salt.json").read_text())
    # molarity: n = c n_DMC M_DMC / (1000 rho - c M_salt) = 2*100*90.08/(1250 - 374.14) = 20.57 -> 21
    assert res["n_LiFSI"] == 21 and res["convention"] == "molarity"


@pytest.mark.parametrize(("seed", "field"), [("1", "parent"), ("2", "id"), ("4", "state"), ("11", "ns_charged")])
def test_each_kind_of_planted_record_error_is_found(tmp_path, seed, field):
    """Every kind of error make_inputs.py can plant is found, alone (solve.py asserts uniqueness)."""
    app = _stage_and_solve("planted-record-error", tmp_path, seed=seed)
    finding = json.loads((app / "output" / "finding.json").read_text())
    assert finding["field"] == field
