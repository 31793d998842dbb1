"""The scripted model (tool choice per CLI, stateless turns, wire formats) and its bad inputs; the price table."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mdbench.errors import InputError
from mdbench.llm.prices import PriceTable
from mdbench.llm.proxy import _Assembler
from mdbench.llm.scripted import Reply, ScriptedModel, ToolCall, encode_chat, encode_responses, sse_chat, sse_responses


def _req(tools: list[str], api: str = "responses", history: int = 0) -> dict:
    if api == "responses":
        return {"tools": [{"type": "function", "name": t, "parameters": {"required": ["patchText"]}} for t in tools],
                "input": [{"role": "user", "content": "x"}] + [{"type": "function_call"}, {
                    "type": "function_call_output"}] * history}
    return {"tools": [{"type": "function", "function": {"name": t, "parameters": {"required": ["patchText"]}}}
                      for t in tools],
            "messages": [{"role": "user", "content": "x"}] + [{"role": "assistant"}, {"role": "tool"}] * history}


SCRIPT = {"turns": [{"shell": "ls -l"}, {"write": {"path": "a b.md", "content": "x\ny"}}, {"final": "bye"}],
          "usage": {"input": 10, "cached": 2, "output": 3}}


@pytest.mark.parametrize("tool,args", [("exec_command", {"cmd": "ls -l"}), ("shell_command", {"command": "ls -l"}),
                                       ("shell", {"command": ["bash", "-lc", "ls -l"]}),
                                       ("bash", {"command": "ls -l"})])
def test_a_shell_turn_uses_the_shell_tool_the_cli_offers(tool, args):
    r = ScriptedModel(SCRIPT)(_req([tool, "unrelated"]))
    assert len(r.tool_calls) == 1 and r.tool_calls[0].name == tool
    got = json.loads(r.tool_calls[0].arguments)
    assert {k: got[k] for k in args} == args
    assert (r.input_tokens, r.cached_tokens, r.output_tokens) == (10, 2, 3)


def test_a_write_turn_prefers_write_then_apply_patch_then_a_heredoc(tmp_path):
    m = ScriptedModel(SCRIPT)
    w = m(_req(["bash", "write"], "chat", history=1)).tool_calls[0]
    assert w.name == "write" and json.loads(w.arguments) == {"filePath": "a b.md", "content": "x\ny"}
    p = m(_req(["bash", "apply_patch"], "chat", history=1)).tool_calls[0]
    assert p.name == "apply_patch" and json.loads(p.arguments) == {
        "patchText": "*** Begin Patch\n*** Add File: a b.md\n+x\n+y\n*** End Patch"}
    h = m(_req(["exec_command"], history=1)).tool_calls[0]
    cmd = json.loads(h.arguments)["cmd"]
    subprocess.run(["bash", "-c", cmd], cwd=tmp_path, check=True)
    assert (tmp_path / "a b.md").read_text() == "x\ny\n"


def test_turns_follow_the_history_and_end_with_the_final_message():
    m = ScriptedModel(SCRIPT)
    assert m(_req(["bash"], "chat", history=2)).text == "bye"
    assert m(_req(["bash"], "chat", history=7)).text == "(script exhausted)"
    assert m({"messages": [{"role": "user", "content": "title?"}]}).text == m.side_text   # no tools: side call
    loop = ScriptedModel({"turns": [{"shell": "a"}, {"shell": "b"}], "loop": True})
    assert [json.loads(loop(_req(["bash"], "chat", history=k)).tool_calls[0].arguments)["command"]
            for k in range(5)] == ["a", "b", "a", "b", "a"]


@pytest.mark.parametrize("script,match", [
    ({}, "needs"), ({"turns": [{"shell": "a", "final": "b"}]}, "exactly one"),
    ({"turns": [{"write": {"path": 1}}]}, "write"),
    ({"turns": [{"shell": "a"}], "usage": {"input": -1}}, "usage.input"),
    ({"turns": [{"shell": "a"}], "usage": {"input": 1, "cached": 2}}, "cannot exceed"),
    ({"turns": [{"final": "x"}], "loop": True}, "loop")])
def test_bad_scripts_are_one_clear_error(script, match):
    with pytest.raises(InputError, match=match):
        ScriptedModel(script)


def test_fake_server_cli_with_a_bad_script_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text("{not json")
    p = subprocess.run([sys.executable, "-m", "mdbench.llm.fake_server", "--script", str(bad)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and str(bad) in p.stderr


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("stream", [False, True])
def test_the_wire_formats_round_trip_through_the_proxys_assembler(api, stream):
    r = Reply(text="thinking done", tool_calls=[ToolCall("call_1", "bash", '{"command": "ls"}')],
              input_tokens=50, cached_tokens=5, output_tokens=7)
    asm = _Assembler(api)
    if stream:
        events = sse_chat(r, "m", "1") if api == "chat" else sse_responses(r, "m", "1")
        for ev in events:
            data = "\n".join(line[5:].lstrip() for line in ev.decode().splitlines() if line.startswith("data:"))
            assert asm.event(data)
    else:
        assert asm.body(encode_chat(r, "m", "1") if api == "chat" else encode_responses(r, "m", "1"))
    out = asm.to_json()
    assert out["complete"] and out["text"] == "thinking done"
    assert out["tool_calls"] == [{"id": "call_1", "name": "bash", "arguments": '{"command": "ls"}'}]
    u = out["usage"]
    assert (u.get("prompt_tokens", u.get("input_tokens")),
            u.get("completion_tokens", u.get("output_tokens"))) == (50, 7)


def test_price_table_errors_name_the_file_and_the_entry(tmp_path):
    p = tmp_path / "prices.yaml"
    p.write_text("models:\n  m: {input: 1, cached_input: .nan, output: 2}\n")
    with pytest.raises(InputError, match=r"prices\.yaml.*models\.m\.cached_input"):
        PriceTable.load(p)
    p.write_text("- a list\n")
    with pytest.raises(InputError, match="models"):
        PriceTable.load(p)


def test_the_shipped_price_table_loads_and_looks_up_with_or_without_a_provider_prefix():
    t = PriceTable.load()
    assert t.get("openai/gpt-5") == t.get("gpt-5") is not None
    assert t.get("no-such-model") is None
    assert t.get("gpt-5").usd(1_000_000, 0, 0) == pytest.approx(t.get("gpt-5").input_usd_per_mtok)
