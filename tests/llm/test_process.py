"""Process evidence from the evaluator's trajectory (``mdbench.llm.process``): what the agent's tool calls show,
per action and per SAEO item; anything unreadable is a reason, never an exception. Fast (no CLI, no sandbox)."""

from __future__ import annotations

import json
import os

import pytest
from mdbench.episode.harnesses import episode_caps, resolve_endpoint_api
from mdbench.errors import InputError
from mdbench.llm.process import ACTION_ITEMS, classify, process_evidence, write_process_evidence
from mdbench.llm.trajectory import build_trajectory


def _call(seq: int, *, tools: list[tuple[str, dict]] | None = None, text: str = "", offer_tools: bool = True,
          history: list[dict] | None = None) -> dict:
    """One answered call as the proxy logs it."""
    return {"seq": seq, "session": "s", "time": "2026-01-01T00:00:00Z", "method": "POST", "path": "/v1/responses",
            "api": "responses", "status": 200, "outcome": "ok", "model": "gpt-5",
            "request": {"model": "gpt-5", "input": [{"role": "user", "content": "Run the study."}, *(history or [])],
                        **({"tools": [{"type": "function", "name": "exec_command"}]} if offer_tools else {})},
            "response": {"text": text, "complete": True,
                         "tool_calls": [{"id": f"c{seq}_{k}", "name": n, "arguments": json.dumps(a)}
                                        for k, (n, a) in enumerate(tools or [])]},
            "metered": {"tokens_in": 100, "tokens_cached": 0, "tokens_out": 10, "usd": 0.001}}


def _trajectory(tmp_path):
    calls = [_call(1, tools=[("exec_command", {"cmd": "ls agent_input && cat PROMPT.md"})]),
             _call(2, tools=[("exec_command", {"cmd": "gmx grompp -f em.mdp -c box.gro -o em.tpr"}),
                             ("shell", {"command": ["bash", "-lc", "gmx mdrun -deffnm prod -nt 2"]})]),
             _call(3, tools=[("exec_command", {"cmd": "curl -s https://example.com/ || true"})],
                   history=[{"type": "function_call_output", "call_id": "c2_1", "output": "Finished mdrun on rank 0"}]),
             _call(4, tools=[("apply_patch", {"input": "*** Begin Patch\n*** Add File: run_record/ledger.json\n"})]),
             _call(5, text="session title", offer_tools=False),    # a side call (no tools offered): not the final
             _call(6, text="Stopping: the production run is done; D is reported in results/.")]
    traj = build_trajectory(calls, agent_name="codex", agent_version="0.0", model_name="gpt-5")
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(traj))
    return path, traj


def _step_of(traj: dict, needle: str) -> int:
    return next(s["step_id"] for s in traj["steps"] if needle in json.dumps(s.get("tool_calls") or []))


def test_tool_calls_become_actions_and_item_evidence(tmp_path):
    path, traj = _trajectory(tmp_path)
    ev = process_evidence(path)
    assert ev["origin"].startswith("evaluator") and ev["agent"]["name"] == "codex"
    assert ev["tool_calls"] == 5 and ev["actions_listed"] == 5
    read, build = _step_of(traj, "agent_input"), _step_of(traj, "grompp")
    net, rec = _step_of(traj, "example.com"), _step_of(traj, "run_record/")
    by = ev["steps_by_action"]
    assert by["read_inputs"] == [read] and by["build_system"] == [build] and by["run_md"] == [build]
    assert by["network"] == [net] and by["write_run_record"] == [rec]
    assert ev["items"]["E1"] == [read] and ev["items"]["Sim1"] == [build] and ev["items"]["Sim4"] == [build]
    assert ev["items"]["E3"] == [rec]
    # the final message is the last agent message without tool calls that is not a side call
    final = ev["final_message"]
    assert final["message"].startswith("Stopping:") and ev["items"]["O5"] == [final["step_id"]]
    cmds = {a["command"]: a["actions"] for a in ev["actions"]}
    assert cmds["bash -lc gmx mdrun -deffnm prod -nt 2"] == ["run_md"]
    outs = {a["command"]: a["output_head"] for a in ev["actions"]}
    assert outs["bash -lc gmx mdrun -deffnm prod -nt 2"] == "Finished mdrun on rank 0"   # what the CLI got back
    assert outs["curl -s https://example.com/ || true"] is None                          # no output sent back
    assert cmds["curl -s https://example.com/ || true"] == ["network"]


