"""CLI commands of the ``arena`` room: ``mdbench arena validate | oracle | run | aggregate | list | inputs |
pin-base``."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from mdbench.errors import InputError

log = logging.getLogger(__name__)


def _task_dirs(paths: tuple[str, ...]) -> list[Path]:
    """Expand arguments: a task folder, or a folder of task folders (default: the built-in suite)."""
    from mdbench.arena.task import TASKS_DIR, list_tasks

    if not paths:
        paths = (str(TASKS_DIR),)
    out: list[Path] = []
    for p in paths:
        tasks = list_tasks(p)
        if not tasks:
            raise InputError("no task.toml here or in its sub-folders; pass a Harbor task folder", p)
        out.extend(t.path for t in tasks)
    return out


def _dataset(paths: tuple[str, ...]) -> Path | None:
    """The dataset folder of a run (Harbor's ``-p <folder of tasks>``): its name becomes ``source``."""
    from mdbench.arena.task import TASKS_DIR

    if not paths:
        return TASKS_DIR
    if len(paths) == 1 and not (Path(paths[0]) / "task.toml").is_file():
        return Path(paths[0])
    return None


@click.group(name="arena")
def arena() -> None:
    """Harbor-format MD task suite: validate tasks, run oracle/agents locally, aggregate job folders."""


@arena.command(name="list")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, file_okay=False))
def list_cmd(paths: tuple[str, ...]) -> None:
    """List tasks with difficulty, category and kind (default: the built-in suite)."""
    from mdbench.arena.task import load_task

    for d in _task_dirs(paths):
        t = load_task(d)
        m = t.metadata
        click.echo(f"{t.name:45s} {m.get('difficulty', '?'):7s} {m.get('category', '?'):20s} {m.get('kind', 'standard')}")


@arena.command()
@click.argument("task_dirs", nargs=-1, type=click.Path(exists=True, file_okay=False))
@click.option("--rules", type=click.Choice(["all", "harbor", "suite"]), default="all", show_default=True,
              help="harbor: what Harbor needs to load and run a task (use it for anyone's Harbor tasks); "
                   "suite: this suite's own rules (process.toml, metadata, pinned base image); all: both.")
@click.option("--with-harbor", is_flag=True,
              help="Also load every task with the installed Harbor's Task model and run `harbor lint` (default "
                   "rules) on it (.venv-harbor, `make harbor-env`).")
def validate(task_dirs: tuple[str, ...], rules: str, with_harbor: bool) -> None:
    """Check TASK_DIR(s) (or folders of tasks) against Harbor's rules and this suite's; exit 1 on problems."""
    from mdbench.arena.task import validate_task

    chosen = ("harbor", "suite") if rules == "all" else (rules,)
    dirs = _task_dirs(task_dirs)
    real: dict[str, list[str]] = {}
    if with_harbor:
        from mdbench.arena.harbor_compat import probe

        from mdbench.arena.harbor_compat import harbor_lint

        for item in probe("task", *dirs)["items"]:
            real[str(Path(item["path"]).resolve())] = [] if item["ok"] else [item["error"]]
        _, findings = harbor_lint(*dirs)
        for f in findings:
            path = Path(str(f.get("path", ""))).resolve()
            owner = next((str(Path(d).resolve()) for d in dirs if path.is_relative_to(Path(d).resolve())), str(path))
            where = f"{f.get('path')}" + (f":{f['line']}" if f.get("line") else "")
            real.setdefault(owner, []).append(f"lint {f.get('rule')}: {where}: {f.get('message')}")
    bad = 0
    for d in dirs:
        problems = [f"[{p.rules}] {p}" for p in validate_task(d, rules=chosen)]
        problems += [f"[harbor {_harbor_version()}] {e}" for e in real.get(str(Path(d).resolve()), [])]
        if problems:
            bad += 1
            click.echo(f"INVALID {d}")
            for p in problems:
                click.echo(f"  - {p}")
        else:
            click.echo(f"ok      {d}")
    if bad:
        sys.exit(1)


