"""Local runner: Harbor's trial flow and error names, the process judge, validation rules, the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mdbench.arena.grading import Grader
from mdbench.arena.judge import ProcessCriterion, load_process_criteria, load_process_spec, score_process
from mdbench.arena.runner import AgentSpec, run_trial
from mdbench.arena.task import TASKS_DIR, validate_task
from mdbench.cli import cli
from mdbench.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures"
CUTOFF = TASKS_DIR / "cutoff-minimum-image"
MDBENCH = [sys.executable, "-m", "mdbench.cli"]


def _result(outcome) -> dict:
    return json.loads((outcome.trial_dir / "result.json").read_text())


def test_partial_answer_scores_fraction(tmp_path):
    """An agent claiming every run is fine gets the run it happens to match, not more."""
    agent = AgentSpec(name="lazy", model_name="test/lazy", command=(
        "mkdir -p output && echo '{\"run_a\": {\"max_cutoff_nm\": 1.2, \"min_box_nm\": 3.2, \"ok\": true},"
        " \"run_b\": {\"max_cutoff_nm\": 1.2, \"min_box_nm\": 2.3, \"ok\": true}}' > output/cutoffs.json"))
    o = run_trial(CUTOFF, agent, tmp_path)
    assert o.rewards == {"correctness": 0.333333}  # run_a of 3 scored criteria (output_exists has weight 0)
    details = json.loads((o.trial_dir / "verifier" / "reward-details.json").read_text())
    assert [c["value"] for c in details["correctness"]["criteria"]] == [1.0, 1.0, 0.0, 0.0]
    assert "KeyError" in details["correctness"]["criteria"][3]["error"]
    res = _result(o)
    assert res["agent_info"] == {"name": "lazy", "version": "1.0.0", "model_info": {"name": "lazy", "provider": "test"}}
    assert res["config"]["agent"]["import_path"] == "mdbench.arena.harbor_agent:CommandAgent"
    assert (o.trial_dir / "artifacts" / "output" / "cutoffs.json").is_file()


def test_agent_timeout_is_recorded_and_verifier_still_runs(tmp_path):
    # only the agent's limit is short (2 s): a timeout multiplier would shorten the build and the verifier too,
    # which then fail on a loaded machine
    task = tmp_path / "task"
    shutil.copytree(CUTOFF, task)
    toml = task / "task.toml"
    text = toml.read_text()
    assert "[agent]\ntimeout_sec = 900.0" in text
    toml.write_text(text.replace("[agent]\ntimeout_sec = 900.0", "[agent]\ntimeout_sec = 2.0"))
    o = run_trial(task, AgentSpec(name="slow", command="sleep 30"), tmp_path / "job")
    res = _result(o)
    assert res["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert res["verifier_result"]["rewards"] == {"correctness": 0.0}
    assert (o.trial_dir / "exception.txt").is_file()


def test_agent_nonzero_exit_and_usage_file(tmp_path):
    cmd = ('echo "{\\"n_input_tokens\\": 10, \\"n_output_tokens\\": 5, \\"cost_usd\\": 0.25}" '
           '> "$ARENA_AGENT_DIR/usage.json"; test -s "$ARENA_INSTRUCTION"; exit 3')
    o = run_trial(CUTOFF, AgentSpec(name="crash", command=cmd), tmp_path)
    res = _result(o)
    assert res["exception_info"]["exception_type"] == "NonZeroAgentExitCodeError"
    assert res["agent_result"]["cost_usd"] == 0.25 and res["agent_result"]["n_input_tokens"] == 10


def test_failing_oracle_is_not_an_exception_but_exit_code_txt(tmp_path):
    """As Harbor's oracle: a solve.sh that fails leaves agent/exit-code.txt, the verifier grades what is there."""
    task = tmp_path / "task"
    shutil.copytree(CUTOFF, task)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nexit 4\n")
    o = run_trial(task, AgentSpec(), tmp_path / "job")
    assert o.exception_type is None and o.rewards == {"correctness": 0.0}
    assert (o.trial_dir / "agent" / "exit-code.txt").read_text() == "4"


def test_broken_build_is_sandbox_build_failed_and_not_graded(tmp_path):
    task = tmp_path / "task"
    shutil.copytree(CUTOFF, task)
    (task / "environment" / "build.sh").write_text("#!/bin/bash\necho nope >&2; exit 2\n")
    o = run_trial(task, AgentSpec(), tmp_path / "job")
    res = _result(o)
    assert o.exception_type == "SandboxBuildFailedError" and res["verifier_result"] is None
    assert "Dockerfile:" in res["exception_info"]["exception_message"] and "exited with code 2" in \
        res["exception_info"]["exception_message"]


