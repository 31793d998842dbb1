"""CLI commands of the ``sdl`` room: ``mdbench sdl compile | run | score | leaderboard``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from mdbench.errors import InputError
from mdbench.paths import NOTEBOOKS_DIR, PARAMS_DIR

log = logging.getLogger(__name__)

RECORDS = ("vapdiff", "synthetic")


def _verbose() -> bool:
    return logging.getLogger().isEnabledFor(logging.INFO)


def load_record(record: str | None, ledger_path: str | None, pg_path: str | None):
    """The ledger named on the command line (exactly one source)."""
    from mdbench.sdl.ledger import load_ledger_json
    from mdbench.sdl.precursor_genome import load_precursor_genome
    from mdbench.sdl.synthetic import synthetic_record
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
    if record == "synthetic":
        return synthetic_record()
    raise click.UsageError(f"unknown --record {record!r}; shipped: {', '.join(RECORDS)}")


def load_assignment_dir(folder: str | Path):
    """``(ledger, [assignments])`` of a folder written by ``mdbench sdl compile`` (verified)."""
    from mdbench.sdl.bundle import load_compiled

    c = load_compiled(folder)
    return c.ledger, c.assignments


@click.group(name="sdl")
def sdl() -> None:
    """SDL-style campaign replay: compile recorded experiments into budgeted campaigns, run policies, score."""


@sdl.command(name="compile")
@click.option("--record", default="vapdiff", show_default=True,
              help="Shipped record: vapdiff (real, Olympus vapdiff_crystal) or synthetic (generated, not experimental).")
@click.option("--ledger", "ledger_path", type=click.Path(exists=True, dir_okay=False), help="An mdbench ledger JSON.")
@click.option("--precursor-genome", "pg_path", type=click.Path(exists=True),
              help="ledger_precursor_genome.json (or its folder / zip archive).")
@click.option("--params", "params_path", type=click.Path(exists=True, dir_okay=False),
              default=str(PARAMS_DIR / "sdl" / "default.yaml"), show_default="params/sdl/default.yaml (shipped with mdbench)",
              help="Compiler parameters YAML.")
@click.option("--seed", type=int, default=None, help="Override the panel seed.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Folder to write.")
def compile_cmd(record, ledger_path, pg_path, params_path, seed, out_dir) -> None:
    """Compile a record into frozen, sha256-hashed, counterbalanced assignments: agent/ and evaluator/ trees."""
    from mdbench.sdl.bundle import write_compiled
    from mdbench.sdl.compiler import CompileSpec, EvaluatorKeys, compile_assignments
    from mdbench.yamlio import load_yaml

    ledger = load_record(record, ledger_path, pg_path)
    params = load_yaml(params_path) or {}
    if not isinstance(params, dict):
        raise InputError("expected a mapping of compiler parameters", params_path)
    if seed is not None:
        params["seed"] = seed
    spec = CompileSpec.from_dict(params, params_path)
    keys = EvaluatorKeys.generate()
    try:
        asgs = compile_assignments(ledger, spec, keys)
    except InputError as exc:
        if exc.path is not None:
            raise
        raise InputError(f"{exc} (parameters from this file)", params_path) from exc
    out = write_compiled(out_dir, ledger, asgs, keys)
    for a in asgs:
        click.echo(f"{a.assignment_id}  horizon {a.horizon:>2}{' full-length' if a.full_length else '            '}"
                   f"  sha256={a.sha256}")
    n_full = sum(a.full_length for a in asgs)
    click.echo(f"{len(asgs)} assignments ({n_full} full-length) of {ledger.name} ({len(ledger.experiments)} "
               f"experiments, K={ledger.n_outcomes}) written to {out}/agent (coordinator-visible) and "
               f"{out}/evaluator (private)")


@sdl.command(name="run")
@click.option("--assignments", "asg_dir", type=click.Path(exists=True, file_okay=False), required=True,
              help="Folder written by `mdbench sdl compile`.")
@click.option("--policy", default=None, help="Built-in policy: uniform, class_prior, kernel, knn, random.")
@click.option("--policy-cmd", default=None,
              help="External policy command (JSON-lines protocol); runs as a confined process.")
@click.option("--policy-llm", "llm_url", default=None,
              help="OpenAI-compatible endpoint (base URL, e.g. https://host/v1) of an LLM coordinator.")
@click.option("--model", default=None, help="Model name for --policy-llm.")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
              help="Environment variable holding the endpoint's API key (--policy-llm).")
@click.option("--price-in", type=float, default=None, help="Price of prompt tokens [currency per 1M tokens].")
@click.option("--price-out", type=float, default=None, help="Price of completion tokens [currency per 1M tokens].")
@click.option("--system", default=None, help="Name of the system in the results (default: policy name).")
@click.option("--panel", type=click.Choice(["full", "all"]), default="full", show_default=True,
              help="full: the full-length counterbalanced panel; all: every compiled assignment.")
@click.option("--only", multiple=True, help="Run only these assignment ids (repeatable).")
@click.option("--seed", type=int, default=0, show_default=True, help="Policy / random-control seed.")
@click.option("--controls/--no-controls", default=True, show_default=True,
              help="Also run the schedule-matched random and call-matched no-evidence controls.")
@click.option("--timeout-s", type=float, default=120.0, show_default=True,
              help="Seconds to wait for each reply of an external policy or endpoint [s].")
@click.option("--expose", multiple=True, type=click.Path(exists=True),
              help="Extra path the confined policy may read (repeatable).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Results folder.")
def run_cmd(asg_dir, policy, policy_cmd, llm_url, model, api_key_env, price_in, price_out, system, panel, only,
            seed, controls, timeout_s, expose, out_dir) -> None:
    """Run one system over the frozen assignments (adaptive branch and controls); write signed traces."""
    from mdbench.sdl.bundle import load_compiled
    from mdbench.sdl.compiler import select_panel
    from mdbench.sdl.confine import CoordinatorSandbox
    from mdbench.sdl.external import ExternalPolicy
    from mdbench.sdl.policies import POLICIES, make_policy
    from mdbench.sdl.runner import run_system

    if sum(bool(x) for x in (policy, policy_cmd, llm_url)) != 1:
        raise click.UsageError("give exactly one of --policy NAME, --policy-cmd CMD or --policy-llm URL")
    compiled = load_compiled(asg_dir)
    asgs = select_panel(compiled.assignments, panel)
    if only:
        unknown = set(only) - {a.assignment_id for a in compiled.assignments}
        if unknown:
            raise click.UsageError(f"unknown assignment ids {sorted(unknown)}")
        asgs = [a for a in compiled.assignments if a.assignment_id in only]
    if policy:
        if policy not in POLICIES:
            raise click.UsageError(f"unknown policy {policy!r}; built-ins: {sorted(POLICIES)}")
        factory = lambda: make_policy(policy, seed)  # noqa: E731
        name, spec = system or policy, {"builtin": policy}
    elif policy_cmd:
        box = CoordinatorSandbox(agent_dir=compiled.agent_dir, hide=(compiled.evaluator_dir, Path(out_dir).resolve()),
                                 expose=tuple(Path(p).resolve() for p in expose))
        factory = lambda: ExternalPolicy(policy_cmd, timeout_s=timeout_s, sandbox=box)  # noqa: E731
        name, spec = system or "external", {"cmd": policy_cmd}
    else:
        from mdbench.llm.client import ChatClient, Prices
        from mdbench.sdl.llm_policy import LLMPolicy

        if not model:
            raise click.UsageError("--policy-llm needs --model")
        prices = Prices(price_in, price_out) if price_in is not None and price_out is not None else None
        client = ChatClient(llm_url, model, api_key_env=api_key_env, timeout_s=timeout_s, prices=prices,
                            transcript=Path(out_dir) / "transcripts" / f"{system or model}.jsonl")
        factory = lambda: LLMPolicy(client)  # noqa: E731
        name, spec = system or model, {"llm_endpoint": llm_url, "model": model}
    results = run_system(compiled, asgs, factory, name, out_dir, seed=seed, controls=controls, verbose=_verbose(),
                         policy_spec=spec)
    for m in results:
        b = m["branches"]["adaptive"]
        state = "" if m["finished"] else f"  DID NOT FINISH: {m['dnf_reasons'][0]}"
        click.echo(f"{m['assignment_id']}: loss pre {b['loss_pre_nats']:.4f} → at budget "
                   f"{b['loss_at_budget_nats']:.4f} nats; AUC {b['adaptive_auc_nats']:.4f}; "
                   f"selection lift {m.get('selection_lift_nats', float('nan')):+.4f}; "
                   f"evidence lift {m.get('evidence_lift_nats', float('nan')):+.4f}{state}")


@sdl.command(name="score")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--assignments", "asg_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="The compile folder (default: the one recorded in each system's run.json).")
def score_cmd(results_dir, asg_dir) -> None:
    """Verify every trace (hash chain, signed head, copies = log) and recompute metrics.json from the logs.

    A trace that does not match its chain is refused with the first bad row named.
    """
    from mdbench.sdl.leaderboard import score_results

    runs = score_results(results_dir, asg_dir)
    bad = [r for r in runs if r.refused]
    if bad:
        raise InputError(f"refused {bad[0].system}: {bad[0].refused}", bad[0].path)
    n = 0
    for r in runs:
        for aid, m in r.metrics.items():
            m["system"] = r.system
            (Path(r.path) / aid / "metrics.json").write_text(json.dumps(m, indent=1), encoding="utf-8")
            n += 1
            click.echo(f"{r.system} {aid}: AUC {m['branches']['adaptive']['adaptive_auc_nats']:.4f}"
                       f"{'' if m['finished'] else '  (did not finish)'}")
    click.echo(f"re-scored {n} campaigns from verified traces")


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.4f}"


@sdl.command(name="leaderboard")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--assignments", "asg_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="The compile folder (default: the one recorded in each system's run.json).")
@click.option("--target-ratio", type=float, default=1.05, show_default=True,
              help="Forecast target (× geometric-mean likelihood) for the acceleration factor.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None,
              help="Write the leaderboard JSON here (default RESULTS_DIR/leaderboard.json).")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None,
              help="Also execute notebooks/sdl_leaderboard.ipynb (papermill) and convert it to this HTML file.")
@click.option("--kernel", "kernel_name", default="mdbench", show_default=True,
              help="Jupyter kernel that executes the leaderboard notebook (--html).")
def leaderboard_cmd(results_dir, asg_dir, target_ratio, json_out, html_out, kernel_name) -> None:
    """Leaderboards from verified traces: one table per identical assignment set; DNF and unranked listed."""
    from mdbench.sdl.leaderboard import build_leaderboards, score_results

    if html_out:
        from mdbench.execute.stage import check_kernel

        check_kernel(kernel_name)
    lbs = build_leaderboards(score_results(results_dir, asg_dir), target_ratio)
    out = Path(json_out or Path(results_dir) / "leaderboard.json")
    out.write_text(json.dumps(lbs.to_dict(), indent=1), encoding="utf-8")
    for n, t in enumerate(lbs.tables, start=1):
        click.echo(f"table {n}: {len(t.assignments)} assignments (horizons {t.horizons}), assignment set "
                   f"sha256 {t.assignment_set_sha256[:16]}…")
        click.echo(f"{'rank':>4}  {'system':<16} {'AUC':>8} {'sel.lift':>9} {'signs':<8} {'enh.':>8} {'ev.lift':>8}")
        for r in t.rows:
            click.echo(f"{r.rank:>4}  {r.system:<16} {r.adaptive_auc_nats:8.4f} {_fmt(r.selection_lift_nats):>9} "
                       f"{r.selection_lift_signs:<8} {_fmt(r.enhancement_at_budget_nats):>8} "
                       f"{_fmt(r.evidence_lift_nats):>8}")
        for s, why in t.did_not_finish.items():
            click.echo(f" DNF  {s:<16} {why}")
        for s, why in t.not_ranked.items():
            click.echo(f"  --  {s:<16} not ranked: {why}")
        click.echo(f"leave-one-assignment-out rank stability: {t.loao_rank_stable_fraction}")
    for s, why in lbs.refused.items():
        click.echo(f"refused {s}: {why}")
    click.echo(f"JSON: {out}")
    if html_out:
        from mdbench.sdl.report import render_leaderboard_html

        path = render_leaderboard_html(results_dir, html_out, target_ratio=target_ratio, kernel_name=kernel_name,
                                       assignments_dir=asg_dir)
        click.echo(f"HTML report: {path}")


__all__ = ["sdl", "load_record", "load_assignment_dir", "NOTEBOOKS_DIR"]
