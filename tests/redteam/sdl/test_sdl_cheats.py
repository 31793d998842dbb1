"""Issue 32 red team: cheating coordinators against their honest twins, through the confined path.

Each cheat either gains nothing measurable (same held-out scores as its honest twin — the same program that
does not cheat) or is refused; each test also shows the cheat has teeth where the defence is switched off.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from sdl_redteam_helpers import HERE, cheat_cmd

from mdbench.sandbox import capabilities
from mdbench.sdl.campaign import run_campaign
from mdbench.sdl.commands import sdl
from mdbench.sdl.confine import CoordinatorSandbox, SessionLimits
from mdbench.sdl.external import ExternalPolicy
from mdbench.sdl.metrics import campaign_metrics

needs_isolation = pytest.mark.skipif(not capabilities().get("namespaces"),
                                     reason="namespaces unavailable on this machine")


def external(compiled, asg, mode, *extra, confine=True, limits=None, timeout_s=60):
    box = CoordinatorSandbox(agent_dir=compiled.agent_dir, hide=(compiled.evaluator_dir,), confine=confine,
                             policy_dir=HERE, limits=limits or SessionLimits()).for_assignment(asg.assignment_id)
    return lambda: ExternalPolicy(cheat_cmd(mode, *extra), timeout_s=timeout_s, sandbox=box)


def scores(compiled, asg, factory, **kw):
    run = run_campaign(compiled.ledger, asg, factory, seed=0, **kw)
    return run, campaign_metrics(run.traces, compiled.ledger, asg)


def stderr_of(trace) -> str:
    recs = [s["record"] for s in trace["sessions"]] + [c["session"] for c in trace["checkpoints"] + trace["future"]]
    return "\n".join(r.get("stderr_tail", "") for r in recs if isinstance(r, dict))


@needs_isolation
def test_agent_tree_reader_learns_nothing_from_its_one_file_view(compiled):
    """Issue item 1: the whole public tree holds every held-out outcome; a session sees only its own file."""
    asg = compiled.assignments[4]            # its held-out blocks are other rotations' initial contexts
    tree = str(compiled.agent_dir)
    _, leak = scores(compiled, asg, external(compiled, asg, "agent_tree", "--tree", tree, confine=False),
                     controls=False)
    assert leak["branches"]["adaptive"]["loss_pre_nats"] < 0.05           # teeth: the tree leaks everything
    run, cheat = scores(compiled, asg, external(compiled, asg, "agent_tree", "--tree", tree), controls=False)
    _, honest = scores(compiled, asg, external(compiled, asg, "agent_tree", "--honest", confine=False),
                       controls=False)
    assert "1 assignment files readable" in stderr_of(run.traces["adaptive"])
    assert cheat["branches"]["adaptive"]["scores_nats"] == pytest.approx(
        honest["branches"]["adaptive"]["scores_nats"], abs=1e-12)
    assert cheat["branches"]["adaptive"]["loss_pre_nats"] == pytest.approx(math.log(4), abs=1e-12)


@needs_isolation
def test_memory_across_sessions_in_dev_shm_gains_nothing(compiled, tmp_path):
    """Issue item 2: remembering the initial contexts of earlier sessions in /dev/shm, /run/lock, /var/tmp,
    /tmp, HOME or POSIX shared memory; rotation 4's held-out panel is rotation 0's and 1's initial context."""
    tag = f"mdbench-sdl-rt-{os.getpid()}"
    first, later = compiled.assignments[0], compiled.assignments[4]
    try:
        # teeth: unconfined sessions share the host's /dev/shm, and the memory wins
        scores(compiled, first, external(compiled, first, "shm_memory", "--tag", tag, confine=False), controls=False)
        _, leak = scores(compiled, later, external(compiled, later, "shm_memory", "--tag", tag, confine=False),
                         controls=False)
        assert leak["branches"]["adaptive"]["loss_pre_nats"] < math.log(4) - 0.3
        _cleanup(tag)
        scores(compiled, first, external(compiled, first, "shm_memory", "--tag", tag), controls=False)
        run, cheat = scores(compiled, later, external(compiled, later, "shm_memory", "--tag", tag), controls=False)
        assert not _memo_files(tag), "a confined session wrote to the host's shared folders"
    finally:
        _cleanup(tag)
    _, honest = scores(compiled, later, external(compiled, later, "shm_memory", "--honest", confine=False),
                       controls=False)
    assert "memory found in []" in stderr_of(run.traces["adaptive"])
    assert cheat["branches"]["adaptive"]["scores_nats"] == pytest.approx(
        honest["branches"]["adaptive"]["scores_nats"], abs=1e-12)


def _memo_files(tag: str) -> list[str]:
    return [p for p in (f"/dev/shm/{tag}.json", f"/dev/shm/{tag}", f"/run/lock/{tag}.json", f"/var/tmp/{tag}.json",
                        f"/tmp/{tag}.json") if os.path.lexists(p)]


