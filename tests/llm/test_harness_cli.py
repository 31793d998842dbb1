"""The real Codex and OpenCode CLIs, driven by the scripted model: directly, through the metering proxy, and inside
the OS sandbox with the model-only network (the proxy on a loopback port of the agent's own namespace).

Skipped, with the install command, where the pinned CLIs are not installed (``make agent-harnesses``).
"""

from __future__ import annotations

import json
import subprocess

import pytest
from _harness_run import (
    UPSTREAM_KEY,
    cleanup,
    harbor_validate,
    need_cli,
    need_isolation,
    run_harness,
)
from mdbench.atif import check_trajectory
from mdbench.episode.harnesses import find_cli
from mdbench.llm.fake_server import FakeChatServer
from mdbench.llm.scripted import ScriptedModel

USAGE = {"input": 1500, "cached": 300, "output": 60}
NOTES = "# plan\nscripted line two\n"


def _script() -> dict:
    """Shell commands (files, the user, the network from inside), a file write, a final message."""
    net = ("P=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H \"Authorization: Bearer $MDBENCH_PROXY_TOKEN\" "
           "http://127.0.0.1:4141/v1/models); echo \"proxy $P\" > out/net.txt; "
           "for u in http://127.0.0.1:{UPSTREAM_PORT}/v1/models http://10.0.0.1/ https://example.com/; do "
           "if curl -s -m 5 -o /dev/null \"$u\"; then echo \"REACHED $u\" >> out/net.txt; "
           "else echo \"blocked $u\" >> out/net.txt; fi; done; env > out/env.txt")
    return {"turns": [{"shell": "mkdir -p out && echo hello-from-script > out/a.txt && id -un > out/who.txt"},
                      {"write": {"path": "notes.md", "content": NOTES}},
                      {"shell": net},
                      {"final": "Scripted study step finished."}],
            "usage": USAGE}


@pytest.mark.parametrize("name", ["codex", pytest.param("opencode", marks=pytest.mark.slow)])
def test_real_cli_runs_the_scripted_turns_against_the_fake_endpoint_directly(name, tmp_path):
    """Step 1: no proxy, no sandbox — the scripted model speaks each CLI's wire format (Codex: Responses API with
    exec_command; OpenCode: chat completions with bash and apply_patch/write)."""
    need_cli(name)
    from mdbench.episode.harnesses import codex_config, opencode_config

    binary, _ = find_cli(name)
    script = {"turns": [{"shell": "echo direct > direct.txt"}, {"write": {"path": "w.txt", "content": "w\n"}},
                        {"final": "ok"}], "usage": USAGE}
    with FakeChatServer(ScriptedModel(script)) as srv:
        home, ws = tmp_path / "home", tmp_path / "ws"
        ws.mkdir()
        if name == "codex":
            cfg = home / ".codex" / "config.toml"
            cfg.parent.mkdir(parents=True)
            cfg.write_text(codex_config("gpt-5", srv.base_url, None))
            argv = [str(binary), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                    "-C", str(ws), "go"]
        else:
            cfg = home / ".config" / "opencode" / "opencode.json"
            cfg.parent.mkdir(parents=True)
            cfg.write_text(opencode_config("gpt-5", srv.base_url))
            argv = [str(binary), "run", "--model", "mdbench/gpt-5", "go"]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "MDBENCH_PROXY_TOKEN": "x",
               "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1"}
        p = subprocess.run(argv, cwd=ws, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=180)
        assert p.returncode == 0, p.stderr[-2000:]
        assert (ws / "direct.txt").read_text() == "direct\n"
        assert (ws / "w.txt").read_text() == "w\n"
        apis = {s["api"] for s in srv.served}
        assert apis == ({"responses"} if name == "codex" else {"chat"})
        assert all(s["stream"] for s in srv.served)
        tools = [t for s in srv.served for t in s["tool_calls"]]
        assert tools[:2] == (["exec_command", "exec_command"] if name == "codex" else ["bash", "apply_patch"])


