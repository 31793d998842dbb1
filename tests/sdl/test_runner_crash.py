"""A crash of the runner itself (not of the coordinator) on one campaign still leaves a signed did-not-finish
trace, the run goes on and is scored; an existing system folder is never overwritten."""

from __future__ import annotations

import pytest
from sdl_helpers import KEYS

import mdbench.sdl.runner as runner
from mdbench.errors import InputError
from mdbench.sdl.bundle import load_compiled, write_compiled
from mdbench.sdl.external import ExternalPolicy
from mdbench.sdl.leaderboard import build_leaderboards, score_results
from mdbench.sdl.policies import make_policy


def test_runner_crash_writes_a_dnf_trace_and_the_run_goes_on(tmp_path, vapdiff, tiny_assignments, monkeypatch):
    compiled = load_compiled(write_compiled(tmp_path / "asg", vapdiff, tiny_assignments[:2], KEYS))
    real = runner.run_campaign
    bad = compiled.assignments[0].assignment_id

    def flaky(ledger, asg, *a, **kw):
        if asg.assignment_id == bad:
            raise ZeroDivisionError("a bug in the runner\nsecond line")
        return real(ledger, asg, *a, **kw)

    monkeypatch.setattr(runner, "run_campaign", flaky)
    ms = runner.run_system(compiled, compiled.assignments, lambda: make_policy("kernel", 0), "kernel",
                           tmp_path / "res", random_draws=1)
    assert [m["finished"] for m in ms] == [False, True]
    assert "runner error: ZeroDivisionError: a bug in the runner second line" in ms[0]["dnf_reasons"][0]
    lbs = build_leaderboards(score_results(tmp_path / "res", compiled.root))
    assert not lbs.refused
    (t,) = lbs.tables
    assert "runner error" in t.did_not_finish["kernel"] and "\n" not in t.did_not_finish["kernel"]
    with pytest.raises(InputError, match="append-only"):
        runner.run_system(compiled, compiled.assignments, lambda: make_policy("kernel", 0), "kernel",
                          tmp_path / "res")


def test_timeout_counts_from_the_request_not_from_the_sandbox_start(tmp_path):
    """A reply timeout far below the sandbox's start-up time: the hello still gets the start-up allowance."""
    import shlex
    import sys
    from pathlib import Path

    from mdbench.sdl.confine import CoordinatorSandbox

    script = Path(__file__).parent / "scripted_policy.py"
    pol = ExternalPolicy(" ".join(shlex.quote(x) for x in (sys.executable, str(script))), timeout_s=0.001,
                         startup_timeout_s=120, sandbox=CoordinatorSandbox(confine=False))
    try:
        pol.reset(0)
        assert pol.name == "scripted"
    finally:
        pol.close()
