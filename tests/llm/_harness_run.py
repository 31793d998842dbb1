"""Run a real harness CLI (Codex / OpenCode) on a scripted model, through the metering proxy, inside the OS sandbox
with the model-only network — the way the episode runner launches it (``harness_launch`` → ``spawn_confined`` with
``loopback_listen`` → ``launch.start(proc.listeners)`` → ``launch.stop()``)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mdbench.episode.harnesses import HarnessUnavailable, find_cli, harness_launch
from mdbench.llm.fake_server import FakeChatServer
from mdbench.llm.proxy import RetryPolicy
from mdbench.llm.scripted import ScriptedModel

UPSTREAM_KEY = "sk-upstream-secret-7f3a9c"


def need_cli(name: str) -> None:
    """Skip (saying how to install) when the pinned CLI is not here."""
    try:
        find_cli(name)
    except HarnessUnavailable as exc:
        pytest.skip(str(exc))


def need_isolation() -> None:
    from mdbench.sandbox import capabilities

    caps = capabilities()
    if not caps.get("namespaces"):
        pytest.skip(f"the OS cannot confine here: {caps.get('namespace_error')}")


@dataclass
class HarnessRun:
    ws: Path
    ep: Path
    summary: dict[str, Any]
    result: Any
    launch: Any
    upstream: FakeChatServer
    stdout: str
    stderr: str
    uid: int | None


def sandbox_base() -> Path:
    """A folder every user may traverse (pytest's tmp is 0700 to root)."""
    base = Path(tempfile.mkdtemp(prefix="mdbench-harness-test-"))
    os.chmod(base, 0o755)
    return base


def run_harness(name: str, script: dict[str, Any], *, model: str = "gpt-5", max_tokens: int | None = None,
                timeout_s: float = 240, confined: bool = True, port: int = 4141,
                endpoint: str | None = None, reasoning: str | None = None,
                endpoint_api: str | None = None, faults: Any = None) -> HarnessRun:
    """Run ``name`` on ``script`` (see module docstring); the caller removes ``run.ws.parent``."""
    from mdbench.sandbox import Confinement, ensure_user, spawn_confined

    base = sandbox_base()
    ws, home, ep = base / "workspace", base / "home", base / "ep"
    for d in (ws, home, ep):
        d.mkdir()
    os.chmod(ws, 0o755)
    upstream = FakeChatServer(lambda req: "", api_key=UPSTREAM_KEY).start()
    # the script may name the fake endpoint's own port ({UPSTREAM_PORT}: a scripted curl that must fail)
    port_up = upstream._httpd.server_address[1]
    upstream.responder = ScriptedModel(json.loads(json.dumps(script).replace("{UPSTREAM_PORT}", str(port_up))))
    if faults is not None:     # e.g. lambda up: up.truncate_next(20)
        faults(upstream)
    old = os.environ.get("MDBENCH_LLM_API_KEY")
    os.environ["MDBENCH_LLM_API_KEY"] = UPSTREAM_KEY
    try:
        launch = harness_launch(name=name, model=model, endpoint=endpoint or upstream.base_url, reasoning=reasoning,
                                workspace=ws,
                                home=home, prompt="Run the scripted steps.", episode_dir=ep, max_tokens=max_tokens,
                                retry=RetryPolicy(max_retries=1, backoff_s=0.1), port=port,
                                endpoint_api=endpoint_api)
    finally:
        if old is None:
            del os.environ["MDBENCH_LLM_API_KEY"]
        else:
            os.environ["MDBENCH_LLM_API_KEY"] = old
    for rel, text in launch.home_files.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text, encoding="utf-8")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", **launch.env}
    out, err = base / "stdout.log", base / "stderr.log"
    uid = None
    if confined:
        user = "mdbench-harness-test"
        if os.geteuid() == 0:
            uid, gid = ensure_user(user)
            for folder, dirs, names in os.walk(home):
                for n in [*dirs, *names]:
                    os.chown(Path(folder) / n, uid, gid)
            os.chown(home, uid, gid)
        conf = Confinement(workdir=ws, env=env, readonly=launch.readonly, writable=(home,), hidden=(ep,),
                           minimal_root=True, timeout_s=timeout_s, grace_s=5, loopback_listen=launch.loopback_listen,
                           user=user, tag="harness-test")
        proc = spawn_confined(launch.argv, conf, stdout=out, stderr=err)
        launch.start(proc.listeners)
        result = proc.wait()
    else:
        import subprocess

        launch.start_loopback()
        with out.open("w") as fo, err.open("w") as fe:
            result = subprocess.run(launch.argv, cwd=ws, env=env, stdout=fo, stderr=fe, timeout=timeout_s)
    summary = launch.stop()
    upstream.stop()
    return HarnessRun(ws, ep, summary, result, launch, upstream, out.read_text(errors="replace"),
                      err.read_text(errors="replace"), uid)


def cleanup(run: HarnessRun) -> None:
    shutil.rmtree(run.ws.parent, ignore_errors=True)


def harbor_validate(path: Path) -> list[str] | None:
    """Problems Harbor's ``Trajectory`` model finds in ``path`` ([] = valid); None without a Harbor environment."""
    from mdbench.arena.harbor_compat import harbor_python, probe

    if harbor_python() is None:
        return None
    ans = probe("trajectory", path)
    return [f"{i.get('path')}: {i.get('error')}" for i in ans.get("items", []) if not i.get("ok")]


__all__ = [
    "UPSTREAM_KEY",
    "HarnessRun",
    "cleanup",
    "harbor_validate",
    "need_cli",
    "need_isolation",
    "run_harness",
    "sandbox_base",
]