@pytest.mark.parametrize("name", ["codex", "opencode"])
def test_real_cli_through_the_proxy_in_the_sandbox_with_model_only_network(name):
    """The must-show: scripted shell commands ran inside the sandbox as the agent user, the proxy counted every
    request with the declared tokens, the trajectory is valid ATIF (Harbor's model when installed), and from inside
    only the proxy is reachable; the endpoint's key never entered the sandbox."""
    need_cli(name)
    need_isolation()
    run = None
    try:
        run = run_harness(name, _script(), reasoning="high")
        ws, s = run.ws, run.summary
        assert run.result.exit_code == 0, (run.stderr[-3000:], run.stdout[-2000:])
        # the scripted commands ran in the sandbox, in the workspace, as the agent user
        assert (ws / "out" / "a.txt").read_text() == "hello-from-script\n"
        assert (ws / "notes.md").read_text() == NOTES
        if run.uid is not None:
            assert (ws / "out" / "who.txt").read_text().strip() == "mdbench-harness-test"
            assert (ws / "out" / "a.txt").stat().st_uid == run.uid
            assert (ws / "notes.md").stat().st_uid == run.uid
        # only the proxy is reachable
        net = (ws / "out" / "net.txt").read_text().splitlines()
        assert net[0] == "proxy 200", net
        assert len(net) == 4 and all(line.startswith("blocked ") for line in net[1:]), net
        # the endpoint's key never entered the sandbox; the agent holds only the proxy token
        env_txt = (ws / "out" / "env.txt").read_text()
        assert UPSTREAM_KEY not in env_txt and "MDBENCH_PROXY_TOKEN=mdbench-proxy-" in env_txt
        # the proxy metered every request the endpoint answered, with the declared tokens
        up = run.upstream.totals()
        assert s["calls"] == up["calls"] == len(run.upstream.served) >= 4
        assert (s["tokens_in"], s["tokens_cached"], s["tokens_out"]) == (
            up["tokens_in"], up["tokens_cached"], up["tokens_out"])
        assert s["tokens_in"] == USAGE["input"] * s["calls"] and s["tokens_out"] == USAGE["output"] * s["calls"]
        assert s["usd"] == pytest.approx(s["calls"] * ((1500 - 300) * 1.25 + 300 * 0.125 + 60 * 10.0) / 1e6)
        assert s["capped"] is None and s["refused"] == 0 and s["failed"] == 0
        # the reasoning effort reached the endpoint in each CLI's own way
        tooled = [r["body"] for r in run.upstream.requests if r["body"].get("tools")]
        if name == "codex":
            assert all(b["reasoning"]["effort"] == "high" for b in tooled)
        else:
            assert all(b["reasoning_effort"] == "high" for b in tooled)
        # every upstream request carried the maintainer's key (added by the proxy), none the agent's token
        assert {r["authorization"] for r in run.upstream.requests} == {f"Bearer {UPSTREAM_KEY}"}
        # the log: one line per call, the GET of the scripted curl included, no key anywhere
        log_text = (run.ep / "llm" / "calls.jsonl").read_text()
        assert UPSTREAM_KEY not in log_text
        lines = [json.loads(x) for x in log_text.splitlines()]
        assert sum(1 for x in lines if x["method"] == "POST" and x["status"] == 200) == s["calls"]
        assert any(x["method"] == "GET" for x in lines)
        # the trajectory: ATIF from the evaluator's side
        traj = json.loads(s["trajectory_path"].read_text())
        assert check_trajectory(traj) is None
        assert traj["agent"]["name"] == name and traj["agent"]["version"] == run.launch.info["version"]
        agent_steps = [st for st in traj["steps"] if st["source"] == "agent"]
        assert len(agent_steps) == s["calls"]
        called = [tc for st in agent_steps for tc in st.get("tool_calls", [])]
        assert len(called) >= 3 and all(
            any(r["source_call_id"] == tc["tool_call_id"] for r in st.get("observation", {}).get("results", []))
            for st in agent_steps for tc in st.get("tool_calls", []))
        assert traj["final_metrics"]["total_prompt_tokens"] == s["tokens_in"]
        assert any("Run the scripted steps." in st["message"] for st in traj["steps"] if st["source"] == "user")
        problems = harbor_validate(s["trajectory_path"])
        if problems is not None:
            assert problems == []
    finally:
        if run is not None:
            cleanup(run)


