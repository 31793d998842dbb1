"""Fast checks of the engine's parts: protocols → mdp, thread cap, adapters, hardware audit, parsers."""

from __future__ import annotations

import multiprocessing
import subprocess
from pathlib import Path

import pytest

from mdbench.engine import protocols as P
from mdbench.engine.hardware import record_hardware_audit
from mdbench.engine.runner import CliRunner, EngineUnavailable, get_runner, gmxapi_unavailable_reason
from mdbench.engine.segments import log_last_step
from mdbench.engine.threads import ThreadSlots
from mdbench.errors import InputError, MdbenchError
from mdbench.record import RunRecord

from engine_helpers import GMX, hold_one_thread, needs_gmx


def _parse_mdp(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith(";") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def test_npt_mdp_has_the_declared_physics(tmp_path):
    npt = P.load_protocol("npt")
    tm = P.Timing(dt_fs=2.0, length_ps=20.0, energy_interval_ps=0.1, xtc_interval_ps=0.5, log_interval_ps=1.0)
    P.write_mdp(npt, tmp_path / "npt.mdp", {"rcoulomb": 0.9}, timing=tm, seed=7)
    mdp = _parse_mdp((tmp_path / "npt.mdp").read_text())
    assert mdp["nsteps"] == "10000"  # 20 ps / 0.002 ps
    assert mdp["nstenergy"] == mdp["nstcalcenergy"] == "50"  # 0.1 ps <= 0.5 ps
    assert mdp["nstxout-compressed"] == "250"
    assert mdp["tcoupl"] == "V-rescale" and mdp["ref-t"] == "298.15"
    assert mdp["pcoupl"] == "C-rescale" and mdp["ref-p"] == "1.0"
    assert mdp["comm-grps"] == "System" and mdp["tc-grps"] == "System"
    assert mdp["constraints"] == "h-bonds" and mdp["DispCorr"] == "EnerPres" and mdp["coulombtype"] == "PME"
    assert mdp["rcoulomb"] == "0.9" and mdp["gen-seed"] == "7"
    # provenance: the source YAMLs and their sha256 are in the header
    header = [ln for ln in (tmp_path / "npt.mdp").read_text().splitlines() if ln.startswith("; source")]
    assert any("npt.yaml" in ln for ln in header) and any("common.yaml" in ln for ln in header)


def test_em_protocol_declares_a_force_criterion():
    em = P.mdp_options(P.load_protocol("em"))
    assert em["integrator"] == "steep" and float(em["emtol"]) > 0


def test_energy_interval_above_half_a_picosecond_is_refused():
    npt = P.load_protocol("npt")
    with pytest.raises(InputError, match="energy_interval_ps=1.0 exceeds 0.5"):
        P.mdp_options(npt, timing=P.Timing(length_ps=10, energy_interval_ps=1.0))


def test_interval_not_a_whole_number_of_steps_is_refused():
    with pytest.raises(InputError, match="xtc_interval_ps=0.003"):
        P.mdp_options(P.load_protocol("nvt"), timing=P.Timing(length_ps=10, xtc_interval_ps=0.003))


def test_missing_and_malformed_protocols_name_the_file(tmp_path):
    with pytest.raises(InputError, match="nope.yaml"):
        P.load_protocol("nope", tmp_path)
    (tmp_path / "bad.yaml").write_text("mdp: [1, 2\n")
    with pytest.raises(InputError, match=r"bad.yaml:\d+"):
        P.load_protocol("bad", tmp_path)


def test_thread_cap_holds_across_processes(tmp_path):
    """Four processes each wanting 1 thread under a cap of 2: never more than 2 run at once."""
    ctx = multiprocessing.get_context("spawn")
    log_path = tmp_path / "log.txt"
    procs = [ctx.Process(target=hold_one_thread, args=(str(tmp_path / "locks"), 2, str(log_path))) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    events = sorted((float(t), kind) for kind, t in (ln.split() for ln in log_path.read_text().splitlines()))
    running, peak = 0, 0
    for _, kind in events:
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert len(events) == 8 and peak == 2


def test_thread_cap_refuses_impossible_requests(tmp_path):
    slots = ThreadSlots(cap=2, lock_dir=tmp_path)
    with pytest.raises(MdbenchError, match="asked for 3 threads but the cap is 2"):
        with slots.acquire(3):
            pass
    with pytest.raises(MdbenchError, match="outside 1..16"):
        ThreadSlots(cap=17, lock_dir=tmp_path)


@needs_gmx
def test_gmxapi_adapter_fails_clearly_when_unavailable():
    reason = gmxapi_unavailable_reason()
    if reason is None:
        pytest.skip("gmxapi is usable here")
    with pytest.raises(EngineUnavailable, match="--engine gmxapi is not usable here.*import gmxapi"):
        get_runner("gmxapi")
    assert isinstance(get_runner("auto"), CliRunner)
    with pytest.raises(EngineUnavailable, match="unknown engine"):
        get_runner("lammps")


@needs_gmx
def test_hardware_audit_is_recorded_once(tmp_path):
    rec = RunRecord(tmp_path)
    payload = record_hardware_audit(rec, tmp_path, GMX, 2)
    again = record_hardware_audit(rec, tmp_path, GMX, 2)
    assert payload == again
    assert [e["type"] for e in rec.events()].count("hardware_audit") == 1
    version = subprocess.run([GMX, "--version"], capture_output=True, text=True).stdout
    assert payload["gromacs"]["version"] in version and payload["gromacs"]["simd"]
    assert payload["gromacs"]["gpu_support"] in ("disabled", "CUDA", "OpenCL", "SYCL", "HIP")
    assert payload["memory_total_GiB"] > 0 and payload["disk_free_GiB"] > 0 and payload["usable_cpus"] >= 1
    assert len(payload["load_average_1_5_15"]) == 3 and payload["thread_cap"] == 2


def test_log_last_step_reads_the_last_energy_block(tmp_path):
    log = tmp_path / "md.log"
    log.write_text("           Step           Time\n              0        0.00000\n\n"
                   "   Energies (kJ/mol)\n...\n           Step           Time\n            500        1.00000\n\n")
    assert log_last_step(log) == 500
    assert log_last_step(tmp_path / "missing.log") is None


@needs_gmx
def test_grompp_failure_names_the_console_log(tmp_path):
    (tmp_path / "x.mdp").write_text("integrator = md\nnot-an-option = 3\n")
    (tmp_path / "x.gro").write_text("x\n0\n   1.0 1.0 1.0\n")
    (tmp_path / "x.top").write_text("")
    runner = CliRunner(ThreadSlots(cap=1, lock_dir=tmp_path / "l"))
    with pytest.raises(MdbenchError, match=r"gmx grompp failed .*x.grompp.console.log"):
        runner.grompp(tmp_path / "x.mdp", tmp_path / "x.gro", tmp_path / "x.top", tmp_path / "x.tpr")
    assert Path(tmp_path / "x.grompp.cmd.json").is_file()


def test_checkpoint_cadence_scales_with_the_segment_and_the_measured_speed():
    from mdbench.engine.cadence import CheckpointCadence
    from mdbench.engine.protocols import load_protocol

    cad = load_protocol("production").checkpoint_cadence  # the registered numbers of common.yaml
    assert cad == CheckpointCadence(per_segment=10, min_interval_min=0.05, max_interval_min=15.0,
                                    first_interval_min=0.5)
    assert cad.interval_min(20_000, None) == 0.5                    # speed unknown: the first interval
    assert cad.interval_min(20_000, 10_000.0) == pytest.approx(0.2)  # 2 min expected / 10 checkpoints
    assert cad.interval_min(20_000, 1e6) == 0.05                    # never more often than every 3 s
    assert cad.interval_min(50_000_000, 10_000.0) == 15.0           # never less often than GROMACS' default


@pytest.mark.parametrize("block, message", [({"per_segment": 0}, "per_segment >= 1"),
                                            ({"every": 3}, "unknown checkpoint option"),
                                            ({"min_interval_min": "x"}, "must be numbers")])
def test_bad_checkpoint_cadence_names_the_problem(block, message):
    from mdbench.engine.cadence import CheckpointCadence
    from mdbench.errors import InputError

    with pytest.raises(InputError, match=message):
        CheckpointCadence.from_mapping(block, "common.yaml")
