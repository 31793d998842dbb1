"""The suite under real Harbor (.venv-harbor, `make harbor-env`): Harbor's models load every task and what we
write, and `harbor run` with the host-environment plug-in scores tasks — oracle 1, null agent 0 — on a sample
of six in `make test` and on every task in `make arena-harbor` (MDBENCH_HARBOR_FULL=1).

Skipped, with the reason, where no Python 3.12 Harbor environment exists.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mdbench.arena.aggregate import load_trials, summarize
from mdbench.arena.harbor_compat import docker_path, harbor_bin, probe
from mdbench.arena.task import TASKS_DIR, list_tasks, validate_task


TASKS = list_tasks(TASKS_DIR)
HOST_ENV = "mdbench.arena.harbor_env:HostEnvironment"
#: `make test` runs `harbor run` on these (one of each way inputs are made, a negative and a hard task);
#: `make arena-harbor` (MDBENCH_HARBOR_FULL=1) on the whole suite.
SAMPLE = ("cutoff-minimum-image", "edr-block-averages", "msd-no-diffusive-regime", "lhce-thermo-real",
          "lhce-box-audit", "tplus-convention-repair")
FULL = os.environ.get("MDBENCH_HARBOR_FULL") == "1"
RUN_TASKS = [t for t in TASKS if FULL or t.short_name in SAMPLE]
COMMAND_AGENT = "mdbench.arena.harbor_agent:CommandAgent"


def test_every_task_loads_with_harbor_and_builds_from_its_dockerfile(harbor_env):
    items = probe("task", *[t.path for t in TASKS])["items"]
    assert len(items) == len(TASKS) >= 25
    assert [i["error"] for i in items if not i["ok"]] == []
    for item, task in zip(items, TASKS):
        assert item["name"] == task.name and item["schema_version"] == "1.4"
        assert not item["uses_prebuilt_image"] and item["dockerfile"]          # Harbor builds environment/
        assert item["agent_user"] == "agent" and item["network_mode"] == "no-network"
        assert item["artifacts"] == ["/app/output"]
        ours = docker_path(task.path)                                           # our restatement agrees
        assert (ours.uses_prebuilt_image, ours.uploads_environment_dir) == (item["uses_prebuilt_image"],
                                                                            item["uploads_environment_dir"])


def test_docker_decision_restated_like_harbor_on_every_variant(harbor_env, tmp_path):
    """docker_image with/without a Dockerfile, compose only, nothing: our reading of the rule equals Harbor's."""
    src = TASKS_DIR / "cutoff-minimum-image"
    variants = []
    for label, image, dockerfile, compose in (("image+dockerfile", True, True, False), ("image-only", True, False, False),
                                              ("dockerfile-only", False, True, False), ("compose", True, False, True)):
        d = tmp_path / label
        shutil.copytree(src, d)
        toml = (d / "task.toml").read_text()
        if image:
            toml = toml.replace("[environment]\n", '[environment]\ndocker_image = "mdbench-arena-base:0.2"\n')
        (d / "task.toml").write_text(toml)
        if not dockerfile:
            (d / "environment" / "Dockerfile").unlink()
        if compose:
            (d / "environment" / "docker-compose.yaml").write_text("services: {}\n")
        variants.append(d)
    for item, d in zip(probe("task", *variants)["items"], variants):
        ours = docker_path(d)
        assert (ours.uses_prebuilt_image, ours.uploads_environment_dir) == (item["uses_prebuilt_image"],
                                                                            item["uploads_environment_dir"]), d.name


def test_real_harbor_tasks_get_the_same_verdict_from_harbor(harbor_env, harbor_task_copies):
    for item, d in zip(probe("task", *harbor_task_copies)["items"], harbor_task_copies):
        assert item["ok"] == (validate_task(d, rules=("harbor",)) == []), (d.name, item["error"])


def test_local_runner_outputs_validate_with_harbor_models(harbor_env, suite_jobs):
    for label in ("oracle", "null"):
        job_dir, outcomes = suite_jobs[label]
        trials = probe("trial", *[o.trial_dir for o in outcomes])["items"]
        assert [t["error"] for t in trials if not t["ok"]] == []
        for t in trials:       # our additions only under the namespaced key
            assert set(t["unknown_keys"]) <= {"mdbench", "config.mdbench"} and t["config_unknown_keys"] == ["mdbench"]
            assert t["reward_valid"]
        (job,) = probe("job", job_dir)["items"]
        assert job["ok"], job["error"]
        assert job["config_unknown_keys"] == ["mdbench"] and job["result_unknown_keys"] == []
    trajectories = sorted(glob.glob(str(suite_jobs["oracle"][0] / "*" / "agent" / "trajectory.json")))
    assert len(trajectories) == len(TASKS)
    assert [i["error"] for i in probe("trajectory", *trajectories)["items"] if not i["ok"]] == []


