"""The LLM process judge on the project's one chat client (mdbench.llm), against the loopback fake endpoint."""

from __future__ import annotations

import json
import shutil

import pytest

from mdbench.arena.judge import JudgeInput, ProcessCriterion, llm_messages, run_llm_judge
from mdbench.arena.runner import AgentSpec, run_trial
from mdbench.arena.task import TASKS_DIR
from mdbench.llm.fake_server import FakeChatServer

CRITERIA = [ProcessCriterion("checked_units", "Checked the units of every input.", "binary", 2),
            ProcessCriterion("explained", "Explained the choice.", "likert", 5)]
TRAJECTORY = {"schema_version": "ATIF-v1.4", "session_id": "s", "agent": {"name": "a", "version": "1"},
              "steps": [{"step_id": 1, "source": "agent", "message": "ran gmx energy -f ener.edr"}]}


def _input() -> JudgeInput:
    return JudgeInput(task="mdbench/x", instruction="Do x.", criteria=[c.__dict__ for c in CRITERIA],
                      trajectory=TRAJECTORY, files={"/app/output/answer.json": '{"D": 1.2}'})


def test_llm_judge_sends_trajectory_criteria_and_files_and_scores_the_reply(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-judge")
    seen = []

    def responder(req):
        seen.append(req)
        return 'Here you are:\n```json\n{"checked_units": {"raw": 1, "reasoning": "ran gmx energy"}, "explained": 4}\n```'

    with FakeChatServer(responder, api_key="sk-test-judge") as srv:
        crits = run_llm_judge(srv.base_url, "fake-model", _input(), CRITERIA, transcript=tmp_path / "t.jsonl")
        auth = srv.requests[0]["authorization"]
    assert [(c.name, c.value, c.error) for c in crits] == [("checked_units", 1.0, None), ("explained", 0.75, None)]
    assert crits[0].reasoning == "ran gmx energy"
    (req,) = seen
    assert req["model"] == "fake-model" and req["temperature"] == 0
    user = req["messages"][1]["content"]
    assert "ran gmx energy -f ener.edr" in user and "checked_units" in user and '{\\"D\\": 1.2}' in user
    transcript = (tmp_path / "t.jsonl").read_text()
    assert "sk-test-judge" not in transcript and "fake-model" in transcript
    assert auth == "Bearer sk-test-judge"


@pytest.mark.parametrize("fault", ["http400", "not_json", "list"])
def test_a_failing_llm_judge_scores_zero_with_the_error(fault):
    reply = {"not_json": "I would give it full marks.", "list": "[1, 2]"}.get(fault, "{}")
    with FakeChatServer(lambda req: reply) as srv:
        if fault == "http400":
            srv.fail_next(400)
        crits = run_llm_judge(srv.base_url, "fake-model", _input(), CRITERIA)
    assert [c.value for c in crits] == [0.0, 0.0]
    assert all(c.error and "LLM judge fake-model" in c.error and "failed" in c.error for c in crits)


def test_a_long_trajectory_is_cut_in_the_prompt():
    ji = _input()
    ji.trajectory = {**TRAJECTORY, "steps": [{"step_id": i, "source": "agent", "message": "x" * 1000}
                                             for i in range(1, 400)]}
    user = llm_messages(ji)[1]["content"]
    assert "trajectory cut at" in user and len(user) < 210_000


def test_llm_judge_scores_the_oracle_trial_through_the_runner(tmp_path):
    """End to end: the verifier of a task whose network is open reaches the endpoint and writes `process`.
    (The suite's tasks are all no-network: there the verifier, as under Harbor, cannot reach one.)"""
    task = tmp_path / "task"
    shutil.copytree(TASKS_DIR / "mdp-repair-gk", task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('network_mode = "no-network"', 'network_mode = "public"'))
    scores = {"explained_comm_grps": 1, "explained_sampling": 1, "minimal_edit": {"raw": 3, "reasoning": "ok"}}
    with FakeChatServer(lambda req: json.dumps(scores)) as srv:
        o = run_trial(task, AgentSpec(), tmp_path / "job", judge_llm=srv.base_url, judge_model="fake-model")
        n_requests = len(srv.requests)
    assert n_requests == 1
    assert o.rewards == {"correctness": 1.0, "process": pytest.approx((1 + 1 + 0.5) / 3, abs=1e-6)}
    details = json.loads((o.trial_dir / "verifier" / "reward-details.json").read_text())
    assert details["process"]["kind"] == "llm" and details["process"]["criteria"][2]["reasoning"] == "ok"
    assert (o.trial_dir / "verifier" / "judge-transcript.jsonl").is_file()