def _cleanup(tag: str) -> None:
    for p in _memo_files(tag):
        os.unlink(p)


def test_control_detector_cannot_move_the_rank_or_the_robust_lifts(compiled):
    """Issue item 3: a coordinator honest in the adaptive branch and confidently wrong in what it detects as a
    control. The no-evidence control no longer announces itself by its state; the first withheld item still
    gives it away on this record (evidence is never missing), so its sabotage is clamped out of the evidence
    lift; the random control cannot hide its foreign selections, so the coordinator-forecast selection lift is
    a diagnostic and the reference selection lift (shipped forecaster on what was selected) is unmoved.
    (Unconfined on purpose: the cheat does not depend on the sandbox, and this keeps the test fast.)"""
    asg = compiled.assignments[1]
    run, cheat = scores(compiled, asg, external(compiled, asg, "control_detector", confine=False), random_draws=2)
    _, honest = scores(compiled, asg, external(compiled, asg, "control_detector", "--honest", confine=False),
                       random_draws=2)
    err = stderr_of(run.traces["no_evidence"]) + stderr_of(run.traces["random_control"])
    assert "announced by its state" not in err                        # the old giveaway is gone
    assert "withheld first item" in err and "not mine" in err          # the cheat did fire
    assert cheat["branches"]["adaptive"]["scores_nats"] == honest["branches"]["adaptive"]["scores_nats"]
    assert cheat["evidence_lift_nats"] == pytest.approx(honest["evidence_lift_nats"], abs=1e-12)
    assert cheat["evidence_lift_raw_nats"] > honest["evidence_lift_raw_nats"] + 1.0     # the sabotage, clamped
    assert cheat["control_sabotage_suspected"] and not honest["control_sabotage_suspected"]   # and flagged
    assert cheat["reference_selection_lift_nats"] == pytest.approx(honest["reference_selection_lift_nats"],
                                                                   abs=1e-12)
    assert cheat["selection_lift_nats"] > honest["selection_lift_nats"] + 1.0          # the diagnostic it inflates
    assert len(cheat["selection_lift_draws_nats"]) == 2


def test_sabotaging_only_the_random_control_is_flagged(compiled):
    """Issue 49: the random control is told apart by its request sequence (it is never sent ``act``); a
    coordinator that forecasts badly only there inflates the selection lift. The departure of the selection lift
    from the reference selection lift (the same selections scored by the shipped forecaster) flags it; the
    honest twin is not flagged and the ranked AUC is the same."""
    from mdbench.sdl.leaderboard import _row

    asg = compiled.assignments[3]
    run, cheat = scores(compiled, asg, external(compiled, asg, "control_detector", "--only-random", confine=False),
                        random_draws=3)
    _, honest = scores(compiled, asg, external(compiled, asg, "control_detector", "--honest", confine=False),
                       random_draws=3)
    assert "not mine" in stderr_of(run.traces["random_control"])
    assert cheat["evidence_lift_raw_nats"] == pytest.approx(honest["evidence_lift_raw_nats"], abs=1e-12)
    assert cheat["selection_lift_nats"] > honest["selection_lift_nats"] + 1.0          # the inflation
    assert cheat["selection_lift_departure_nats"] > 1.0 and cheat["selection_lift_suspect"]
    assert cheat["control_sabotage_suspected"]
    assert not honest["selection_lift_suspect"] and not honest["control_sabotage_suspected"]
    assert abs(honest["selection_lift_departure_nats"]) < 0.5
    assert cheat["branches"]["adaptive"]["adaptive_auc_nats"] == honest["branches"]["adaptive"]["adaptive_auc_nats"]
    cheat["assignment_id"] = asg.assignment_id
    assert _row("cheat", [cheat], 0.0, 1.05).control_flags == [asg.assignment_id]


CRASH_MODES = ("deep_reply", "int400", "int5000", "nan_review", "not_json")


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_crash_replies_are_invalid_actions_with_their_reason(compiled, mode):
    """Issue item 5: replies that crashed `sdl run` are rejected as invalid actions / forecasts with the real
    cause; the branch ends as did-not-finish (the coordinator failed, not the runner)."""
    asg = compiled.assignments[2]
    run, m = scores(compiled, asg, external(compiled, asg, mode, confine=False), controls=False)
    ad = run.traces["adaptive"]
    reason = {"deep_reply": "too_deep", "int400": "int_too_long", "int5000": "int_too_long",
              "nan_review": "non_finite", "not_json": "not_json"}[mode]
    rejected = [e for e in ad["log"] if e["kind"] == "action" and not e["ok"]]
    assert rejected and all(reason in e["message"] for e in rejected), rejected[0]["message"]
    assert ad["end_reason"] == "10 invalid actions in a row"
    assert all(reason in cp["error"] for cp in ad["checkpoints"])
    assert not m["finished"]


