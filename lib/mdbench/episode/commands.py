"""CLI commands of the ``episode`` room: ``mdbench episode prepare | run | aggregate | harbor-task``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from mdbench.choices import preset_names
from mdbench.untrusted import shown


@click.group(name="episode")
def episode() -> None:
    """Agent episodes: prepare the frozen workspace, run an agent confined, audit, aggregate."""


@episode.command("prepare")
@click.option("--preset", default="micro", show_default=True, help=" | ".join(preset_names()))
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="New episode folder EP.")
@click.option("--bundle", "bundle_dir", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="Use this bundle (verified) instead of building it from the preset.")
@click.option("--config", "config", multiple=True, help="KEY=VALUE labels: harness=NAME model=NAME repeat=K.")
@click.option("--timeout", "timeout_min", type=float, default=None,
              help="Default wall-clock limit of the run [min] (default per preset).")
@click.argument("pairs", nargs=-1)
def prepare_cmd(preset: str, out: Path, bundle_dir: Path | None, config: tuple[str, ...], timeout_min: float | None,
                pairs: tuple[str, ...]) -> None:
    """Write EP/: workspace/agent_input/ (read-only bundle), workspace/PROMPT.md, episode.json."""
    from mdbench.episode.workspace import Limits, default_timeout_min, parse_config, prepare_episode  # noqa: PLC0415

    cfg = parse_config([*config, *pairs])
    limits = Limits(timeout_min=timeout_min or default_timeout_min(preset))
    ep = prepare_episode(preset, out, cfg, limits=limits, bundle_dir=bundle_dir)
    click.echo(f"episode {ep.episode_id} prepared in {ep.root}: bundle sha256 {ep.bundle_sha256[:16]}…, "
               f"timeout {ep.limits.timeout_min:g} min, {ep.limits.md_budget_ns_per_case:g} ns/case budget")


@episode.command("run")
@click.argument("ep", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--agent", default=None,
              help="Agent command line, or oracle | oracle:earned (production until earned) | null | buggy:<kind> "
                   "(tplus_convention, float32_volume, "
                   "clean_claim). Not needed with --harness.")
@click.option("--harness", default=None, help="Launch a coding-agent harness by name (docs/harnesses.md).")
@click.option("--model", default=None, help="Model the harness uses.")
@click.option("--endpoint", default=None, help="OpenAI-compatible endpoint URL the runner meters for the harness.")
@click.option("--reasoning", default=None, help="Reasoning effort passed to the harness.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=None,
              help="Harness: token cap of the episode (in + out, metered by the proxy) "
                   "[default $MDBENCH_LLM_MAX_TOKENS or 200000000].")
@click.option("--max-usd", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Harness: USD cap of the episode [default $MDBENCH_LLM_MAX_USD or 200].")
@click.option("--endpoint-api", type=click.Choice(["native", "chat"]), default=None,
              help="Harness: chat when the endpoint serves Chat Completions only (the proxy translates Codex's "
                   "Responses calls) [default $MDBENCH_LLM_ENDPOINT_API or native].")
@click.option("--timeout", "timeout_min", type=float, default=None, help="Wall-clock limit [min] (default: episode's).")
@click.option("--grace", "grace_s", type=float, default=None, help="SIGTERM → SIGKILL grace period [s].")
@click.option("--threads", type=int, default=None, help="CPU threads (cores) for the agent; default min(16, cores).")
@click.option("--cpus", default=None, help="Exact cores for the agent, e.g. 0-7 or 8,9,10 (concurrent episodes).")
@click.option("--user", default=None, help="Account the agent runs as when the runner is root (default "
              "mdbench-episode-agent; give concurrent episodes different ones).")
@click.option("--gpus", default="", help="GPU ids visible to the agent (CUDA_VISIBLE_DEVICES), e.g. 0.")
@click.option("--memory-mib", type=int, default=None,
              help="Memory limit of the agent's whole tree [MiB] (default min(32768, 3/4 of RAM); 0: none).")
@click.option("--pids-max", type=int, default=4096, show_default=True, help="Most processes at once (0: no limit).")
@click.option("--tmp-size-mib", type=int, default=2048, show_default=True, help="Size of the agent's private /tmp.")
@click.option("--workspace-quota-gib", type=float, default=32.0, show_default=True,
              help="Hard disk quota of the agent's workspace [GiB] (a sparse loop-mounted image as root; 0: none).")
@click.option("--env", "env", multiple=True, help="Pass KEY=VALUE (or KEY from this shell) to the agent.")
@click.option("--expose", multiple=True, type=click.Path(path_type=Path, exists=True),
              help="Extra path the agent may read (read-only), e.g. the agent's own code.")
@click.option("--hide", multiple=True, type=click.Path(path_type=Path), help="Extra path hidden from the agent.")
@click.option("--network", "network", is_flag=False, flag_value="host", default=None,
              type=click.Choice(["none", "model-only", "host"]),
              help="none (loopback only), model-only (the harness's metered model port; the default with "
                   "--endpoint) or host; --network alone means host.")
@click.option("--as-caller", is_flag=True,
              help="Debugging your own agent: run as the calling user, agent_input/ not mounted read-only "
                   "(changes are still detected afterwards).")
@click.option("--allow-unconfined", is_flag=True, help="Run even where the OS cannot confine the agent (recorded).")
@click.option("--force", is_flag=True, help="Run a finished episode again (earlier files and the workspace move to "
              "previous/<n>/; a fresh workspace is prepared from the pristine bundle).")
@click.option("--no-reanalysis", is_flag=True, help="Audit without the canonical reanalysis.")
@click.option("--adjudication", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
              help="Expert adjudication.yaml applied by the audit.")
@click.option("--progress", "progress_s", type=float, default=None,
              help="Print elapsed time and ns charged every so many seconds (default 60 on a terminal).")
def run_cmd(ep: Path, agent: str | None, harness: str | None, model: str | None, endpoint: str | None,
            reasoning: str | None, timeout_min: float | None, grace_s: float | None, threads: int | None, gpus: str,
            memory_mib: int | None, pids_max: int, tmp_size_mib: int, workspace_quota_gib: float,
            env: tuple[str, ...], expose: tuple[Path, ...], hide: tuple[Path, ...], network: str | None,
            as_caller: bool, allow_unconfined: bool, force: bool, no_reanalysis: bool, adjudication: Path | None,
            progress_s: float | None, cpus: str | None, user: str | None, max_tokens: int | None,
            max_usd: float | None, endpoint_api: str | None) -> None:
    """Run AGENT (or a --harness) in EP/workspace under the episode's limits, audit it, write EP/result.json."""
    from mdbench.episode.runner import AGENT_USER, RunOptions, parse_cpus, parse_env, run_episode  # noqa: PLC0415

    if not harness and (max_tokens is not None or max_usd is not None or endpoint_api is not None):
        raise click.UsageError("--max-tokens, --max-usd and --endpoint-api apply to --harness runs only (an --agent "
                               "command is not metered by mdbench's proxy)")

    opts = RunOptions(timeout_min=timeout_min, grace_s=grace_s, threads=threads, gpus=gpus, env=parse_env(env),
                      expose=tuple(p.resolve() for p in expose), hide=tuple(p.resolve() for p in hide),
                      network=network, as_caller=as_caller, allow_unconfined=allow_unconfined, force=force,
                      reanalysis=not no_reanalysis, adjudication=adjudication,
                      progress_s=progress_s if progress_s is not None else (60.0 if sys.stderr.isatty() else None),
                      cpus=parse_cpus(cpus) if cpus else None, user=user or AGENT_USER, memory_mib=memory_mib,
                      pids_max=pids_max, tmp_size_mib=tmp_size_mib,
                      workspace_quota_mib=int(round(workspace_quota_gib * 1024)), harness=harness, model=model,
                      endpoint=endpoint, reasoning=reasoning, max_tokens=max_tokens, max_usd=max_usd,
                      endpoint_api=endpoint_api)
    res = run_episode(ep, agent, opts)
    click.echo(summary_line(res) + f" → {ep / 'result.json'}")
    # every name below may come from the agent's files: printed escaped, one line each (a newline stays \\n)
    for f in (res.get("input_integrity") or {}).get("findings", [])[:10]:
        click.echo(f"  input integrity: {shown(f)}", err=True)
    for f in (res.get("cost") or {}).get("findings", [])[:10]:
        click.echo(f"  agent file: {shown(f['code'])} {shown(f['path'] or '')}: {shown(f['detail'])}", err=True)
    if res.get("work_not_done_here"):
        click.echo(f"  work_not_done_here: {shown(res['work'].get('reason'), max_chars=600)}", err=True)
    if res.get("reason") and res["status"] != "completed":
        click.echo(f"  {res['status']}: {shown(res['reason'], max_chars=600)}", err=True)
    if res.get("runner_error"):
        click.echo(f"  runner error (result written): {shown(res['runner_error'], max_chars=600)}", err=True)
    if "error" in (res.get("audit") or {}):
        click.echo(f"  audit: {shown(res['audit']['error'], max_chars=600)}", err=True)
    if res["status"] == "interrupted":
        raise SystemExit(130)


