"""CLI commands of the ``sdl`` room: ``mdbench sdl compile | run | score | leaderboard``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from mdbench.errors import InputError
from mdbench.paths import NOTEBOOKS_DIR, PARAMS_DIR

log = logging.getLogger(__name__)


def _verbose() -> bool:
    return logging.getLogger().isEnabledFor(logging.INFO)


def load_record(record: str | None, ledger_path: str | None, pg_path: str | None):
    """The ledger named on the command line (exactly one source)."""
    from mdbench.sdl.ledger import load_ledger_json
    from mdbench.sdl.precursor_genome import load_precursor_genome
    from mdbench.sdl.vapdiff import load_vapdiff

    given = [x for x in (ledger_path, pg_path) if x]
    if len(given) > 1:
        raise click.UsageError("give one of --ledger or --precursor-genome")
    if ledger_path:
        return load_ledger_json(ledger_path)
    if pg_path:
        return load_precursor_genome(pg_path)
    if record in (None, "vapdiff", "vapdiff_crystal"):
        return load_vapdiff()
    raise click.UsageError(f"unknown --record {record!r}; shipped: vapdiff")


def load_assignment_dir(folder: str | Path):
    """``(ledger, [assignments])`` of a folder written by ``mdbench sdl compile``."""
    from mdbench.sdl.compiler import load_assignment
    from mdbench.sdl.ledger import load_ledger_json

    folder = Path(folder)
    index = folder / "index.json"
    if not index.exists():
        raise InputError("no index.json — write this folder with `mdbench sdl compile --out`", str(folder))
    ledger = load_ledger_json(folder / "ledger.json")
    ids = json.loads(index.read_text(encoding="utf-8"))
    asgs = [load_assignment(folder / f"{aid}.json", ledger) for aid in ids]
    for a in asgs:
        if ids[a.assignment_id] != a.sha256:
            raise InputError(f"{a.assignment_id}: sha256 differs from index.json", str(index))
    return ledger, asgs


@click.group(name="sdl")
def sdl() -> None:
    """SDL-style campaign replay: compile recorded experiments into budgeted campaigns, run policies, score."""


@sdl.command(name="compile")
@click.option("--record", default="vapdiff", show_default=True, help="Shipped record (vapdiff).")
@click.option("--ledger", "ledger_path", type=click.Path(exists=True, dir_okay=False), help="An mdbench ledger JSON.")
@click.option("--precursor-genome", "pg_path", type=click.Path(exists=True),
              help="ledger_precursor_genome.json (or its folder / zip archive).")
@click.option("--params", "params_path", type=click.Path(exists=True, dir_okay=False),
              default=str(PARAMS_DIR / "sdl" / "default.yaml"), show_default=True, help="Compiler parameters YAML.")
@click.option("--seed", type=int, default=None, help="Override the panel seed.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Folder to write.")
def compile_cmd(record, ledger_path, pg_path, params_path, seed, out_dir) -> None:
    """Compile a record into frozen, sha256-hashed, counterbalanced assignments (+ ledger.json)."""
    from mdbench.sdl.compiler import CompileSpec, compile_assignments, save_assignments
    from mdbench.sdl.ledger import save_ledger_json
    from mdbench.yamlio import load_yaml

    ledger = load_record(record, ledger_path, pg_path)
    params = load_yaml(params_path) or {}
    if not isinstance(params, dict):
        raise InputError("expected a mapping of compiler parameters", params_path)
    if seed is not None:
        params["seed"] = seed
    spec = CompileSpec.from_dict(params, params_path)
    try:
        asgs = compile_assignments(ledger, spec)
    except InputError as exc:
        if exc.path is not None:
            raise
        raise InputError(f"{exc} (parameters from this file)", params_path) from exc
    out = Path(out_dir)
    save_ledger_json(ledger, out / "ledger.json")
    save_assignments(asgs, out)
    for a in asgs:
        click.echo(f"{a.assignment_id}  sha256={a.sha256}")
    click.echo(f"{len(asgs)} assignments of {ledger.name} ({len(ledger.experiments)} experiments, "
               f"K={ledger.n_outcomes}) written to {out}")


@sdl.command(name="run")
@click.option("--assignments", "asg_dir", type=click.Path(exists=True, file_okay=False), required=True,
              help="Folder written by `mdbench sdl compile`.")
@click.option("--policy", default=None, help="Built-in policy: uniform, class_prior, kernel, knn, random.")
@click.option("--policy-cmd", default=None, help="External policy command (JSON-lines protocol on stdin/stdout).")
@click.option("--system", default=None, help="Name of the system in the results (default: policy name).")
@click.option("--only", multiple=True, help="Run only these assignment ids (repeatable).")
@click.option("--seed", type=int, default=0, show_default=True, help="Policy / random-control seed.")
@click.option("--controls/--no-controls", default=True, show_default=True,
              help="Also run the schedule-matched random and call-matched no-evidence controls.")
@click.option("--timeout-s", type=float, default=120.0, show_default=True,
              help="Seconds to wait for each reply of an external policy [s].")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Results folder.")
def run_cmd(asg_dir, policy, policy_cmd, system, only, seed, controls, timeout_s, out_dir) -> None:
    """Run one policy over the frozen assignments (adaptive branch and controls); write traces + metrics."""
    from mdbench.sdl.external import ExternalPolicy
    from mdbench.sdl.policies import POLICIES, make_policy
    from mdbench.sdl.runner import run_system

    if bool(policy) == bool(policy_cmd):
        raise click.UsageError("give exactly one of --policy NAME or --policy-cmd CMD")
    ledger, asgs = load_assignment_dir(asg_dir)
    if only:
        unknown = set(only) - {a.assignment_id for a in asgs}
        if unknown:
            raise click.UsageError(f"unknown assignment ids {sorted(unknown)}")
        asgs = [a for a in asgs if a.assignment_id in only]
    if policy:
        if policy not in POLICIES:
            raise click.UsageError(f"unknown policy {policy!r}; built-ins: {sorted(POLICIES)}")
        factory = lambda: make_policy(policy, seed)  # noqa: E731
        name, spec = system or policy, {"builtin": policy}
    else:
        factory = lambda: ExternalPolicy(policy_cmd, timeout_s=timeout_s)  # noqa: E731
        name, spec = system or "external", {"cmd": policy_cmd}
    results = run_system(ledger, asgs, factory, name, out_dir, seed=seed, controls=controls, verbose=_verbose(),
                         policy_spec=spec)
    for m in results:
        b = m["branches"]["adaptive"]
        click.echo(f"{m['assignment_id']}: loss pre {b['loss_pre_nats']:.4f} → at budget "
                   f"{b['loss_at_budget_nats']:.4f} nats; AUC {b['adaptive_auc_nats']:.4f}; "
                   f"selection lift {m.get('selection_lift_nats', float('nan')):+.4f}; "
                   f"evidence lift {m.get('evidence_lift_nats', float('nan')):+.4f}")


@sdl.command(name="score")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--assignments", "asg_dir", type=click.Path(exists=True, file_okay=False), required=True,
              help="The folder the runs were compiled into (ledger.json + assignments).")
def score_cmd(results_dir, asg_dir) -> None:
    """Re-score saved traces from scratch (verifying every hash chain) and rewrite metrics.json."""
    from mdbench.sdl.environment import verify_chain
    from mdbench.sdl.metrics import campaign_metrics

    ledger, asgs = load_assignment_dir(asg_dir)
    by_id = {a.assignment_id: a for a in asgs}
    n = 0
    for mpath in sorted(Path(results_dir).glob("*/*/metrics.json")):
        d = mpath.parent
        asg = by_id.get(d.name)
        if asg is None:
            raise InputError(f"assignment {d.name} is not in {asg_dir}", str(d))
        traces = {}
        for tp in sorted(d.glob("*.trace.json")):
            tr = json.loads(tp.read_text(encoding="utf-8"))
            if not verify_chain(tr["log"]):
                raise InputError("action log hash chain does not verify: the trace was altered", str(tp))
            if tr["assignment_sha256"] != asg.sha256:
                raise InputError("trace ran on a different assignment hash", str(tp))
            traces[tr["branch"]] = tr
        m = campaign_metrics(traces, ledger, asg)
        m["system"] = json.loads(mpath.read_text(encoding="utf-8")).get("system", d.parent.name)
        mpath.write_text(json.dumps(m, indent=1), encoding="utf-8")
        n += 1
        click.echo(f"{m['system']} {asg.assignment_id}: AUC {m['branches']['adaptive']['adaptive_auc_nats']:.4f}")
    click.echo(f"re-scored {n} campaigns")


@sdl.command(name="leaderboard")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--target-ratio", type=float, default=1.05, show_default=True,
              help="Forecast target (× geometric-mean likelihood) for the acceleration factor.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None,
              help="Write the leaderboard JSON here (default RESULTS_DIR/leaderboard.json).")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None,
              help="Also execute notebooks/sdl_leaderboard.ipynb (papermill) and convert it to this HTML file.")
def leaderboard_cmd(results_dir, target_ratio, json_out, html_out) -> None:
    """Leaderboard: equal weight per assignment, per-assignment signs, leave-one-assignment-out stability."""
    from mdbench.sdl.leaderboard import build_leaderboard, load_results

    lb = build_leaderboard(load_results(results_dir), target_ratio)
    out = Path(json_out or Path(results_dir) / "leaderboard.json")
    out.write_text(json.dumps(lb.to_dict(), indent=1), encoding="utf-8")
    click.echo(f"{'rank':>4}  {'system':<16} {'AUC':>8} {'sel.lift':>9} {'signs':<8} {'enh.':>8} {'ev.lift':>8}")
    for r in lb.rows:
        f = lambda x: "n/a" if x is None else f"{x:+.4f}"  # noqa: E731
        click.echo(f"{r.rank:>4}  {r.system:<16} {r.adaptive_auc_nats:8.4f} {f(r.selection_lift_nats):>9} "
                   f"{r.selection_lift_signs:<8} {f(r.enhancement_at_budget_nats):>8} {f(r.evidence_lift_nats):>8}")
    for s, why in lb.excluded.items():
        click.echo(f"excluded {s}: {why}")
    click.echo(f"leave-one-assignment-out rank stability: {lb.loao_rank_stable_fraction}; JSON: {out}")
    if html_out:
        from mdbench.sdl.report import render_leaderboard_html

        path = render_leaderboard_html(results_dir, html_out, target_ratio=target_ratio)
        click.echo(f"HTML report: {path}")


__all__ = ["sdl", "load_record", "load_assignment_dir", "NOTEBOOKS_DIR"]
