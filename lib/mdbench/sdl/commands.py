"""CLI commands of the ``sdl`` room: ``mdbench sdl compile | run | score | leaderboard``."""

from __future__ import annotations

import json
import logging
import shlex
import signal
import sys
from pathlib import Path

import click

from mdbench.errors import InputError
from mdbench.paths import NOTEBOOKS_DIR, PARAMS_DIR
from mdbench.untrusted import write_new

log = logging.getLogger(__name__)

RECORDS = ("vapdiff", "synthetic")


def _exit_on_sigterm(signum, frame) -> None:
    """SIGTERM ends the run like Ctrl-C: every open session is closed on the way out (``finally`` blocks)."""
    sys.exit(128 + signum)


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
              help="External policy command (JSON-lines protocol); runs as a confined process that sees only the "
                   "runtime, its assignment's view and --policy-dir.")
@click.option("--policy-dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="The policy's own folder (program, weights), read-only inside the sandbox; files named in "
                   "--policy-cmd must lie in it (nothing else they name is mounted).")
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
              help="Seconds to wait for each reply of an external policy or endpoint, counted from the request "
                   "(sandbox start-up excluded) [s].")
@click.option("--startup-timeout-s", type=float, default=60.0, show_default=True,
              help="Seconds for an external policy's sandbox start-up and its hello reply [s].")
@click.option("--campaign-budget-s", type=click.FloatRange(min=0.0), default=7200.0, show_default=True,
              help="Wall-clock budget per campaign, all branches and evaluator calls together [s] (recorded in "
                   "every trace; a campaign over it does not finish).")
@click.option("--random-draws", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Seeded schedule-matched random-control draws per assignment.")
@click.option("--memory-mib", type=click.IntRange(64, None), default=4096, show_default=True,
              help="Memory limit of each external coordinator session [MiB].")
@click.option("--pids-max", type=click.IntRange(8, None), default=256, show_default=True,
              help="Process/thread limit of each external coordinator session.")
@click.option("--expose", multiple=True, type=click.Path(exists=True),
              help="Extra path the confined policy may read (repeatable).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Results folder.")
def run_cmd(asg_dir, policy, policy_cmd, policy_dir, llm_url, model, api_key_env, price_in, price_out, system, panel, only,
            seed, controls, timeout_s, startup_timeout_s, campaign_budget_s, random_draws, memory_mib, pids_max,
            expose, out_dir) -> None:
    """Run one system over the frozen assignments (adaptive branch and controls); write signed traces."""
    from mdbench.sdl.bundle import load_compiled
    from mdbench.sdl.compiler import select_panel
    from mdbench.sdl.campaign import one_line
    from mdbench.sdl.confine import CoordinatorSandbox, SessionLimits, run_folder
    from mdbench.sdl.external import external_factory_for
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
    factory_for, limits = None, None
    if policy:
        if policy not in POLICIES:
            raise click.UsageError(f"unknown policy {policy!r}; built-ins: {sorted(POLICIES)}")
        factory = lambda: make_policy(policy, seed)  # noqa: E731
        name, spec = system or policy, {"builtin": policy}
    elif policy_cmd:
        limits = SessionLimits(memory_mib=memory_mib, pids_max=pids_max)
        box = CoordinatorSandbox(agent_dir=compiled.agent_dir, hide=(compiled.evaluator_dir, Path(out_dir).resolve()),
                                 policy_dir=Path(policy_dir).resolve() if policy_dir else None,
                                 expose=tuple(Path(p).resolve() for p in expose), limits=limits)
        box.granted()   # a granted folder that reveals an evaluator folder: one line, before anything runs
        outside = box.not_granted(shlex.split(policy_cmd))
        if outside:
            raise click.UsageError(f"--policy-cmd names {outside[0]!r}, which is not inside --policy-dir (or "
                                   "--expose): nothing the command line names is mounted in the sandbox; put the "
                                   "policy's files in its own folder and give it with --policy-dir")
        factory_for = external_factory_for(policy_cmd, box, timeout_s=timeout_s, startup_timeout_s=startup_timeout_s)
        factory = factory_for(asgs[0]) if asgs else None
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
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)   # a killed run ends its sessions, leaves no folder
    try:
        with run_folder():
            results = run_system(compiled, asgs, factory, name, out_dir, seed=seed, controls=controls,
                                 verbose=_verbose(), policy_spec=spec, random_draws=random_draws,
                                 wall_budget_s=campaign_budget_s, factory_for=factory_for,
                                 session_limits=limits.to_dict() if limits else None)
    finally:
        signal.signal(signal.SIGTERM, previous)
    for m in results:
        b = m["branches"]["adaptive"]
        state = "" if m["finished"] else f"  DID NOT FINISH: {one_line(m['dnf_reasons'][0], 200)}"
        click.echo(f"{m['assignment_id']}: loss pre {b['loss_pre_nats']:.4f} → at budget "
                   f"{b['loss_at_budget_nats']:.4f} nats; AUC {b['adaptive_auc_nats']:.4f}; "
                   f"selection lift {m.get('selection_lift_nats', float('nan')):+.4f}; "
                   f"evidence lift {m.get('evidence_lift_nats', float('nan')):+.4f}{state}")


