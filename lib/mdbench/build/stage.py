"""The setup stage of a run: build ``RUN_DIR/cases/<CASE>/setup`` and record it in the run record."""

from __future__ import annotations

import logging
from pathlib import Path

from mdbench.build.system import BuildResult, build_system

log = logging.getLogger(__name__)

#: files of the setup folder recorded as artifacts
SETUP_ARTIFACTS = ("build.json", "topol.top", "packmol.inp", "grompp_audit.log", "forcefield.itp", "LI.itp",
                   "FSI.itp", "DMC.itp", "TTE.itp")


def setup_case(run_dir: str | Path, system: str, preset: str = "micro", seed: int = 2026,
               density_g_cm3: float | None = None, overwrite: bool = False,
               bundle: str | Path | None = None) -> BuildResult:
    """Build case ``system`` into ``RUN_DIR/cases/<system>/setup`` and record the setup stage.

    With ``bundle`` (an agent input bundle), counts, force field and geometries come from the bundle
    (see :func:`~mdbench.build.system.build_system`).

    The run record gets a ``setup_started`` and a ``setup_built`` event (seed, density, counts, audits),
    the setup files as artifacts, and the stage state ``setup`` = ``valid`` when every audit passed,
    ``invalid`` (reason: the failed audits) otherwise. A packing error is recorded as ``setup_failed``
    with stage state ``invalid`` and re-raised.
    """
    from mdbench.record import RunRecord

    run_dir = Path(run_dir).resolve()
    out = run_dir / "cases" / system / "setup"
    rec = RunRecord(run_dir)
    started = {"case": system, "preset": preset, "seed": seed, "density_g_cm3": density_g_cm3,
               "out_dir": f"cases/{system}/setup"}
    if bundle:
        started["bundle"] = str(bundle)
    rec.append_event("setup_started", started)
    try:
        res = build_system(system, preset, out, seed=seed, density_g_cm3=density_g_cm3, overwrite=overwrite,
                           bundle=bundle)
    except Exception as exc:
        ev = rec.append_event("setup_failed", {"case": system, "error": str(exc)})
        rec.set_stage_state(system, "setup", "invalid", f"build failed: {exc}", {"event": ev["id"]})
        raise
    ev = rec.append_event("setup_built", res.to_dict())
    for name in (*SETUP_ARTIFACTS, res.gro_path.name):
        if (out / name).is_file():
            rec.add_artifact(out / name, ev["id"])
    failed = [a.name for a in res.audits if not a.passed]
    evidence = {"build_json": f"cases/{system}/setup/build.json", "event": ev["id"],
                "audits": {a.name: a.passed for a in res.audits}}
    if failed:
        rec.set_stage_state(system, "setup", "invalid", f"setup audits failed: {', '.join(failed)}", evidence)
    else:
        rec.set_stage_state(system, "setup", "valid", f"all {len(res.audits)} setup audits passed", evidence)
    return res
