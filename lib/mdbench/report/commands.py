"""CLI commands of the ``report`` room."""

from __future__ import annotations

from pathlib import Path

import click

from mdbench.cli import check_out


@click.command(name="report")
@click.argument("audit_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out", type=click.Path(path_type=Path), required=True, help="HTML file to write.")
@click.option("--per-run", is_flag=True, help="Render notebooks/audit_run.ipynb for a single audit.")
@click.option("--title", default="SAEO audit report", help="Page title.")
@click.option("--keep-notebook", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also keep the executed notebook at this path (default: only the HTML page is written).")
def report(audit_dirs: tuple[Path, ...], out: Path, per_run: bool, title: str, keep_notebook: Path | None) -> None:
    """Render AUDIT_DIR... (each holding saeo.json) into ONE self-contained HTML page."""
    from mdbench.report.render import render_report  # noqa: PLC0415 - `mdbench report --help` without loading the renderer

    check_out(out, is_file=True)
    if keep_notebook is not None:
        check_out(keep_notebook, option="--keep-notebook", is_file=True)
    path = render_report(list(audit_dirs), out, notebook="audit_run" if per_run else "aggregate", title=title,
                         keep_notebook=keep_notebook)
    click.echo(f"report → {path}")