def _compile_options(f):
    """``--assignments`` (repeatable) and ``--compile-sha256``: the compile a results folder is scored against."""
    f = click.option("--compile-sha256", "key_shas", multiple=True,
                     help="Instead of --assignments: the evaluator key sha256 of the compile (evaluator_key_sha256 "
                          "in run.manifest.json); the compile folder recorded in run.json is used only if it "
                          "matches.")(f)
    return click.option("--assignments", "asg_dirs", type=click.Path(exists=True, file_okay=False), multiple=True,
                        help="The compile folder the results were run against (repeatable); a system of any other "
                             "compile is refused.")(f)


@sdl.command(name="score")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@_compile_options
def score_cmd(results_dir, asg_dirs, key_shas) -> None:
    """Verify every trace (hash chain, signed head, copies = log) and recompute metrics.json from the logs.

    A trace that does not match its chain is refused with the first bad row named.
    """
    from mdbench.sdl.leaderboard import score_results

    runs = score_results(results_dir, _compiles(asg_dirs, key_shas), compile_sha256=key_shas)
    bad = [r for r in runs if r.refused]
    if bad:
        raise InputError(f"refused {bad[0].system}: {bad[0].refused}", bad[0].path)
    n = 0
    for r in runs:
        for aid, m in r.metrics.items():
            m["system"] = r.system
            write_new(Path(r.path) / aid / "metrics.json", json.dumps(m, indent=1))   # never through a planted link
            n += 1
            click.echo(f"{r.system} {aid}: AUC {m['branches']['adaptive']['adaptive_auc_nats']:.4f}"
                       f"{'' if m['finished'] else '  (did not finish)'}")
    click.echo(f"re-scored {n} campaigns from verified traces")


def _compiles(asg_dirs: tuple[str, ...], key_shas: tuple[str, ...]) -> tuple[str, ...]:
    """The compile folders named on the command line; at least one compile must be named."""
    if not asg_dirs and not key_shas:
        raise click.UsageError("name the compile the results were run against: --assignments DIR (or "
                               "--compile-sha256 HEX); a results folder is never scored against the compile it names "
                               "itself")
    return asg_dirs


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.4f}"


@sdl.command(name="leaderboard")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@_compile_options
@click.option("--target-ratio", type=float, default=1.05, show_default=True,
              help="Forecast target (× geometric-mean likelihood) for the acceleration factor.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None,
              help="Write the leaderboard JSON here (default RESULTS_DIR/leaderboard.json).")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None,
              help="Also execute notebooks/sdl_leaderboard.ipynb (papermill) and convert it to this HTML file.")
@click.option("--kernel", "kernel_name", default="mdbench", show_default=True,
              help="Jupyter kernel that executes the leaderboard notebook (--html).")
def leaderboard_cmd(results_dir, asg_dirs, key_shas, target_ratio, json_out, html_out, kernel_name) -> None:
    """Leaderboards from verified traces: one table per identical assignment set; DNF and unranked listed."""
    from mdbench.sdl.leaderboard import build_leaderboards, score_results

    if html_out:
        from mdbench.execute.stage import check_kernel

        check_kernel(kernel_name)
    lbs = build_leaderboards(score_results(results_dir, _compiles(asg_dirs, key_shas), compile_sha256=key_shas),
                             target_ratio)
    out = Path(json_out or Path(results_dir) / "leaderboard.json")
    write_new(out, json.dumps(lbs.to_dict(), indent=1))
    for n, t in enumerate(lbs.tables, start=1):
        budgets = "; ".join(", ".join(f"{k} {v}" for k, v in b.items()) for b in t.budgets)
        click.echo(f"table {n}: {len(t.assignments)} assignments, horizon {t.horizons}, budgets {budgets}, "
                   f"random-control draws {t.random_draws}; assignment set sha256 {t.assignment_set_sha256[:16]}…")
        click.echo(f"{'rank':>4}  {'system':<16} {'AUC':>8}  | diagnostics: {'sel.lift':>9} {'signs':<8} "
                   f"{'ref.lift':>8} {'enh.':>8} {'ev.lift':>8}")
        for r in t.rows:
            click.echo(f"{r.rank:>4}  {r.system:<16} {r.adaptive_auc_nats:8.4f}  |              "
                       f"{_fmt(r.selection_lift_nats):>9} {r.selection_lift_signs:<8} "
                       f"{_fmt(r.reference_selection_lift_nats):>8} {_fmt(r.enhancement_at_budget_nats):>8} "
                       f"{_fmt(r.evidence_lift_nats):>8}")
        for r in t.rows:
            if r.control_flags:
                click.echo(f"  !!  {r.system:<16} control sabotage suspected on {len(r.control_flags)} of "
                           f"{r.n_assignments} assignments ({', '.join(r.control_flags)}): its selection or "
                           "evidence lift is not trustworthy")
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
                                       assignments_dirs=asg_dirs, compile_sha256=key_shas)
        click.echo(f"HTML report: {path}")


__all__ = ["sdl", "load_record", "load_assignment_dir", "NOTEBOOKS_DIR"]
