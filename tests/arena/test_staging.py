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
def test_agent_sandbox_shows_the_task_and_the_toolchain_and_hides_the_benchmark(tmp_path):
    """An agent step (mdbench.sandbox, minimal_root): /app writable, the toolchain runs, numpy imports, mdbench
    does not; the project checkout (.git, templates, tests), the jobs tree, host /tmp and /root are gone."""
    from mdbench.paths import PROJECT_ROOT

    jobs = tmp_path / "jobs"
    (jobs / "earlier" / "t__1" / "verifier").mkdir(parents=True)
    (jobs / "earlier" / "t__1" / "verifier" / "reward-details.json").write_text("answer")
    host_tmp = Path("/tmp") / f"mdbench-test-host-tmp-{os.getpid()}.txt"
    host_tmp.write_text("host tmp")
    home_secret = Path("/root") / f"mdbench-test-secret-{os.getpid()}.txt"
    home_secret.write_text("secret")
    ws = staging.Workspace.create()
    ws.host("/app").chmod(0o1777)
    box = staging.make_sandbox(ws, user="agent", no_network=True, python=staging.agent_python(),
                               hide=staging.hidden_folders(staging.Path(PROJECT_ROOT / "templates/arena/tasks/cutoff-minimum-image"), jobs))
    probes = {
        "git": f"ls {PROJECT_ROOT}/.git", "templates": f"ls {PROJECT_ROOT}/templates/arena/tasks",
        "tests": f"ls {PROJECT_ROOT}/tests", "jobs": f"cat {jobs}/earlier/t__1/verifier/reward-details.json",
        "host_tmp": f"cat {host_tmp}", "root": f"cat {home_secret}", "mdbench": '"$MDBENCH_PYTHON" -c "import mdbench"',
    }
    cmd = "; ".join(f"{c} >/dev/null 2>&1 && echo LEAK:{k}" for k, c in probes.items())
    cmd += '; "$MDBENCH_PYTHON" -c "import numpy; print(\'numpy-ok\')"; echo hi > app-made.txt && echo wrote-app; id -u'
    try:
        rc, timed_out, out = staging.run_sync(cmd, box, cwd=ws.host("/app"), env=staging.command_env(ws, box.python),
                                              timeout_s=120)
    finally:
        host_tmp.unlink()
        home_secret.unlink()
    assert rc == 0 and not timed_out, out
    assert "LEAK" not in out, out
    lines = out.split()
    assert "numpy-ok" in lines and "wrote-app" in lines and lines[-1] != "0", out
    assert ws.host("/app/app-made.txt").read_text() == "hi\n"
    ws.remove()