@pytest.mark.parametrize(("content", "etype", "reason"), [
    ('{"correctness": "1.0"}', "VerifierOutputParseError", "Non-numeric reward"),
    ('{"correctness": NaN}', "VerifierOutputParseError", "Non-finite reward"),
    ("", "RewardFileEmptyError", "empty"),
    (None, "RewardFileNotFoundError", "No reward file"),
])
def test_malformed_reward_is_a_verifier_error_naming_the_file(tmp_path, content, etype, reason):
    task = tmp_path / "task"
    shutil.copytree(CUTOFF, task)
    write = "" if content is None else f"printf '%s' '{content}' > /logs/verifier/reward.json"
    (task / "tests" / "test.sh").write_text(f"#!/bin/bash\n{write}\n")
    o = run_trial(task, AgentSpec(), tmp_path / "job")
    res = _result(o)
    assert o.exception_type == etype and res["verifier_result"] is None
    assert reason in res["exception_info"]["exception_message"] and "reward" in res["exception_info"]["exception_message"]


def test_instruction_is_given_to_command_agents_only(tmp_path):
    cmd = 'grep -q "/app/runs/run_a" "$ARENA_INSTRUCTION" && test "$(pwd)" = "$ARENA_APP_DIR"'
    o = run_trial(CUTOFF, AgentSpec(name="reader", command=cmd), tmp_path)
    assert o.exception_type is None
    assert (o.trial_dir / "agent" / "instruction.md").is_file()


def test_judge_command_reads_json_and_scores_likert(tmp_path):
    """mdp-repair-gk has binary, binary, likert(5): raw 1, 0, 4 -> (1 + 0 + 0.75)/3. The judge reads one JSON
    document on stdin: the oracle's own trajectory and the task's listed output files."""
    judge = tmp_path / "judge.py"
    judge.write_text(
        "import json, sys\n"
        "d = json.load(sys.stdin)\n"
        "assert d['trajectory']['schema_version'].startswith('ATIF') and d['trajectory']['steps']\n"
        "assert 'comm-grps' in d['files']['/app/output/changes.md']\n"
        "assert [c['name'] for c in d['criteria']] == ['explained_comm_grps', 'explained_sampling', 'minimal_edit']\n"
        "print(json.dumps({'explained_comm_grps': 1, 'explained_sampling': 0,"
        " 'minimal_edit': {'raw': 4, 'reasoning': 'ok'}}))\n")
    o = run_trial(TASKS_DIR / "mdp-repair-gk", AgentSpec(), tmp_path, judge_cmd=f"{sys.executable} {judge}")
    assert o.rewards["correctness"] == 1.0
    assert o.rewards["process"] == pytest.approx((1 + 0 + 0.75) / 3, abs=1e-6)
    details = json.loads((o.trial_dir / "verifier" / "reward-details.json").read_text())
    assert details["process"]["kind"] == "command" and details["process"]["criteria"][2]["reasoning"] == "ok"


def test_no_trajectory_means_unscorable_not_one(tmp_path):
    """A run that recorded no trajectory gets no process reward even from a judge that would give top marks."""
    judge = tmp_path / "judge.sh"
    judge.write_text('#!/bin/bash\necho \'{"considered_all_cutoffs": 1, "explained_fix": 1}\'\n')
    o = run_trial(CUTOFF, AgentSpec(name="quiet", command="true"), tmp_path, judge_cmd=f"bash {judge}")
    assert o.rewards == {"correctness": 0.0}
    details = json.loads((o.trial_dir / "verifier" / "reward-details.json").read_text())
    assert details["process"]["state"] == "unscorable" and "no trajectory" in details["process"]["reason"]


def test_failing_judge_scores_zero_with_the_error(tmp_path):
    o = run_trial(CUTOFF, AgentSpec(), tmp_path, judge_cmd="echo not-json")
    details = json.loads((o.trial_dir / "verifier" / "reward-details.json").read_text())
    assert o.rewards["process"] == 0.0 and all("failed" in c["error"] for c in details["process"]["criteria"])


