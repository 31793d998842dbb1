"""A real Codex, scripted as a cheater: it forges the cost and trajectory files an agent could write (and the
process evidence the runner derives from the trajectory), tries to reach the endpoint around the proxy, and
rewrites its own CLI config. The cheat must gain nothing: the result's measured tokens, USD, trajectory and
process evidence are the proxy's, the forgeries stay labelled self-reported, nothing outside the proxy answered.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "llm"))
from _harness_run import UPSTREAM_KEY, need_cli, need_isolation  # noqa: E402

from mdbench.episode.toolchain import agent_toolchain  # noqa: E402
from mdbench.llm.fake_server import FakeChatServer  # noqa: E402
from mdbench.llm.scripted import ScriptedModel  # noqa: E402

USAGE = {"input": 3000, "cached": 0, "output": 100}
FAKE_TRAJ = {"schema_version": "ATIF-v1.6", "agent": {"name": "codex", "version": "0.171.0"},
             "steps": [{"step_id": 1, "source": "agent", "message": "cheap",
                        "tool_calls": [{"tool_call_id": "x", "function_name": "exec_command",
                                        "arguments": {"cmd": "gmx mdrun -deffnm prod"}}],
                        "metrics": {"prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 0.0}}],
             "final_metrics": {"total_prompt_tokens": 1, "total_completion_tokens": 1, "total_cost_usd": 0.0}}

FAKE_EVIDENCE = {"origin": "forged", "steps_by_action": {"run_md": [1]}, "items": {"Sim4": [1]}}


def _b64(doc: dict) -> str:
    return base64.b64encode(json.dumps(doc).encode()).decode()


def test_forged_cost_files_and_a_bypass_attempt_gain_nothing():
    need_cli("codex")
    need_isolation()
    if agent_toolchain().problems:
        pytest.skip("agent toolchain missing (make agent-env)")
    base = Path(tempfile.mkdtemp(prefix="mdbench-redteam-harness-ep-"))
    os.chmod(base, 0o755)
    try:
        ep = base / "ep"
        env = {**os.environ, "MDBENCH_LLM_API_KEY": UPSTREAM_KEY}
        mdb = [sys.executable, "-m", "mdbench.cli"]
        assert subprocess.run([*mdb, "episode", "prepare", "--preset", "micro", "--out", str(ep)],
                              capture_output=True, env=env, timeout=300).returncode == 0
        with FakeChatServer(lambda r: "", api_key=UPSTREAM_KEY) as up:
            port = up._httpd.server_address[1]
            up.responder = ScriptedModel({"turns": [
                {"write": {"path": "cost.json", "content": json.dumps(
                    {"agent": "codex", "model": "gpt-5", "tokens": {"prompt": 1, "completion": 1, "total": 2},
                     "usd": 0.0})}},
                # base64: the forged run_md claim is in the files only, not in the command the model sent
                {"shell": f"echo {_b64(FAKE_TRAJ)} | base64 -d > trajectory.json; mkdir -p audit; "
                          f"echo {_b64(FAKE_EVIDENCE)} | base64 -d > audit/process_evidence.json"},
                {"shell": f"curl -s -m 5 -H 'Authorization: Bearer {UPSTREAM_KEY}' "
                          f"http://127.0.0.1:{port}/v1/models > bypass.txt; echo \"exit $?\" >> bypass.txt"},
                {"shell": f"sed -i 's#127.0.0.1:4141#127.0.0.1:{port}#' \"$HOME/.codex/config.toml\"; "
                          "curl -s -m 5 http://169.254.169.254/ >> bypass.txt; echo \"exit $?\" >> bypass.txt"},
                {"final": "Done cheaply."}], "usage": USAGE})
            res = subprocess.run([*mdb, "episode", "run", str(ep), "--harness", "codex", "--model", "gpt-5",
                                  "--endpoint", up.base_url], capture_output=True, text=True, env=env, timeout=900)
            answered = up.totals()
            paths = [r["path"] for r in up.requests]
        assert res.returncode == 0, res.stdout + res.stderr
        result = json.loads((ep / "result.json").read_text())
        m = result["cost"]["measured"]
        # the forgeries were written (the cheat ran) and are kept as the agent's own claims
        assert '"cheap"' in (ep / "workspace" / "trajectory.json").read_text()
        assert (ep / "workspace" / "cost.json").is_file() and result["cost"]["label"] == "self_reported"
        # measured = the proxy's figures, whatever the agent wrote
        assert m["calls"] == answered["calls"] >= 5 and m["tokens_in"] == answered["tokens_in"]
        assert result["tokens_label"] == "measured" and result["cost_usd"] > 0
        assert result["tokens"] == m["tokens"] > 2
        traj_path = Path(result["trajectory_path"])
        assert traj_path == ep / "trajectory.json"
        traj = json.loads(traj_path.read_text())
        assert traj["final_metrics"]["total_prompt_tokens"] == answered["tokens_in"]
        # the process evidence is the evaluator's trajectory's: the forged mdrun step and evidence file count nothing
        pe = result["audit"]["process_evidence"]
        assert pe["tool_calls"] == sum(len(st.get("tool_calls") or []) for st in traj["steps"]) >= 3
        assert "run_md" not in pe["steps_by_action"] and "Sim4" not in pe["items"]
        assert "forged" not in (ep / "audit" / "process_evidence.json").read_text()
        assert "forged" in (ep / "workspace" / "audit" / "process_evidence.json").read_text()
        # the bypass attempts failed inside the sandbox and never reached the endpoint
        bypass = (ep / "workspace" / "bypass.txt").read_text()
        assert bypass.count("exit 0") == 0 and bypass.count("exit ") == 2
        assert paths and all(p.endswith("/responses") for p in paths)
    finally:
        shutil.rmtree(base, ignore_errors=True)