def _harbor_run(tmp_path: Path, job: str, agent_args: list[str], *extra: str, scores: Path,
                timeout: float = 1500) -> Path:
    """`harbor run` over the suite (or the tasks ``-i`` selects) with the host plug-in; the job folder."""
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    cmd = [str(harbor_bin()), "run", "-p", str(TASKS_DIR), *agent_args, "-e", HOST_ENV, "-o", str(tmp_path / "jobs"),
           "--job-name", job, "-n", "2", "-y", "-q", "--ve", f"ARENA_PROCESS_SCORES={scores}", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tmp_path / "jobs" / job


@pytest.fixture(scope="module")
def harbor_jobs(harbor_env, tmp_path_factory, expert_score_files) -> dict[str, Path]:
    """`harbor run` on this machine (:data:`RUN_TASKS`): the oracle, and the null command agent."""
    root = tmp_path_factory.mktemp("harbor_run")
    select = [] if FULL else [a for name in SAMPLE for a in ("-i", f"*{name}")]
    return {"oracle": _harbor_run(root, "oracle", ["-a", "oracle"], *select, scores=expert_score_files["best"]),
            "null": _harbor_run(root, "null", ["-a", COMMAND_AGENT, "--ak", "agent_name=null-agent"], *select,
                                scores=expert_score_files["worst"])}


def _trial_results(job_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(job_dir.glob("*/result.json"))]


@pytest.mark.gromacs
def test_harbor_run_oracle_scores_one_on_every_task(harbor_jobs):
    results = _trial_results(harbor_jobs["oracle"])
    assert sorted(r["task_name"] for r in results) == sorted(t.name for t in RUN_TASKS)
    bad = {r["task_name"]: ((r.get("verifier_result") or {}).get("rewards"), r.get("exception_info"))
           for r in results if (r.get("verifier_result") or {}).get("rewards") != {"correctness": 1.0, "process": 1.0}}
    assert bad == {}
    job = json.loads((harbor_jobs["oracle"] / "result.json").read_text())
    ev = job["stats"]["evals"]["oracle__tasks"]
    assert ev["n_trials"] == len(RUN_TASKS) and ev["n_errors"] == 0
    assert ev["metrics"] == [{"correctness": 1.0, "process": 1.0}]
    s = summarize(load_trials([harbor_jobs["oracle"]])).iloc[0]
    assert s["strict_pass"] == f"{len(RUN_TASKS)}/{len(RUN_TASKS)}" and s["harbor_n_trials"] == ev["n_trials"]


@pytest.mark.gromacs
def test_harbor_run_null_agent_scores_zero_on_every_task(harbor_jobs):
    results = _trial_results(harbor_jobs["null"])
    assert sorted(r["task_name"] for r in results) == sorted(t.name for t in RUN_TASKS)
    assert {r["task_name"]: r["verifier_result"]["rewards"] for r in results} == \
        {r["task_name"]: {"correctness": 0.0} for r in results}
    assert all(r["agent_info"]["name"] == "null-agent" and r["exception_info"] is None for r in results)
    trials = load_trials([harbor_jobs["null"]])
    assert (trials["process_state"] == "unscorable").all()        # no trajectory: no process reward
    job = json.loads((harbor_jobs["null"] / "result.json").read_text())
    s = summarize(trials).iloc[0]
    ev = job["stats"]["evals"]["null-agent__tasks"]
    assert (s["harbor_n_trials"], s["harbor_n_errors"]) == (ev["n_trials"], ev["n_errors"]) == (len(RUN_TASKS), 0)
    assert s["harbor_metrics"] == ev["metrics"][0] == {"mean": 0.0}


@pytest.mark.skipif(os.geteuid() != 0, reason="the agent's sandbox (user, namespaces) needs root")
def test_a_hostile_agent_under_harbor_cannot_cheat(harbor_env, tmp_path, expert_score_files):
    """An agent that tries to read the solution and tests, edit the frozen inputs, reach the network and leave a
    process behind fails at each, under `harbor run` with the host plug-in."""
    probe_script = (
        'r=/logs/agent/attempts.txt; '
        f'cat {TASKS_DIR}/cutoff-minimum-image/solution/solve.py >/dev/null 2>&1 && echo read_solution >> $r; '
        f'ls {TASKS_DIR} >/dev/null 2>&1 && test -n "$(ls {TASKS_DIR})" && echo listed_tasks >> $r; '
        'echo x >> /app/runs/run_a/md.mdp 2>/dev/null && echo wrote_input >> $r; '
        'rm -f /app/runs/run_a/conf.gro 2>/dev/null; test -f /app/runs/run_a/conf.gro || echo deleted_input >> $r; '
        '(exec 3<>/dev/tcp/1.1.1.1/53) 2>/dev/null && echo network >> $r; '
        'id -u > /logs/agent/uid.txt; touch $r; (sleep 613 &) ; true')
    job = _harbor_run(tmp_path, "hostile", ["-a", COMMAND_AGENT, "--ak", "agent_name=hostile", "--ak",
                                            f"command={probe_script}"], "-i", "*cutoff-minimum-image",
                      scores=expert_score_files["worst"])
    (trial,) = [p.parent for p in job.glob("*/result.json")]
    assert (trial / "agent" / "attempts.txt").read_text() == ""
    assert (trial / "agent" / "uid.txt").read_text().strip() != "0"
    assert subprocess.run(["pgrep", "-f", "sleep 613"], capture_output=True).returncode != 0


def test_cli_validate_with_harbor_reports_harbors_own_verdict(harbor_env, harbor_task_copies):
    from click.testing import CliRunner

    from mdbench.cli import cli

    ok = CliRunner().invoke(cli, ["arena", "validate", "--with-harbor", str(TASKS_DIR / "cutoff-minimum-image")])
    assert ok.exit_code == 0 and ok.output.startswith("ok"), ok.output
    (bad,) = [d for d in harbor_task_copies if d.name == "aborted-shard-handoff-ghost-commits"]
    out = CliRunner().invoke(cli, ["arena", "validate", "--rules", "harbor", "--with-harbor", str(bad)])
    assert out.exit_code == 1 and "[harbor]" in out.output and "[harbor 0.26.0] FileNotFoundError" in out.output


@pytest.mark.skipif(os.geteuid() != 0, reason="the agent's sandbox (user, namespaces) needs root")
def test_an_interrupt_ends_harbor_run_and_the_whole_agent_tree(harbor_env, tmp_path):
    """SIGINT to `harbor run` while the agent runs: harbor exits, and no process of the agent outlives it."""
    import signal
    import time

    n = 6000 + os.getpid() % 1000
    marker = f"sleep {n}"                  # the agent's processes; harbor's own argv holds $((…)), not this
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    cmd = [str(harbor_bin()), "run", "-p", str(TASKS_DIR), "-i", "*cutoff-minimum-image", "-a", COMMAND_AGENT,
           "--ak", "agent_name=sleeper", "--ak", f"command=(sleep $((6000 + {n - 6000})) &) ; sleep $((6000 + {n - 6000}))", "-e", HOST_ENV,
           "-o", str(tmp_path / "jobs"), "--job-name", "int", "-n", "1", "-y", "-q"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and subprocess.run(["pgrep", "-x", "-f", marker], capture_output=True).returncode:
        time.sleep(1)
    assert subprocess.run(["pgrep", "-x", "-f", marker], capture_output=True).returncode == 0, "the agent never started"
    proc.send_signal(signal.SIGINT)
    try:  # alone it ends in ~20 s; after the suite's other harbor runs it took over 120 s twice (cause not traced)
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        rows = subprocess.run(["ps", "-eo", "pid=,ppid=,stat=,etime=,wchan:20=,args="], capture_output=True,
                              text=True).stdout.splitlines()
        keep, kids = {proc.pid}, [r.split(None, 2) for r in rows]
        for _ in range(20):  # harbor's descendants, however deep
            keep |= {int(k[0]) for k in kids if len(k) > 1 and int(k[1]) in keep}
        tree = "\n".join(r for r in rows if int(r.split(None, 1)[0]) in keep)
        proc.kill()
        pytest.fail("harbor run did not end within 300 s of SIGINT; its process group then:\n" + tree[-4000:])
    time.sleep(2)
    assert subprocess.run(["pgrep", "-x", "-f", marker], capture_output=True).returncode != 0, "agent processes survived"