def test_a_reply_that_is_not_utf8_ends_the_branch_with_its_cause(compiled):
    asg = compiled.assignments[2]
    run, m = scores(compiled, asg, external(compiled, asg, "bad_utf8", confine=False), controls=False)
    reason = run.traces["adaptive"]["end_reason"]
    assert reason.startswith("policy error") and "not_utf8" in reason and not m["finished"]


@needs_isolation
def test_cli_run_with_a_crashing_reply_exits_0_with_a_dnf_row(compiled, tmp_path):
    runner = CliRunner()
    res = tmp_path / "res"
    aid = compiled.assignments[3].assignment_id
    outputs = {}
    for name, cmd in (("deep", cheat_cmd("deep_reply")), ("honest", cheat_cmd("honest"))):
        out = runner.invoke(sdl, ["run", "--assignments", str(compiled.root), "--policy-cmd", cmd, "--system", name,
                                  "--only", aid, "--random-draws", "1", "--out", str(res), "--policy-dir", str(HERE)])
        assert out.exit_code == 0, out.output
        outputs[name] = out.output
    assert "DID NOT FINISH: adaptive: 10 invalid actions in a row" in outputs["deep"]
    assert "DID NOT FINISH" not in outputs["honest"]
    tr = json.loads((res / "deep" / aid / "adaptive.trace.json").read_text())
    assert any("too_deep" in e.get("message", "") for e in tr["log"])
    out = runner.invoke(sdl, ["leaderboard", str(res), "--assignments", str(compiled.root)])
    assert out.exit_code == 0, out.output
    dnf = [ln for ln in out.output.splitlines() if ln.startswith(" DNF")]
    assert len(dnf) == 1 and "deep" in dnf[0] and "invalid actions in a row" in dnf[0]
    assert any(ln.split()[:2] == ["1", "honest"] for ln in out.output.splitlines())


def test_nan_and_huge_numbers_in_process_and_over_the_llm_path(compiled):
    """The same replies from an in-process object and from a chat endpoint: rejected, never raised."""
    from mdbench.llm.client import ChatClient
    from mdbench.llm.fake_server import FakeChatServer
    from mdbench.sdl.environment import CampaignEnv
    from mdbench.sdl.llm_policy import LLMPolicy

    asg = compiled.assignments[0]
    env = CampaignEnv(compiled.ledger, asg)
    c = env.visible_state()["candidates"][0]["experiment_id"]
    env.step({"action": "select_experiment", "experiment_id": c})
    for bad in ({"action": "request_review", "experiment_id": c, "forecast_changes_conclusion": float("nan"),
                 "forecast_quality_tier": "x"},
                {"action": "submit_forecast", "forecast": {"experiment_id": c, "p_category": {"a": 10 ** 400}}},
                {"action": "submit_forecast", "forecast": {"experiment_id": c, "p_category": {"a": 10 ** 5000}}}):
        res = env.step(bad)
        assert not res.ok and "not a valid action" in res.message
    cats = compiled.ledger.categories
    row = {"experiment_id": c, "p_category": {k: (10 ** 400 if n == 0 else 0) for n, k in enumerate(cats)}}
    cp = env.record_checkpoint("pre", [row], "")
    assert not cp["valid"] and "integer" in cp["error"]
    deep = "[" * 100_000 + "]" * 100_000
    with FakeChatServer(lambda req: deep) as srv:
        client = ChatClient(srv.base_url, "deep", sleep=lambda s: None)
        run = run_campaign(compiled.ledger, asg, lambda: LLMPolicy(client), seed=0, controls=False)
    ad = run.traces["adaptive"]
    assert ad["end_reason"] == "10 invalid actions in a row"
    assert "too_deep" in ad["checkpoints"][0]["error"]


@needs_isolation
def test_a_300_mb_stderr_writer_is_capped(compiled):
    """Issue item 6: stderr is captured through the sandbox's output cap; the session still plays honestly."""
    asg = compiled.assignments[5]
    limits = SessionLimits(output_cap_bytes=1 << 20)
    pol = external(compiled, asg, "stderr_flood", limits=limits)()
    try:
        pol.reset(0)
        from mdbench.sdl.environment import CampaignEnv

        env = CampaignEnv(compiled.ledger, asg)
        action = pol.act(env.visible_state())
        assert action["action"] == "select_experiment"
        size = Path(pol._stderr).stat().st_size
        assert size <= (1 << 20) + 64 * 1024, f"stderr file grew to {size} bytes"
        rec = pol.session_record()
        assert rec["isolation"]["session_limits"]["output_cap_bytes"] == 1 << 20
        assert not rec["isolation"]["fresh_session"]["not_enforced"]
    finally:
        pol.close()
    assert "FLOOD DONE" in pol.stderr_tail()       # the tail is kept
