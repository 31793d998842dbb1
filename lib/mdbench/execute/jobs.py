"""Run many (run, system, stage) jobs: stages of one system in order, systems in parallel.

Executors are registered explicitly in :data:`EXECUTORS`: ``local`` (a process pool, default workers =
cores), ``dask`` (a running scheduler given by address, or a ``LocalCluster``) and ``slurm`` (Slurm jobs as
Dask workers through dask-jobqueue, from a YAML profile: :mod:`mdbench.execute.slurm`). All run the same
function on the same chains, so results agree.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from mdbench.choices import EXECUTORS as _EXECUTOR_REGISTRY
from mdbench.choices import load_executor
from mdbench.errors import InputError
from mdbench.execute.stage import StageResult, prepare_parameters, run_stage
from mdbench.threads import ThreadSlots
from mdbench.yamlio import load_yaml

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    """One stage of one system of one run."""

    run_dir: str
    system: str
    stage: str
    params: dict[str, Any] = field(default_factory=dict)


def _chains(jobs: list[Job]) -> list[list[Job]]:
    grouped: "OrderedDict[tuple[str, str], list[Job]]" = OrderedDict()
    for job in jobs:
        grouped.setdefault((str(Path(job.run_dir).resolve()), job.system), []).append(job)
    return list(grouped.values())


#: Niceness of the stages after a chain's last MD stage (its analysis) when the chain runs in a worker
#: process: they use the CPU the MD leaves (nice 19 gets ~1.5 % of a core that an mdrun thread wants, CFS
#: weights 15 vs 1024), so analysis overlaps MD without slowing it.
AFTER_MD_NICENESS = 19


def runs_md(job: Job) -> bool:
    """A stage runs MD when its template declares the ``threads`` parameter (minimisation, equilibration,
    production); its chain holds an MD demand on the machine-wide thread slots until its last such stage."""
    return "threads" in job.params


def run_chain(chain: list[Job], force: bool = False, nice_after_md: bool = False) -> list[dict[str, Any]]:
    """Run the stages of one system in order; after a failure the rest are ``not_reached``.

    While MD stages remain, the chain holds its case's demand on the thread slots
    (:meth:`~mdbench.threads.ThreadSlots.demand`), so that an mdrun asking for the fair share gets
    ``cap // cases with MD ahead``; after its last MD stage the rest runs at :data:`AFTER_MD_NICENESS` when
    ``nice_after_md`` (a worker process that runs this one chain only, as the local pool's do).
    """
    results: list[dict[str, Any]] = []
    failed = False
    last_md = max((i for i, job in enumerate(chain) if runs_md(job)), default=-1)
    with ExitStack() as demand:
        if last_md >= 0:
            demand.enter_context(ThreadSlots().demand(f"{Path(chain[0].run_dir).resolve()}:{chain[0].system}"))
        for index, job in enumerate(chain):
            if index == last_md + 1 and last_md >= 0:
                demand.close()
                if nice_after_md:
                    _lower_priority_in_worker()
            if failed:
                results.append(StageResult(job.run_dir, job.system, job.stage, "not_reached",
                                           error="an earlier stage of this system failed").to_dict())
                continue
            result = run_stage(job.run_dir, job.system, job.stage, job.params, force=force)
            failed = result.status == "failed"
            results.append(result.to_dict())
    return results


def _lower_priority_in_worker() -> None:
    """``nice`` this process to :data:`AFTER_MD_NICENESS` when it is a worker (never the caller's own process,
    whose priority could not be raised again)."""
    if multiprocessing.parent_process() is None or not hasattr(os, "nice"):
        return
    try:
        os.nice(max(0, AFTER_MD_NICENESS - os.nice(0)))
    except OSError:  # not permitted here: the analysis runs at normal priority
        pass


def run_local(chains: list[list[Job]], workers: int, force: bool, on_done: Callable[[list[dict]], None],
           scheduler: str | None = None) -> None:
    if workers <= 1 or len(chains) == 1:
        for chain in chains:
            on_done(run_chain(chain, force))
        return
    context = multiprocessing.get_context("spawn")
    # one chain per worker process: a worker niced for its chain's analysis never runs another chain's MD
    with ProcessPoolExecutor(max_workers=min(workers, len(chains)), mp_context=context,
                             max_tasks_per_child=1) as pool:
        futures = [pool.submit(run_chain, chain, force, True) for chain in chains]
        for future in as_completed(futures):
            on_done(future.result())


def run_dask(chains: list[list[Job]], workers: int, force: bool, on_done: Callable[[list[dict]], None],
          scheduler: str | None = None) -> None:
    from dask.distributed import Client, LocalCluster
    from dask.distributed import as_completed as dask_completed

    cluster = None
    if scheduler:
        try:
            client = Client(scheduler)
        except OSError as exc:  # refused or timed out (distributed.comm.timeouts.connect, default 30 s)
            raise InputError(f"cannot reach the Dask scheduler {scheduler} ({exc}); start it, or give its address "
                             "with --scheduler, or run without --scheduler for a LocalCluster") from exc
    else:
        cluster = LocalCluster(n_workers=max(1, min(workers, len(chains))), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    try:
        futures = [client.submit(run_chain, chain, force, pure=False) for chain in chains]
        for future in dask_completed(futures):
            on_done(future.result())
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


#: executor name → ``module:function`` of its run function (registered in :mod:`mdbench.choices`, the one
#: place the CLI reads too; see there).
EXECUTORS = _EXECUTOR_REGISTRY


def run_jobs(jobs: list[Job], executor: str = "local", workers: int | None = None, scheduler: str | None = None,
             force: bool = False, verbose: bool = True, slurm_profile: str | None = None) -> list[StageResult]:
    """Run jobs with the chosen executor; returns one :class:`StageResult` per job, in input order.

    ``scheduler`` is the Dask scheduler address (``dask``), ``slurm_profile`` the profile YAML (``slurm``).

    Every job's parameters are validated before any kernel starts. A failed stage stops only the later
    stages of its own system.
    """
    if executor not in EXECUTORS:
        raise InputError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    for job in jobs:
        prepare_parameters(job.stage, job.run_dir, job.system, job.params)
    chains = _chains(jobs)
    workers = workers or os.cpu_count() or 1
    collected: dict[tuple[str, str, str], StageResult] = {}
    with tqdm(total=len(jobs), disable=not verbose, unit="stage", desc="stages") as bar:
        def on_done(results: list[dict]) -> None:
            for item in results:
                result = StageResult(**item)
                collected[(str(Path(result.run_dir).resolve()), result.system, result.stage)] = result
                bar.set_postfix_str(f"{result.system} {result.stage.rsplit('/', 1)[-1]}: {result.status}")
                bar.update(1)

        load_executor(executor)(chains, workers, force, on_done, slurm_profile if executor == "slurm" else scheduler)
    return [collected[(str(Path(j.run_dir).resolve()), j.system, j.stage)] for j in jobs]


def load_plan(path: str | Path) -> tuple[list[Job], dict[str, Any]]:
    """Read a batch plan (YAML) into jobs and executor options.

    Two forms are accepted::

        jobs:                        # explicit list
          - {run_dir: outputs/runs/a, system: DE, stage: study/10_setup, params: {preset: micro}}

        run_dir: outputs/runs/a      # or a product: every system × every stage
        systems: [DE, HCE]
        stages: [study/10_setup, study/20_minimize]
        params: {preset: micro}              # given to every stage that declares them
        stage_params: {study/10_setup: {seed: 7}}

    Top-level ``executor``, ``workers``, ``scheduler`` and ``slurm_profile`` (a path relative to the plan) set
    the defaults for ``mdbench batch``.
    """
    plan = load_yaml(path)
    where = str(path)
    if not isinstance(plan, dict):
        raise InputError(f"a batch plan must be a mapping with 'jobs' or 'run_dir' + 'systems' + 'stages', "
                         f"not a {type(plan).__name__}", where)
    base = Path(path).resolve().parent
    options = {k: plan[k] for k in ("executor", "workers", "scheduler") if k in plan}
    if "slurm_profile" in plan:
        options["slurm_profile"] = str(base / str(plan["slurm_profile"]))
    jobs: list[Job] = []

    def run_dir_of(value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise InputError(f"run_dir must be a folder path (a string), not {value!r}", where)
        run_dir = Path(value)
        return str(run_dir if run_dir.is_absolute() else (base / run_dir))

    def mapping(value: Any, key: str) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise InputError(f"'{key}' must be a mapping (name: value), not {type(value).__name__} {value!r}", where)
        return dict(value)

    def names(key: str) -> list[str]:
        value = plan[key]
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise InputError(f"'{key}' must be a non-empty list of names, e.g. {key}: [DE, HCE], not {value!r}",
                             where)
        return value

    if "jobs" in plan:
        if not isinstance(plan["jobs"], list):
            raise InputError(f"'jobs' must be a list of {{run_dir, system, stage, params}} mappings, "
                             f"not {type(plan['jobs']).__name__}", where)
        for index, item in enumerate(plan["jobs"]):
            if not isinstance(item, dict) or not {"run_dir", "system", "stage"} <= set(item):
                raise InputError(f"jobs[{index}] needs run_dir, system and stage", where)
            jobs.append(Job(run_dir_of(item["run_dir"]), str(item["system"]), str(item["stage"]),
                            mapping(item.get("params"), f"jobs[{index}].params")))
    elif {"run_dir", "systems", "stages"} <= set(plan):
        from mdbench.execute.parameters import read_schema
        from mdbench.execute.stage import template_path

        systems, stages = names("systems"), names("stages")
        shared = mapping(plan.get("params"), "params")
        per_stage = mapping(plan.get("stage_params"), "stage_params")
        for stage in per_stage:
            if stage not in stages:
                raise InputError(f"stage_params names {stage!r}, which is not in stages ({', '.join(stages)})", where)
        declared = {stage: read_schema(template_path(stage)) for stage in stages}
        for name in shared:  # a misspelt key would otherwise reach no template and be dropped silently
            if not any(name in schema for schema in declared.values()):
                raise InputError(f"params: {name!r} is declared by none of the stages "
                                 f"({', '.join(stages)}); check the spelling", where)
        for system in systems:
            for stage in stages:
                params = {k: v for k, v in shared.items() if k in declared[stage]}
                params.update(mapping(per_stage.get(stage), f"stage_params.{stage}"))
                jobs.append(Job(run_dir_of(plan["run_dir"]), system, stage, params))
    else:
        raise InputError("a batch plan needs 'jobs', or 'run_dir' + 'systems' + 'stages'", where)
    return jobs, options
