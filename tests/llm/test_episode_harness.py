"""End to end: ``mdbench episode run EP --harness codex|opencode --model M --endpoint URL`` on a micro episode, the
real CLI driven by the scripted model through the runner's metering proxy (model-only network), then the audit.

Needs the pinned CLIs (``make agent-harnesses``), the agent toolchain (``make agent-env``) and OS namespaces;
skipped, saying which, without them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _harness_run import UPSTREAM_KEY, harbor_validate, need_cli, need_isolation
from mdbench.atif import check_trajectory
from mdbench.episode.toolchain import agent_toolchain
from mdbench.llm.fake_server import FakeChatServer
from mdbench.llm.scripted import ScriptedModel

USAGE = {"input": 2000, "cached": 500, "output": 80}


@pytest.fixture
def base():
    """A folder every user may traverse (the agent user writes the workspace), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="mdbench-harness-ep-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _mdbench(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mdbench.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("name", ["codex", pytest.param("opencode", marks=pytest.mark.slow)])
def test_episode_run_with_a_real_harness_is_metered_traced_and_audited(name, base):
    need_cli(name)
    need_isolation()
    tc = agent_toolchain()
    if tc.problems:
        pytest.skip("agent toolchain missing: " + "; ".join(tc.problems))
    ep = base / "ep"
    res = _mdbench("episode", "prepare", "--preset", "micro", "--out", str(ep), "--config", f"harness={name}",
                   "--config", "model=gpt-5")
    assert res.returncode == 0, res.stderr
    script = {"turns": [
        {"shell": "ls agent_input > seen.txt && id -un > who.txt"},
        {"shell": "curl -s -m 5 https://example.com/ > ext.txt 2>&1; echo \"exit $?\" >> ext.txt"},
        {"write": {"path": "run_record_notes.md", "content": "# scripted agent\nno study was run\n"}},
        {"final": "Stopping: scripted test agent."}], "usage": USAGE}
    with FakeChatServer(ScriptedModel(script), api_key=UPSTREAM_KEY) as up:
        res = _mdbench("episode", "run", str(ep), "--harness", name, "--model", "gpt-5", "--endpoint", up.base_url,
                       "--max-usd", "7.5", "--endpoint-api", "native",
                       env={"MDBENCH_LLM_API_KEY": UPSTREAM_KEY, "MDBENCH_LLM_MAX_USD": "1000"})
        totals = up.totals()
    result = json.loads((ep / "result.json").read_text())
    assert res.returncode == 0, res.stdout + res.stderr
    assert result["status"] == "completed", json.dumps(result)[:3000]
    # the harness, its version and model are recorded
    h = result["harness"]
    assert (h["harness"], h["model"], h["network"]) == (name, "gpt-5", "model-only")
    # the CLI's caps and endpoint API are what applied (the flag wins over $MDBENCH_LLM_MAX_USD) and were asked
    assert h["caps"]["max_usd"] == 7.5 and h["endpoint_api"] == "native"
    assert result["limits"]["harness_requested"] == {"max_tokens": None, "max_usd": 7.5, "endpoint_api": "native"}
    assert h["version"] and h["version"] in subprocess.run(
        [h["binary"], "--version"], capture_output=True, text=True, timeout=60).stdout
    # the scripted commands ran in the workspace as the agent, and the outside world was not reachable
    ws = ep / "workspace"
    assert "BENCHMARK_CONTRACT.md" in (ws / "seen.txt").read_text()
    assert (ws / "who.txt").read_text().strip() != "root"
    assert "exit 0" not in (ws / "ext.txt").read_text()
    # tokens and USD from the proxy, equal to what the endpoint declared
    m = result["cost"]["measured"]
    assert m["calls"] == totals["calls"] >= 4
    assert (m["tokens_in"], m["tokens_cached"], m["tokens_out"]) == (
        totals["tokens_in"], totals["tokens_cached"], totals["tokens_out"])
    assert result["tokens_label"] == "measured" and result["cost_usd_label"] == "measured"
    assert result["cost_usd"] == pytest.approx(m["calls"] * ((2000 - 500) * 1.25 + 500 * 0.125 + 80 * 10.0) / 1e6)
    # the trajectory is the evaluator's, in ATIF, valid for Harbor
    traj_path = Path(result["trajectory_path"])
    assert traj_path == ep / "trajectory.json"
    traj = json.loads(traj_path.read_text())
    assert check_trajectory(traj) is None and traj["agent"]["name"] == name
    assert any("example.com" in json.dumps(st.get("tool_calls")) for st in traj["steps"])   # the attempt is logged
    problems = harbor_validate(traj_path)
    if problems is not None:
        assert problems == []
    # the audit ran on what the agent left
    assert (ep / "audit" / "saeo.json").is_file()
    # the process judge's evidence is the evaluator's trajectory: the scripted actions appear, by step
    pe = result["audit"]["process_evidence"]
    assert pe["path"] == "audit/process_evidence.json" and (ep / pe["path"]).is_file()
    read = next(a for a in pe["actions"] if "ls agent_input" in a["command"])
    net = next(a for a in pe["actions"] if "example.com" in a["command"])
    assert "read_inputs" in read["actions"] and read["step_id"] in pe["items"]["E1"]
    assert net["actions"] == ["network"] and net["step_id"] in pe["steps_by_action"]["network"]
    assert pe["final_message"]["message"].startswith("Stopping: scripted test agent.")
    assert pe["tool_calls"] == sum(len(st.get("tool_calls") or []) for st in traj["steps"])
    # the endpoint's key is nowhere the agent could read, nor in the records
    for p in [*ws.rglob("*"), ep / "result.json", ep / "llm" / "calls.jsonl"]:
        if p.is_file() and not p.is_symlink() and p.stat().st_size < 5_000_000:
            assert UPSTREAM_KEY.encode() not in p.read_bytes(), p