@pytest.mark.parametrize("name", ["codex", pytest.param("opencode", marks=pytest.mark.slow)])
def test_cli_past_the_token_cap_is_cut_off_with_the_cap_named(name):
    """A script that never stops calling: the proxy refuses once the cap is spent and the CLI ends non-zero."""
    need_cli(name)
    need_isolation()
    script = {"turns": [{"shell": "echo again >> loop.txt"}], "loop": True,
              "usage": {"input": 4000, "cached": 0, "output": 100}}
    run = run_harness(name, script, max_tokens=20_000)
    try:
        s = run.summary
        assert s["capped"] and "token cap" in s["capped"] and "20000" in s["capped"]
        assert s["refused"] >= 1
        # the calls answered before the cap: the cap was reached by the last of them, not before
        assert s["tokens_in"] + s["tokens_out"] >= 20_000
        assert (s["calls"] - 1) * 4100 < 20_000
        assert run.result.exit_code != 0
        assert "token cap reached" in run.stdout + run.stderr
        lines = [json.loads(x) for x in (run.ep / "llm" / "calls.jsonl").read_text().splitlines()]
        assert any(x.get("refused") == "cap" and x["status"] == 403 for x in lines)
        tool_turns = sum(1 for x in run.upstream.served if x["tool_calls"])
        assert (run.ws / "loop.txt").read_text().count("again") == tool_turns >= s["calls"] - 1
    finally:
        cleanup(run)


def test_missing_or_wrong_version_cli_raises_with_the_install_command(tmp_path, monkeypatch):
    from mdbench.episode.harnesses import HarnessUnavailable, harness_launch

    monkeypatch.setenv("MDBENCH_AGENT_HARNESSES", str(tmp_path / "none"))
    with pytest.raises(HarnessUnavailable, match="make agent-harnesses"):
        harness_launch(name="codex", model="gpt-5", endpoint="http://127.0.0.1:9/v1", reasoning=None,
                       workspace=tmp_path, home=tmp_path, prompt="p", episode_dir=tmp_path)
    fake = tmp_path / "old" / "node_modules" / "opencode-ai"
    (fake / "bin").mkdir(parents=True)
    (fake / "package.json").write_text('{"name": "opencode-ai", "version": "0.0.1"}')
    exe = fake / "bin" / "opencode.exe"
    exe.write_bytes(b"#!/bin/sh\necho 0.0.1\n" + b"#" * 1_100_000)
    exe.chmod(0o755)
    monkeypatch.setenv("MDBENCH_AGENT_HARNESSES", str(tmp_path / "old"))
    with pytest.raises(HarnessUnavailable, match=r"version 0\.0\.1.*pins .*make agent-harnesses"):
        harness_launch(name="opencode", model="gpt-5", endpoint="http://127.0.0.1:9/v1", reasoning=None,
                       workspace=tmp_path, home=tmp_path, prompt="p", episode_dir=tmp_path)


def test_codex_with_its_endpoint_down_ends_with_the_cause_in_the_summary():
    """Bad input: the endpoint refuses connections. The proxy retries, answers 502 with the cause; Codex gives up
    (non-zero exit: the runner's agent_error) and the summary names the cause; nothing is metered."""
    need_cli("codex")
    need_isolation()
    import socket as _socket

    s = _socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()
    run = run_harness("codex", {"turns": [{"final": "never"}]}, endpoint=f"http://127.0.0.1:{dead}/v1", timeout_s=180)
    try:
        sm = run.summary
        assert run.result.exit_code != 0
        assert sm["calls"] == 0 and sm["tokens_in"] == 0 and sm["failed"] >= 1
        assert f"127.0.0.1:{dead}" in sm["error"] and "Connection" in sm["error"]
        assert sm["trajectory_path"] is None
    finally:
        cleanup(run)


def test_the_install_script_pins_the_versions_harness_launch_checks():
    import re

    from mdbench.episode.harnesses import VERSIONS
    from mdbench.paths import PROJECT_ROOT

    text = (PROJECT_ROOT / "scripts" / "agent_harnesses.sh").read_text()
    assert re.search(r'CODEX_VERSION:-([0-9.]+)', text).group(1) == VERSIONS["codex"]
    assert re.search(r'OPENCODE_VERSION:-([0-9.]+)', text).group(1) == VERSIONS["opencode"]


