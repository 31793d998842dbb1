"""What a killed stage left behind, set aside before the stage runs again — with the inventory kept true.

A stage interrupted anywhere (SIGKILL of the whole process tree, SIGTERM, a machine going down) leaves
partial outputs. Rerunning the same command must neither trip over them nor overwrite a file the artifact
inventory lists. Every helper here moves such outputs into a numbered ``discarded/<label>_NN/`` folder
beside them through :meth:`mdbench.record.RunRecord.set_aside`, which re-points listed files to their new
path (original sha256 kept) and records the move as an ``artifacts_set_aside`` event, so the recovery is
visible as such and ``mdbench record validate`` finds no listed-but-missing file.

Segments of MD (checkpoints, continuation, restart) are handled by :mod:`mdbench.engine.segments`; the
executor sets aside the notebooks of interrupted template executions (:mod:`mdbench.execute.stage`).
"""

from __future__ import annotations

from pathlib import Path

from mdbench.record import RunRecord


def set_aside_outputs(rec: RunRecord, folder: Path, names: list[str], label: str, reason: str,
                      **context) -> dict:
    """Move the entries ``names`` of ``folder`` that exist into ``folder/discarded/<label>_NN/``.

    ``NN`` numbers the set-asides of ``label`` (01, 02, …). Returns the ``artifacts_set_aside`` event
    (empty when nothing existed).
    """
    present = [folder / n for n in names if (folder / n).exists()]
    if not present:
        return {}
    discarded = folder / "discarded"
    n = 1 + (sum(1 for _ in discarded.glob(f"{label}_*")) if discarded.is_dir() else 0)
    return rec.set_aside(present, discarded / f"{label}_{n:02d}", reason, **context)


def set_aside_interrupted_setup(run_dir: str | Path, case: str) -> dict:
    """Before the setup stage runs, set aside what an interrupted setup of ``case`` left.

    Interrupted means the record holds a ``setup_started`` event for the case that no ``setup_built`` or
    ``setup_failed`` event followed. Then the ``setup`` folder (it may be complete: the build renames its
    work folder into place before the run record is told) and any ``.setup.*`` work folder of a killed
    packing move to ``cases/<case>/discarded/setup_NN/``. A setup folder the record knows nothing about (made
    by hand) is left alone.
    """
    run_dir = Path(run_dir).resolve()
    rec = RunRecord(run_dir)
    open_start = None
    for event in rec.events():
        payload = event.get("payload") or {}
        if payload.get("case") != case:
            continue
        if event.get("type") == "setup_started":
            open_start = event
        elif event.get("type") in ("setup_built", "setup_failed"):
            open_start = None
    folder = run_dir / "cases" / case
    if open_start is None or not folder.is_dir():
        return {}
    names = ["setup"] + sorted(p.name for p in folder.glob(".setup.*") if p.is_dir())
    return set_aside_outputs(rec, folder, names, "setup", f"setup started by event {open_start['id']} was "
                             "interrupted before it was recorded; its outputs are set aside and the case is "
                             "built again", case=case, stage="setup", started_event=open_start["id"])


#: Files of an energy minimisation (``-deffnm em``) and its inputs, regenerated when it runs again.
MINIMIZATION_FILES = ("em.mdp", "em.tpr", "em.mdout.mdp", "em.log", "em.edr", "em.trr", "em.gro", "em_gate.png")


def set_aside_unfinished_minimization(rec: RunRecord, wd: Path, case: str, previous_state: dict | None) -> dict:
    """Before a minimisation runs again, set aside the outputs of the previous one (interrupted, failed or
    superseded), so the rerun overwrites no listed file. Nothing happens on a first run."""
    if not any((wd / n).exists() for n in ("em.log", "em.edr", "em.trr", "em.gro")):
        return {}
    state = (previous_state or {}).get("state")
    why = {"running": "was interrupted", None: "left outputs without a recorded state"}.get(
        state, f"ended {state}")
    return set_aside_outputs(rec, wd, list(MINIMIZATION_FILES), "em",
                             f"the previous minimisation {why}; its outputs are set aside before it runs again",
                             case=case, stage="minimization", previous_state=state)
