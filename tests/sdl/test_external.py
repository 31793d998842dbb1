"""External policy over the JSON-lines subprocess protocol, driven by a scripted policy program."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from click.testing import CliRunner

from mdbench.sdl.campaign import run_campaign
from mdbench.sdl.commands import sdl
from mdbench.sdl.environment import verify_chain
from mdbench.sdl.external import ExternalPolicy

SCRIPT = Path(__file__).parent / "scripted_policy.py"


def cmd(*extra: str) -> str:
    return " ".join(shlex.quote(x) for x in (sys.executable, str(SCRIPT), *extra))


def test_scripted_external_policy_runs_all_branches(vapdiff, small_assignments):
    asg = small_assignments[0]
    run = run_campaign(vapdiff, asg, lambda: ExternalPolicy(cmd("--cheat"), timeout_s=60), seed=0)
    ad = run.traces["adaptive"]
    assert ad["end_reason"] == "policy stopped"
    assert [e["experiment_id"] for e in ad["experiments"]] == list(asg.roles["candidates"])[::-1][:4]
    assert all(cp["valid"] for tr in run.traces.values() for cp in tr["checkpoints"])
    assert len(ad["checkpoints"]) == 1 + asg.budgets.experiments
    # the three cheating attempts were refused and revealed nothing
    refused = [e for e in ad["log"] if e["kind"] == "action" and not e["ok"]]
    assert len(refused) == 3 and ad["n_invalid"] == 3
    assert all("reveal" not in e for e in refused)
    assert all(verify_chain(tr["log"]) for tr in run.traces.values())
    assert run.traces["random_control"]["n_invalid"] == 0


def test_dying_policy_ends_the_branch_with_a_recorded_reason(vapdiff, small_assignments):
    run = run_campaign(vapdiff, small_assignments[0], lambda: ExternalPolicy(cmd("--die-after", "4"), timeout_s=30),
                       seed=0, controls=False)
    reason = run.traces["adaptive"]["end_reason"]
    assert reason.startswith("policy error") and "dying on purpose" in reason


def test_cli_run_with_policy_cmd(tmp_path):
    runner = CliRunner()
    params = Path(__file__).parents[2] / "params" / "sdl" / "small.yaml"
    res = runner.invoke(sdl, ["compile", "--params", str(params), "--out", str(tmp_path / "asg")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(sdl, ["run", "--assignments", str(tmp_path / "asg"), "--policy-cmd", cmd(),
                              "--only", "vapdiff_crystal-s0-a1", "--out", str(tmp_path / "res")])
    assert res.exit_code == 0, res.output
    m = json.loads((tmp_path / "res" / "external" / "vapdiff_crystal-s0-a1" / "metrics.json").read_text())
    assert set(m["branches"]) == {"adaptive", "random_control", "no_evidence"}
    assert m["branches"]["adaptive"]["n_closed"] == 4
