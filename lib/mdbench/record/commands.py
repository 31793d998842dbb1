"""CLI commands of the ``record`` room: ``mdbench record validate|budget``."""

from __future__ import annotations

import sys
from pathlib import Path

import click


def _require_record(run_dir: Path) -> None:
    """One line naming the folder when it holds no run record (and never create one)."""
    from mdbench.errors import InputError

    if not run_dir.is_dir():
        raise InputError("no such run directory; give the folder that holds run_record/", str(run_dir))
    if not (run_dir / "run_record").is_dir():
        raise InputError("not a run directory: no run_record/ in it; give the folder a study or agent ran in",
                         str(run_dir))


@click.group()
def record() -> None:
    """Inspect and validate a run record (contract schema version 1.2)."""


@record.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--no-hashes", is_flag=True, help="Skip recomputing artifact sha256 sums.")
def validate(run_dir: Path, no_hashes: bool) -> None:
    """Check every record file against its schema and the cross-references; print file:line: message."""
    from mdbench.record.validate import validate_run

    _require_record(run_dir)
    findings = validate_run(run_dir, check_hashes=not no_hashes)
    for finding in findings:
        click.echo(f"{finding} [{finding.severity}]")
    errors = sum(1 for f in findings if f.severity == "error")
    click.echo(f"{run_dir}: {errors} error(s), {len(findings) - errors} warning(s)", err=True)
    sys.exit(1 if errors else 0)


@record.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def budget(run_dir: Path) -> None:
    """Print ns charged and held per case against the 100 ns/case and 300 ns/study budget."""
    from mdbench.record import CASE_BUDGET_NS, STUDY_BUDGET_NS, RunRecord

    _require_record(run_dir)
    rec = RunRecord(run_dir)
    cases = sorted({a["case"] for a in rec.attempts()})
    for case in cases:
        click.echo(f"{case:6s} charged {rec.charged_ns(case):10.4f} ns  committed {rec.committed_ns(case):10.4f} ns"
                   f"  of {CASE_BUDGET_NS:g} ns")
    click.echo(f"study  charged {rec.charged_ns():10.4f} ns  committed {rec.committed_ns():10.4f} ns"
               f"  of {STUDY_BUDGET_NS:g} ns")
