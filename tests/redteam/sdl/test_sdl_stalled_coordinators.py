"""Issue 49, break 2: a coordinator that stops reading must never hang the run.

A coordinator that answers ``hello`` and then never reads its stdin (or closes its stdout, or floods it) blocked
the runner in a pipe write of the state, without limit. Now every write and read has the request's deadline:
the session fails within ``timeout_s``, the run ends within its campaign budget, and a finished, interrupted
(SIGTERM) or killed (SIGKILL) run leaves no session folder, no ``mdbench-sandbox-*`` folder and no cgroup.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from sdl_redteam_helpers import HERE, cheat_cmd

from mdbench.sandbox import CGROUP_ROOT, capabilities
from mdbench.sdl.confine import CoordinatorSandbox, sweep_orphans
from mdbench.sdl.external import ExternalPolicy, PolicyProcessError

needs_isolation = pytest.mark.skipif(not capabilities().get("namespaces"),
                                     reason="namespaces unavailable on this machine")

STALLS = ("no_read", "close_stdout", "flood_stdout", "flood_line")
TIMEOUT_S = 3.0
#: Scheduling slack on a loaded machine [s] (the deadline itself is exact in the code).
SLACK_S = 1.5


def leftovers(tmp: Path, pid: int | None = None) -> list[str]:
    """Session folders and sandbox folders in ``tmp``, and cgroups of runner ``pid`` (any runner if None)."""
    out = [p.name for p in tmp.iterdir() if p.name.startswith(("mdbench-sdl-", "mdbench-sandbox-"))]
    prefix = "mdbench-sdl-coordinator-" + (f"{pid}-" if pid is not None else "")
    if CGROUP_ROOT.is_dir():
        for ctrl in CGROUP_ROOT.iterdir():
            if ctrl.is_dir() and not ctrl.is_symlink():
                out += [f"{ctrl.name}/{c.name}" for c in ctrl.glob(prefix + "*")]
    return out


@pytest.fixture()
def private_tmp(tmp_path, monkeypatch):
    """This process's temporary folders go to a folder of this test only (others run beside us)."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


@needs_isolation
@pytest.mark.parametrize("mode", STALLS)
def test_a_stalled_coordinator_fails_its_request_within_the_timeout(compiled, private_tmp, mode):
    asg = compiled.assignments[0]
    box = CoordinatorSandbox(agent_dir=compiled.agent_dir, hide=(compiled.evaluator_dir,),
                             policy_dir=HERE).for_assignment(asg.assignment_id)
    pol = ExternalPolicy(cheat_cmd(mode), timeout_s=TIMEOUT_S, sandbox=box)
    err, waited = None, 0.0
    try:
        try:
            pol.reset(0)       # a flood may already drown the hello reply: the session does not start
        except PolicyProcessError as exc:
            err = exc
        if err is None:
            time.sleep(0.5)    # let a flood fill the pipe
            t0 = time.monotonic()
            with pytest.raises(PolicyProcessError) as info:
                pol.request({"type": "act", "state": {"pad": "x" * 2_000_000}})    # more than a pipe holds
            waited, err = time.monotonic() - t0, info.value
        assert waited < TIMEOUT_S + SLACK_S, f"{mode}: {waited:.1f} s"
        assert str(err).split(":")[0] in ("timeout", "unsolicited", "flood", "exit"), str(err)
        assert "\n" not in str(err)
        with pytest.raises(PolicyProcessError):                  # the channel stays closed
            pol.request({"type": "act", "state": {}})
    finally:
        t1 = time.monotonic()
        pol.close()
        closing = time.monotonic() - t1
    assert closing < 2.0 + 2.0 + SLACK_S, f"closing took {closing:.1f} s"   # grace + reaper
    assert pol.session_record()["process"]["status"] in ("terminated", "exited")
    assert leftovers(private_tmp, os.getpid()) == []


def _run_cli(compiled, tmp: Path, res: Path, mode: str, budget_s: float, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp)}
    argv = [sys.executable, "-m", "mdbench", "sdl", "run", "--assignments", str(compiled.root),
            "--policy-cmd", cheat_cmd(mode), "--policy-dir", str(HERE), "--only", compiled.assignments[1].assignment_id,
            "--random-draws", "1", "--timeout-s", str(TIMEOUT_S), "--startup-timeout-s", "60",
            "--campaign-budget-s", str(budget_s), "--out", str(res), *extra]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@needs_isolation
def test_sdl_run_with_a_non_reading_coordinator_ends_within_its_budget_as_dnf(compiled, tmp_path):
    tmp, res = tmp_path / "tmp", tmp_path / "res"
    tmp.mkdir()
    budget = 12.0
    t0 = time.monotonic()
    proc = _run_cli(compiled, tmp, res, "no_read", budget)
    out, err = proc.communicate(timeout=budget + 120)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, err[-2000:]
    # the budget, plus the one session under way when it ran out (timeout + sandbox start + close), plus start-up
    assert wall < budget + 60, f"{wall:.0f} s"
    assert "DID NOT FINISH" in out
    aid = compiled.assignments[1].assignment_id
    tr = json.loads((res / "external" / aid / "adaptive.trace.json").read_text())
    assert "timeout" in tr["end_reason"] and f"within {TIMEOUT_S:g} s" in tr["end_reason"]
    assert (res / "external" / "run.manifest.json").exists()
    assert leftovers(tmp, proc.pid) == []


@needs_isolation
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_run_leaves_no_folder_and_no_cgroup(compiled, tmp_path, sig):
    tmp, res = tmp_path / "tmp", tmp_path / "res"
    tmp.mkdir()
    proc = _run_cli(compiled, tmp, res, "no_read", 600.0)
    deadline = time.monotonic() + 90
    while not list(tmp.glob("mdbench-sdl-run-*/mdbench-sandbox-*")):      # a session is running
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    if sig == signal.SIGKILL:
        # the sandbox supervisor dies with its caller and ends the tree (after the grace period); what the killed
        # runner kept lies in its one run folder (sandbox folders included), removed by the next run's sweep
        time.sleep(2.0 + 3.0)
        left = leftovers(tmp, proc.pid)
        assert all(x.startswith("mdbench-sdl-run-") or "/" in x for x in left), left
        sweep_orphans(tmp)
    else:
        assert proc.returncode == 128 + signal.SIGTERM
    assert leftovers(tmp, proc.pid) == []
