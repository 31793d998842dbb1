"""Helpers of the episode tests (kept out of conftest.py so that imports are unambiguous).

The fixtures (conftest.py): one real oracle episode on the micro preset (GROMACS, all three cases) is made once per session and shared;
buggy episodes replay it (``mdbench-buggy-agent KIND --from-run``) instead of simulating again, and the
aggregate test copies finished episodes under other configurations. Everything else uses agents that run in
seconds (null, the cheater in ``cheater.py``).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mdbench.sandbox import capabilities

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
CAPS = capabilities()
needs_namespaces = pytest.mark.skipif(not CAPS.get("namespaces"),
                                      reason=f"the OS cannot confine processes here: {CAPS.get('namespace_error')}")
needs_root = pytest.mark.skipif(not CAPS.get("root"), reason="needs root (a separate user for the agent)")
needs_gmx = pytest.mark.skipif(shutil.which("gmx") is None or shutil.which("packmol") is None,
                               reason="needs gmx and packmol on PATH")
#: Wall-clock limit of the oracle micro episode [min] (3 cases, 2 cores shared with other work).
ORACLE_TIMEOUT_MIN = 90
#: The agent toolchain's interpreter (first on an evaluated agent's PATH); this project's Python is hidden.
AGENT_PY = "python3"
PROJECT = HERE.parent.parent


def ensure_agent_env() -> None:
    """Build the agent toolchain's Python (``make agent-env``) if it is missing; idempotent, seconds when built."""
    proc = subprocess.run(["bash", str(PROJECT / "scripts" / "agent_env.sh")], capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, f"make agent-env failed: {proc.stderr[-2000:]}"


def mdbench(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the ``mdbench`` CLI of this installation."""
    return subprocess.run([sys.executable, "-m", "mdbench.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def prepare(ep: Path, *config: str, preset: str = "micro") -> Path:
    res = mdbench("episode", "prepare", "--preset", preset, "--out", str(ep), *config)
    assert res.returncode == 0, res.stderr
    return ep


def run(ep: Path, agent: str, *opts: str, timeout: float = 900) -> dict:
    """``mdbench episode run EP --agent AGENT OPTS`` → result.json (asserting the command succeeded)."""
    res = mdbench("episode", "run", str(ep), "--agent", agent, *opts, timeout=timeout)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads((ep / "result.json").read_text())


def saeo(ep: Path) -> dict:
    return json.loads((ep / "audit" / "saeo.json").read_text())


def copy_episode(src: Path, dest: Path, **config) -> Path:
    """A copy of a finished episode's records (episode.json, result.json, audit/) under another configuration."""
    dest.mkdir(parents=True)
    for name in ("episode.json", "result.json"):
        doc = json.loads((src / name).read_text())
        doc["configuration"] = dict(doc["configuration"], **config)
        (dest / name).write_text(json.dumps(doc, indent=1))
    shutil.copytree(src / "audit", dest / "audit")
    return dest


def run_verifier(task: Path, workspace: Path, out: Path) -> dict:
    """The Harbor task's ``tests/test.sh`` run on this host against ``workspace``; returns reward.json."""
    import os  # noqa: PLC0415

    env = dict(os.environ, MDBENCH_WORKSPACE=str(workspace), MDBENCH_VERIFIER_DIR=str(out),
               MDBENCH_TESTS_DIR=str(task / "tests"), MDBENCH_PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(task / "tests" / "test.sh")], env=env, capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "reward.json").read_text())


def processes_of(user: str) -> list[int]:
    """PIDs (host view) of every process owned by the account ``user`` (none when it does not exist)."""
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        return []
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    out.append(int(d))
            except FileNotFoundError:
                pass
    return out


def seen_by(user: str, path: Path) -> bool:
    """``path`` exists as the processes of ``user`` see it (the workspace is a quota image mounted in the
    sandbox's own namespace while the agent runs: read through ``/proc/<pid>/root``)."""
    for pid in processes_of(user):
        try:
            if os.path.lexists(f"/proc/{pid}/root{Path(path).absolute()}"):
                return True
        except OSError:
            continue
    return False


def oracle_episode_in(base: Path) -> Path:
    """A finished oracle episode (micro preset, 2 threads) in ``base/ep`` — the body of the ``oracle_episode``
    fixtures (tests/episode and tests/redteam/episode)."""
    from _testseed import seed_for  # tests/conftest.py puts tests/ on the path

    if shutil.which("gmx") is None or shutil.which("packmol") is None:
        pytest.skip("needs gmx and packmol on PATH")
    if not CAPS.get("namespaces"):
        pytest.skip(f"the OS cannot confine processes here: {CAPS.get('namespace_error')}")
    ep = prepare(base / "ep", "harness=reference", "model=oracle", "repeat=1")
    oracle = f"{BIN / 'mdbench-oracle'} --seed {seed_for('episode/oracle')}"  # seeds from MDBENCH_TEST_SEED
    run(ep, oracle, "--threads", "2", "--timeout", str(ORACLE_TIMEOUT_MIN), timeout=ORACLE_TIMEOUT_MIN * 60 + 900)
    return ep


def run_measured(args: list[str], timeout: float = 900) -> dict:
    """Run ``mdbench ARGS`` and measure that process tree alone (``wait4``): rc, stdout, stderr, wall [s] and the
    peak resident memory of its largest process [MiB]."""
    import tempfile
    import time

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "mdbench.cli", *args], stdout=out, stderr=err, text=True)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            proc.returncode = 0  # reaped by wait4: Popen must not wait again
        wall = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        return {"rc": os.waitstatus_to_exitcode(status), "stdout": out.read(), "stderr": err.read(),
                "wall_s": wall, "peak_mib": usage.ru_maxrss / 1024.0}
