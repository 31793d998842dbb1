"""CLI commands of the ``execute`` room: ``mdbench run-template`` and ``mdbench batch``."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import yaml

from mdbench.choices import executor_names


def _parse_params(pairs: tuple[str, ...], params_file: Path | None) -> dict:
    from mdbench.errors import InputError
    from mdbench.yamlio import load_yaml

    params: dict = {}
    if params_file:
        loaded = load_yaml(params_file)
        if loaded is not None and not isinstance(loaded, dict):
            raise InputError(f"a parameters file must be a mapping (name: value), not a {type(loaded).__name__}",
                             str(params_file))
        params = dict(loaded or {})
    for pair in pairs:
        if "=" not in pair:
            raise click.BadParameter(f"{pair!r}: use name=value", param_hint="-p")
        name, value = pair.split("=", 1)
        params[name] = yaml.safe_load(value)
    return params


def _summarise(results: list) -> int:
    failed = 0
    for result in results:
        mark = {"finished": "ok", "skipped": "skip", "failed": "FAIL", "not_reached": "--"}.get(result.status, "?")
        click.echo(f"{mark:5s} {result.system:6s} {result.stage:28s} {result.notebook_path or ''}"
                   + (f"  ({result.error})" if result.error else ""))
        failed += result.status in ("failed", "not_reached")
    return failed


@click.command("run-template")
@click.argument("stage")
@click.option("--run-dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Run directory.")
@click.option("--system", required=True, help="Case name, e.g. DE.")
@click.option("-p", "--param", "pairs", multiple=True, help="Template parameter as name=value (YAML value).")
@click.option("--params-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="YAML file of template parameters.")
@click.option("--force", is_flag=True, help="Rerun even if the inputs are unchanged.")
def run_template(stage: str, run_dir: Path, system: str, pairs: tuple[str, ...], params_file: Path | None,
                 force: bool) -> None:
    """Execute templates/STAGE.ipynb (e.g. study/10_setup) for one system with papermill."""
    from mdbench.execute import run_stage

    result = run_stage(run_dir, system, stage, _parse_params(pairs, params_file), force=force)
    sys.exit(1 if _summarise([result]) else 0)


@click.command()
@click.argument("plan", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--executor", type=click.Choice(executor_names()), default=None,
              help="Default: the plan's, or local.")
@click.option("--workers", type=int, default=None, help="Parallel systems (default: cores).")
@click.option("--scheduler", default=None, help="Dask scheduler ADDRESS (default: start a LocalCluster).")
@click.option("--slurm-profile", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Slurm profile YAML for --executor slurm (default: the plan's slurm_profile).")
@click.option("--force", is_flag=True, help="Rerun finished jobs too.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def batch(plan: Path, executor: str | None, workers: int | None, scheduler: str | None, slurm_profile: Path | None,
          force: bool, quiet: bool) -> None:
    """Run a plan of (run, system, stage) jobs; finished jobs with unchanged inputs are skipped."""
    from mdbench.execute import load_plan, run_jobs

    jobs, options = load_plan(plan)
    results = run_jobs(jobs, executor=executor or options.get("executor", executor_names()[0]),
                       workers=workers or options.get("workers"), scheduler=scheduler or options.get("scheduler"),
                       force=force, verbose=not quiet,
                       slurm_profile=str(slurm_profile) if slurm_profile else options.get("slurm_profile"))
    sys.exit(1 if _summarise(results) else 0)