def test_configs_point_at_the_proxy_only_and_turn_the_clis_own_sandboxes_and_prompts_off():
    import tomllib

    from mdbench.episode.harnesses import PROXY_TOKEN_ENV, codex_config, opencode_config

    c = tomllib.loads(codex_config('gpt-"5"', "http://127.0.0.1:4141/v1", "high"))
    assert c["model"] == 'gpt-"5"' and c["model_provider"] == "mdbench" and c["model_reasoning_effort"] == "high"
    assert (c["approval_policy"], c["sandbox_mode"], c["web_search"]) == ("never", "danger-full-access", "disabled")
    prov = c["model_providers"]["mdbench"]
    assert prov == {**prov, "base_url": "http://127.0.0.1:4141/v1", "env_key": PROXY_TOKEN_ENV,
                    "wire_api": "responses"}
    o = json.loads(opencode_config("glm-4.6", "http://127.0.0.1:4141/v1", "high"))
    p = o["provider"]["mdbench"]
    assert p["options"]["baseURL"] == "http://127.0.0.1:4141/v1" and PROXY_TOKEN_ENV in p["options"]["apiKey"]
    assert p["models"]["glm-4.6"]["options"] == {"reasoningEffort": "high"}
    assert o["model"] == o["small_model"] == "mdbench/glm-4.6"
    assert o["permission"]["bash"] == o["permission"]["edit"] == "allow" and o["permission"]["webfetch"] == "deny"
    assert o["share"] == "disabled" and o["autoupdate"] is False


def test_codex_with_a_chat_only_endpoint_runs_through_the_translating_proxy():
    """Seed 000 pairs Codex with DeepSeek, whose endpoint speaks Chat Completions only: the proxy translates."""
    need_cli("codex")
    need_isolation()
    script = {"turns": [{"shell": "echo translated > t.txt"}, {"write": {"path": "w.md", "content": "w\n"}},
                        {"final": "done"}], "usage": USAGE}
    run = run_harness("codex", script, model="deepseek-chat", endpoint_api="chat", reasoning="high")
    try:
        assert run.result.exit_code == 0, run.stderr[-3000:]
        assert (run.ws / "t.txt").read_text() == "translated\n" and (run.ws / "w.md").read_text() == "w\n"
        assert {s["api"] for s in run.upstream.served} == {"chat"}
        assert all(r["path"].endswith("/chat/completions") for r in run.upstream.requests)
        assert all(r["body"].get("reasoning_effort") == "high" for r in run.upstream.requests if r["body"].get("tools"))
        s = run.summary
        assert s["calls"] == run.upstream.totals()["calls"] >= 3
        assert s["tokens_in"] == USAGE["input"] * s["calls"]
        assert s["usd"] == pytest.approx(s["calls"] * ((1500 - 300) * 0.28 + 300 * 0.028 + 60 * 0.42) / 1e6)
        traj = json.loads(s["trajectory_path"].read_text())
        assert check_trajectory(traj) is None
        assert sum(len(st.get("tool_calls", [])) for st in traj["steps"]) == 2
        problems = harbor_validate(s["trajectory_path"])
        if problems is not None:
            assert problems == []
    finally:
        cleanup(run)


def test_codex_facing_broken_streams_retries_then_ends_with_the_cause():
    """Bad input: every stream breaks after its first event. The proxy passes each break on (logged incomplete),
    Codex retries as configured and gives up (non-zero exit: agent_error); the summary says why."""
    need_cli("codex")
    need_isolation()
    run = run_harness("codex", {"turns": [{"final": "never seen"}], "usage": USAGE},
                      faults=lambda up: up.truncate_next(50))
    try:
        s = run.summary
        assert run.result.exit_code != 0
        assert s["incomplete"] == s["calls"] >= 2 and "without its final event" in s["error"]
        assert s["tokens_in"] == 0 and s["usd"] is None     # no usage ever arrived: unknown, not zero
        assert not (run.ws / "never seen").exists()
    finally:
        cleanup(run)
