"""The LLM coordinator against the loopback fake endpoint: a whole campaign with the expected number of calls,
the paper's prompt structure, state deltas that rebuild the state exactly, malformed replies rejected,
an endpoint that stays down is did-not-finish, and the CLI with the key from the environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sdl_fake_coordinator import ScriptedModel

from mdbench.llm.client import ChatClient
from mdbench.llm.fake_server import FakeChatServer
from mdbench.sdl.campaign import run_campaign
from mdbench.sdl.commands import sdl
from mdbench.sdl.environment import CampaignEnv
from mdbench.sdl.leaderboard import isolation_rankable
from mdbench.sdl.llm_policy import SYSTEM_PROMPT, LLMPolicy, apply_delta, state_delta
from mdbench.sdl.metrics import campaign_metrics
from mdbench.sdl.policies import make_policy


def expected_chat_calls(traces) -> int:
    """Campaign calls (act), the random control's forecast / review-expectation calls, and one per fresh
    evaluator session (checkpoints and future decisions not shared from the adaptive branch)."""
    n = traces["adaptive"]["n_calls"] + traces["no_evidence"]["n_calls"]
    rnd = traces["random_control"]
    n += sum(1 for e in rnd["log"] if e["kind"] == "action" and e["ok"] and
             e["action"]["action"] in ("submit_forecast", "request_review"))
    n += sum(1 for t in traces.values() for c in t["checkpoints"] + t["future"] if not c["session"].get("shared_from"))
    return n


def test_llm_coordinator_completes_a_campaign_with_the_expected_number_of_calls(vapdiff, tiny_assignments):
    asg = tiny_assignments[0]
    model = ScriptedModel()
    with FakeChatServer(model, cost_per_call=0.001) as srv:
        client = ChatClient(srv.base_url, "fake-coordinator", sleep=lambda s: None)
        run = run_campaign(vapdiff, asg, lambda: LLMPolicy(client), seed=0, random_draws=1)
        n_requests = len(srv.requests)
    m = campaign_metrics(run.traces, vapdiff, asg)
    assert m["finished"], m["dnf_reasons"]
    # budget 2: select, prior, inspect, update ×2, stop = 9 calls; the call-matched control gets 9 as well;
    # random control: 2 priors + 2 updates; evaluator sessions: pre, future_pre, then 2 checkpoints + 1 future per branch
    assert run.traces["adaptive"]["n_calls"] == run.traces["no_evidence"]["n_calls"] == 9
    assert n_requests == expected_chat_calls(run.traces) == 9 + 9 + 4 + 2 + 3 * 3
    assert client.totals.calls == n_requests
    u = m["branches"]["adaptive"]["usage"]
    assert u["calls"] == 9 + 2 + 2 + 1 and u["cost"] == pytest.approx(u["calls"] * 0.001)
    iso = m["branches"]["adaptive"]["isolation"]
    assert iso["method"] == "llm_endpoint" and iso["model"] == "fake-coordinator" and isolation_rankable(iso)[0]
    # the same campaign as the built-in script would play: uniform forecasts, one inspection per experiment
    assert m["branches"]["adaptive"]["evidence_used"] == 2


def test_prompt_structure_and_deltas(vapdiff, tiny_assignments):
    asg = tiny_assignments[1]
    model = ScriptedModel()
    with FakeChatServer(model) as srv:
        client = ChatClient(srv.base_url, "fake", sleep=lambda s: None)
        pol = LLMPolicy(client)
        pol.reset(0)
        env = CampaignEnv(vapdiff, asg)
        sent = []
        while not env.done:
            st = env.visible_state()
            sent.append(st)
            env.step(pol.act(st))
        msgs = srv.requests[-1]["body"]["messages"]
    assert msgs[0] == {"role": "system", "content": SYSTEM_PROMPT}
    first = json.loads(msgs[1]["content"])
    assert first["campaign_state"] == sent[0] and first["phase"] == "select"
    assert first["permitted_action_schema"]["oneOf"][0]["properties"]["action"]["const"] == "select_experiment"
    later = [json.loads(m["content"]) for m in msgs[3::2]]
    assert all("campaign_state" not in b and "state_delta" in b for b in later)
    # the model rebuilt exactly the states the environment showed
    assert model.states == sent
    # one full state, then deltas that are a small fraction of it
    assert max(pol.payload_chars[1:]) < 0.2 * pol.payload_chars[0]
    print(f"\nfirst turn {pol.payload_chars[0]} characters; later turns at most {max(pol.payload_chars[1:])}")


def test_state_delta_round_trips_on_a_whole_campaign(vapdiff, tiny_assignments):
    env = CampaignEnv(vapdiff, tiny_assignments[2])
    pol = make_policy("kernel", 0)
    prev = env.visible_state()
    while not env.done:
        env.step(pol.act(prev))
        cur = env.visible_state()
        assert apply_delta(prev, state_delta(prev, cur)) == cur
        prev = cur


def test_malformed_replies_are_rejected_and_the_model_sees_why(vapdiff, tiny_assignments):
    asg = tiny_assignments[3]
    model = ScriptedModel(garble=(3,))           # request 3 = the adaptive branch's first act (after pre + future)
    with FakeChatServer(model) as srv:
        client = ChatClient(srv.base_url, "fake", sleep=lambda s: None)
        run = run_campaign(vapdiff, asg, lambda: LLMPolicy(client), seed=0, controls=False)
        last = json.loads(srv.requests[3]["body"]["messages"][-1]["content"])
    ad = run.traces["adaptive"]
    assert ad["n_invalid"] == 1 and ad["end_reason"] == "policy stopped"
    msg = last["state_delta"]["set"]["last_result"]["message"]
    assert "reply is not a valid action: not_json" in msg          # the real cause, one line


def test_an_endpoint_that_stays_down_is_did_not_finish(vapdiff, tiny_assignments):
    asg = tiny_assignments[4]
    with FakeChatServer(ScriptedModel()) as srv:
        srv.fail_next(503, n=1000)
        client = ChatClient(srv.base_url, "fake", max_retries=1, sleep=lambda s: None)
        run = run_campaign(vapdiff, asg, lambda: LLMPolicy(client), seed=0, controls=False)
    m = campaign_metrics(run.traces, vapdiff, asg)
    assert not m["finished"] and "503" in m["dnf_reasons"][0]
    assert all(not c["valid"] for c in run.traces["adaptive"]["checkpoints"])


def test_cli_run_with_policy_llm(tmp_path, monkeypatch):
    runner = CliRunner()
    params = Path(__file__).parents[2] / "params" / "sdl" / "small.yaml"
    assert runner.invoke(sdl, ["compile", "--params", str(params), "--out", str(tmp_path / "asg")]).exit_code == 0
    monkeypatch.setenv("FAKE_KEY", "sk-fake")
    with FakeChatServer(ScriptedModel(), api_key="sk-fake") as srv:
        res = runner.invoke(sdl, ["run", "--assignments", str(tmp_path / "asg"), "--policy-llm", srv.base_url,
                                  "--model", "fake-coordinator", "--api-key-env", "FAKE_KEY", "--only",
                                  "vapdiff_crystal-s0-a6", "--no-controls", "--price-in", "1", "--price-out", "2",
                                  "--out", str(tmp_path / "res")])
        assert res.exit_code == 0, res.output
        assert all(r["authorization"] == "Bearer sk-fake" for r in srv.requests)
    transcript = (tmp_path / "res" / "transcripts" / "fake-coordinator.jsonl").read_text()
    assert "sk-fake" not in transcript and len(transcript.splitlines()) == len(srv.requests)
    m = json.loads((tmp_path / "res" / "fake-coordinator" / "vapdiff_crystal-s0-a6" / "metrics.json").read_text())
    assert m["finished"] and m["branches"]["adaptive"]["usage"]["cost"] > 0
