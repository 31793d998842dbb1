"""The ``slurm`` executor: profiles checked before anything is submitted, the job script a lab's cluster gets,
and (``make test-slurm``, against a real single-node Slurm) a micro study whose scraps equal the local run's.

The integration test runs only where ``MDBENCH_SLURM_PROFILE`` names a profile of a running cluster, which
``make test-slurm`` arranges (scripts/slurm_localhost.sh: slurm-wlm + munge on 127.0.0.1, stopped afterwards).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from mdbench.errors import InputError
from mdbench.execute import Job, load_plan, run_jobs
from mdbench.execute.slurm import load_profile, make_cluster

PROFILE = """queue: gpu
account: chem-md
cores: 8
memory: 32GiB
gpus_per_job: 1
walltime: "48:00:00"
jobs: 2
modules: [gromacs/2024.3-cuda]
conda_env: mdbench
prologue: ["export OMP_PLACES=cores"]
interface: lo
log_directory: logs
env: {MDBENCH_GPU: "on"}
extra_directives: ["--constraint=a100"]
"""


def _write(tmp_path: Path, text: str, name: str = "profile.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_profile_becomes_the_job_script_a_cluster_needs(tmp_path):
    profile = load_profile(_write(tmp_path, PROFILE))
    assert profile.log_directory == str(tmp_path / "logs")
    cluster = make_cluster(profile)
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    for line in ("#SBATCH -p gpu", "#SBATCH -A chem-md", "#SBATCH --cpus-per-task=8", "#SBATCH -t 48:00:00",
                 "#SBATCH --gres=gpu:1", "#SBATCH --constraint=a100", "module load gromacs/2024.3-cuda",
                 "conda activate mdbench", "export OMP_PLACES=cores", "export MDBENCH_THREAD_CAP=8",
                 "export MDBENCH_GPU=on", f"#SBATCH -o {tmp_path / 'logs'}/mdbench-%J.out"):
        assert line in script, (line, script)
    assert "#SBATCH --mem=32G" in script
    assert "--nthreads 1" in script and "--interface lo" in script  # one chain at a time per job
    assert script.index("module load") < script.index("conda activate") < script.index("dask_worker")


@pytest.mark.parametrize("text, message", [
    ("cores: 4\n", "'memory' is required"),
    ("memory: 4GiB\n", "'cores' is required"),
    ("cores: 0\nmemory: 4GiB\n", "'cores' must be an integer >= 1"),
    ("cores: 8\nmemory: 4GiB\njobs: 3\n", "jobs x cores = 3 x 8 = 24 threads exceeds the study's limit of 16"),
    ("cores: 2\nmemory: 4GiB\nqueues: gpu\n", "unknown key(s) ['queues']"),
    ("cores: 2\nmemory: 4GiB\nmodules: gromacs\n", "'modules' must be a list"),
    ("- cores: 2\n", "must be a mapping"),
])
def test_bad_profiles_are_refused_naming_the_file(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(InputError, match=re.escape(message)) as info:
        load_profile(path)
    assert str(path) in str(info.value)


def test_slurm_executor_without_a_profile_says_how(tmp_path):
    with pytest.raises(InputError, match="--slurm-profile PROFILE.yaml"):
        run_jobs([Job(str(tmp_path), "DE", "selftest/01_echo", {"value": 1.0})], executor="slurm", verbose=False)
    with pytest.raises(InputError, match="file not found"):
        run_jobs([Job(str(tmp_path), "DE", "selftest/01_echo", {"value": 1.0})], executor="slurm", verbose=False,
                 slurm_profile=str(tmp_path / "missing.yaml"))


def test_plan_names_executor_and_profile(tmp_path):
    plan = _write(tmp_path, "run_dir: runs/a\nsystems: [DE]\nstages: [selftest/01_echo]\nparams: {value: 1.0}\n"
                            "executor: slurm\nslurm_profile: cluster/profile.yaml\n", "plan.yaml")
    _, options = load_plan(plan)
    assert options == {"executor": "slurm", "slurm_profile": str(tmp_path / "cluster" / "profile.yaml")}


# ----------------------------------------------------------------------------- a real Slurm (make test-slurm)
REAL = os.environ.get("MDBENCH_SLURM_PROFILE")
needs_slurm = pytest.mark.skipif(not REAL, reason="no running Slurm (make test-slurm starts one)")

#: Scrap fields that belong to one execution, not to its results: wall times, absolute paths, dates.
_PER_EXECUTION = ("wall_s", "duration_s", "time_utc", "started_utc", "finished_utc", "elapsed", "seconds",
                  "hostname", "date")


#: Files whose bytes name the execution (host, date, absolute paths: GROMACS logs, our console logs; the
#: checkpoints, whose header records the host and the wall-clock time of writing — two ``-reprod`` runs of one
#: tpr give identical xtc, edr and gro but different cpt bytes), and the minimisation tpr, whose mdp leaves
#: ld-seed = -1 so that grompp draws one (steepest descent never uses it); and the tprs grompp writes from a
#: checkpoint, whose bytes differ in 8 bytes that no field holds (``gmx check -tol 0 -abstol 0`` of the two
#: production tprs of one test run reports no difference in inputrec, topology, box, x or v).
_PER_EXECUTION_FILES = (".log", ".console.log", ".cmd.json", ".cpt", ".tpr")


def _leaves(value, path: str = ""):
    """(path, value) of every leaf of a scrap, for a readable list of what differs."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{path}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, value