def _harbor_version() -> str:
    from mdbench.arena.harbor_compat import HARBOR_VERSION

    return HARBOR_VERSION


def _common_run_options(f):
    f = click.option("--jobs-dir", type=click.Path(file_okay=False), default="outputs/arena/jobs",
                     show_default=True, help="Folder that receives the job folder (relative to the working directory).")(f)
    f = click.option("--job-name", default=None, help="Job folder name (default: timestamp).")(f)
    f = click.option("--python", "python", default=None, help="Interpreter given to scripts as MDBENCH_PYTHON (default: this one).")(f)
    f = click.option("--judge-cmd", "--judge", "judge_cmd", default=None,
                     help="Process judge program: reads the judge input JSON (criteria, trajectory, files) on stdin, "
                          "prints {criterion: raw} JSON.")(f)
    f = click.option("--judge-llm", default=None, metavar="URL",
                     help="Process judge on an OpenAI-compatible endpoint (e.g. http://127.0.0.1:8000/v1); the key is "
                          "read from $OPENAI_API_KEY (or the variable $ARENA_JUDGE_API_KEY_ENV names).")(f)
    f = click.option("--judge-model", default=None,
                     help="Model of --judge-llm (default: [judge] judge of the task's process.toml).")(f)
    f = click.option("--process-scores", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="Expert score file (JSON {task: {criterion: raw}}) for process criteria.")(f)
    f = click.option("--timeout-multiplier", type=float, default=1.0, show_default=True, help="Scales agent and verifier timeouts.")(f)
    f = click.option("--keep-workspace", is_flag=True, help="Keep the temporary workspace for inspection.")(f)
    return f


def _report(job_dir: Path, outcomes) -> None:
    for o in outcomes:
        rewards = json.dumps(o.rewards) if o.rewards is not None else "no reward"
        err = f"  [{o.exception_type}]" if o.exception_type else ""
        click.echo(f"{o.task_name:45s} {rewards}{err}")
    click.echo(f"job folder: {job_dir}")


@arena.command()
@click.argument("task_dirs", nargs=-1, type=click.Path(exists=True, file_okay=False))
@_common_run_options
@click.option("--strict/--no-strict", default=True, show_default=True, help="Exit 1 unless every oracle scores correctness 1.0.")
@click.pass_context
def oracle(ctx: click.Context, task_dirs: tuple[str, ...], strict: bool, **kw) -> None:
    """Run each task's reference solution (solution/solve.sh) and its verifier, without Docker."""
    from mdbench.arena.runner import AgentSpec, run_job

    job_dir, outcomes = run_job(_task_dirs(task_dirs), AgentSpec(name="oracle"), kw.pop("jobs_dir"),
                                job_name=kw.pop("job_name"), verbose=_verbose(ctx), dataset=_dataset(task_dirs), **kw)
    _report(job_dir, outcomes)
    if strict and any(o.correctness < 1.0 or o.exception_type for o in outcomes):
        click.echo("error: some oracle did not score correctness 1.0", err=True)
        sys.exit(1)


@arena.command()
@click.argument("task_dirs", nargs=-1, type=click.Path(exists=True, file_okay=False))
@click.option("--agent", "command", required=True,
              help="Shell command run in the task's /app (mapped); the instruction path is in $ARENA_INSTRUCTION.")
@click.option("--agent-name", default="command", show_default=True, help="Agent name recorded in result.json.")
@click.option("--model", "model_name", default=None, help="provider/model recorded in result.json.")
@_common_run_options
@click.pass_context
def run(ctx: click.Context, task_dirs: tuple[str, ...], command: str, agent_name: str, model_name: str | None, **kw) -> None:
    """Run an agent command on each task, then its verifier; write a Harbor job folder.

    The agent may write /logs/agent/trajectory.json (ATIF) and /logs/agent/usage.json
    ({n_input_tokens, n_output_tokens, n_cache_tokens, cost_usd}); both paths are mapped.
    """
    from mdbench.arena.runner import AgentSpec, run_job

    job_dir, outcomes = run_job(_task_dirs(task_dirs), AgentSpec(name=agent_name, command=command, model_name=model_name),
                                kw.pop("jobs_dir"), job_name=kw.pop("job_name"), verbose=_verbose(ctx),
                                dataset=_dataset(task_dirs), **kw)
    _report(job_dir, outcomes)