def test_episode_past_the_token_cap_ends_with_the_cap_named_in_the_result(base):
    """A scripted model that never stops: the runner's proxy refuses once --max-tokens is spent, Codex
    stops, and result.json names the cap beside the metered tokens."""
    need_cli("codex")
    need_isolation()
    tc = agent_toolchain()
    if tc.problems:
        pytest.skip("agent toolchain missing: " + "; ".join(tc.problems))
    ep = base / "ep"
    assert _mdbench("episode", "prepare", "--preset", "micro", "--out", str(ep)).returncode == 0
    script = {"turns": [{"shell": "echo more >> loop.txt"}], "loop": True,
              "usage": {"input": 6000, "cached": 0, "output": 200}}
    with FakeChatServer(ScriptedModel(script), api_key=UPSTREAM_KEY) as up:
        res = _mdbench("episode", "run", str(ep), "--harness", "codex", "--model", "gpt-5", "--endpoint", up.base_url,
                       "--max-tokens", "30000", env={"MDBENCH_LLM_API_KEY": UPSTREAM_KEY})
        answered = up.totals()["calls"]
    result = json.loads((ep / "result.json").read_text())
    assert res.returncode == 0, res.stdout + res.stderr          # the runner never crashes
    m = result["cost"]["measured"]
    assert m["capped"] and "token cap reached" in m["capped"] and "30000" in m["capped"]
    assert m["calls"] == answered and m["tokens"] >= 30000 and (answered - 1) * 6200 < 30000
    assert result["status"] == "agent_error"
    assert result["harness"]["caps"]["max_tokens"] == 30000


def test_a_missing_harness_cli_blocks_the_episode_with_the_install_command(base):
    tc = agent_toolchain()
    if tc.problems:
        pytest.skip("agent toolchain missing: " + "; ".join(tc.problems))
    ep = base / "ep"
    assert _mdbench("episode", "prepare", "--preset", "micro", "--out", str(ep)).returncode == 0
    res = _mdbench("episode", "run", str(ep), "--harness", "codex", "--model", "gpt-5", "--endpoint",
                   "http://127.0.0.1:9/v1", "--max-tokens", "5000", "--endpoint-api", "chat",
                   env={"MDBENCH_AGENT_HARNESSES": str(base / "no-harnesses")})
    assert "Traceback" not in res.stderr
    result = json.loads((ep / "result.json").read_text())
    assert result["status"] == "infrastructure_blocked"
    assert result["limits"]["harness_requested"] == {"max_tokens": 5000, "max_usd": None, "endpoint_api": "chat"}
    assert "process_evidence" not in result["audit"]      # no model call, no trajectory, no evidence invented
    text = json.dumps(result) + (ep / "agent" / "stderr.log").read_text()
    assert "codex CLI is not installed" in text and "make agent-harnesses" in text


@pytest.mark.parametrize("args, needle", [
    (["--harness", "codex", "--model", "m", "--endpoint", "http://127.0.0.1:9/v1", "--max-usd", "-1"], "--max-usd"),
    (["--harness", "codex", "--model", "m", "--endpoint", "http://127.0.0.1:9/v1", "--max-tokens", "0"],
     "--max-tokens"),
    (["--harness", "codex", "--model", "m", "--endpoint", "http://127.0.0.1:9/v1", "--endpoint-api", "grpc"],
     "--endpoint-api"),
    (["--agent", "null", "--max-tokens", "100"], "apply to --harness runs only"),
])
def test_bad_cap_flags_are_one_clear_error_and_nothing_runs(base, args, needle):
    ep = base / "ep"
    assert _mdbench("episode", "prepare", "--preset", "micro", "--out", str(ep)).returncode == 0
    res = _mdbench("episode", "run", str(ep), *args)
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr
    assert not (ep / "result.json").exists() and not (ep / "agent").exists()