def test_commands_without_the_markers_are_not_credited():
    assert classify("echo gmx_is_not_run; ls") == []
    assert classify("cat run_record_notes.md") == []          # run_record/ is the record folder, not a prefix
    assert set(ACTION_ITEMS) >= {"read_inputs", "run_md", "network", "final_message"}


def test_write_process_evidence_writes_the_file_and_a_short_copy_for_the_result(tmp_path):
    _trajectory(tmp_path)
    short = write_process_evidence(tmp_path, tmp_path / "audit")
    full = json.loads((tmp_path / "audit" / "process_evidence.json").read_text())
    assert short["path"] == "audit/process_evidence.json" and full["tool_calls"] == short["tool_calls"] == 5
    assert "rules" in full and "rules" not in short


def test_no_trajectory_is_no_evidence_and_a_bad_one_is_a_reason(tmp_path):
    assert process_evidence(tmp_path / "trajectory.json") is None
    assert write_process_evidence(tmp_path, tmp_path / "audit") is None and not (tmp_path / "audit").exists()
    bad = tmp_path / "bad.json"
    for text, reason in [("{not json", "not_json"), ("[" * 5000 + "]" * 5000, "too_deep"),
                         ('{"steps": 1}', "not_atif"), ('{"steps": [], "x": NaN}', "non_finite")]:
        bad.write_text(text)
        ev = process_evidence(bad)
        assert ev["refused"] == reason, (text[:20], ev)
    os.mkfifo(tmp_path / "fifo.json")
    assert process_evidence(tmp_path / "fifo.json")["refused"] == "not_regular"
    (tmp_path / "link.json").symlink_to(tmp_path / "bad.json")
    assert process_evidence(tmp_path / "link.json")["refused"] in ("symlink", "not_regular")


def test_hostile_steps_are_skipped_not_fatal(tmp_path):
    doc = {"schema_version": "ATIF-v1.4", "session_id": "x", "agent": {"name": "a", "version": "1"},
           "steps": [1, None, {"source": "agent", "step_id": "7", "tool_calls": "rm -rf /"},
                     {"source": "agent", "step_id": 2, "tool_calls": [None, {"arguments": ["gmx", "mdrun"]},
                                                                      {"arguments": {"cmd": ["gmx", "mdrun"]}}]}]}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    ev = process_evidence(p)
    assert ev["tool_calls"] == 2 and ev["steps_by_action"] == {"run_md": [2]}


def test_caps_flags_win_over_the_environment_which_wins_over_the_defaults(monkeypatch):
    monkeypatch.setenv("MDBENCH_LLM_MAX_TOKENS", "1234")
    monkeypatch.setenv("MDBENCH_LLM_MAX_USD", "2.5")
    monkeypatch.setenv("MDBENCH_LLM_ENDPOINT_API", "chat")
    assert (episode_caps(None, None).max_tokens, episode_caps(None, None).max_usd) == (1234, 2.5)
    assert (episode_caps(99, 0.5).max_tokens, episode_caps(99, 0.5).max_usd) == (99, 0.5)
    assert resolve_endpoint_api(None) == "chat" and resolve_endpoint_api("native") == "native"
    for bad in [(0, None), (None, -1.0), (None, float("inf")), (None, float("nan"))]:
        with pytest.raises(InputError):
            episode_caps(*bad)
    with pytest.raises(InputError, match="native or chat"):
        resolve_endpoint_api("grpc")
