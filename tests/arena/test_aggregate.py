"""Aggregation of Harbor job folders against hand-computed numbers, and the HTML report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mdbench.arena.aggregate import breakdown, find_trial_dirs, load_trials, render_report, summarize
from mdbench.arena.task import TASKS_DIR, list_tasks
from mdbench.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures"

SYN = FIXTURES / "jobs_synthetic"
REAL = FIXTURES / "harbor_real"
#: The project's shared copy of real Harbor outputs (not in a fresh clone): the fixtures were taken from it.
SHARED_HARBOR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "harbor"
REAL_SOURCES = [pytest.param(REAL, id="fixtures"),
                pytest.param(SHARED_HARBOR, id="shared", marks=pytest.mark.skipif(
                    not SHARED_HARBOR.is_dir(), reason=f"no shared Harbor data at {SHARED_HARBOR}"))]


def _row(df, agent, dataset=None):
    sel = df[df["agent"] == agent]
    if dataset:
        sel = sel[sel["dataset"] == dataset]
    assert len(sel) == 1
    return sel.iloc[0]


def test_synthetic_jobs_hand_computed():
    s = summarize(load_trials([SYN / "2026-11-01__10-00-00", SYN / "2026-11-02__10-00-00"]))
    a, b = _row(s, "alpha"), _row(s, "beta")
    assert (a["model"], a["dataset"], a["strict_pass"]) == ("m1", "mdbench", "1/4")
    assert a["strict_pass_pct"] == pytest.approx(25.0)
    assert a["mean_correctness"] == pytest.approx(0.9375)
    assert a["mean_process"] == pytest.approx(1.0) and a["n_process_scored"] == 3
    assert a["mean_cost_usd"] == pytest.approx(3.5 / 3) and a["n_cost_known"] == 3
    assert (a["n_errored"], a["n_timeouts"], a["n_other_errors"], a["n_failed_without_error"]) == (1, 1, 0, 2)
    assert b["strict_pass"] == "1/3" and b["strict_pass_pct"] == pytest.approx(100 / 3)
    assert b["mean_correctness"] == pytest.approx(2 / 3)
    assert b["mean_process"] == pytest.approx(0.75)
    assert b["mean_cost_usd"] == pytest.approx(0.2)
    assert (b["n_errored"], b["n_timeouts"], b["n_other_errors"], b["n_failed_without_error"]) == (1, 0, 1, 1)


def test_synthetic_breakdowns_use_task_metadata():
    trials = load_trials([SYN])
    d = breakdown(trials, "difficulty")
    alpha = d[d["agent"] == "alpha"].set_index("difficulty")
    assert alpha.loc["easy", "strict_pass"] == "1/2" and alpha.loc["medium", "strict_pass"] == "0/1"
    assert alpha.loc["hard", "strict_pass"] == "0/1" and alpha.loc["medium", "mean_correctness"] == pytest.approx(0.75)
    c = breakdown(trials, "category")
    beta = c[c["agent"] == "beta"].set_index("category")
    assert beta.loc["run-record-audit", "strict_pass"] == "1/1" and beta.loc["topology", "strict_pass"] == "0/1"


def test_reward_txt_and_process_requirement():
    loose = summarize(load_trials([SYN], require_process=False))
    assert _row(loose, "alpha")["strict_pass"] == "2/4"          # the reward.txt-only trial now passes
    assert _row(loose, "beta")["strict_pass"] == "1/3"           # process 0.5 still fails


def test_real_harbor_trials_hand_computed():
    trials = load_trials([REAL], require_process=False)
    assert len(trials) == 13
    s = summarize(trials)
    claw = _row(s, "openclaw", "clawbench")
    assert claw["n"] == 4 and claw["mean_correctness"] == pytest.approx((0.5556 + 0.2296 + 0.4075 + 0.3698) / 4)
    assert (claw["n_timeouts"], claw["n_other_errors"], claw["strict_pass"]) == (1, 0, "0/4")
    pinch = _row(s, "openclaw", "pinchbench")
    assert pinch["mean_correctness"] == pytest.approx(0.125) and pinch["n_timeouts"] == 1
    wild = _row(s, "openclaw", "wildclawbench")
    assert wild["mean_correctness"] == 0.0 and wild["n_other_errors"] == 1 and wild["n"] == 2
    assert math.isnan(wild["mean_cost_usd"])
    codex = _row(s, "codex")
    assert codex["model"] == "gpt-5.6-sol" and codex["strict_pass"] == "2/3"
    assert codex["mean_correctness"] == pytest.approx(2 / 3)
    assert codex["mean_cost_usd"] == pytest.approx((1.9008056 + 2.1017964 + 2.7725992) / 3)
    claude = _row(s, "claude-code")
    assert claude["strict_pass"] == "1/1" and claude["mean_cost_usd"] == pytest.approx(18.074647)
    # errored trial with a reward keeps its reward but is never a strict pass
    hdfs = trials[trials["task"] == "task-log-hdfs-block-ops"].iloc[0]
    assert hdfs["correctness"] == pytest.approx(0.25) and hdfs["error_kind"] == "timeout" and not hdfs["strict_pass"]
    # a trial with no reward anywhere counts 0
    search = trials[trials["task"] == "04-search-retrieval-task-4-efficient-search"].iloc[0]
    assert not search["reward_found"] and search["correctness"] == 0.0 and search["exception_type"] == "RuntimeError"


def test_step_reward_files_are_found_without_result_rewards(tmp_path):
    import shutil
    src = REAL / "15735640198__harbor/archived-jobs/failed-claw-family-jobs/clawbench-19-kimi2.6/t3-data-pipeline-report__25HCHpE"
    dst = tmp_path / "job" / src.name
    shutil.copytree(src, dst)
    res = json.loads((dst / "result.json").read_text())
    res["verifier_result"] = None
    (dst / "result.json").write_text(json.dumps(res))
    assert load_trials([tmp_path / "job"]).iloc[0]["correctness"] == pytest.approx(0.4075)


def test_no_trials_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="no Harbor trial folders"):
        load_trials([tmp_path])
    with pytest.raises(InputError, match="no such job folder"):
        find_trial_dirs([tmp_path / "missing"])


def test_html_report_renders_with_figures(tmp_path, suite_jobs):
    n_tasks = len(list_tasks(TASKS_DIR))
    paths = render_report([SYN, suite_jobs["oracle"][0], suite_jobs["null"][0], REAL], tmp_path / "report.html",
                          keep_notebook=tmp_path / "kept" / "executed.ipynb")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "report.html", "report.summary.json"]
    html = paths["html"].read_text()
    import base64
    import re

    pngs = [base64.b64decode(b) for b in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=\n]+)", html)]
    assert any(len(p) > 20_000 for p in pngs), "the figure (success vs cost, per-category bars) is missing"
    import scrapbook as sb

    scraps = sb.read_notebook(str(paths["notebook"])).scraps
    assert scraps["n_trials"].data == 7 + 2 * n_tasks + 13
    assert {r["strict_pass"] for r in scraps["overall"].data if r["agent"] == "alpha"} == {"1/4"}
    assert "Strict-Pass@1" in html and "1/4" in html and f"{n_tasks}/{n_tasks}" in html
    summary = json.loads(paths["summary"].read_text())
    oracle = [r for r in summary["overall"] if r["agent"] == "oracle"][0]
    assert oracle["strict_pass"] == f"{n_tasks}/{n_tasks}" and oracle["mean_process"] == 1.0
    assert paths["notebook"].is_file()


def test_cli_aggregate_json():
    from click.testing import CliRunner

    from mdbench.cli import cli

    out = CliRunner().invoke(cli, ["arena", "aggregate", str(SYN), "--out", "unused.html", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["agent"]: r for r in json.loads(out.output)}
    assert rows["alpha"]["strict_pass"] == "1/4" and rows["beta"]["n_other_errors"] == 1


def test_report_notebook_follows_template_rules():
    import nbformat

    from mdbench.paths import NOTEBOOKS_DIR

    nb = nbformat.read(str(NOTEBOOKS_DIR / "arena_report.ipynb"), as_version=4)
    assert nb.metadata["kernelspec"] == {"name": "mdbench", "display_name": "Python (mdbench)", "language": "python"}
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)
    src = "\n".join(c.source for c in code)
    assert len(src.splitlines()) < 150 and "\ndef " not in "\n" + src and "\nclass " not in "\n" + src
    import re
    for line in code[0].source.splitlines():
        assert re.match(r"^\w+: \w+ = .+  # .+", line), line


def _jobstats_of(trial_dirs):
    from mdbench.arena.rewards import job_stats

    return job_stats(json.loads((d / "result.json").read_text()) for d in trial_dirs)


def test_harbor_columns_restate_jobstats_on_real_trials():
    """Harbor's columns beside ours, on the 13 real trials: per evals key, Harbor counts only trials with valid
    rewards (n_trials) and averages only those (metrics); an errored trial with a reward keeps it when its
    exception allows (AgentTimeoutError), loses it otherwise (the setup.sh RuntimeError trial has none at all)."""
    trials = load_trials([REAL], require_process=False)
    s = summarize(trials).set_index(["agent", "model", "dataset"])
    stats = _jobstats_of(find_trial_dirs([REAL]))
    assert stats["n_completed_trials"] == 13 and stats["n_errored_trials"] == 3
    for key, e in stats["evals"].items():
        agent, model, source = key.split("__")
        row = s.loc[(agent, model, source)]
        assert row["harbor_n_trials"] == e["n_trials"] and row["harbor_n_errors"] == e["n_errors"]
        assert row["harbor_metrics"] == pytest.approx(e["metrics"][0] if e["metrics"] else {})
    wild = s.loc[("openclaw", "kimi-k2.6", "wildclawbench")]
    # documented difference: ours averages over both trials (missing reward = 0), Harbor over the graded one
    assert (wild["n"], wild["harbor_n_trials"], wild["mean_correctness"]) == (2, 1, 0.0)
    assert wild["harbor_metrics"]["reward"] == 0.0
    pinch = s.loc[("openclaw", "kimi-k2.6", "pinchbench")]
    assert pinch["harbor_n_trials"] == 3 and pinch["harbor_metrics"]["reward"] == pytest.approx(0.125)


@pytest.mark.parametrize("source", REAL_SOURCES)
def test_harbor_jobstats_itself_agrees(harbor_env, source):
    """The restated JobStats equals Harbor's JobStats.from_trial_results on the real trials (n, mean, errors):
    on the fixtures and on the shared folder they came from."""
    from mdbench.arena.harbor_compat import probe

    dirs = find_trial_dirs([source])
    assert len(dirs) == 13
    theirs = probe("stats", *dirs)["items"][0]["stats"]
    ours = _jobstats_of(dirs)
    assert ours["n_completed_trials"] == theirs["n_completed_trials"]
    assert ours["n_errored_trials"] == theirs["n_errored_trials"]
    assert set(ours["evals"]) == set(theirs["evals"])
    for key, e in theirs["evals"].items():
        assert ours["evals"][key]["n_trials"] == e["n_trials"] and ours["evals"][key]["n_errors"] == e["n_errors"]
        assert ours["evals"][key]["exception_stats"] == e["exception_stats"]
        assert ours["evals"][key]["reward_stats"] == e["reward_stats"]
        assert [pytest.approx(m) for m in e["metrics"]] == ours["evals"][key]["metrics"]   # Harbor's Mean
    assert ours["cost_usd"] == pytest.approx(theirs["cost_usd"])
