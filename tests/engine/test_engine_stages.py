"""The stages on real GROMACS: gates, ledger, budget refusal, kill-and-resume, checkpoint fallback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mdbench.engine import stages
from mdbench.engine.runner import CliRunner, EngineError
from mdbench.engine.segments import checkpoint_step, run_segment
from mdbench.engine.threads import ThreadSlots
from mdbench.record import RunRecord

from _testseed import seed_for
from engine_helpers import WATER_PRESET, needs_gmx, water_tpr

pytestmark = [needs_gmx, pytest.mark.gromacs]


def _events(run: Path, kind: str) -> list[dict]:
    return [e for e in RunRecord(run).events() if e["type"] == kind]


class KillingRunner(CliRunner):
    """The CLI runner, but the first mdrun of segment ``deffnm`` gets SIGKILL once its checkpoint exists.

    ``after_s`` more seconds of dynamics run after the checkpoint appears, so the killed attempt has steps
    beyond its checkpoint (as a real crash would).
    """

    def __init__(self, deffnm: str, n_checkpoints: int = 1, after_s: float = 1.0, sig: int = signal.SIGKILL):
        super().__init__(ThreadSlots(cap=1))
        self.deffnm, self.n_checkpoints, self.after_s, self.sig = deffnm, n_checkpoints, after_s, sig
        self.killed_pid: int | None = None

    def mdrun(self, tpr, deffnm, **kw):
        if deffnm != self.deffnm or self.killed_pid is not None:
            return super().mdrun(tpr, deffnm, **kw)
        cpt = Path(tpr).parent / f"{deffnm}.cpt"
        prev = Path(tpr).parent / f"{deffnm}_prev.cpt"

        def watch(proc):
            def run():
                want = prev if self.n_checkpoints > 1 else cpt
                while proc.poll() is None and not want.exists():
                    time.sleep(0.05)
                time.sleep(self.after_s)
                if proc.poll() is None:
                    self.killed_pid = proc.pid
                    os.kill(proc.pid, self.sig)  # the mdrun this test started, by its pid
            threading.Thread(target=run, daemon=True).start()

        kw.pop("on_start", None)
        return super().mdrun(tpr, deffnm, on_start=watch, **{**kw, "cpt_min": 0.005})


# ----------------------------------------------------------------------------- water: gate failure, budget
def test_short_equilibration_fails_its_gate_and_says_why(water_run):
    """0.4 ps of NPT holds at most 5 energy frames: N_eff < 10 whatever the data, even after one extension."""
    assert stages.minimize(water_run, "W", preset=WATER_PRESET, engine="cli").state == "valid"
    report = stages.equilibrate(water_run, "W", preset=WATER_PRESET, engine="cli", nvt_ps=1.0, npt_ps=0.4,
                                max_extensions=1, seed=seed_for("engine/md"))
    assert report.state == "invalid"
    assert "equilibration gate FAILED after 1 extension(s)" in report.reason and "N_eff" in report.reason
    rec = RunRecord(water_run)
    state = rec.stage_states()["W"]["equilibration"]
    assert state["state"] == "invalid" and state["reason"] == report.reason
    # gate registered before its first evaluation; evaluated twice (initial + extension), both failed
    reg = [r for r in rec.registrations() if r["kind"] == "gate" and r["definition"]["gate"] == "equilibration"]
    evals = [e for e in _events(water_run, "gate_evaluated") if e["payload"]["gate"] == "equilibration"]
    assert len(reg) == 1 and len(evals) == 2 and reg[0]["event_id"] < evals[0]["id"]
    assert not any(e["payload"]["passed"] for e in evals)
    failed = {c["name"] for c in evals[-1]["payload"]["checks"] if not c["passed"]}
    assert {"Density_N_eff", "Volume_N_eff", "Potential_N_eff"} <= failed
    assert Path(evals[-1]["payload"]["evidence"]["figure"]).is_file()
    # ledger: NVT, NPT, then an extension of the NPT attempt, each charged its steps
    npt = [a for a in rec.attempts() if a["kind"] == "npt"]
    assert [a["relation"] for a in npt] == ["branch", "extension"] and npt[1]["parent"] == npt[0]["id"]
    assert [a["completed_steps"] for a in npt] == [200, 200] and all(a["status"] == "completed" for a in npt)
    # and production refuses to start downstream of it
    prod = stages.produce(water_run, "W", preset=WATER_PRESET, engine="cli", seed=seed_for("engine/md"))
    assert prod.state == "invalid_upstream" and not (water_run / "cases/W/prod/prod.tpr").exists()


def test_reservation_beyond_100_ns_is_refused_before_anything_runs(water_run):
    assert stages.minimize(water_run, "W", preset=WATER_PRESET, engine="cli").state == "valid"
    report = stages.equilibrate(water_run, "W", preset=WATER_PRESET, engine="cli", nvt_ps=100_001.0)
    assert report.state == "invalid" and "budget refused" in report.reason and "100 ns" in report.reason
    rec = RunRecord(water_run)
    assert rec.attempts() == [] and rec.charged_ns("W") == 0.0
    refused = _events(water_run, "budget_refused")
    assert len(refused) == 1 and refused[0]["payload"]["planned_ns"] == pytest.approx(100.001)
    equil = water_run / "cases/W/equil"
    assert not list(equil.glob("*.mdrun.*")) and not (equil / "nvt.log").exists()


# ----------------------------------------------------------------------------- water: checkpoint fallback
@pytest.mark.parametrize("corrupt_prev", [False, True], ids=["fallback_to_prev", "restart"])
def test_corrupt_checkpoint_falls_back_or_restarts(water_run, corrupt_prev):
    rec = RunRecord(water_run)
    killer = KillingRunner("md", n_checkpoints=2, after_s=0.3)
    tpr = water_tpr(water_run, killer)
    first = run_segment(rec, killer, "W", tpr, "md", target_step=3000, dt_ps=0.002, stage="test", kind="nvt",
                        parent=None, relation=None, cpt_min=0.005)
    assert first.status == "interrupted" and killer.killed_pid is not None
    wd = tpr.parent
    prev_step = checkpoint_step(killer, wd / "md_prev.cpt")
    data = (wd / "md.cpt").read_bytes()
    (wd / "md.cpt").write_bytes(data[: len(data) // 3])  # torn write
    if corrupt_prev:
        (wd / "md_prev.cpt").write_bytes(b"garbage")
    second = run_segment(rec, CliRunner(ThreadSlots(cap=1)), "W", tpr, "md", target_step=3000, dt_ps=0.002,
                         stage="test", kind="nvt", parent=None, relation=None)
    assert second.status == "completed" and second.final_step == 3000
    attempts = rec.attempts()
    assert [a["status"] for a in attempts] == ["interrupted", "completed"]
    assert attempts[1]["parent"] == attempts[0]["id"]
    if corrupt_prev:
        assert attempts[1]["relation"] == "restart" and attempts[1]["completed_steps"] == 3000
        ev = _events(water_run, "segment_restart")
        assert len(ev) == 1 and "no readable checkpoint" in ev[0]["payload"]["reason"]
        assert list((wd / "discarded").glob("md_*/md.log"))
    else:
        assert attempts[1]["relation"] == "continuation"
        assert attempts[1]["completed_steps"] == 3000 - prev_step
        ev = _events(water_run, "checkpoint_fallback")
        assert len(ev) == 1 and ev[0]["payload"]["step"] == prev_step
    # the steps the second attempt computes again are charged to both and kept once
    from mdbench.record.steps import segment_accounts
    from mdbench.record.validate import validate_run

    killed, resumed = attempts
    start = 0 if corrupt_prev else prev_step
    assert killed["end_step"] == first.final_step and resumed["start_step"] == start
    assert resumed["supersedes"] == [{"attempt_id": killed["id"], "from_step": start, "to_step": first.final_step,
                                      "steps": first.final_step - start}]
    acc = segment_accounts(attempts)[resumed["segment"]]
    assert (acc.charged_steps, acc.computed_steps, acc.superseded_steps, acc.kept_steps) == (
        first.final_step + 3000 - start, first.final_step + 3000 - start, first.final_step - start, 3000)
    assert [str(f) for f in validate_run(water_run) if f.severity == "error"] == []


# ----------------------------------------------------------------------------- micro DE through production
def test_micro_de_through_production_with_gates_and_ledger(micro_de_equilibrated, tmp_path):
    """The CI end-to-end: micro DE, minimised and equilibrated by the templates, then the production template."""
    from mdbench.execute import run_stage

    run = tmp_path / "run"
    shutil.copytree(micro_de_equilibrated, run)
    res = run_stage(run, "DE", "study/40_production", {"preset": "micro", "engine": "cli", "threads": 1,
                                                        "seed": seed_for("engine/md")})
    assert res.status == "finished", res.error
    assert res.scraps["stage_state"] == "valid"
    rec = RunRecord(run)
    states = rec.stage_states()["DE"]
    assert {k: states[k]["state"] for k in ("minimization", "equilibration", "production")} == {
        "minimization": "valid", "equilibration": "valid", "production": "valid"}
    # gates: registered, then evaluated with evidence and a figure
    regs = {r["definition"]["gate"]: r for r in rec.registrations() if r["kind"] == "gate"}
    evals = _events(run, "gate_evaluated")
    for gate in ("minimization", "equilibration"):
        mine = [e for e in evals if e["payload"]["gate"] == gate]
        assert mine and regs[gate]["event_id"] < mine[0]["id"] and mine[-1]["payload"]["passed"]
        assert mine[-1]["payload"]["registration_id"] == regs[gate]["id"]
    assert _events(run, "hardware_audit")
    # ledger: lineage nvt → npt (→ extensions) → production, ns charged from completed steps
    attempts = rec.attempts()
    kinds = [a["kind"] for a in attempts]
    assert kinds[0] == "nvt" and kinds[-1] == "production" and set(kinds) == {"nvt", "npt", "production"}
    prod = attempts[-1]
    assert prod["relation"] == "branch" and prod["parent"] == [a for a in attempts if a["kind"] == "npt"][-1]["id"]
    proto = stages.load_preset("micro")["protocol"]
    dt_ps = proto["dt_fs"] / 1000
    nsteps = round(proto["production_ps"] / dt_ps)
    assert prod["completed_steps"] == prod["planned_steps"] == nsteps
    assert rec.charged_ns("DE") == pytest.approx(sum(a["completed_steps"] for a in attempts) * dt_ps / 1000)
    # production at the stationary-tail mean NPT volume
    setup = _events(run, "production_setup")[-1]["payload"]
    assert setup["box_volume_nm3"] == pytest.approx(setup["mean_volume_nm3"], rel=2e-3)
    # the canonical branch's files agree
    cons = states["production"]["evidence"]
    assert cons["consistent"] and cons["pressure_tensor_in_edr"]
    assert cons["xtc_frames"] == round(proto["production_ps"] / proto["xtc_interval_ps"]) + 1
    assert cons["edr_frames"] == round(proto["production_ps"] / proto["energy_interval_ps"]) + 1
    assert cons["checkpoint_step"] == cons["log_last_step"] == nsteps
    arts = rec.artifacts()
    for ext in ("tpr", "xtc", "edr", "cpt", "log"):
        assert f"cases/DE/prod/prod.{ext}" in arts
    assert "cases/DE/prod/prod.mdp" in arts and "cases/DE/em/em_gate.png" in arts


def test_sigkill_during_production_then_rerun_resumes(micro_de_equilibrated, tmp_path):
    """SIGKILL mdrun mid-production, rerun the stage: continuous trajectory, checkpointed steps charged once."""
    import MDAnalysis as mda

    run = tmp_path / "run"
    shutil.copytree(micro_de_equilibrated, run)
    proto = stages.load_preset("micro")["protocol"]
    nsteps = round(10.0 / (proto["dt_fs"] / 1000))  # a 10 ps production
    killer = KillingRunner("prod", after_s=1.0)
    with pytest.raises(EngineError, match="SIGKILL"):
        stages.produce(run, "DE", preset="micro", engine=killer, production_ps=10.0, seed=seed_for("engine/md"))
    rec = RunRecord(run)
    killed = rec.attempts()[-1]
    assert killed["status"] == "interrupted" and "SIGKILL" in killed["reason"]
    assert rec.stage_states()["DE"]["production"]["state"] == "invalid"
    wd = run / "cases/DE/prod"
    cpt_step = checkpoint_step(killer, wd / "prod.cpt")
    assert 0 < cpt_step < nsteps
    assert killed["completed_steps"] >= cpt_step  # the killed attempt is charged what its log shows it computed

    report = stages.produce(run, "DE", preset="micro", engine="cli", production_ps=10.0, seed=seed_for("engine/md"))
    assert report.state == "valid", report.reason
    rec = RunRecord(run)
    prod = [a for a in rec.attempts() if a["stage"] == "production"]
    assert [a["status"] for a in prod] == ["interrupted", "completed"]
    resumed = prod[1]
    assert resumed["relation"] == "continuation" and resumed["parent"] == killed["id"]
    assert resumed["planned_steps"] == resumed["completed_steps"] == nsteps - cpt_step  # only new steps
    # checkpointed steps are charged once: killed (start → its last logged step) + resumed (checkpoint → end)
    assert killed["completed_steps"] + resumed["completed_steps"] == nsteps + (killed["completed_steps"] - cpt_step)
    # one continuous trajectory: every xtc frame once, evenly spaced, no gap, no duplicate
    u = mda.Universe(str(wd / "prod.tpr"), str(wd / "prod.xtc"))
    times = np.array([ts.time for ts in u.trajectory])
    dx = proto["xtc_interval_ps"]
    assert len(times) == round(10.0 / dx) + 1 and np.allclose(np.diff(times), dx, atol=1e-3)
    assert report.evidence["consistency"]["consistent"]
    assert json.loads((wd / "prod.segment.json").read_text())["attempts"][1]["cpi"] == "prod.cpt"


def test_sigterm_stops_mdrun_at_a_checkpoint_and_the_rerun_continues(water_run):
    """SIGTERM: GROMACS writes a checkpoint and exits cleanly before nsteps; that is an interruption too."""
    rec = RunRecord(water_run)
    killer = KillingRunner("md", after_s=0.3, sig=signal.SIGTERM)
    tpr = water_tpr(water_run, killer)
    first = run_segment(rec, killer, "W", tpr, "md", target_step=3000, dt_ps=0.002, stage="test", kind="nvt",
                        parent=None, relation=None, cpt_min=0.005)
    assert first.status == "interrupted" and 0 < first.final_step < 3000
    step = checkpoint_step(killer, tpr.parent / "md.cpt")
    assert step == first.final_step  # GROMACS checkpointed where it stopped: nothing computed is lost
    second = run_segment(rec, CliRunner(ThreadSlots(cap=1)), "W", tpr, "md", target_step=3000, dt_ps=0.002,
                         stage="test", kind="nvt", parent=None, relation=None)
    assert second.status == "completed"
    a, b = rec.attempts()
    assert a["completed_steps"] + b["completed_steps"] == 3000 and b["relation"] == "continuation"
    assert b["start_step"] == a["end_step"] == step and b["supersedes"] == []  # nothing computed twice


def test_driver_killed_leaves_an_open_attempt_that_the_rerun_closes_and_resumes(water_run):
    """SIGKILL the Python driver itself: mdrun is told to stop (SIGTERM via PDEATHSIG) and checkpoints;
    the rerun charges the open attempt from its log, closes it as interrupted and continues."""
    import subprocess
    import sys

    tpr = water_tpr(water_run, CliRunner(ThreadSlots(cap=1)))
    script = ("from mdbench.record import RunRecord\n"
              "from mdbench.engine.runner import CliRunner\n"
              "from mdbench.engine.threads import ThreadSlots\n"
              "from mdbench.engine.segments import run_segment\n"
              f"run_segment(RunRecord({str(water_run)!r}), CliRunner(ThreadSlots(cap=1)), 'W', {str(tpr)!r}, 'md',"
              " target_step=3000, dt_ps=0.002, stage='test', kind='nvt', parent=None, relation=None, cpt_min=0.005)\n")
    driver = subprocess.Popen([sys.executable, "-c", script])
    cpt = tpr.parent / "md.cpt"
    deadline = time.monotonic() + 120
    while not cpt.exists() and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert driver.poll() is None, "the segment finished before the driver could be killed"
    driver.kill()  # the driver this test started, by its pid
    driver.wait()
    log = tpr.parent / "md.log"
    deadline = time.monotonic() + 60
    while "Received the TERM signal" not in log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "Received the TERM signal" in log.read_text(errors="replace")
    time.sleep(1.0)  # let mdrun write its last checkpoint and exit
    rec = RunRecord(water_run)
    assert [a["status"] for a in rec.attempts()] == ["reserved"]
    res = run_segment(rec, CliRunner(ThreadSlots(cap=1)), "W", tpr, "md", target_step=3000, dt_ps=0.002,
                      stage="test", kind="nvt", parent=None, relation=None)
    assert res.status == "completed"
    first, second = rec.attempts()
    assert first["status"] == "interrupted" and "left open" in first["reason"] and first["completed_steps"] > 0
    assert second["relation"] == "continuation" and second["parent"] == first["id"]
    assert second["completed_steps"] == 3000 - json.loads((tpr.parent / "md.segment.json").read_text())[
        "attempts"][1]["start_step"]


def test_npt_production_by_choice_continues_from_the_npt_checkpoint(water_run, relaxed_protocols):
    """ensemble="NPT": no box rescaling, barostat on, grompp continues from the NPT checkpoint."""
    kw = dict(preset=WATER_PRESET, engine="cli", protocols_dir=relaxed_protocols)
    assert stages.minimize(water_run, "W", **kw).state == "valid"
    kw["seed"] = seed_for("engine/md")
    assert stages.equilibrate(water_run, "W", nvt_ps=1.0, npt_ps=4.0, **kw).state == "valid"
    report = stages.produce(water_run, "W", ensemble="NPT", production_ps=2.0, **kw)
    assert report.state == "valid", report.reason
    mdp = (water_run / "cases/W/prod/prod.mdp").read_text()
    assert "pcoupl" in mdp and "C-rescale" in mdp and not (water_run / "cases/W/prod/prod_start.gro").exists()
    setup = _events(water_run, "production_setup")[-1]["payload"]
    assert setup["ensemble"] == "NPT" and setup["nsteps"] == 1000
    from mdbench.engine.gates import read_edr

    assert "Volume" in read_edr(water_run / "cases/W/prod/prod.edr")  # the box fluctuates: NPT indeed
