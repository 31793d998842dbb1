"""Production extended in segments (``gmx convert-tpr`` + the same segment with a larger target), and a kill
during an extension: the record stays valid, the state graph consistent, no step charged twice."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from mdbench.analysis.study_state import graph_findings, record_state_graph
from mdbench.engine import stages
from mdbench.engine.runner import EngineError
from mdbench.record import RunRecord
from mdbench.record.validate import validate_run

from _testseed import seed_for
from engine_helpers import WATER_PRESET, needs_gmx

sys.path.insert(0, str(Path(__file__).parent))
from test_engine_stages import KillingRunner  # noqa: E402

pytestmark = [needs_gmx, pytest.mark.gromacs]


def _prod_attempts(run: Path) -> list[dict]:
    return [a for a in RunRecord(run).attempts() if a["stage"] == "production"]


def _errors(run: Path) -> list[str]:
    return [str(f) for f in validate_run(run) if f.severity == "error"]


def test_extension_then_kill_during_the_next_one_and_resume(water_run, relaxed_protocols):
    import MDAnalysis as mda

    kw = dict(preset=WATER_PRESET, engine="cli", protocols_dir=relaxed_protocols)
    assert stages.minimize(water_run, "W", **kw).state == "valid"
    kw["seed"] = seed_for("engine/md")
    assert stages.equilibrate(water_run, "W", nvt_ps=1.0, npt_ps=4.0, **kw).state == "valid"
    assert stages.produce(water_run, "W", production_ps=2.0, **kw).state == "valid"
    # extension: the same segment continued from its checkpoint to 4 ps
    report = stages.produce(water_run, "W", production_ps=4.0, **kw)
    assert report.state == "valid", report.reason
    first, ext = _prod_attempts(water_run)
    assert ext["relation"] == "extension" and ext["parent"] == first["id"]
    assert ext["start_step"] == first["target_step"] == 1000 and ext["completed_steps"] == 1000
    cons = report.evidence["consistency"]
    assert cons["consistent"] and cons["nsteps"] == 2000 and cons["xtc_frames"] == 4.0 / 0.5 + 1
    # asking for less never shortens it: nothing runs
    assert stages.produce(water_run, "W", production_ps=2.0, **kw).state == "valid"
    assert len(_prod_attempts(water_run)) == 2
    # a kill during the next extension (to 6 ps), then the same call resumes it
    killer = KillingRunner("prod", after_s=0.5)
    with pytest.raises(EngineError, match="SIGKILL"):
        stages.produce(water_run, "W", production_ps=6.0, **{**kw, "engine": killer})
    assert _prod_attempts(water_run)[-1]["status"] == "interrupted"
    report = stages.produce(water_run, "W", production_ps=6.0, **kw)
    assert report.state == "valid", report.reason
    prod = _prod_attempts(water_run)
    assert [a["status"] for a in prod][-2:] == ["interrupted", "completed"]
    assert prod[-1]["relation"] == "continuation" and prod[-1]["target_step"] == 3000
    assert not _errors(water_run)  # the ledger's steps tile the segment once: none lost, none charged twice
    wd = water_run / "cases/W/prod"
    u = mda.Universe(str(wd / "prod.tpr"), str(wd / "prod.xtc"))
    times = np.array([ts.time for ts in u.trajectory])
    assert len(times) == 6.0 / 0.5 + 1 and np.allclose(np.diff(times), 0.5, atol=1e-3)
    assert json.loads((wd / "prod.extension.json").read_text())["target_step"] == 3000
    # the graph: one node per production segment, the production valid; recorded and recomputed agree
    graph = record_state_graph(water_run, ["W"])
    segments = [n for n in graph["nodes"].values() if n["kind"] == "segment"]
    assert len(segments) == len(prod) and graph["nodes"]["stage:W/production"]["state"] == "valid"
    assert graph_findings(water_run, ["W"]) == [] and not _errors(water_run)
