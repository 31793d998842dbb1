"""CLI commands of the ``inputs`` room: ``mdbench bundle build | verify`` (``validate-ff`` is added by
:mod:`mdbench.validation.commands`, the room above build, engine and analysis that runs the validation study)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mdbench.choices import preset_names


@click.group(name="bundle")
def bundle() -> None:
    """Build, verify and validate the agent input bundle."""


@bundle.command(name="build")
@click.option("--preset", "-p", default="tiny", show_default=True, help=" | ".join(preset_names()))
@click.option("--out", "-o", "out_dir", required=True, type=click.Path(path_type=Path), help="New bundle folder.")
@click.option("--overwrite", is_flag=True, help="Replace a non-empty folder.")
def build_cmd(preset: str, out_dir: Path, overwrite: bool) -> None:
    """Write the input bundle for PRESET into OUT (byte-identical for identical inputs)."""
    from mdbench.cli import check_out
    from mdbench.execute.parameters import check_preset
    from mdbench.inputs.bundle import build_bundle, frozen_forcefield_checksum

    check_preset(preset)
    check_out(out_dir)
    path = build_bundle(preset, out_dir, overwrite=overwrite)
    n = sum(1 for p in path.rglob("*") if p.is_file())
    click.echo(f"bundle ({preset}) written to {path}: {n} files; force field sha256 {frozen_forcefield_checksum()}")


@bundle.command(name="verify")
@click.argument("bundle_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
def verify_cmd(bundle_dir: Path) -> None:
    """Check BUNDLE_DIR against its bundle_checksums.sha256; exit 1 naming every changed/missing/extra file."""
    from mdbench.inputs.bundle import verify_bundle

    findings = verify_bundle(bundle_dir)
    for f in findings:
        click.echo(f, err=True)
    if findings:
        click.echo(f"bundle verification FAILED: {len(findings)} finding(s)", err=True)
        sys.exit(1)
    click.echo(f"{bundle_dir}: all files match bundle_checksums.sha256")
