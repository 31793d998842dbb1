"""CLI commands of the ``analysis`` room: ``mdbench analyze`` and ``mdbench analyze-files``."""

from __future__ import annotations

import logging
from pathlib import Path

import click


def _quiet_libraries() -> None:
    """MDAnalysis warns at import about optional readers we never use; keep the CLI output clean."""
    logging.getLogger("MDAnalysis").setLevel(logging.ERROR)


def _summary(doc: dict) -> str:
    counts: dict[str, int] = {}
    for ob in doc["observables"].values():
        counts[ob["state"]] = counts.get(ob["state"], 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _settings(preset: str | None, settings_file: Path | None, structure_max_frames: int | None):
    """The registered settings: params/analysis/ for ``preset``, overlaid by ``settings_file`` and the CLI's
    structure-frame cap."""
    from mdbench.analysis.settings import AnalysisSettings
    from mdbench.execute.parameters import check_preset

    check_preset(preset)
    overrides = {} if structure_max_frames is None else {"structure_max_frames": structure_max_frames or None}
    return AnalysisSettings.for_preset(preset, *([settings_file] if settings_file else []), **overrides)


_PRESET_HELP = ("Analysis settings of this preset: params/analysis/default.yaml overlaid by "
                "params/analysis/<preset>.yaml when it exists.")
_SETTINGS_HELP = "A settings file overlaid on the preset's (sections and keys as in params/analysis/default.yaml)."


@click.command(name="analyze")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--case", "cases", multiple=True, help="Case to analyse (repeatable); default: every cases/* dir.")
@click.option("--guard-ps", type=float, default=None,
              help="Excluded initial interval [ps]; default: the registered automatic rule.")
@click.option("--structure-max-frames", type=click.IntRange(min=0), default=None,
              help="At most this many frames for RDF/coordination/association (every k-th frame); "
                   "0 = every frame. Default: the settings' structure_max_frames.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes for the trajectory pass; default: one per core for large trajectories.")
@click.option("--preset", default=None, help=_PRESET_HELP)
@click.option("--settings", "settings_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help=_SETTINGS_HELP)
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def analyze(run_dir: Path, cases: tuple[str, ...], guard_ps: float | None, structure_max_frames: int | None,
            workers: int | None, preset: str | None, settings_file: Path | None, no_progress: bool) -> None:
    """Analyse the production runs of RUN_DIR into analysis/<CASE>/results.json and record states."""
    _quiet_libraries()
    from mdbench.analysis.pipeline import analyze_case
    from mdbench.errors import InputError

    root = run_dir / "cases"
    present = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink()) if root.is_dir() else []
    unknown = [c for c in cases if c not in present]
    if unknown:  # nothing may be recorded for a case the run does not have (the record is append-only)
        raise InputError(f"--case {', '.join(unknown)}: no such case in this run (cases/ holds: "
                         f"{', '.join(present) or 'none'})", str(run_dir))
    cases = cases or tuple(present)
    if not cases:
        raise InputError("no cases found; expected cases/<CASE>/prod/ in the run directory, or pass --case",
                         str(run_dir))
    settings = _settings(preset, settings_file, structure_max_frames)
    for case in cases:
        doc = analyze_case(run_dir, case, guard_ps=guard_ps,
                           settings=settings,
                           verbose=not no_progress, workers=workers)
        click.echo(f"{case}: analysis/{case}/results.json ({_summary(doc)})")
        prod = run_dir / "cases" / case / "prod"
        xtcs, edrs = sorted(prod.glob("*.xtc")), sorted(prod.glob("*.edr"))
        _warn_partial_inputs(doc, xtcs[0] if xtcs else prod, edrs[0] if edrs else prod)
        if not (doc.get("energy") or {}) and len(xtcs) == 1 and len(edrs) == 1:
            warning = energy_coverage_warning(edrs[0], xtcs[0])
            if warning:
                click.echo(f"warning: {warning}", err=True)


@click.command(name="analyze-files")
@click.option("--tpr", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="Run input (.tpr) of the production run.")
@click.option("--xtc", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="Compressed trajectory (.xtc).")
@click.option("--edr", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="Energy file (.edr) with the pressure tensor.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Output directory for results.json and figures.")
@click.option("--guard-ps", type=float, default=None,
              help="Excluded initial interval [ps]; default: the registered automatic rule.")
@click.option("--case", default="case", show_default=True, help="Case label written into results.json.")
@click.option("--no-figures", is_flag=True, help="Skip the PNG figures.")
@click.option("--structure-max-frames", type=click.IntRange(min=0), default=None,
              help="At most this many frames for RDF/coordination/association (every k-th frame); "
                   "0 = every frame. Default: the settings' structure_max_frames.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes for the trajectory pass; default: one per core for large trajectories.")
@click.option("--preset", default=None, help=_PRESET_HELP)
@click.option("--settings", "settings_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help=_SETTINGS_HELP)
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def analyze_files(tpr: Path, xtc: Path, edr: Path, out_dir: Path, guard_ps: float | None, case: str,
                  no_figures: bool, structure_max_frames: int | None, workers: int | None, preset: str | None,
                  settings_file: Path | None, no_progress: bool) -> None:
    """Analyse any GROMACS tpr/xtc/edr into OUT/results.json (no run record needed)."""
    _quiet_libraries()
    from mdbench.analysis.pipeline import analyze_files as run
    from mdbench.cli import check_out

    settings = _settings(preset, settings_file, structure_max_frames)
    check_out(out_dir)
    doc = run(tpr, xtc, edr, out_dir, guard_ps=guard_ps, case=case, figures=not no_figures,
              settings=settings, verbose=not no_progress, workers=workers)
    click.echo(f"{out_dir / 'results.json'} ({_summary(doc)})")
    _warn_partial_inputs(doc, xtc, edr)
    if not (doc.get("energy") or {}):  # the library did not report on the energy file: check its coverage here
        warning = energy_coverage_warning(edr, xtc)
        if warning:
            click.echo(f"warning: {warning}", err=True)


def energy_coverage_warning(edr: Path, xtc: Path) -> str | None:
    """One line when the energy file does not cover the trajectory's time interval (a cut or truncated
    ``.edr``: thermodynamics and viscosity then rest on part of the run), else None.

    The tolerance is one energy-output interval (the files' last frames need not coincide exactly).
    """
    import numpy as np

    from mdbench.trajcheck import scan_xtc

    try:
        traj = scan_xtc(xtc)
        first_x, last_x = traj.first_time_ps, traj.last_time_ps
    except Exception:  # the trajectory's own problems are reported by the analysis
        return None
    try:
        from mdbench.analysis.edrfile import Unsupported, read_edr

        try:
            times = read_edr(edr).time_ps
        except Unsupported:
            import pyedr

            times = np.asarray(pyedr.edr_to_dict(str(edr))["Time"], dtype=float)
    except Exception as exc:
        return f"{edr}: energies not readable to the end ({type(exc).__name__}); thermodynamics and viscosity " \
               "may rest on part of the run"
    if first_x is None or last_x is None or len(times) == 0:
        return None
    step = float(np.median(np.diff(times))) if len(times) > 1 else 0.0
    if times[-1] + step + 1e-6 < last_x or times[0] - step - 1e-6 > first_x:
        return (f"{edr}: energies cover {times[0]:g}–{times[-1]:g} ps but the trajectory {xtc.name} runs "
                f"{first_x:g}–{last_x:g} ps (energy file cut short?); thermodynamics and viscosity rest on the "
                "covered part only — give the complete .edr of this production")
    return None


def _warn_partial_inputs(doc: dict, xtc: Path, edr: Path) -> None:
    """One warning line per input only partly used: a trajectory cut mid-frame (issue 25), an energy file cut
    mid-frame or one that does not cover the analysed interval (issue 38; fields written by the analysis)."""
    traj = doc.get("trajectory") or {}
    if traj.get("truncated"):
        click.echo(f"warning: {xtc}: {traj.get('summary') or 'cut mid-frame; analysed to its last complete frame'}",
                   err=True)
    energy = doc.get("energy") or {}
    if energy.get("truncated"):
        click.echo(f"warning: {edr}: {energy.get('summary') or 'cut mid-frame; read to its last complete frame'} "
                   "— thermodynamics and viscosity use the complete frames only", err=True)
    coverage = energy.get("coverage") or {}
    if coverage and coverage.get("covers_trajectory") is False:
        click.echo(f"warning: {edr}: energies cover {coverage.get('summary') or 'less than the analysed interval'} "
                   f"of {xtc}", err=True)
