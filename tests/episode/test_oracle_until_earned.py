"""The reference agent with production until earned (issue 46): ``mdbench-oracle --until earned
[--budget-ns N]`` and the shorthand ``--agent oracle:earned`` run ``mdbench study run --until earned``; the
default stays the preset's fixed length. The command line is parsed by the study command itself (click), so an
option the study does not know fails here. The study with ``--until earned`` is run for real by
tests/engine/test_until_earned_kill.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from mdbench.engine.commands import run as study_run
from mdbench.episode import agents
from mdbench.episode.runner import is_reference, resolve_agent
from mdbench.errors import InputError


def _parsed(cmd: list[str]) -> dict:
    """The study command's parameters as click parses ``cmd`` (``python -m mdbench.cli study run …``)."""
    assert cmd[1:5] == ["-m", "mdbench.cli", "study", "run"], cmd
    with study_run.make_context("run", cmd[5:]) as ctx:
        return dict(ctx.params)


def test_oracle_study_command_default_fixed_and_until_earned(tmp_path):
    fixed = _parsed(agents.study_command(tmp_path / "agent_input", tmp_path, 2, ("DE", "HCE"), 7))
    assert fixed["until"] == "fixed" and fixed["budget_ns"] is None and fixed["seed"] == 7
    earned = _parsed(agents.study_command(tmp_path / "agent_input", tmp_path, 2, ("DE",), 7, "earned", 1.5))
    assert earned["until"] == "earned" and earned["budget_ns"] == pytest.approx(1.5)
    assert _parsed(agents.study_command(tmp_path, tmp_path, 1, until="earned"))["budget_ns"] is None
    with pytest.raises(ValueError, match="until"):
        agents.study_command(tmp_path, tmp_path, 1, until="forever")


def test_oracle_options_reach_the_study(tmp_path, monkeypatch):
    """``mdbench-oracle --until earned --budget-ns 2`` runs the study with them; --budget-ns alone is refused."""
    seen = {}

    def study(*args):  # records what the oracle would run the study with (the study itself: the engine test)
        seen["args"] = args
        return 0

    monkeypatch.setattr(agents, "run_oracle", study)
    assert agents.oracle_main(["--bundle", str(tmp_path), "--out", str(tmp_path), "--threads", "1",
                               "--until", "earned", "--budget-ns", "2"]) == 0
    assert seen["args"][-2:] == ("earned", 2.0)
    seen.clear()
    assert agents.oracle_main(["--bundle", str(tmp_path), "--out", str(tmp_path), "--threads", "1"]) == 0
    assert seen["args"][-2:] == ("fixed", None)
    assert agents.oracle_main(["--out", str(tmp_path), "--budget-ns", "2"]) == 2  # without --until earned


def test_oracle_earned_shorthand(tmp_path):
    argv = resolve_agent("oracle:earned")
    assert argv[-2:] == ["--until", "earned"] and is_reference("oracle:earned")
    assert "--until" not in resolve_agent("oracle")
    with pytest.raises(InputError, match="oracle takes ':earned'"):
        resolve_agent("oracle:forever")
    # the argv parses as the oracle's own command line
    args = agents._oracle_parser("mdbench-oracle").parse_args(argv[-2:] + ["--out", str(Path(tmp_path))])
    assert args.until == "earned" and args.budget_ns is None