def comparable(value, run_dir: str):
    """A scrap with per-execution fields dropped and the run directory written as ``RUN``."""
    if isinstance(value, dict):
        return {k: comparable(v, run_dir) for k, v in value.items()
                if not any(k == p or k.endswith("_" + p) for p in _PER_EXECUTION)
                and not k.endswith(_PER_EXECUTION_FILES)}
    if isinstance(value, list):
        return [comparable(v, run_dir) for v in value]
    if isinstance(value, str):
        return value.replace(run_dir, "RUN")
    return value


@needs_slurm
@pytest.mark.timeout(3600)  # two micro studies through production: ~10 min on a quiet 2-core machine
def test_micro_study_through_slurm_matches_the_local_executor(tmp_path, monkeypatch):
    """Micro DE: setup, minimisation, equilibration, production and the six analyses, once through a real
    Slurm job (dask-jobqueue) and once with the local executor; every scrap agrees.

    Both sides run mdrun with ``-reprod`` (``MDBENCH_REPRODUCIBLE=1``; the Slurm jobs get it from the
    profile): without it two runs of one tpr on this machine already part after a few hundred steps.
    """
    monkeypatch.setenv("MDBENCH_REPRODUCIBLE", "1")
    assert load_profile(REAL).env.get("MDBENCH_REPRODUCIBLE") == "1", "the Slurm profile must export it too"
    from mdbench.engine.commands import ANALYSIS_STAGES, STUDY_STAGES, build_jobs

    assert shutil.which("sbatch"), "MDBENCH_SLURM_PROFILE is set but sbatch is not on PATH"
    stages = STUDY_STAGES + ANALYSIS_STAGES
    started = time.time()
    runs = {"slurm": tmp_path / "slurm", "local": tmp_path / "local"}
    results = {}
    for executor, run in runs.items():
        jobs = build_jobs(run, ["DE"], "micro", "cli", 1, 2026, stages=stages)
        results[executor] = run_jobs(jobs, executor=executor, workers=1, verbose=False,
                                     slurm_profile=REAL if executor == "slurm" else None)
    for executor, res in results.items():
        assert [r.status for r in res] == ["finished"] * len(stages), [(r.stage, r.status, r.error) for r in res]
    # the stages ran in a Slurm job: its worker log (the profile's log_directory) was written during this test
    logs = Path(load_profile(REAL).log_directory or ".")
    fresh = [p for p in logs.glob("mdbench-*.err") if p.stat().st_mtime >= started]
    assert any("Starting established connection" in p.read_text() for p in fresh), list(logs.iterdir())
    mismatches = []
    for a, b in zip(results["slurm"], results["local"]):
        sa, sb = comparable(a.scraps, str(runs["slurm"])), comparable(b.scraps, str(runs["local"]))
        if sa != sb:
            la, lb = dict(_leaves(sa)), dict(_leaves(sb))
            mismatches.append((a.stage, [(k, la.get(k), lb.get(k)) for k in sorted(set(la) | set(lb))
                                         if la.get(k) != lb.get(k)][:20]))
    assert not mismatches, mismatches
