"""The task suite: its mix, every oracle passes, a do-nothing agent fails, answers against independent truth."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mdbench.arena import inputs as pipeline_inputs
from mdbench.arena.aggregate import load_trials, summarize
from mdbench.arena.task import BASE_IMAGE, INPUTS_DIR, TASKS_DIR, list_tasks, validate_task


def needs_gmx(test):
    """GROMACS-dependent (tasks build boxes and run gmx at build time and in their verifiers)."""
    return pytest.mark.gromacs(pytest.mark.skipif(shutil.which("gmx") is None, reason="GROMACS (gmx) not on PATH")(test))


TASKS = list_tasks(TASKS_DIR)


def test_suite_size_and_mix():
    """At least 25 tasks, at least 6 hard multi-step ones, negative and underspecified examples, many categories."""
    assert len(TASKS) >= 25
    diffs = [t.metadata["difficulty"] for t in TASKS]
    kinds = [t.metadata.get("kind") for t in TASKS]
    assert set(diffs) == {"easy", "medium", "hard"}
    hard_multi = [t.short_name for t in TASKS if t.metadata["difficulty"] == "hard" and t.metadata.get("steps", 1) >= 3]
    assert len(hard_multi) >= 6, hard_multi
    assert kinds.count("negative") >= 2 and kinds.count("underspecified") >= 1
    assert len({t.metadata["category"] for t in TASKS}) >= 6


def test_pipeline_inputs_are_exact_copies_of_the_master():
    """Tasks ship byte-identical copies of the pipeline's files, and the master matches its provenance record."""
    copies = pipeline_inputs.all_copies()
    assert len({c.task for c in copies}) >= 5
    assert pipeline_inputs.check_copies() == []
    prov = json.loads((INPUTS_DIR / "micro_lhce" / "PROVENANCE.json").read_text())
    for rel, sha in prov["sha256"].items():
        assert pipeline_inputs._sha256(INPUTS_DIR / "micro_lhce" / rel) == sha, rel
    assert prov["command"].startswith("mdbench study run --preset micro --systems LHCE")


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.short_name)
def test_task_meets_harbor_and_suite_rules(task):
    assert validate_task(task.path) == []
    dockerfile = (task.path / "environment" / "Dockerfile").read_text()
    assert f"FROM {BASE_IMAGE}" in dockerfile and "rm -rf /app/.environment" in dockerfile


@needs_gmx
def test_every_oracle_scores_one(suite_jobs):
    job_dir, outcomes = suite_jobs["oracle"]
    assert len(outcomes) == len(TASKS)
    bad = {o.task_name: (o.rewards, o.exception_type) for o in outcomes
           if o.exception_type or o.rewards != {"correctness": 1.0, "process": 1.0}}
    assert bad == {}
    trials = load_trials([job_dir])
    assert trials["strict_pass"].all() and (trials["process_state"] == "scored").all()


@needs_gmx
def test_null_agent_scores_zero_and_its_process_is_unscorable(suite_jobs):
    """The null agent writes nothing: correctness 0 everywhere, and with no trajectory no process reward at all."""
    job_dir, outcomes = suite_jobs["null"]
    assert len(outcomes) == len(TASKS)
    assert {o.task_name: o.rewards for o in outcomes} == {o.task_name: {"correctness": 0.0} for o in outcomes}
    trials = load_trials([job_dir])
    assert (trials["process_state"] == "unscorable").all()
    s = summarize(trials)
    assert s.loc[0, "strict_pass"] == f"0/{len(TASKS)}" and s.loc[0, "n_process_unscorable"] == len(TASKS)
    details = json.loads((outcomes[0].trial_dir / "verifier" / "reward-details.json").read_text())
    assert details["process"]["state"] == "unscorable" and "no trajectory" in details["process"]["reason"]


