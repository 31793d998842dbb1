"""CLI commands of the ``inputs`` room: ``mdbench bundle build | verify | validate-ff``."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
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


@bundle.command(name="validate-ff")
@click.option("--out", "-o", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Work folder (one <level>/<SPECIES>/ folder per run; reruns skip finished segments).")
@click.option("--level", default="frozen", show_default=True,
              help="Charge set: 'frozen' or a candidate level in data/charge_candidates (e.g. B3LYP/def2-TZVP).")
@click.option("--species", "species", multiple=True, type=click.Choice(["DMC", "TTE"]), default=("DMC", "TTE"),
              show_default=True, help="Liquids to run (repeat the option).")
@click.option("--molecules", type=click.IntRange(min=2), default=None,
              help="Molecules per box [default: DMC 100, TTE 64].")
@click.option("--nvt-ps", default=20.0, show_default=True, help="NVT length [ps].")
@click.option("--npt-ps", default=200.0, show_default=True, help="NPT length [ps]; density over its 2nd half.")
@click.option("--prod-ps", default=0.0, show_default=True,
              help="NVT production for viscosity and self-diffusion [ps]; 0 = density only.")
@click.option("--threads", "-nt", default=1, show_default=True, help="gmx mdrun -nt.")
@click.option("--seed", default=2026, show_default=True, help="packmol and velocity seed.")
@click.option("--select", "select", is_flag=True,
              help="Run nothing: apply the charge-level rule to every result already under OUT.")
@click.option("--seeds", default=None,
              help="Independent replicates, comma-separated seeds (at least 3, e.g. 2026,3026,4026): mean +- 95 % "
                   "interval between them, written to OUT/validation_replicates.json.")
@click.option("--summary", is_flag=True,
              help="Run nothing: summarise the replicates already under OUT (JSON and table).")
def validate_ff_cmd(out_dir: Path, level: str, species: tuple[str, ...], molecules: int | None, nvt_ps: float,
                    npt_ps: float, prod_ps: float, threads: int, seed: int, select: bool, seeds: str | None,
                    summary: bool) -> None:
    """Pure DMC and TTE against experiment: density, viscosity (Green-Kubo, Einstein-Helfand), D (Yeh-Hummer).

    Exit 1 when a density misses its tolerance (DMC 1.065 g/cm^3 +-3 %, TTE 1.54 g/cm^3 +-5 %).
    """
    from mdbench.inputs.validate_ff import (collect, collect_replicates, markdown_table, replicate_summary,
                                            replicate_table, select_level, validate_forcefield, validate_replicates)

    if summary or seeds:
        if seeds:
            try:
                seed_list = tuple(int(x) for x in seeds.split(",") if x.strip())
            except ValueError:
                raise click.BadParameter("comma-separated integers, e.g. 2026,3026,4026", param_hint="--seeds")
            doc = validate_replicates(out_dir, species=species, seeds=seed_list, level=level, n_molecules=molecules,
                                      nvt_ps=nvt_ps, npt_ps=npt_ps, prod_ps=prod_ps, threads=threads)
        else:
            doc = replicate_summary(collect_replicates(out_dir))
            (out_dir / "validation_replicates.json").write_text(json.dumps(doc, indent=1) + "\n")
        click.echo(replicate_table(doc))
        return
    if select:
        results = collect(out_dir)
        click.echo(markdown_table(results))
        sel = select_level(results)
        click.echo(json.dumps(asdict(sel), indent=1))
        return
    res = validate_forcefield(out_dir, species=species, level=level, n_molecules=molecules, nvt_ps=nvt_ps,
                              npt_ps=npt_ps, prod_ps=prod_ps, threads=threads, seed=seed)
    click.echo(json.dumps([asdict(r) for r in res], indent=1))
    if not all(r.density_passed for r in res):
        sys.exit(1)
