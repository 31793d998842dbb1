"""The harness hook of ``episode run`` (issue 31 ↔ issue 36), exercised with a tiny fake ``launch`` object.

The fake stands in for ``mdbench.episode.harnesses.harness_launch`` (the harness helper's module): it asks for a
file in the agent's private HOME, an environment variable and one loopback port, serves that port from the host
side (the only network the agent has: ``model-only``), and reports metered tokens/USD when stopped. The agent is
real and confined.
"""

from __future__ import annotations

import json
import sys
import threading
import types
from pathlib import Path

import pytest

from mdbench.episode.runner import RunOptions, run_episode

from _episode_helpers import needs_namespaces, prepare

pytestmark = [needs_namespaces, pytest.mark.timeout(300)]
PORT = 18931
AGENT = r"""
import json, os, socket, pathlib
out = {"env": os.environ.get("FAKE_HARNESS"), "home": os.environ["HOME"]}
out["config"] = pathlib.Path(os.environ["HOME"], ".fake", "config.toml").read_text()
s = socket.create_connection(("127.0.0.1", PORT), timeout=10)
s.sendall(b"ping"); out["reply"] = s.recv(16).decode(); s.close()
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3); out["internet"] = "reached"
except OSError as exc:
    out["internet"] = f"refused: {exc}"
pathlib.Path("harness.json").write_text(json.dumps(out))
if os.environ.get("FAKE_SLEEP"):
    import time; time.sleep(600)
""".replace("PORT", str(PORT))


class FakeLaunch:
    def __init__(self, argv: list[str], env: dict[str, str]):
        self.argv = argv
        self.env = env
        self.home_files = {".fake/config.toml": "model = 'fake-model'\n"}
        self.readonly = ()
        self.loopback_listen = (PORT,)
        self.info = {"fake": True, "version": "0.0"}
        self.started_with: dict | None = None
        self.stopped = 0
        self.served: list[bytes] = []

    def start(self, listeners: dict) -> None:
        self.started_with = dict(listeners)
        sock = listeners[PORT]

        def serve() -> None:
            conn, _ = sock.accept()
            self.served.append(conn.recv(16))
            conn.sendall(b"pong")
            conn.close()

        threading.Thread(target=serve, daemon=True).start()

    def stop(self) -> dict:  # idempotent by contract: the runner stops it before the audit and again at the end
        self.stopped += 1
        return {"tokens_in": 1200, "tokens_cached": 200, "tokens_out": 300, "usd": 0.25, "calls": 3, "capped": None,
                "trajectory_path": None}


def _install(monkeypatch, launch: FakeLaunch) -> list[dict]:
    calls: list[dict] = []

    def harness_launch(**kw):
        calls.append(kw)
        return launch

    monkeypatch.setitem(sys.modules, "mdbench.episode.harnesses",
                        types.SimpleNamespace(harness_launch=harness_launch))
    return calls


def _opts(**kw) -> RunOptions:
    base = dict(harness="fake", model="fake-model", endpoint="http://127.0.0.1:9/v1", reasoning="high",
                reanalysis=False, timeout_min=1.0, grace_s=1.0)
    return RunOptions(**{**base, **kw})


def test_the_hook_launches_the_harness_with_its_home_env_port_and_metered_costs(tmp_path, monkeypatch):
    ep = prepare(tmp_path / "ep", "harness=fake", "model=fake-model")
    launch = FakeLaunch(["python3", "-c", AGENT], {"FAKE_HARNESS": "yes"})
    calls = _install(monkeypatch, launch)
    result = run_episode(ep, None, _opts())
    (kw,) = calls
    assert set(kw) == {"name", "model", "endpoint", "reasoning", "workspace", "home", "prompt", "episode_dir",
                       "max_tokens", "max_usd", "endpoint_api"}
    assert (kw["name"], kw["model"], kw["reasoning"]) == ("fake", "fake-model", "high")
    assert Path(kw["workspace"]) == (ep / "workspace").resolve() and Path(kw["home"]) == (ep / "home").resolve()
    assert kw["prompt"] == (ep / "workspace" / "PROMPT.md").read_text()  # the prompt's text
    assert result["status"] == "completed", (ep / "agent" / "stderr.log").read_text()[-2000:]
    assert (ep / "workspace" / "harness.json").is_file(), result.get("workspace_quota")
    seen = json.loads((ep / "workspace" / "harness.json").read_text())
    assert seen["env"] == "yes" and seen["config"] == "model = 'fake-model'\n" and seen["reply"] == "pong"
    assert seen["internet"].startswith("refused")  # model-only: the harness's port and nothing else
    assert Path(seen["home"]) == (ep / "home").resolve()
    assert launch.served == [b"ping"] and launch.stopped >= 1 and PORT in launch.started_with
    assert result["limits"]["network"] == "model-only"
    assert result["harness"]["fake"] and result["harness"]["name"] == "fake"
    measured = result["cost"]["measured"]
    assert (measured["tokens_in"], measured["tokens_out"], measured["usd"]) == (1200, 300, 0.25)
    assert (result["tokens"], result["tokens_label"], result["cost_usd_label"]) == (1500, "measured", "measured")
    assert result["agent"]["argv"][0] == "python3" and result["agent"]["spec"] == "harness:fake"


def test_the_harness_is_stopped_on_timeout_too(tmp_path, monkeypatch):
    ep = prepare(tmp_path / "ep", "harness=fake", "model=sleeper")
    launch = FakeLaunch(["python3", "-c", AGENT], {"FAKE_HARNESS": "yes", "FAKE_SLEEP": "1"})
    _install(monkeypatch, launch)
    result = run_episode(ep, None, _opts(timeout_min=0.1))
    assert result["status"] == "timeout" and launch.stopped >= 1
    assert result["cost"]["measured"]["calls"] == 3


def test_a_missing_harness_module_or_cli_is_infrastructure_blocked_with_the_install_command(tmp_path, monkeypatch):
    ep = prepare(tmp_path / "ep", "harness=missing", "model=m")
    monkeypatch.setitem(sys.modules, "mdbench.episode.harnesses", None)  # import fails
    result = run_episode(ep, None, _opts())
    assert result["status"] == "infrastructure_blocked" and not result["scored_as_candidate"]
    assert "scripts/agent_harnesses.sh" in result["reason"]
    ep2 = prepare(tmp_path / "ep2", "harness=nocli", "model=m")
    launch = FakeLaunch(["/nonexistent/fake-cli", "exec"], {})
    _install(monkeypatch, launch)
    result = run_episode(ep2, None, _opts())
    assert result["status"] == "infrastructure_blocked" and "fake-cli" in result["reason"]
    assert launch.stopped >= 1  # stopped whatever happened