@arena.command()
@click.argument("job_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_html", required=True, type=click.Path(dir_okay=False), help="HTML report to write.")
@click.option("--tasks-dir", "tasks_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Task suite(s) for difficulty/category metadata (default: the built-in suite).")
@click.option("--require-process/--no-require-process", default=True, show_default=True,
              help="Strict-Pass needs a scored process reward of 1.")
@click.option("--json", "json_only", is_flag=True, help="Only print the summary JSON (no notebook, no HTML).")
@click.option("--keep-notebook", type=click.Path(dir_okay=False), default=None,
              help="Also keep the executed report notebook at this path (by default only the page is written).")
def aggregate(job_dirs: tuple[str, ...], out_html: str, tasks_dirs: tuple[str, ...], require_process: bool,
              json_only: bool, keep_notebook: str | None) -> None:
    """Aggregate Harbor JOB_DIRS into Strict-Pass@1, rewards, cost and error tables plus an HTML report."""
    from mdbench.arena import aggregate as agg
    from mdbench.arena.task import TASKS_DIR

    tasks = list(tasks_dirs) or [TASKS_DIR]
    if json_only:
        trials = agg.load_trials(job_dirs, tasks, require_process=require_process)
        click.echo(json.dumps(agg.summary_json(trials)["overall"], indent=2))
        return
    paths = agg.render_report(list(job_dirs), out_html, tasks_dirs=tasks, require_process=require_process,
                              keep_notebook=keep_notebook)
    summary = json.loads(paths["summary"].read_text(encoding="utf-8"))
    for row in summary["overall"]:
        harbor = ", ".join(f"{k} {v:.3f}" for k, v in row["harbor_metrics"].items()) or "no valid reward"
        click.echo(f"{row['agent']} / {row['model']} [{row['dataset']}]: Strict-Pass@1 {row['strict_pass']} "
                   f"({row['strict_pass_pct']:.0f} %), correctness {row['mean_correctness']:.3f}; Harbor: "
                   f"{row['harbor_n_trials']} graded, {row['harbor_n_errors']} errored, {harbor}")
    click.echo(f"report: {paths['html']}")


def _verbose(ctx: click.Context) -> bool:
    root = ctx.find_root()
    return bool(root.params.get("verbose")) if root is not None else False


@arena.command(name="pin-base")
@click.argument("reference")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, file_okay=False))
def pin_base(reference: str, paths: tuple[str, ...]) -> None:
    """Pin every task's FROM to REFERENCE, the base image's pushed digest
    (REGISTRY/mdbench-arena-base:0.2@sha256:<digest>), so that `harbor lint --select ALL` passes."""
    from mdbench.arena.task import pin_base_image

    changed = pin_base_image(_task_dirs(paths), reference)
    for path in changed:
        click.echo(f"pinned {path}")
    click.echo(f"{len(changed)} Dockerfile(s) now FROM {reference}")


@arena.command()
@click.option("--check", "check_only", is_flag=True, help="Only report task copies that differ from the master; exit 1 if any.")
@click.option("--regenerate", is_flag=True,
              help="Rerun the micro LHCE study (minutes of GROMACS) and replace the master set, then the copies.")
def inputs(check_only: bool, regenerate: bool) -> None:
    """Pipeline-made task inputs (templates/arena/inputs/): check or refresh the tasks' copies."""
    from mdbench.arena import inputs as inp

    if regenerate:
        click.echo(f"regenerated {inp.regenerate()}")
    if check_only:
        bad = inp.check_copies()
        for c in bad:
            click.echo(f"{c.state:8s} {c.copy}  (master {c.master})")
        if bad:
            sys.exit(1)
        click.echo(f"all {len(inp.all_copies())} copies match the master")
        return
    for c in inp.sync_copies():
        click.echo(f"updated {c.copy}")
