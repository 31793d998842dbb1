"""CLI of the ``validation`` room: ``mdbench bundle validate-ff`` (the model against experiment).

The ``bundle`` group is the inputs room's (:mod:`mdbench.inputs.commands`); this room sits above build, engine and
analysis (its study packs, runs and analyses boxes), so it adds its command to that group instead of the inputs room
importing it, and the ``mdbench`` CLI loads ``bundle`` from here.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import click

from mdbench.inputs.commands import bundle

__all__ = ["bundle", "validate_ff_cmd"]


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
    from mdbench.validation.forcefield import (collect, collect_replicates, markdown_table, replicate_summary,
                                              replicate_table, select_level, validate_forcefield,
                                              validate_replicates)

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