@needs_gmx
def test_trial_and_job_folders_are_harbor_shaped(suite_jobs):
    job_dir, outcomes = suite_jobs["oracle"]
    job = json.loads((job_dir / "result.json").read_text())
    assert job["n_total_trials"] == len(TASKS)
    ev = job["stats"]["evals"]["oracle__tasks"]            # Harbor's key: agent__source (no model), source = folder
    assert ev["n_trials"] == len(TASKS) and ev["n_errors"] == 0
    assert ev["metrics"] == [{"correctness": 1.0, "process": 1.0}]
    assert len(ev["reward_stats"]["correctness"]["1.0"]) == len(TASKS)
    t = outcomes[0].trial_dir
    assert t.name.startswith(outcomes[0].task_name.split("/")[1][:32] + "__")
    res = json.loads((t / "result.json").read_text())
    assert res["source"] == "tasks" and res["config"]["task"]["name"] is None
    assert res["config"]["environment"]["import_path"] == "mdbench.arena.harbor_env:HostEnvironment"
    assert set(res["mdbench"]) == {"task_sha256", "sandbox", "usage_findings", "collect_skipped"}
    assert res["verifier_environment_mode"] == "separate" and res["mdbench"]["sandbox"]["agent"]["minimal_root"]
    assert json.loads((t / "verifier" / "reward.json").read_text()) == res["verifier_result"]["rewards"]
    assert (t / "artifacts" / "output").is_dir() and (t / "agent" / "trajectory.json").is_file()
    assert (t / "agent" / "oracle.txt").is_file() and not (t / "agent" / "instruction.md").exists()


# --- task data against independent truth ----------------------------------------------------------

def _stage_and_solve(task_name: str, tmp_path: Path, *, seed: str | None = None) -> Path:
    """Build a task's inputs and run its reference solution in ``tmp_path``; return the app folder."""
    src = TASKS_DIR / task_name
    app, agent = tmp_path / "app", tmp_path / "agent"
    app.mkdir(); agent.mkdir()
    env = dict(os.environ, MDBENCH_PYTHON=sys.executable, ARENA_APP_DIR=str(app), ARENA_AGENT_DIR=str(agent),
               ARENA_SOLUTION_DIR=str(src / "solution"))
    if seed is not None:
        env["ARENA_SEED"] = seed
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


@pytest.mark.parametrize("seed", ["1", "2", "3", "5", "7"])
def test_unregistered_change_is_found_among_registered_revisions(tmp_path, seed):
    """Whichever definition is planted, the reference finds exactly it and never the registered revision."""
    app = _stage_and_solve("unregistered-definition-change", tmp_path, seed=seed)
    finding = json.loads((app / "output" / "finding.json").read_text())
    assert finding["definition"] != "analysis_fitting_rules"
    real = json.loads((INPUTS_DIR / "micro_lhce" / "analysis" / "results.json").read_text())["definitions"]
    node = real[finding["definition"]]
    for key in finding["field"].split("."):
        node = node[key]
    assert node == finding["registered"] != finding["used"]


@pytest.mark.parametrize("seed", ["1", "2", "3"])
def test_tplus_repair_names_each_planted_convention(tmp_path, seed):
    app = _stage_and_solve("tplus-convention-repair", tmp_path, seed=seed)
    out = json.loads((app / "output" / "repair.json").read_text())
    assert sorted(out["wrong"].values()) == ["no_cross_terms", "self_diffusion_ratio"]
    for case, value in out["t_plus"].items():
        c = json.loads((app / "onsager" / f"{case}.json").read_text())
        assert value == pytest.approx((c["L_pp"] - c["L_pm"]) / (c["L_pp"] + c["L_mm"] - 2 * c["L_pm"]))


def test_association_of_the_real_run_agrees_with_the_pipeline(tmp_path):
    """The task's reference (MDAnalysis capped_distance) and the study pipeline's own analysis (mdbench.analysis)
    classify the same real trajectory identically: SSIP/CIP/AGG fractions and block values."""
    app = _stage_and_solve("lhce-ion-association", tmp_path)
    ours = json.loads((app / "output" / "association.json").read_text())
    pipeline = json.loads((INPUTS_DIR / "micro_lhce" / "analysis" / "results.json").read_text())["association"]["FSI"]
    names = {"SSIP": "free_or_SSIP", "CIP": "CIP", "AGG": "AGG"}
    for ours_name, theirs in names.items():
        assert ours["fractions"][ours_name] == pytest.approx(pipeline["fractions"][theirs]["value"], abs=1e-9)
        assert ours["blocks"][ours_name] == pytest.approx(pipeline["fractions"][theirs]["blocks"], abs=1e-9)


def test_extension_decision_charges_what_the_record_room_charges(tmp_path):
    """Charged nanoseconds of the real ledger agree with mdbench.record's own budget accounting."""
    from mdbench.record import RunRecord

    app = _stage_and_solve("lhce-extend-or-stop", tmp_path)
    out = json.loads((app / "output" / "decision.json").read_text())
    assert out["charged_ns"] == pytest.approx(RunRecord(INPUTS_DIR / "micro_lhce").charged_ns("LHCE"), abs=1e-9)
    assert not out["diffusive"] and out["beta"] < 0.9 and out["decision"] == "extend_partial"
