"""External coordinators run as confined processes: the protocol end to end, the two cheats of issue #22
(stack walk, packaged-record load) fail through the isolated path with the attempts in the trace, and an
honest coordinator scores the same confined as unconfined."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from sdl_helpers import POLICY_DIR, policy_cmd

from mdbench.sandbox import capabilities
from mdbench.sdl.campaign import run_campaign
from mdbench.sdl.commands import sdl
from mdbench.sdl.confine import COORDINATOR_USER, CoordinatorSandbox
from mdbench.sdl.environment import verify_chain
from mdbench.sdl.external import ExternalPolicy
from mdbench.sdl.metrics import campaign_metrics
from mdbench.sdl.vapdiff import data_dir

needs_isolation = pytest.mark.skipif(not capabilities().get("namespaces"),
                                     reason="namespaces unavailable on this machine: "
                                            f"{capabilities().get('namespace_error', 'unknown')}")


def external(script: str, *args: str, confine: bool = True, timeout_s: float = 60):
    box = CoordinatorSandbox(confine=confine, policy_dir=POLICY_DIR)
    return lambda: ExternalPolicy(policy_cmd(script, *args), timeout_s=timeout_s, sandbox=box)


def _stderr(trace) -> str:
    return "\n".join(s["record"].get("stderr_tail", "") for s in trace["sessions"]) + "\n".join(
        cp["session"].get("stderr_tail", "") for cp in trace["checkpoints"] + trace["future"])


@needs_isolation
def test_scripted_external_policy_runs_all_branches_confined(vapdiff, small_assignments):
    asg = small_assignments[0]
    run = run_campaign(vapdiff, asg, external("scripted_policy.py", "--cheat"), seed=0, random_draws=1)
    ad = run.traces["adaptive"]
    assert ad["end_reason"] == "policy stopped"
    assert [e["experiment_id"] for e in ad["experiments"]] == asg.public("candidates")[::-1][:4]
    assert all(cp["valid"] for tr in run.traces.values() for cp in tr["checkpoints"])
    assert len(ad["checkpoints"]) == 1 + asg.budgets.experiments
    # the three cheating actions were refused and revealed nothing
    refused = [e for e in ad["log"] if e["kind"] == "action" and not e["ok"]]
    assert len(refused) == 3 and ad["n_invalid"] == 3
    assert all("reveal" not in e for e in refused)
    assert all(verify_chain(tr["log"]) for tr in run.traces.values())
    assert run.traces["random_control"]["n_invalid"] == 0
    # the isolation method is in the chain: separate user, namespaces, evaluator data hidden
    iso = ad["policy"]["isolation"]
    assert iso["method"] == "confined_process" and iso["isolation"] == "namespaces"
    assert iso["mount_namespace"] and iso["pid_namespace"] and iso["network_namespace"]
    if capabilities()["root"]:
        assert iso["user"] == COORDINATOR_USER and iso["uid"] != 0
    assert str(data_dir().parent) in iso["hidden"]
    # a fresh session: private /tmp, /dev/shm, /var/tmp, /run/lock and IPC; limits recorded in the trace
    assert iso["ipc_namespace"] and set(iso["limits"]["private_paths"]) >= {"/tmp", "/dev/shm", "/var/tmp", "/run/lock"}
    assert iso["session_limits"]["memory_mib"] == 4096 and not iso["fresh_session"]["not_enforced"]
    if iso["cgroup"]:
        assert iso["limits"]["memory_mib"] == 4096 and iso["limits"]["pids_max"] == 256
    # the call-matched control matched exactly, also for an external coordinator
    assert run.traces["no_evidence"]["n_calls"] == ad["n_calls"]
    assert ad["sessions"][0]["record"]["process"]["status"] == "exited"


@needs_isolation
def test_honest_coordinator_scores_the_same_confined_and_unconfined(vapdiff, tiny_assignments):
    asg = tiny_assignments[0]
    confined = campaign_metrics(run_campaign(vapdiff, asg, external("scripted_policy.py"), seed=0,
                                             random_draws=1).traces, vapdiff, asg)
    plain = campaign_metrics(run_campaign(vapdiff, asg, external("scripted_policy.py", confine=False), seed=0,
                                          random_draws=1).traces, vapdiff, asg)
    for b in confined["branches"]:
        for key in ("scores_nats", "curve_nats", "n_calls", "future_scores_nats", "experiments"):
            assert confined["branches"][b][key] == plain["branches"][b][key], (b, key)
    assert confined["selection_lift_nats"] == plain["selection_lift_nats"]
    assert confined["branches"]["adaptive"]["isolation"]["isolation"] == "namespaces"
    assert plain["branches"]["adaptive"]["isolation"]["isolation"] == "none"


def test_stack_walk_works_in_process(vapdiff, tiny_assignments):
    """The cheat has teeth: as an in-process object it finds the environment and forecasts perfectly."""
    from cheating_policy import InProcessCheat

    asg = tiny_assignments[1]
    m = campaign_metrics(run_campaign(vapdiff, asg, InProcessCheat, seed=0, controls=False).traces, vapdiff, asg)
    assert m["branches"]["adaptive"]["loss_pre_nats"] < 0.01          # read the recorded outcomes
    assert m["branches"]["adaptive"]["isolation"]["trusted"] is False   # and is never ranked (leaderboard)


@needs_isolation
def test_stack_walk_cheat_reads_nothing_through_the_isolated_path(vapdiff, tiny_assignments):
    asg = tiny_assignments[1]
    run = run_campaign(vapdiff, asg, external("cheating_policy.py", "--mode", "stack_walk"), seed=0, controls=False)
    ad = run.traces["adaptive"]
    m = campaign_metrics(run.traces, vapdiff, asg)
    err = _stderr(ad)
    assert "ATTEMPT stack_walk" in err and "outcomes found: 0" in err and "outcomes found: 1" not in err
    assert "ATTEMPT proc_scan" in err
    # nothing leaked: every held-out forecast is the uniform one (ln 4)
    assert m["branches"]["adaptive"]["scores_nats"] == pytest.approx([-math.log(4)] * 3, abs=1e-12)
    print("\n" + err.strip().splitlines()[0])


@needs_isolation
def test_packaged_record_cheat_fails_confined_and_succeeds_unconfined(vapdiff, tiny_assignments):
    asg = tiny_assignments[2]
    leak = campaign_metrics(run_campaign(vapdiff, asg, external("cheating_policy.py", "--mode", "packaged_record",
                                                                confine=False), seed=0, controls=False).traces,
                            vapdiff, asg)
    assert leak["branches"]["adaptive"]["loss_pre_nats"] < 0.05      # unconfined, the packaged record leaks
    run = run_campaign(vapdiff, asg, external("cheating_policy.py", "--mode", "packaged_record"), seed=0,
                       controls=False)
    err = _stderr(run.traces["adaptive"])
    assert "ATTEMPT packaged_record: failed" in err and "READ" not in err
    assert "evaluator/ledger.json: failed" in err
    m = campaign_metrics(run.traces, vapdiff, asg)
    assert m["branches"]["adaptive"]["scores_nats"] == pytest.approx([-math.log(4)] * 3, abs=1e-12)
    print("\n" + "\n".join(err.strip().splitlines()[:2]))


@needs_isolation
def test_dying_policy_ends_the_branch_with_a_recorded_reason(vapdiff, small_assignments):
    run = run_campaign(vapdiff, small_assignments[0], external("scripted_policy.py", "--die-after", "4",
                                                               timeout_s=30), seed=0, controls=False)
    reason = run.traces["adaptive"]["end_reason"]
    assert reason.startswith("policy error") and "dying on purpose" in reason


@needs_isolation
def test_cli_run_with_policy_cmd_hides_the_evaluator_tree(tmp_path):
    runner = CliRunner()
    params = Path(__file__).parents[2] / "params" / "sdl" / "small.yaml"
    res = runner.invoke(sdl, ["compile", "--params", str(params), "--out", str(tmp_path / "asg")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(sdl, ["run", "--assignments", str(tmp_path / "asg"), "--policy-cmd",
                              policy_cmd("cheating_policy.py", "--mode", "packaged_record"), "--policy-dir", str(POLICY_DIR),
                              "--only", "vapdiff_crystal-s0-a7", "--no-controls", "--out", str(tmp_path / "res")])
    assert res.exit_code == 0, res.output
    tr = json.loads((tmp_path / "res" / "external" / "vapdiff_crystal-s0-a7" / "adaptive.trace.json").read_text())
    assert str((tmp_path / "asg" / "evaluator").resolve()) in tr["policy"]["isolation"]["hidden"]
    # the compile's agent tree is hidden; the session reads a view holding its own assignment's file only
    assert str((tmp_path / "asg" / "agent").resolve()) in tr["policy"]["isolation"]["hidden"]
    assert tr["policy"]["isolation"]["agent_view"] == ["README.md", "action_schema.json", "forecast_row_schema.json",
                                                       "vapdiff_crystal-s0-a7.json"]
    assert "evaluator/ledger.json: failed" in _stderr(tr)
