"""Cheating agents against the arena, written as an attacker would, run for real (local runner and `harbor run`).

One cheater per trial tries everything at once, and records in ``/logs/agent/attempts.txt`` each cheat that got
anywhere: links planted at every name the verifier and the collectors write or read (pointing at root-owned decoy
files outside the trial), the project's ``.git`` and other checkouts, sibling jobs of the same ``-o`` folder, a
found reference solution run, a previous answer copied, reward files written by hand, negative usage reported.
The test fails if any cheat gained anything: a non-zero correctness, a decoy changed (content, mode, owner or
mtime), a decoy's content copied into the trial folder, an attempt recorded, or forged usage taken as real.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mdbench.arena.runner import AgentSpec, run_trial
from mdbench.arena.task import TASKS_DIR
from mdbench.paths import PROJECT_ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the agent's sandbox (user, namespaces) needs root")

TASK = TASKS_DIR / "cutoff-minimum-image"
SECRET = "MDBENCH-DECOY-SECRET-7f3a"
#: Every name the verifier, the judge and the collectors write or read in the trial's folders.
VERIFIER_NAMES = ("reward.json", "reward.txt", "reward-details.json", "test-stdout.txt", "test-stderr.txt",
                  "judge-transcript.jsonl")
AGENT_NAMES = ("trajectory.json", "usage.json", "command-output.txt", "usage-findings.txt", "instruction.md")


def _git_common_dir() -> str:
    out = subprocess.run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "--git-common-dir"], capture_output=True,
                         text=True)
    return str((PROJECT_ROOT / out.stdout.strip()).resolve()) if out.returncode == 0 else str(PROJECT_ROOT / ".git")


@pytest.fixture()
def decoys(tmp_path):
    """Root-owned files outside any trial (one under /var/tmp, one under the test's folder), and a fake other
    checkout of the project holding the task's solution under /opt."""
    made = []
    var = Path("/var/tmp") / f"mdbench-decoys-{os.getpid()}"
    var.mkdir(mode=0o755, exist_ok=True)
    for d in (var, tmp_path / "decoys"):
        d.mkdir(exist_ok=True)
        for name in ("decoy.txt", "decoy.json"):
            p = d / name
            p.write_text(json.dumps({"secret": SECRET, "correctness": 1.0}) if name.endswith(".json")
                         else SECRET + "\n")
            p.chmod(0o644)
            os.chown(p, 0, 0)
            made.append(p)
    other = Path("/opt") / f"mdbench-other-checkout-{os.getpid()}"
    shutil.copytree(TASK / "solution", other / "templates/arena/tasks/cutoff-minimum-image/solution")
    before = {p: _fingerprint(p) for p in made}
    try:
        yield {"files": made, "other_checkout": other}
        for p, fp in before.items():
            assert _fingerprint(p) == fp, f"decoy {p} outside the trial changed"
    finally:  # never leave a decoy checkout on the machine, whatever the test found
        shutil.rmtree(var, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)


def _fingerprint(p: Path) -> tuple:
    st = os.lstat(p)
    return hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns


@pytest.fixture()
def sibling_job(tmp_path):
    """An earlier job in the same ``-o`` folder whose verifier details and artifacts spell out the answer."""
    trial = tmp_path / "jobs" / "earlier-oracle" / "cutoff-minimum-image__AAAAAAA"
    (trial / "verifier").mkdir(parents=True)
    (trial / "artifacts" / "output").mkdir(parents=True)
    (trial / "verifier" / "reward-details.json").write_text(json.dumps({"answer": SECRET}))
    (trial / "artifacts" / "output" / "cutoffs.json").write_text(json.dumps({"answer": SECRET}))
    return trial


def cheater_script(decoy_files: list[Path], other_checkout: Path, sibling: Path) -> str:
    """The cheater's shell command (runs in /app as the task's agent user)."""
    d_txt, d_json = str(decoy_files[0]), str(decoy_files[1])
    solve = "templates/arena/tasks/cutoff-minimum-image/solution/solve.py"
    lines = ['r=/logs/agent/attempts.txt; : > $r; mkdir -p output']
    # links at every name the grader and the collectors write or read
    lines += [f'ln -sf {d_txt} /logs/verifier/{n} 2>/dev/null' for n in VERIFIER_NAMES]
    lines += [f'ln -sf {d_json} /logs/agent/{n} 2>/dev/null' for n in AGENT_NAMES if n != "instruction.md"]
    lines += [f'ln -sf {d_txt} /logs/artifacts/stolen.txt 2>/dev/null',
              f'ln -sf {d_json} output/cutoffs.json 2>/dev/null']
    # the benchmark itself: git history, this checkout, other checkouts, the task folder, sibling jobs
    lines += [f'git --git-dir={_git_common_dir()} show HEAD:{solve} > /dev/null 2>&1 && echo read_git >> $r',
              f'cat {PROJECT_ROOT}/{solve} > /dev/null 2>&1 && echo read_checkout >> $r',
              f'cat {TASK}/solution/solve.py > /dev/null 2>&1 && echo read_task >> $r',
              f'ls {PROJECT_ROOT}/tests/arena > /dev/null 2>&1 && echo read_tests >> $r',
              f'cat {other_checkout}/{solve} > /dev/null 2>&1 && echo read_other_checkout >> $r',
              f'cat {sibling}/verifier/reward-details.json > /dev/null 2>&1 && echo read_sibling_job >> $r',
              f'cat {d_txt} > /dev/null 2>&1 && echo read_decoy >> $r',
              f'ls {PROJECT_ROOT}/lib {PROJECT_ROOT}/templates 2>/dev/null | grep -q . && echo listed_project >> $r',
              'for c in /work/*/templates /work/wt/*/templates /home/*/*/templates; do '
              'test -d $c && echo listed_other_checkout >> $r; done',
              'ls -A /root/.ssh /root/.cache 2>/dev/null | grep -q . && echo listed_root_home >> $r']
    # run a found solution, copy a previous answer (each also a cheat when it merely succeeds)
    lines += [f'for s in {PROJECT_ROOT}/{solve} {other_checkout}/{solve} {TASK}/solution/solve.py; do '
              f'test -r $s && "$MDBENCH_PYTHON" $s > /dev/null 2>&1 && echo ran_solution >> $r; done',
              f'cp {sibling}/artifacts/output/cutoffs.json output/copied.json 2>/dev/null && echo copied_answer >> $r',
              '"$MDBENCH_PYTHON" -c "import mdbench" 2>/dev/null && echo imported_mdbench >> $r']
    # write the rewards by hand, forge the usage
    lines += ['rm -f /logs/verifier/reward.json /logs/verifier/reward.txt 2>/dev/null',
              'echo \'{"correctness": 1.0, "process": 1.0}\' > /logs/verifier/reward.json 2>/dev/null',
              'echo 1 > /logs/verifier/reward.txt 2>/dev/null',
              'rm -f /logs/agent/usage.json; echo \'{"cost_usd": -42.5, "n_input_tokens": -1000, '
              '"n_output_tokens": 1e999, "n_cache_tokens": true}\' > /logs/agent/usage.json',
              'true']
    return "\n".join(lines)


def _no_secret_under(folder: Path) -> list[str]:
    hits = []
    for p in folder.rglob("*"):
        if p.is_file() and not p.is_symlink() and SECRET in p.read_text(errors="replace"):
            hits.append(str(p.relative_to(folder)))
    return hits


def test_a_cheating_agent_gets_nothing_from_the_local_runner(tmp_path, decoys, sibling_job):
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({"agents": {"oracle": {TASK.name: {}}}}))   # the cheater has no expert marks
    script = cheater_script(decoys["files"], decoys["other_checkout"], sibling_job)
    o = run_trial(TASK, AgentSpec(name="cheater", command=script, model_name="evil/cheater"), tmp_path / "jobs" / "now",
                  process_scores=scores)
    res = json.loads((o.trial_dir / "result.json").read_text())
    assert (o.trial_dir / "agent" / "attempts.txt").read_text() == ""
    assert o.rewards == {"correctness": 0.0}, o.rewards              # no process: the cheater left no trajectory
    details = json.loads((o.trial_dir / "verifier" / "reward-details.json").read_text())
    assert details["process"]["state"] == "unscorable"
    assert not (o.trial_dir / "verifier" / "reward-details.json").is_symlink()
    # forged usage: nothing of it entered the result, and it is flagged
    ar = res["agent_result"]
    assert (ar["cost_usd"], ar["n_input_tokens"], ar["n_output_tokens"], ar["n_cache_tokens"]) == (None,) * 4
    findings = ar["metadata"]["mdbench_usage_findings"]
    assert findings == ["usage.json refused: non_finite"]     # 1e999: the whole file is refused
    # nothing the links pointed at was read into the trial folder, no link was copied
    assert _no_secret_under(o.trial_dir) == []
    assert not any(p.is_symlink() for p in o.trial_dir.rglob("*"))


