"""The ``slurm`` executor: the same (run, system, stage) chains on a Slurm cluster through dask-jobqueue.

A YAML *profile* describes the jobs a lab's cluster should get; :func:`load_profile` validates it and
:func:`make_cluster` turns it into a :class:`dask_jobqueue.SLURMCluster`. Each Slurm job is one Dask worker
that runs whole chains (the stages of one system, in order) with the function the local and Dask executors
run, so results are the same whichever executor ran them. Example profile::

    queue: gpu                 # sbatch -p
    account: chem-md           # sbatch -A (optional)
    cores: 8                   # CPUs per job = threads its mdrun jobs may use (MDBENCH_THREAD_CAP in the job)
    memory: 32GiB              # per job
    gpus_per_job: 1            # --gres=gpu:N (0: CPU-only jobs)
    walltime: "48:00:00"
    jobs: 2                    # Slurm jobs at once = systems in parallel; jobs x cores <= 16 (seed rule)
    modules: [gromacs/2024.3-cuda]          # `module load` lines in the job script
    conda_env: mdbench                      # `conda activate` (a name or a path), after the modules
    prologue: ["export OMP_PLACES=cores"]   # any other shell lines
    python: /path/to/env/bin/python         # the workers' Python (default: this interpreter)
    interface: ib0                          # network interface of the scheduler and workers (lo: one node)
    log_directory: slurm-logs               # job stdout/stderr (relative: to the current folder)
    env: {MDBENCH_GPU: auto}                # exported in every job
    extra_directives: ["--constraint=a100"] # further #SBATCH lines

The seed's limits hold across the cluster: ``jobs × cores`` may not exceed 16 threads, and with GPUs the
study-wide GPU lock (``run_record/gpu.lock`` on the shared run directory) admits one GPU MD job at a time.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mdbench.threads import CONTRACT_THREAD_CAP
from mdbench.errors import InputError
from mdbench.yamlio import load_yaml

log = logging.getLogger(__name__)

_KEYS = {"queue", "account", "cores", "memory", "gpus_per_job", "walltime", "jobs", "modules", "conda_env",
         "prologue", "python", "interface", "log_directory", "env", "extra_directives", "local_directory"}


@dataclass
class SlurmProfile:
    """A validated Slurm profile (see the module docstring for every key).

    Attributes
    ----------
    cores : int
        CPUs per Slurm job; the job's mdrun threads are capped at it (``MDBENCH_THREAD_CAP``).
    memory : str
        Memory per job, e.g. ``"32GiB"`` (dask's notation; Slurm gets it rounded up).
    jobs : int
        Slurm jobs (Dask workers) at once.
    gpus_per_job : int
        GPUs requested per job (``--gres=gpu:N``).
    """

    cores: int
    memory: str
    walltime: str = "24:00:00"
    jobs: int = 1
    queue: str | None = None
    account: str | None = None
    gpus_per_job: int = 0
    modules: list[str] = field(default_factory=list)
    conda_env: str | None = None
    prologue: list[str] = field(default_factory=list)
    python: str | None = None
    interface: str | None = None
    log_directory: str | None = None
    local_directory: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    extra_directives: list[str] = field(default_factory=list)
    source: str = ""

    def job_script_prologue(self) -> list[str]:
        """Shell lines run before the worker starts: modules, conda, the env, the thread cap."""
        lines = [f"module load {shlex.quote(m)}" for m in self.modules]
        if self.conda_env:
            lines += ['eval "$(conda shell.bash hook)"', f"conda activate {shlex.quote(self.conda_env)}"]
        lines += list(self.prologue)
        env = {"MDBENCH_THREAD_CAP": str(self.cores), **self.env}
        lines += [f"export {k}={shlex.quote(str(v))}" for k, v in env.items()]
        return lines

    def cluster_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`dask_jobqueue.SLURMCluster` for this profile."""
        directives = list(self.extra_directives)
        if self.gpus_per_job:
            directives.append(f"--gres=gpu:{self.gpus_per_job}")
        kwargs: dict[str, Any] = {
            # one Dask thread per job runs one chain at a time; the job's `cores` CPUs are its mdrun threads
            "queue": self.queue, "account": self.account, "cores": 1, "job_cpu": self.cores, "processes": 1,
            "memory": self.memory, "walltime": self.walltime, "job_extra_directives": directives,
            "job_script_prologue": self.job_script_prologue(), "python": self.python or sys.executable,
            "job_name": "mdbench",
            # no dashboard; the HTTP endpoint stays on the scheduler's interface (loopback for `interface: lo`)
            "scheduler_options": {"dashboard": False, "dashboard_address": None},
        }
        if self.interface:
            kwargs["interface"] = self.interface
            kwargs["scheduler_options"]["interface"] = self.interface
        if self.log_directory:
            kwargs["log_directory"] = self.log_directory
        if self.local_directory:
            kwargs["local_directory"] = self.local_directory
        return kwargs


def _fail(path: str, message: str) -> InputError:
    return InputError(f"Slurm profile: {message}", path)


def load_profile(path: str | Path) -> SlurmProfile:
    """Read and check a Slurm profile; every problem is an :class:`~mdbench.errors.InputError` naming the file.

    Raises
    ------
    InputError
        Unknown key, missing ``cores``/``memory``, a non-positive count, ``jobs × cores`` above the 16-thread
        rule, or a malformed list or mapping.
    """
    path = str(path)
    if not Path(path).is_file():
        raise _fail(path, "file not found; write one as in the README's Slurm section")
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise _fail(path, "must be a mapping of keys (queue, cores, memory, …)")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise _fail(path, f"unknown key(s) {unknown}; known: {', '.join(sorted(_KEYS))}")
    for key in ("cores", "memory"):
        if key not in data:
            raise _fail(path, f"'{key}' is required")
    ints = {}
    for key, minimum in (("cores", 1), ("jobs", 1), ("gpus_per_job", 0)):
        value = data.get(key, minimum if key != "jobs" else 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise _fail(path, f"'{key}' must be an integer >= {minimum} (got {value!r})")
        ints[key] = value
    if ints["jobs"] * ints["cores"] > CONTRACT_THREAD_CAP:
        raise _fail(path, f"jobs x cores = {ints['jobs']} x {ints['cores']} = {ints['jobs'] * ints['cores']} threads "
                          f"exceeds the study's limit of {CONTRACT_THREAD_CAP}; lower jobs or cores")
    for key in ("modules", "prologue", "extra_directives"):
        if not isinstance(data.get(key, []), list):
            raise _fail(path, f"'{key}' must be a list of strings")
    if not isinstance(data.get("env", {}), dict):
        raise _fail(path, "'env' must be a mapping NAME: value")
    if ints["gpus_per_job"] and ints["jobs"] > 1:
        log.info("%s: %d GPU jobs may be queued; the study-wide GPU lock still runs one GPU MD job at a time",
                 path, ints["jobs"])
    base = Path(path).resolve().parent
    log_dir = data.get("log_directory")
    return SlurmProfile(
        cores=ints["cores"], memory=str(data["memory"]), walltime=str(data.get("walltime", "24:00:00")),
        jobs=ints["jobs"], queue=data.get("queue"), account=data.get("account"), gpus_per_job=ints["gpus_per_job"],
        modules=[str(m) for m in data.get("modules", [])], conda_env=data.get("conda_env"),
        prologue=[str(x) for x in data.get("prologue", [])], python=data.get("python"),
        interface=data.get("interface"),
        log_directory=str(Path(log_dir) if Path(str(log_dir)).is_absolute() else base / str(log_dir)) if log_dir else None,
        local_directory=data.get("local_directory"), env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
        extra_directives=[str(x) for x in data.get("extra_directives", [])], source=path)


def make_cluster(profile: SlurmProfile):
    """A :class:`dask_jobqueue.SLURMCluster` for ``profile`` (no job submitted yet)."""
    try:
        from dask_jobqueue import SLURMCluster  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        raise InputError(f"--executor slurm needs dask-jobqueue ({exc}); pip install dask-jobqueue") from exc
    if profile.log_directory:
        os.makedirs(profile.log_directory, exist_ok=True)
    return SLURMCluster(**profile.cluster_kwargs())


def run_on_slurm(chains: list, workers: int, force: bool, on_done: Callable[[list[dict]], None],
                 target: str | None = None) -> None:
    """Executor ``slurm``: submit ``min(profile.jobs, chains)`` Slurm jobs and run every chain on them.

    ``target`` is the profile's path (``--slurm-profile`` or the plan's ``slurm_profile``). The profile's
    ``jobs``, not ``workers`` (counted on the submitting machine), sets how many systems run at once.
    """
    from dask.distributed import Client  # noqa: PLC0415
    from dask.distributed import as_completed as dask_completed  # noqa: PLC0415

    from mdbench.execute.jobs import run_chain  # noqa: PLC0415

    if not target:
        raise InputError("--executor slurm needs a profile: --slurm-profile PROFILE.yaml (or slurm_profile: in the "
                         "plan)")
    profile = load_profile(target)
    n_jobs = max(1, min(profile.jobs, len(chains)))
    cluster = make_cluster(profile)
    log.info("Slurm: %d job(s) of %d cores, %s, walltime %s (profile %s)", n_jobs, profile.cores, profile.memory,
             profile.walltime, target)
    try:
        cluster.scale(jobs=n_jobs)
        with Client(cluster) as client:
            futures = [client.submit(run_chain, chain, force, pure=False) for chain in chains]
            for future in dask_completed(futures):
                on_done(future.result())
    finally:
        cluster.close()
