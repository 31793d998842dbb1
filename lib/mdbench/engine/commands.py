"""CLI commands of the ``engine`` room: ``mdbench study run``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from mdbench.analysis.observables import analysis_templates
from mdbench.choices import executor_names, preset_names

#: The study's stages, in order, as executor stage names.
STUDY_STAGES = ("study/10_setup", "study/20_minimize", "study/30_equilibrate", "study/40_production")
#: Per-system analysis stages that follow production (issue 5), and the cross-case comparison.
ANALYSIS_STAGES = analysis_templates()
COMPARE_STAGE = "study/60_compare"
#: ``--through`` choices: the last stage to run (``comparison`` runs everything).
THROUGH = {"setup": 1, "minimization": 2, "equilibration": 3, "production": 4, "comparison": None}


@click.group()
def study() -> None:
    """Run the electrolyte study: setup, minimisation, equilibration and production per system."""


def build_jobs(out: Path, systems: list[str], preset: str, engine: str, threads: int, seed: int,
               stages: tuple[str, ...] = STUDY_STAGES, bundle: str = "") -> list:
    """The executor jobs of a study: every stage for every system, with the parameters each template declares."""
    from mdbench.execute import Job, read_schema, template_path  # noqa: PLC0415

    offered = {"preset": preset, "engine": engine, "threads": threads, "seed": seed}
    if bundle:
        offered["bundle"] = bundle
    jobs = []
    for system in systems:
        for stage in stages:
            declared = read_schema(template_path(stage))
            jobs.append(Job(str(out), system, stage, {k: v for k, v in offered.items() if k in declared}))
    return jobs


def _threads_option(value) -> int:
    """``--threads``: ``auto`` → 0 (:data:`mdbench.engine.runner.FOLLOW_THE_WORK`), else a positive integer."""
    if isinstance(value, int) or str(value).strip().lower() != "auto":
        try:
            number = int(value)
        except ValueError:
            raise click.BadParameter(f"{value!r} is neither auto nor a whole number of threads, e.g. --threads 2")
        if number < 1:
            raise click.BadParameter(f"{number} threads: give at least 1, or auto")
        return number
    return 0


def _preset_and_bundle(preset: str | None, bundle: Path | None) -> tuple[str, str]:
    """(preset name, bundle path or "") for a study: a bundle is verified and sets the size unless --preset does."""
    if bundle is None:
        return preset or "micro", ""
    from mdbench.engine.stages import TARGET_TEMPERATURE_K  # noqa: PLC0415
    from mdbench.errors import InputError  # noqa: PLC0415
    from mdbench.inputs.bundle import load_bundle_inputs  # noqa: PLC0415

    inputs = load_bundle_inputs(bundle)
    off = {c: (t, inputs.pressure_bar[c]) for c, t in inputs.temperature_K.items()
           if abs(t - TARGET_TEMPERATURE_K) > 1e-6 or abs(inputs.pressure_bar[c] - 1.0) > 1e-9}
    if off:
        raise InputError(f"this pipeline's protocols run 298.15 K and 1 bar; the bundle asks for {off}",
                         str(inputs.root / "cases"))
    return preset or inputs.preset, str(inputs.root)


@study.command("run")
@click.option("--preset", type=click.Choice(preset_names()), default=None,
              help="System size and protocol lengths (params/presets/); default micro, or the bundle's size.")
@click.option("--bundle", "bundle", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Agent input bundle (e.g. agent_input/): verified, then molecule counts, force field and "
                   "geometries come from it instead of params/ presets.")
@click.option("--systems", multiple=True, default=("DE", "HCE", "LHCE"), show_default=True,
              help="Cases to run; repeat the option or give several names (--systems DE HCE).")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Run directory.")
@click.option("--executor", type=click.Choice(executor_names()), default=executor_names()[0], show_default=True)
@click.option("--slurm-profile", type=click.Path(exists=True, dir_okay=False), expose_value=False,
              callback=lambda ctx, _param, value: ctx.meta.__setitem__("slurm_profile", value),
              help="Slurm profile YAML for --executor slurm (queue, cores, memory, GPUs, walltime, modules).")
@click.option("--engine", type=click.Choice(["auto", "cli", "gmxapi"]), default="auto", show_default=True,
              help="GROMACS adapter: gmxapi when usable (auto), or the gmx command line.")
@click.option("--threads", default="auto", show_default=True, callback=lambda _c, _p, v: _threads_option(v),
              help="Threads per mdrun: auto (threads follow the work: every case starts at once, each mdrun takes "
                   "the fair share of the free cores and takes more at its next checkpoint when a case finishes) or "
                   "a fixed number. All jobs together stay within MDBENCH_THREAD_CAP (default the core count, "
                   "at most 16).")
@click.option("--workers", type=int, default=None, help="Systems run in parallel (default: all with --threads auto, "
              "else cores // threads).")
@click.option("--dry-run", is_flag=True, help="Print the plan: ns per case and the expected wall time on this "
              "machine (measured ns/day of earlier runs, else a short benchmark of each case), then stop.")
@click.option("--seed", type=int, default=2026, show_default=True, help="Packing and velocity seed.")
@click.option("--force", is_flag=True, help="Rerun stages whose inputs did not change.")
@click.option("--analysis/--no-analysis", default=True, show_default=True,
              help="Run the analysis templates per system and the cross-case comparison after production.")
@click.option("--through", type=click.Choice(list(THROUGH)), default="comparison", show_default=True,
              help="Last stage to run; rerun the command (with a later one) to continue.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@click.option("--until", type=click.Choice(["fixed", "earned"]), default="fixed", show_default=True,
              help="fixed: the preset's production length; earned: then extend each case's production segment by "
                   "segment while an SI result is projected earned within the budget (docs/run-record.md).")
@click.option("--budget-ns", type=float, default=None, help="With --until earned: cap on the study's MD [ns] "
              "(default the registered 300 ns; 100 ns per case).")
@click.argument("more_systems", nargs=-1)
def run(preset: str | None, bundle: Path | None, systems: tuple[str, ...], out: Path, executor: str, engine: str,
        threads: int, workers: int | None, dry_run: bool, seed: int, force: bool, analysis: bool, through: str,
        quiet: bool, until: str, budget_ns: float | None, more_systems: tuple[str, ...]) -> None:
    """Run setup → production (→ analysis → comparison) per system; prints ns done / ns planned.

    Interrupted anywhere (Ctrl-C, a kill, a machine going down), the same command resumes: finished stages
    are skipped, MD continues from its last checkpoint, and what the interruption left is set aside and
    recorded.
    """
    from mdbench.engine.progress import ProgressWatcher, planned_ns  # noqa: PLC0415
    from mdbench.engine.runner import FOLLOW_THE_WORK, get_runner  # noqa: PLC0415
    from mdbench.engine.stages import load_preset  # noqa: PLC0415
    from mdbench.engine.threads import default_thread_cap  # noqa: PLC0415
    from mdbench.errors import InputError  # noqa: PLC0415
    from mdbench.execute import run_jobs  # noqa: PLC0415

    names = [s for s in (*systems, *more_systems)]
    bad = [s for s in names if s not in ("DE", "HCE", "LHCE")]
    if bad:
        raise InputError(f"unknown system(s) {bad}; choose from DE HCE LHCE")
    get_runner(engine)  # fail now, with the reason, if the engine cannot be used here
    profile = click.get_current_context().meta.get("slurm_profile")
    if executor == "slurm" and profile:  # the threads of a Slurm job are its profile's cores, not this host's
        from mdbench.execute.slurm import load_profile  # noqa: PLC0415

        cap = load_profile(profile).cores
    else:
        cap = default_thread_cap()
    if threads > cap:
        raise InputError(f"--threads {threads} exceeds the thread cap {cap} (MDBENCH_THREAD_CAP, max 16)")
    from mdbench.engine.estimate import estimate_study, format_plan, record_run_history  # noqa: PLC0415

    if dry_run:
        preset, bundle_arg = _preset_and_bundle(preset, bundle)
        click.echo(format_plan(estimate_study(names, preset, cap=cap, threads=threads, bundle=bundle_arg,
                                              analysis=analysis and THROUGH[through] is None,
                                              echo=(lambda _m: None) if quiet else click.echo)))
        return
    from mdbench.cli import check_out  # noqa: PLC0415

    check_out(out)
    preset, bundle_arg = _preset_and_bundle(preset, bundle)
    out = out.resolve()
    analysis = analysis and THROUGH[through] is None
    stages = STUDY_STAGES[:THROUGH[through]] + (ANALYSIS_STAGES if analysis else ())
    jobs = build_jobs(out, names, preset, engine, threads, seed, stages=stages, bundle=bundle_arg)
    workers = workers or (len(names) if threads == FOLLOW_THE_WORK else
                          max(1, min(len(names), cap // threads, os.cpu_count() or 1)))
    planned = planned_ns(load_preset(preset))
    plan = None
    if not quiet and executor == "local":  # the ETA follows the plan's schedule where this machine has a history
        plan = estimate_study(names, preset, cap=cap, threads=threads, bundle=bundle_arg, analysis=analysis,
                              benchmark=False)
        click.echo(format_plan(plan).splitlines()[0] if plan is None else format_plan(plan))
    # one display: the watcher's overall bar in ns of MD and a line per system (no per-stage count bar)
    with ProgressWatcher(out, names, planned, verbose=not quiet, last_stage=stages[-1], plan=plan):
        results = run_jobs(jobs, executor=executor, workers=workers, force=force, verbose=False,
                           slurm_profile=profile)
    if analysis:  # the comparison needs every system's analysis, so it runs after them
        from mdbench.execute import Job  # noqa: PLC0415

        results += run_jobs([Job(str(out), "ALL", COMPARE_STAGE, {"cases": names})], executor="local", workers=1,
                            force=force, verbose=False)
    if until == "earned" and analysis:  # production until each result is earned or out of reach
        from mdbench.engine.adaptive import extend_until_earned  # noqa: PLC0415

        results += extend_until_earned(out, names, preset=preset, engine=engine, threads=threads, seed=seed,
                                       budget_ns=budget_ns, echo=(lambda _m: None) if quiet else click.echo,
                                       analysis_jobs=lambda cases: build_jobs(out, cases, preset, engine, threads,
                                                                              seed, stages=ANALYSIS_STAGES),
                                       compare_stage=COMPARE_STAGE)
    if executor == "local":  # this run's MD speeds, for the next estimate on this machine
        try:
            record_run_history(out, names, preset, bundle_arg)
        except (OSError, ValueError, KeyError) as exc:  # a history is a convenience: never fail the study on it
            click.echo(f"note: the MD speed history was not updated ({exc})", err=True)
    sys.exit(_summary(out, names, results, planned, stages[-1]))


def _summary(out: Path, names: list[str], results: list, planned: float, last_stage: str) -> int:
    """Print each stage's status and each case's ns charged / planned; the exit status (1 when any failed)."""
    from mdbench.engine.progress import system_progress  # noqa: PLC0415

    failed = 0
    click.echo(f"{'system':6s} {'stage':24s} status")
    for r in results:
        click.echo(f"{r.system:6s} {r.stage:24s} {r.status}" + (f"  ({r.error})" if r.error else ""))
        failed += r.status in ("failed", "not_reached")
    for s in names:
        p = system_progress(out, s, planned, last_stage=last_stage)
        click.echo(f"{s:6s} {p.done_ns:.4f} / {p.planned_ns:.4f} ns charged/planned; last stage {p.stage}: {p.state}")
    return 1 if failed else 0