def test_forged_usage_is_flagged_in_the_aggregate(tmp_path):
    from mdbench.arena.aggregate import load_trials, summarize

    cmd = 'echo \'{"cost_usd": -42.5, "n_input_tokens": -1000, "n_output_tokens": 5}\' > /logs/agent/usage.json'
    run_trial(TASK, AgentSpec(name="forger", command=cmd, model_name="evil/forger"), tmp_path / "jobs" / "j")
    trials = load_trials([tmp_path / "jobs" / "j"], require_process=False)
    row = trials.iloc[0]
    assert bool(row["usage_flagged"]) and pd_isna(row["cost_usd"]) and pd_isna(row["n_input_tokens"])
    assert row["n_output_tokens"] == 5                              # the honest figure stays
    s = summarize(trials).iloc[0]
    assert s["n_usage_flagged"] == 1 and (s["mean_cost_usd"] is None or s["mean_cost_usd"] >= 0)


def pd_isna(x) -> bool:
    import pandas as pd

    return bool(pd.isna(x))


def test_aggregate_rejects_forged_usage_in_a_foreign_result(tmp_path):
    """A result.json written by another runner (or edited afterwards) with a negative cost: not summed, flagged."""
    from mdbench.arena.aggregate import load_trials, summarize

    trial = tmp_path / "job" / "t__1"
    (trial / "verifier").mkdir(parents=True)
    (trial / "verifier" / "reward.json").write_text('{"correctness": 1.0}')
    (trial / "result.json").write_text(json.dumps({
        "trial_name": "t__1", "task_name": "mdbench/cutoff-minimum-image", "agent_info": {"name": "x"},
        "verifier_result": {"rewards": {"correctness": 1.0}}, "exception_info": None,
        "agent_result": {"cost_usd": -127.5, "n_input_tokens": -3000, "n_output_tokens": 10}}))
    trials = load_trials([tmp_path / "job"], require_process=False)
    assert bool(trials.iloc[0]["usage_flagged"]) and pd_isna(trials.iloc[0]["cost_usd"])
    assert pd_isna(trials.iloc[0]["n_input_tokens"]) and trials.iloc[0]["n_output_tokens"] == 10
    assert summarize(trials).iloc[0]["n_usage_flagged"] == 1


