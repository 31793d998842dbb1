"""Local runner, verifier scoring (fractions, judge, likert), validation errors, CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mdbench.arena.grading import Grader, ProcessCriterion, load_process_criteria, score_process
from mdbench.arena.runner import AgentSpec, path_map, rewrite_paths, run_trial
from mdbench.arena.task import TASKS_DIR, validate_task
from mdbench.cli import cli
from mdbench.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures"

CUTOFF = TASKS_DIR / "cutoff-minimum-image"
MDBENCH = [sys.executable, "-m", "mdbench.cli"]


def test_rewrite_paths_whole_components_only(tmp_path):
    m = path_map(tmp_path)
    text = 'cat /app/x.gro /tests/verify.py > /logs/verifier/reward.txt; ls /apple /app'
    out = rewrite_paths(text, m)
    assert f"{tmp_path}/app/x.gro" in out and f"{tmp_path}/tests/verify.py" in out
    assert f"{tmp_path}/logs/verifier/reward.txt" in out and "/apple" in out and out.endswith(f"{tmp_path}/app")


def test_partial_answer_scores_fraction(tmp_path):
    """An agent claiming every run is fine gets the run it happens to match, not more."""
    agent = AgentSpec(name="lazy", model_name="test/lazy", command=(
        "mkdir -p output && echo '{\"run_a\": {\"max_cutoff_nm\": 1.2, \"min_box_nm\": 3.2, \"ok\": true},"
        " \"run_b\": {\"max_cutoff_nm\": 1.2, \"min_box_nm\": 2.3, \"ok\": true}}' > output/cutoffs.json"))
    o = run_trial(CUTOFF, agent, tmp_path)
    assert o.rewards == {"correctness": 0.5}      # output_exists + run_a of 4 criteria
    details = json.loads((o.trial_dir / "verifier" / "reward-details.json").read_text())
    assert [c["value"] for c in details["correctness"]["criteria"]] == [1.0, 1.0, 0.0, 0.0]
    assert "KeyError" in details["correctness"]["criteria"][3]["error"]


def test_agent_timeout_is_recorded_and_verifier_still_runs(tmp_path):
    o = run_trial(CUTOFF, AgentSpec(name="slow", command="sleep 30"), tmp_path, timeout_multiplier=0.002)
    res = json.loads((o.trial_dir / "result.json").read_text())
    assert res["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert res["verifier_result"]["rewards"] == {"correctness": 0.0}
    assert (o.trial_dir / "exception.txt").is_file()


def test_agent_nonzero_exit_and_usage_file(tmp_path):
    cmd = ('echo "{\\"n_input_tokens\\": 10, \\"n_output_tokens\\": 5, \\"cost_usd\\": 0.25}" '
           '> "$ARENA_AGENT_DIR/usage.json"; test -s "$ARENA_INSTRUCTION"; exit 3')
    o = run_trial(CUTOFF, AgentSpec(name="crash", command=cmd), tmp_path)
    res = json.loads((o.trial_dir / "result.json").read_text())
    assert res["exception_info"]["exception_type"] == "NonZeroAgentExitCodeError"
    assert res["agent_result"]["cost_usd"] == 0.25 and res["agent_result"]["n_input_tokens"] == 10


def test_instruction_is_rewritten_for_the_agent(tmp_path):
    cmd = 'grep -q "$ARENA_APP_DIR/runs/run_a" "$ARENA_INSTRUCTION" && ! grep -q " /app/" "$ARENA_INSTRUCTION"'
    o = run_trial(CUTOFF, AgentSpec(name="reader", command=cmd), tmp_path)
    assert o.exception_type is None


def test_judge_command_scores_process_with_likert(tmp_path):
    """mdp-repair-gk has binary, binary, likert(5): raw 1, 0, 4 -> (1 + 0 + 0.75)/3."""
    judge = tmp_path / "judge.sh"
    judge.write_text('#!/bin/bash\ntest -f "$ARENA_CRITERIA" && test -f "$ARENA_TRAJECTORY" && '
                     'echo \'{"explained_comm_grps": 1, "explained_sampling": 0, "minimal_edit": {"raw": 4, "reasoning": "ok"}}\'\n')
    o = run_trial(TASKS_DIR / "mdp-repair-gk", AgentSpec(), tmp_path, judge_cmd=f"bash {judge}")
    assert o.rewards["correctness"] == 1.0
    assert o.rewards["process"] == pytest.approx((1 + 0 + 0.75) / 3, abs=1e-6)
    details = json.loads((o.trial_dir / "verifier" / "reward-details.json").read_text())
    assert details["process"]["kind"] == "llm" and details["process"]["criteria"][2]["reasoning"] == "ok"


def test_rewardkit_normalisation_on_harbor_example():
    crits = load_process_criteria(FIXTURES / "harbor_real/15735640198__harbor/examples/tasks/reward-kit-example/tests/quality/quality.toml")
    assert [(c.name, c.type, c.points) for c in crits] == [("edge_case_handling", "binary", 2), ("code_readability", "likert", 5)]
    scored = score_process(crits, {"edge_case_handling": 1, "code_readability": 3})
    assert [c.value for c in scored] == [1.0, 0.5]
    assert score_process(crits, {})[0].error == "not scored"
    assert ProcessCriterion("x", "d", "likert", 3).normalise(1) == 0.0


def test_grader_weights_and_exceptions(tmp_path):
    g = Grader("t")
    g.check("a", True, "a", weight=3)
    g.check("b", lambda: 1 / 0, "b")
    assert g.correctness == pytest.approx(0.75)
    assert g.finish(tmp_path) == {"correctness": 0.75}
    assert "ZeroDivisionError" in json.loads((tmp_path / "reward-details.json").read_text())["correctness"]["criteria"][1]["error"]


def _broken_copy(tmp_path: Path) -> Path:
    d = tmp_path / "task"
    shutil.copytree(CUTOFF, d)
    return d


def test_validate_reports_schema_and_structure_problems(tmp_path):
    d = _broken_copy(tmp_path)
    text = (d / "task.toml").read_text().replace('schema_version = "1.3"', 'schema_version = "1.0"')
    (d / "task.toml").write_text(text.replace('difficulty = "easy"', 'difficulty = "trivial"'))
    (d / "tests" / "test.sh").unlink()
    (d / "tests" / "process.toml").write_text('[[criterion]]\ndescription = "x"\ntype = "likert"\npoints = 1\n')
    problems = "\n".join(validate_task(d))
    assert "schema_version" in problems and "'1.3' was expected" in problems
    assert "difficulty" in problems and "tests/test.sh: missing" in problems
    assert "likert scale needs points >= 2" in problems


def test_validate_names_line_of_malformed_toml(tmp_path):
    d = _broken_copy(tmp_path)
    (d / "task.toml").write_text('schema_version = "1.3"\n[task\nname = "x"\n')
    (problem,) = validate_task(d)
    assert "task.toml:2:" in problem and "malformed TOML" in problem


def test_harbor_upstream_task_toml_fails_our_metadata_schema(tmp_path):
    """Harbor's own 1.3 example parses; it lacks our metadata (packages, system), which validate names."""
    d = _broken_copy(tmp_path)
    shutil.copy(FIXTURES / "harbor_real/15735640198__harbor/examples/tasks/separate-verifier-environment.task.toml", d / "task.toml")
    problems = "\n".join(validate_task(d))
    assert "'packages' is a required property" in problems and "schema_version" not in problems


def test_cli_validate_and_oracle_on_one_task(tmp_path):
    ok = subprocess.run([*MDBENCH, "arena", "validate", str(CUTOFF)], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("ok")
    d = _broken_copy(tmp_path)
    (d / "instruction.md").unlink()
    runner = CliRunner()
    bad = runner.invoke(cli, ["arena", "validate", str(d)])
    assert bad.exit_code == 1 and "instruction.md: missing" in bad.output
    args = ["arena", "oracle", str(CUTOFF), "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j"]
    run = runner.invoke(cli, args)
    assert run.exit_code == 0, run.output
    assert '{"correctness": 1.0}' in run.output and (tmp_path / "jobs/j/result.json").is_file()
    again = runner.invoke(cli, args)
    assert isinstance(again.exception, InputError) and "already holds a result.json" in str(again.exception)


def test_load_process_criteria_errors(tmp_path):
    p = tmp_path / "process.toml"
    p.write_text('[[criterion]]\ntype = "binary"\n')
    with pytest.raises(InputError, match="has no description"):
        load_process_criteria(p)
    p.write_text('[[criterion]]\ndescription = "d"\ntype = "stars"\n')
    with pytest.raises(InputError, match="must be 'binary' or 'likert'"):
        load_process_criteria(p)
