"""CLI commands of the ``audit`` room."""

from __future__ import annotations

from pathlib import Path

import click

#: Finding codes that mean an input file of the run could not be read; the CLI names each such file on stderr.
UNREADABLE_INPUT_CODES = frozenset({"unreadable_trajectory", "trajectory_truncated", "unreadable_edr",
                                    "unreadable_tpr"})


@click.command(name="audit")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--bundle", "bundle", type=click.Path(path_type=Path), default=None,
              help="Agent input bundle (case definitions, force field, checksums).")
@click.option("--out", "out", type=click.Path(path_type=Path), required=True,
              help="Audit directory to write saeo.json and findings.md into (outside RUN_DIR).")
@click.option("--no-reanalysis", is_flag=True, help="Skip the canonical reanalysis of production files.")
@click.option("--judge-cmd", default=None, help="External judge command: JSON evidence on stdin, verdicts on stdout.")
@click.option("--judge-llm", "judge_llm", default=None, metavar="URL",
              help="Built-in LLM judge: an OpenAI-compatible endpoint (e.g. https://api.openai.com/v1).")
@click.option("--model", "judge_model", default=None, help="Model of the --judge-llm endpoint.")
@click.option("--judge-key-env", default="OPENAI_API_KEY", show_default=True,
              help="Environment variable holding the --judge-llm API key.")
@click.option("--adjudication", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
              help="Expert adjudication.yaml (append-only entries), applied last.")
@click.option("--verbose/--quiet", default=False, help="Progress bar over cases.")
@click.option("--force", is_flag=True, help="Audit a folder without run_record/ (everything it lacks scores 0).")
def audit(run_dir: Path, bundle: Path | None, out: Path, no_reanalysis: bool, judge_cmd: str | None,
          judge_llm: str | None, judge_model: str | None, judge_key_env: str, adjudication: Path | None,
          verbose: bool, force: bool) -> None:
    """SAEO audit of RUN_DIR: 21 items rated 1/0.5/0 with evidence → OUT/saeo.json, OUT/findings.md."""
    from mdbench.audit.core import audit_run  # noqa: PLC0415

    if judge_llm and not judge_model:
        raise click.UsageError("--judge-llm needs --model (the endpoint's model name)")
    if judge_llm and judge_cmd:
        raise click.UsageError("use one judge: --judge-cmd or --judge-llm")
    from mdbench.cli import check_out  # noqa: PLC0415
    from mdbench.errors import InputError  # noqa: PLC0415

    if not run_dir.is_dir():
        raise InputError("no such run directory; give the folder the study or agent ran in", str(run_dir))
    if not force and not (run_dir / "run_record").is_dir():
        raise InputError("not a run directory: no run_record/ in it; give the folder the study or agent ran in, "
                         "or pass --force to audit it anyway", str(run_dir))
    if bundle is not None and not bundle.is_dir():
        raise InputError("--bundle: no such bundle folder; give the agent input bundle (mdbench bundle build)",
                         str(bundle))
    check_out(out)

    import inspect  # noqa: PLC0415

    extra = {"force": force} if "force" in inspect.signature(audit_run).parameters else {}
    res = audit_run(run_dir, bundle, out, reanalysis=not no_reanalysis, judge_cmd=judge_cmd,
                    adjudication=adjudication, verbose=verbose, judge_llm=judge_llm, judge_model=judge_model,
                    judge_key_env=judge_key_env, **extra)
    click.echo(f"composite {res.composite_final:.1f} (preliminary {res.composite_preliminary:.1f}); "
               f"claimed {res.claimed_outcome}, evidence supports {res.expected_outcome}; "
               f"{len(res.findings)} findings → {out / 'saeo.json'}")
    named: set[str] = set()
    for f in res.findings:  # a production file the audit could not read: one line naming it (issue 38)
        if f.code in UNREADABLE_INPUT_CODES and f.path and f.path not in named:
            named.add(f.path)
            click.echo(f"warning: {run_dir / f.path}: {f.message.split(': ', 1)[0]} ({f.code}, item {f.item}; "
                       f"see {out / 'findings.md'})", err=True)