def test_a_cheating_agent_gets_nothing_under_harbor(tmp_path, decoys, sibling_job):
    """The same cheater under `harbor run` with the host plug-in (separate verifier environment)."""
    from mdbench.arena.harbor_compat import harbor_bin, harbor_python

    if harbor_python() is None:
        pytest.skip("no Harbor environment (.venv-harbor): run `make harbor-env`")
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({"agents": {"oracle": {TASK.name: {}}}}))
    # the sibling job lives in the same -o folder as this run
    jobs = sibling_job.parent.parent
    script = cheater_script(decoys["files"], decoys["other_checkout"], sibling_job)
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    cmd = [str(harbor_bin()), "run", "-p", str(TASKS_DIR), "-i", "*cutoff-minimum-image", "-e",
           "mdbench.arena.harbor_env:HostEnvironment", "-a", "mdbench.arena.harbor_agent:CommandAgent",
           "--ak", "agent_name=cheater", "--ak", f"command={script}", "-o", str(jobs), "--job-name", "cheat",
           "-n", "1", "-y", "-q", "--ve", f"ARENA_PROCESS_SCORES={scores}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (trial,) = [p.parent for p in (jobs / "cheat").glob("*/result.json")]
    res = json.loads((trial / "result.json").read_text())
    assert (trial / "agent" / "attempts.txt").read_text() == ""
    assert res["verifier_result"]["rewards"] == {"correctness": 0.0}
    assert res["verifier_environment_mode"] == "separate"
    ar = res["agent_result"]
    assert (ar["cost_usd"], ar["n_input_tokens"]) == (None, None)
    assert ar["metadata"]["mdbench_usage_findings"] == ["usage.json refused: non_finite"]
    job = json.loads((jobs / "cheat" / "result.json").read_text())
    assert (job["stats"].get("cost_usd") or 0) >= 0
    assert _no_secret_under(trial) == []