def summary_line(res: dict) -> str:
    """One line per episode result: status, time, ns, score, integrity."""
    score = res.get("score")
    ns = res.get("ns_charged")
    wall = res.get("wall_s")
    intact = res.get("agent_input_intact")
    return (f"{res['episode_id']}: {res['status']} (exit {res.get('exit_code')}) in "
            f"{'n/a' if wall is None else f'{wall:.1f}'} s, "
            f"CPU {res['cpu_s'] if res.get('cpu_s') is not None else 'n/a'} s, "
            f"{'n/a' if ns is None else f'{ns:.4f}'} ns charged (self-reported), score "
            f"{'n/a' if score is None else f'{score:.1f}'}; agent_input "
            f"{'not checked' if intact is None else 'intact' if intact else 'CHANGED'}; "
            f"{res.get('stragglers_killed') or 0} straggler(s) killed")


@episode.command("show")
@click.argument("ep", type=click.Path(path_type=Path, file_okay=False, exists=True))
def show_cmd(ep: Path) -> None:
    """Print EP/result.json (or that the episode has not run)."""
    path = ep / "result.json"
    if not path.is_file():
        click.echo(f"{ep}: prepared, not run yet")
        return
    click.echo(json.dumps(json.loads(path.read_text()), indent=1))


@episode.command("aggregate")
@click.argument("episodes", nargs=-1, required=True, type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--out", "out", required=True, type=click.Path(path_type=Path, dir_okay=False), help="report.html")
@click.option("--title", default="ElectrolyteMD-Bench episodes", show_default=True)
@click.option("--keep-notebook", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also keep the executed notebook at this path (default: only the HTML page is written).")
def aggregate_cmd(episodes: tuple[Path, ...], out: Path, title: str, keep_notebook: Path | None) -> None:
    """One self-contained HTML page over EPISODES: Figs. 2, 3, S1–S4, 5 and the cost table."""
    from mdbench.cli import check_out  # noqa: PLC0415
    from mdbench.episode.aggregate import render_report  # noqa: PLC0415

    check_out(out, is_file=True)
    if keep_notebook is not None:
        check_out(keep_notebook, option="--keep-notebook", is_file=True)
    path = render_report(list(episodes), out, title=title, keep_notebook=keep_notebook)
    click.echo(f"report of {len(episodes)} episode(s) written to {path}")


@episode.command("harbor-task")
@click.option("--preset", default="micro", show_default=True)
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="New task folder.")
@click.option("--timeout", "timeout_min", type=float, default=None, help="Agent timeout [min] (default per preset).")
@click.option("--cpus", type=int, default=16, show_default=True, help="CPUs of the task environment (seed: 16).")
@click.option("--memory-mb", type=int, default=32768, show_default=True)
@click.option("--gpus", type=int, default=0, show_default=True, help="GPUs of the task environment (seed: 1).")
@click.option("--base-image", default=None,
              help="FROM of the agent's and the verifier's images (default: python:3.11.13-slim-bookworm pinned to "
                   "its digest); mdbench-arena-base:0.2 writes the variant for the mdbench host plug-in.")
@click.option("--oracle-wheels", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="Wheels of mdbench and its dependencies for Harbor's oracle under Docker (pip wheel -w DIR .).")
def harbor_task_cmd(preset: str, out: Path, timeout_min: float | None, cpus: int, memory_mb: int, gpus: int,
                    base_image: str | None, oracle_wheels: Path | None) -> None:
    """Write the episode as a Harbor task (task.toml, instruction.md, environment/, tests/, solution/)."""
    from mdbench.episode.harbor import DEFAULT_BASE_IMAGE, write_harbor_task  # noqa: PLC0415

    path = write_harbor_task(preset, out, timeout_min=timeout_min, cpus=cpus, memory_mb=memory_mb, gpus=gpus,
                             base_image=base_image or DEFAULT_BASE_IMAGE, oracle_wheels=oracle_wheels)
    click.echo(f"Harbor task written to {path}; run it with: harbor run -p {path} -a <agent> -m <model>")
