"""CLI commands of the ``inputs`` room: ``mdbench bundle build | verify | validate-ff``."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import click


@click.group(name="bundle")
def bundle() -> None:
    """Build, verify and validate the agent input bundle."""


@bundle.command(name="build")
@click.option("--preset", "-p", default="paper", show_default=True, help="micro | tiny | small | paper")
@click.option("--out", "-o", "out_dir", required=True, type=click.Path(path_type=Path), help="New bundle folder.")
@click.option("--overwrite", is_flag=True, help="Replace a non-empty folder.")
def build_cmd(preset: str, out_dir: Path, overwrite: bool) -> None:
    """Write the input bundle for PRESET into OUT (byte-identical for identical inputs)."""
    from mdbench.inputs.bundle import build_bundle, frozen_forcefield_checksum

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


@bundle.command(name="validate-ff")
@click.option("--out", "-o", "out_dir", required=True, type=click.Path(path_type=Path), help="Work folder.")
@click.option("--molecules", default=150, show_default=True, help="Molecules per pure-liquid box.")
@click.option("--nvt-ps", default=20.0, show_default=True, help="NVT length [ps].")
@click.option("--npt-ps", default=200.0, show_default=True, help="NPT length [ps]; density averaged over its 2nd half.")
@click.option("--threads", "-nt", default=2, show_default=True, help="gmx mdrun -nt.")
@click.option("--seed", default=2026, show_default=True, help="packmol and velocity seed.")
@click.option("--cutoff-nm", default=1.0, show_default=True, help="Coulomb and LJ cut-off [nm].")
@click.option("--species", "species", multiple=True, type=click.Choice(["DMC", "TTE"]), default=("DMC", "TTE"),
              show_default=True, help="Liquids to run (repeat the option).")
def validate_ff_cmd(out_dir: Path, molecules: int, nvt_ps: float, npt_ps: float, threads: int, seed: int,
                    cutoff_nm: float, species: tuple[str, ...]) -> None:
    """Pure DMC and TTE densities at 298.15 K / 1 bar against 1.065 (+-3 %) and 1.54 (+-5 %) g/cm^3."""
    from mdbench.inputs.validate_ff import validate_forcefield

    res = validate_forcefield(out_dir, species=species, n_molecules=molecules, nvt_ps=nvt_ps, npt_ps=npt_ps,
                              threads=threads, seed=seed, cutoff_nm=cutoff_nm)
    click.echo(json.dumps([asdict(r) for r in res], indent=1))
    if not all(r.passed for r in res):
        sys.exit(1)
