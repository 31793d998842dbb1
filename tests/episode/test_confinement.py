"""Agents that cheat, crash, linger or find no GROMACS — and the operating system stopping them.

Each test runs a real confined process through ``mdbench episode run`` (no mocks); none needs GROMACS.
"""

from __future__ import annotations

import json
import os
import pwd
import sys
import time

from mdbench.audit.model import composite_score
from mdbench.episode.aggregate import load_episodes, notes
from mdbench.episode.runner import AGENT_USER
from mdbench.paths import PROJECT_ROOT

from _episode_helpers import (AGENT_PY, HERE, mdbench, needs_namespaces, needs_root, prepare, processes_of, run,
                              saeo)

CHEATER = f"{AGENT_PY} {HERE / 'cheater.py'}"
#: The agent sees only the system folders, the installation and its workspace: its own code must be exposed.
EXPOSE = ("--expose", str(HERE / "cheater.py"))


def _agent_processes() -> list[int]:
    """PIDs (host view) of processes owned by the agent account."""
    return processes_of(AGENT_USER)


@needs_namespaces
@needs_root
def test_cheating_agent_is_stopped_by_the_os_and_its_setsid_child_dies_with_the_timeout(tmp_path):
    ep = prepare(tmp_path / "ep", "harness=test", "model=cheater")
    prepare(tmp_path / "other", "harness=test", "model=neighbour")  # another episode in the same folder
    env = dict(os.environ, MDBENCH_TEST_SECRET="do-not-leak")
    # 9 s: enough for the cheater to start its setsid child on a loaded machine (with 3 s it sometimes had not,
    # and no straggler was left to kill); it lingers, so the timeout always ends it
    timeout_min, grace_s = 0.15, 2.0
    res = mdbench("episode", "run", str(ep), "--agent", f"{CHEATER} --rename --linger", "--timeout", str(timeout_min),
                  "--grace", str(grace_s), "--env", "PASSED_ON=yes", "--env", f"MDBENCH_PROJECT_ROOT={PROJECT_ROOT}",
                  "--no-reanalysis", *EXPOSE, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    result = json.loads((ep / "result.json").read_text())
    report = json.loads((ep / "workspace" / "cheat.json").read_text())
    # the frozen inputs: every write refused by permissions or the read-only mount
    for key in ("write_case_file", "chmod_case_file", "create_in_agent_input", "delete_from_agent_input",
                "rename_agent_input", "overwrite_prompt"):
        assert report[key].startswith("refused"), (key, report[key])
    # the evaluator's files: invisible (EP/ shows only the workspace)
    assert report["read_episode_json"].startswith("refused")
    assert report["read_pristine_checksums"].startswith("refused")
    assert report["list_episode_folder"] == "ok: ['workspace']"
    assert report["list_episodes_beside"] == "ok: ['ep']"  # the neighbouring episode is hidden
    assert "bundle" not in report["list_episode_folder"] and ".ssh" not in report["read_root_home"]
    # of the checkout only the agent toolchain and the exposed agent script (under tests/) are there: no .venv,
    # lib, templates, .git or outputs/
    assert report["list_project_root"] == "ok: ['.agent-env', 'tests']"
    assert report["uid"] == pwd.getpwnam(AGENT_USER).pw_uid != 0
    # no inherited secrets; what --env passes arrives
    assert "MDBENCH_TEST_SECRET" not in report["env_keys"] and "PASSED_ON" in report["env_keys"]
    assert {"MDBENCH_PROMPT", "OMP_NUM_THREADS", "MDBENCH_THREAD_CAP", "CUDA_VISIBLE_DEVICES"} <= set(report["env_keys"])
    # the timeout ended the whole tree within the grace period; the setsid child is gone
    assert result["status"] == "timeout" and result["stragglers_killed"] >= 1
    assert result["wall_s"] <= timeout_min * 60 + grace_s + 15.0, result["wall_s"]
    alive = ep / "workspace" / "alive"
    before = alive.read_text()
    time.sleep(0.5)
    assert alive.read_text() == before, "the lingering child is still writing"
    assert _agent_processes() == []
    assert result["agent_input_intact"] and result["input_integrity"]["findings"] == []
    assert result["isolation"]["pid_namespace"] and result["isolation"]["mount_namespace"]
    assert result["isolation"]["network_namespace"] and result["isolation"]["user"] == AGENT_USER


@needs_namespaces
def test_an_agent_that_edits_agent_input_is_flagged_with_evidence_and_E2(tmp_path):
    """--as-caller drops the read-only mount (debugging one's own agent): the check after the run still
    catches every change, keeps the evidence and the audit's E2 drops to 0."""
    ep = prepare(tmp_path / "ep", "harness=test", "model=tamperer")
    result = run(ep, CHEATER, "--as-caller", "--no-reanalysis", "--timeout", "2", *EXPOSE)
    assert result["status"] == "completed"
    assert not result["agent_input_intact"]
    f = set(result["input_integrity"]["findings"])
    assert {"changed: cases/DE.yaml", "extra: extra.txt", "missing: references/ESTIMATORS.md",
            "changed: ../PROMPT.md"} <= f
    evidence = json.loads((ep / result["input_integrity"]["evidence"]).read_text())
    kept = ep / evidence["files"]["cases/DE.yaml"]["copy"]
    assert kept.read_text().endswith("# tampered\n")
    doc = saeo(ep)
    assert doc["items"]["E2"]["final"] == 0.0 and doc["items"]["E2"]["source"] == "expert"
    assert "agent_input/ differs from the frozen bundle" in doc["items"]["E2"]["reason"]
    assert result["audit"]["items"]["E2"] == 0.0
    assert any("agent_input/ changed" in n for n in notes(load_episodes([ep])))


@needs_namespaces
def test_null_agent_is_scored_without_crashing_and_the_report_explains_it(tmp_path):
    ep = prepare(tmp_path / "ep", "harness=reference", "model=null")
    result = run(ep, "null", "--no-reanalysis", "--timeout", "2")
    assert result["status"] == "completed" and result["exit_code"] == 0
    assert (ep / "audit" / "saeo.json").is_file() and (ep / "audit" / "findings.md").is_file()
    doc = saeo(ep)
    assert {o["state"] for o in doc["observables"]} == {"not_reached"}
    assert doc["claimed_outcome"] is None and doc["expected_outcome"] == "candidate_failure"
    assert all(doc["items"][i]["final"] == 0 for i in ("Sim1", "Sim2", "Sim3", "Sim4", "A1", "O4", "O5"))
    score, dims = composite_score({i: v["final"] for i, v in doc["items"].items()})
    assert result["score"] == round(score, 3) == round(doc["composite"]["final"], 3)
    assert result["ns_charged"] is None and result["ledger"]["note"].startswith("no ledger")
    (line,) = [n for n in notes(load_episodes([ep])) if "no terminal claim" in n]
    assert "not_reached" in line and f"composite {doc['composite']['final']:.1f}" in line


@needs_namespaces
def test_a_second_run_refuses_unless_forced_and_keeps_the_first(tmp_path):
    ep = prepare(tmp_path / "ep", "harness=reference", "model=null")
    first = run(ep, "null", "--no-reanalysis")
    again = mdbench("episode", "run", str(ep), "--agent", "null")
    assert again.returncode == 1 and "already run; pass --force" in again.stderr
    second = run(ep, "null", "--no-reanalysis", "--force")
    assert second["previous_runs"] == 1
    kept = json.loads((ep / "previous" / "1" / "result.json").read_text())
    assert kept["started_at"] == first["started_at"]
    assert (ep / "previous" / "1" / "audit" / "saeo.json").is_file()
    assert (ep / "previous" / "1" / "agent" / "stdout.log").is_file()


@needs_namespaces
def test_missing_gromacs_is_infrastructure_blocked_not_a_candidate_failure(tmp_path):
    ep = prepare(tmp_path / "ep", "harness=reference", "model=oracle")
    env = dict(os.environ, PATH="/nonexistent")  # the runner finds no gmx and no packmol for the agent
    res = mdbench("episode", "run", str(ep), "--agent", "oracle", "--no-reanalysis", env=env)
    assert res.returncode == 0, res.stderr
    result = json.loads((ep / "result.json").read_text())
    assert result["status"] == "infrastructure_blocked" and not result["scored_as_candidate"]
    assert result["sandbox_status"] == "not_started" and (ep / "agent" / "stdout.log").read_text() == ""
    assert "gmx" in (ep / "agent" / "stderr.log").read_text()
    assert (ep / "audit" / "saeo.json").is_file()  # audited all the same
    (rec,) = load_episodes([ep])
    assert not rec.scored


@needs_namespaces
def test_agent_crash_is_agent_error_and_still_audited(tmp_path):
    ep = prepare(tmp_path / "ep", "harness=test", "model=crash")
    result = run(ep, f"{AGENT_PY} -c 'import sys; sys.exit(3)'", "--no-reanalysis")
    assert (result["status"], result["exit_code"]) == ("agent_error", 3)
    assert "composite" in result["audit"]


def test_unknown_reference_agent_is_refused(tmp_path):
    ep = prepare(tmp_path / "ep")
    res = mdbench("episode", "run", str(ep), "--agent", "buggy:nope")
    assert res.returncode == 1 and "unknown buggy kind 'nope'" in res.stderr and "clean_claim" in res.stderr
    assert not (ep / "agent").exists()