def test_the_agent_never_sees_the_judge_configuration(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-judge-secret")
    scores = tmp_path / "scores.json"
    scores.write_text("{}")
    cmd = 'env > "$ARENA_AGENT_DIR/env.txt"'
    o = run_trial(CUTOFF, AgentSpec(name="peek", command=cmd), tmp_path, process_scores=scores, judge_cmd="true",
                  judge_llm="http://127.0.0.1:9/v1", judge_model="m")
    env = (o.trial_dir / "agent" / "env.txt").read_text()
    assert "ARENA_PROCESS_SCORES" not in env and "ARENA_JUDGE_CMD" not in env and str(scores) not in env
    assert "ARENA_JUDGE_LLM_URL" not in env and "sk-judge-secret" not in env


def test_rewardkit_normalisation_on_harbor_example():
    crits = load_process_criteria(FIXTURES / "harbor_real/15735640198__harbor/examples/tasks/reward-kit-example/tests/quality/quality.toml")
    assert [(c.name, c.type, c.points) for c in crits] == [("edge_case_handling", "binary", 2), ("code_readability", "likert", 5)]
    spec = load_process_spec(FIXTURES / "harbor_real/15735640198__harbor/examples/tasks/reward-kit-example/tests/quality/quality.toml")
    assert spec.files == ["/app/textstats.py", "/app/analyze.py"] and spec.judge_model == "anthropic/claude-sonnet-4-6"
    scored = score_process(crits, {"edge_case_handling": 1, "code_readability": 3})
    assert [c.value for c in scored] == [1.0, 0.5]
    assert score_process(crits, {})[0].error == "not scored"
    assert ProcessCriterion("x", "d", "likert", 3).normalise(1) == 0.0


def test_grader_weights_and_exceptions(tmp_path, monkeypatch):
    monkeypatch.setenv("ARENA_TESTS_DIR", str(tmp_path))
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


def test_validate_separates_harbor_rules_from_suite_rules(tmp_path):
    d = _broken_copy(tmp_path)
    text = (d / "task.toml").read_text().replace('difficulty = "easy"', 'difficulty = "trivial"')
    (d / "task.toml").write_text(text.replace('schema_version = "1.4"', 'schema_version = "1.0"'))
    (d / "tests" / "test.sh").unlink()
    (d / "tests" / "process.toml").write_text('[[criterion]]\ndescription = "x"\ntype = "likert"\npoints = 1\n')
    problems = validate_task(d)
    harbor = [str(p) for p in problems if p.rules == "harbor"]
    suite = [str(p) for p in problems if p.rules == "suite"]
    assert harbor == [f"{d / 'tests' / 'test.sh'}: missing; Harbor runs it as the verifier"]
    assert any("difficulty" in p for p in suite) and any("likert scale needs points >= 2" in p for p in suite)
    assert not any("schema_version" in p for p in harbor + suite)      # 1.0 is a schema Harbor accepts


def test_validate_flags_a_prebuilt_image_beside_the_dockerfile(tmp_path):
    d = _broken_copy(tmp_path)
    (d / "task.toml").write_text((d / "task.toml").read_text().replace(
        "[environment]\n", '[environment]\ndocker_image = "mdbench-arena-base:0.2"\n'))
    problems = [str(p) for p in validate_task(d)]
    assert any("docker_image" in p and "skip the Dockerfile" in p for p in problems), problems


def test_validate_names_line_of_malformed_toml(tmp_path):
    d = _broken_copy(tmp_path)
    (d / "task.toml").write_text('schema_version = "1.4"\n[task\nname = "x"\n')
    (problem,) = validate_task(d)
    assert "task.toml:2:" in str(problem) and "malformed TOML" in str(problem) and problem.rules == "harbor"


def test_real_harbor_tasks_pass_harbor_rules(harbor_task_copies):
    """The 11 real Harbor tasks of the shared data (code stubbed): 10 meet Harbor's rules; the one whose second
    step has no test script does not — the same verdicts Harbor itself gives (test_harbor.py)."""
    verdicts = {d.name: [str(p) for p in validate_task(d, rules=("harbor",))] for d in harbor_task_copies}
    assert len(verdicts) == 11
    assert [n for n, p in verdicts.items() if p] == ["aborted-shard-handoff-ghost-commits"]
    assert "2_reconcile-aborted-generations" in verdicts["aborted-shard-handoff-ghost-commits"][0]


def test_cli_validate_and_oracle_on_one_task(tmp_path):
    ok = subprocess.run([*MDBENCH, "arena", "validate", str(CUTOFF)], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("ok")
    d = _broken_copy(tmp_path)
    (d / "instruction.md").unlink()
    runner = CliRunner()
    bad = runner.invoke(cli, ["arena", "validate", "--rules", "harbor", str(d)])
    assert bad.exit_code == 1 and "[harbor]" in bad.output and "instruction.md: missing" in bad.output
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
    p.write_text('[judge]\nfiles = ["relative.txt"]\n[[criterion]]\ndescription = "d"\n')
    with pytest.raises(InputError, match="absolute container paths"):
        load_process_spec(p)


@pytest.mark.gromacs
def test_kept_artifacts_are_self_contained_and_the_separate_verifier_reads_them(tmp_path):
    """The oracle's repaired topol.top #includes the task's force field by absolute path: kept in the trial
    folder it names /app/… (as under Docker), never the deleted workspace, and the separate verifier (a fresh
    workspace) still runs grompp on it."""
    o = run_trial(TASKS_DIR / "lhce-topology-repair", AgentSpec(name="oracle"), tmp_path)
    assert o.rewards == {"correctness": 1.0}
    includes = [line for line in (o.trial_dir / "artifacts" / "output" / "topol.top").read_text().splitlines()
                if line.startswith("#include")]
    assert includes and all(line.startswith('#include "/app/') for line in includes), includes
    assert not any("mdbench-arena-workspaces" in p.read_text(errors="replace")
                   for p in (o.trial_dir / "artifacts").rglob("*") if p.is_file() and p.stat().st_size < 1_000_000)
