"""``make lab`` serves JupyterLab with the ``mdbench`` kernel on the loopback address, also as root."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOT_NOTICE = "make lab: running as root, so JupyterLab is started with --allow-root"


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, ""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_serves_lab_with_the_mdbench_kernel_on_loopback(tmp_path):
    port, token = _free_loopback_port(), secrets.token_hex(16)
    runtime = tmp_path / "runtime"
    env = dict(os.environ, JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=str(runtime),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    log = tmp_path / "lab.log"
    with log.open("wb") as out:
        make = subprocess.Popen(["make", "--no-print-directory", "lab", f"LAB_PORT={port}",
                                 "LAB_ARGS=--ServerApp.port_retries=0"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        status = None
        while time.monotonic() < deadline and make.poll() is None:
            try:
                status, _ = _get(f"{base}/api/status", token)
            except OSError:
                status = None
            if status == 200:
                break
            time.sleep(0.5)
        text = log.read_text(errors="replace")
        assert status == 200, f"JupyterLab did not answer on {base} (make exit {make.poll()}):\n{text[-3000:]}"
        assert text.count(ROOT_NOTICE) == (1 if os.geteuid() == 0 else 0), text[-3000:]
        code, page = _get(f"{base}/lab", token)
        assert code == 200 and "JupyterLab" in page
        code, body = _get(f"{base}/api/kernelspecs", token)
        assert code == 200
        specs = json.loads(body)["kernelspecs"]
        assert "mdbench" in specs and specs["mdbench"]["spec"]["display_name"] == "Python (mdbench)"
        assert _get(f"{base}/api/kernelspecs", "wrong-token")[0] in (401, 403)   # the token is required
        server = [json.loads(p.read_text()) for p in runtime.glob("jpserver-*.json")]
        assert len(server) == 1 and server[0]["port"] == port
        assert server[0]["url"].startswith(f"http://127.0.0.1:{port}/")           # bound to loopback only
        pid = server[0]["pid"]
        assert os.getpgid(pid) == make.pid                                         # started by this test
        os.kill(pid, signal.SIGTERM)        # the server this test started, by its process id
        make.wait(timeout=60)
        assert not list(runtime.glob("jpserver-*.json"))                          # it shut down cleanly
    finally:
        if make.poll() is None:             # only if the server did not stop: the session this test started
            os.killpg(make.pid, signal.SIGKILL)
            make.wait(timeout=30)
