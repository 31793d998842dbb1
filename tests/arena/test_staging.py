"""Staging a task without a container: path mapping, Dockerfile replay, the agent's sandbox."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mdbench.arena import staging
from mdbench.errors import InputError


def test_rewrite_maps_whole_components_of_container_roots_only(tmp_path):
    ws = staging.Workspace(root=tmp_path)
    text = "cat /app/x.gro /tests/verify.py > /logs/verifier/reward.txt; ls /apple /app; echo ${X:-/app} /tmp/a /home/b"
    out = ws.rewrite(text)
    assert f"{tmp_path}/app/x.gro" in out and f"{tmp_path}/tests/verify.py" in out
    assert f"{tmp_path}/logs/verifier/reward.txt" in out and "/apple" in out and f"ls /apple {tmp_path}/app;" in out
    assert "${X:-/app}" in out and " /tmp/a /home/b" in out          # host /tmp and /home keep their meaning
    with pytest.raises(InputError, match="outside the mapped folders"):
        ws.host("/etc/passwd")


def _task_env(tmp_path: Path, dockerfile: str, files: dict[str, str] | None = None) -> Path:
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(dockerfile)
    for name, text in (files or {}).items():
        (env / name).write_text(text)
    return env


def _replay(env: Path, tmp_path: Path) -> staging.Workspace:
    ws = staging.Workspace.create(parent=tmp_path)
    staging.replay_dockerfile(env, ws, lambda cmd, cwd, t: (subprocess.run(["bash", "-c", cmd], cwd=cwd).returncode, ""),
                              timeout_s=60)
    return ws


def test_replay_copies_runs_and_sets_env(tmp_path):
    env = _task_env(tmp_path, "FROM mdbench-arena-base:0.2\nWORKDIR /app\nENV A=/app/x B=2\n"
                    "COPY data.txt /app/in/\nRUN cp /app/in/data.txt /app/copy.txt \\\n && echo ok > /app/run.txt\n",
                    {"data.txt": "payload"})
    ws = _replay(env, tmp_path)
    assert (ws.host("/app/in/data.txt")).read_text() == "payload" == ws.host("/app/copy.txt").read_text()
    assert ws.host("/app/run.txt").read_text() == "ok\n" and ws.env == {"A": f"{ws.root}/app/x", "B": "2"}


@pytest.mark.parametrize(("dockerfile", "message"), [
    ("FROM ubuntu:24.04\n", "provides only mdbench-arena-base"),
    ("FROM mdbench-arena-base:0.2\nVOLUME /data\n", "cannot replay this instruction"),
    ("FROM mdbench-arena-base:0.2\nCOPY ../secret /app/\n", "not in the build context"),
    ("FROM mdbench-arena-base:0.2\nRUN exit 3\n", "RUN exited with code 3"),
])
def test_replay_errors_name_the_dockerfile_line(tmp_path, dockerfile, message):
    env = _task_env(tmp_path, dockerfile)
    with pytest.raises(InputError, match=message) as err:
        _replay(env, tmp_path)
    assert f"{env / 'Dockerfile'}:" in str(err.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's user switch and mounts need root")
def test_sandbox_reaches_runtime_in_a_closed_folder_and_hides_the_rest(tmp_path):
    """As with pyenv under /root (mode 700): the interpreter's folder is bound back for the unprivileged user,
    everything else in the closed folder, and a hidden folder inside it, stay out of reach."""
    closed = tmp_path / "closed"
    (closed / "runtime").mkdir(parents=True)
    (closed / "runtime" / "tool.txt").write_text("runtime ok")
    (closed / "secret.txt").write_text("secret")
    (closed / "tasks").mkdir()
    (closed / "tasks" / "solve.py").write_text("answer")
    closed.chmod(0o700)
    (tmp_path / "open").mkdir()
    (tmp_path / "open" / "solution.txt").write_text("answer")
    ws = staging.Workspace.create(parent=closed)          # even the workspace sits in the closed folder
    box = staging.make_sandbox(ws, user="agent", no_network=False, python="/nonexistent/bin/python",
                               hide=(closed / "tasks", tmp_path / "open"))
    box = staging.Sandbox(user=box.user, hide=box.hide, runtime=(*box.runtime, closed / "runtime"), stage=box.stage)
    cmd = (f"cat {closed}/runtime/tool.txt; echo; cat {closed}/secret.txt 2>/dev/null || echo no-secret; "
           f"cat {closed}/tasks/solve.py 2>/dev/null || echo no-task; cat {tmp_path}/open/solution.txt 2>/dev/null "
           "|| echo no-solution; id -u")
    cmd += f"; echo hi > {ws.root}/app/made.txt && echo wrote-app"
    ws.host("/app").chmod(0o1777)
    out = subprocess.run(staging.sandbox_argv(cmd, box), capture_output=True, text=True, cwd="/")
    lines = out.stdout.split()
    assert out.returncode == 0, out.stderr
    assert lines[:4] == ["runtime", "ok", "no-secret", "no-task"] and lines[4] == "no-solution"
    assert lines[5] != "0" and lines[6] == "wrote-app" and ws.host("/app/made.txt").read_text() == "hi\n"
    ws.remove()
