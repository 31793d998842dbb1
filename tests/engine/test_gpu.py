"""GPU offload in the runner: flags from ``gmx --version`` and the processed mdp, fallbacks with reasons,
pinning, the study-wide GPU lock (one GPU MD job at a time), and GPU use in the ledger and hardware audit.

This machine has neither a GPU nor a GPU build of GROMACS, so those two are stand-ins (gpu_helpers.py):
``gmx --version`` texts of CUDA/OpenCL/double builds and a one-GPU ``nvidia-smi``. The processed mdps come
from the real ``gmx grompp`` of the study's own protocols; the runner, the lock and the record are real.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from mdbench.engine import gpu as G
from mdbench.engine import protocols as P
from mdbench.engine.gpu import gromacs_build_info
from mdbench.engine.hardware import record_hardware_audit
from mdbench.engine.runner import CliRunner
from mdbench.record import RunRecord

from engine_helpers import GMX, make_water_case, needs_gmx
from gpu_helpers import DATA, fake_gpu_tools, read_calls, run_mdrun_job

ALL_GPU = ["-nb", "gpu", "-pme", "gpu", "-bonded", "gpu", "-update", "gpu"]


def _build(version_file: str) -> dict:
    """Parse a ``gmx --version`` text exactly as the audit parses a real one."""
    info: dict = {}
    keys = {"GROMACS version": "version", "Precision": "precision", "GPU support": "gpu_support"}
    for line in (DATA / version_file).read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            info[keys[key.strip()]] = value.strip()
    return info


def _study_mdp(tmp_path: Path, name: str, overrides: dict | None = None) -> dict[str, str]:
    """The study protocol ``name`` as written for a stage, read back as mdrun's inputs would be."""
    path = tmp_path / f"{name}.mdp"
    P.write_mdp(P.load_protocol(name), path, overrides or {})
    return G.read_mdp(path)


GPU = [G.GpuDevice(0, "NVIDIA H100 80GB HBM3", "GPU-0", 81559.0, "550.54.15")]


def test_parsed_versions_name_the_gpu_api():
    assert G.gpu_backend(_build("debian_2022_5_cpu.txt")) is None
    assert G.gpu_backend(_build("conda_2024_3_cuda.txt")) == "CUDA"
    assert G.gpu_backend(_build("opencl_2023_3.txt")) == "OpenCL"
    assert G.gpu_backend({"gpu_support": "SYCL (AdaptiveCpp)"}) == "SYCL"


@pytest.mark.parametrize("protocol", ["nvt", "npt", "production"])
def test_cuda_build_offloads_every_task_of_the_study_md(tmp_path, protocol):
    plan = G.plan_offload(_build("conda_2024_3_cuda.txt"), GPU, _study_mdp(tmp_path, protocol))
    assert plan.mdrun_args() == ALL_GPU and plan.reasons == {}


def test_minimisation_offloads_only_nonbonded(tmp_path):
    plan = G.plan_offload(_build("conda_2024_3_cuda.txt"), GPU, _study_mdp(tmp_path, "em"))
    assert plan.mdrun_args() == ["-nb", "gpu", "-pme", "cpu", "-bonded", "cpu", "-update", "cpu"]
    assert "integrator = steep is not dynamical" in plan.reasons["pme"]
    assert "GPU update needs md" in plan.reasons["update"]


@pytest.mark.parametrize("overrides, task, reason", [
    ({"tcoupl": "Nose-Hoover"}, "update", "Nose-Hoover"),
    ({"pcoupl": "MTTK"}, "update", "pcoupl = MTTK"),
    ({"integrator": "sd"}, "update", "integrator = sd"),
    ({"constraint-algorithm": "SHAKE"}, "update", "SHAKE"),
    ({"freezegrps": "System", "freezedim": "Y Y Y"}, "update", "frozen atoms"),
    ({"vdwtype": "PME"}, "pme", "LJ-PME"),
    ({"pme-order": 6}, "pme", "pme-order = 6"),
    ({"coulombtype": "Reaction-Field"}, "pme", "is not PME"),
    ({"energygrps": "A B"}, "bonded", "single energy group"),
])
def test_mdp_that_forbids_a_task_keeps_it_on_the_cpu_with_the_reason(tmp_path, overrides, task, reason):
    plan = G.plan_offload(_build("conda_2024_3_cuda.txt"), GPU, _study_mdp(tmp_path, "nvt", overrides))
    assert plan.tasks[task] == "cpu" and reason in plan.reasons[task]
    assert plan.tasks["nb"] == "gpu" and plan.uses_gpu
    others = [t for t in G.TASKS if t not in (task, "nb")]
    assert all(plan.tasks[t] == "gpu" for t in others), plan.reasons


def test_opencl_build_keeps_bonded_and_update_on_the_cpu(tmp_path):
    plan = G.plan_offload(_build("opencl_2023_3.txt"), GPU, _study_mdp(tmp_path, "nvt"))
    assert plan.mdrun_args() == ["-nb", "gpu", "-pme", "gpu", "-bonded", "cpu", "-update", "cpu"]
    assert "OpenCL build" in plan.reasons["bonded"] and "CUDA or SYCL only" in plan.reasons["update"]


def test_without_gpu_support_the_command_line_is_unchanged(tmp_path):
    plan = G.plan_offload(_build("debian_2022_5_cpu.txt"), GPU, _study_mdp(tmp_path, "nvt"))
    assert plan.mdrun_args() == [] and not plan.uses_gpu
    assert "no GPU support (GPU support: disabled)" in plan.reasons["all"]


def test_gpu_build_without_a_device_says_so_and_keeps_gromacs_off_the_gpu(tmp_path):
    plan = G.plan_offload(_build("conda_2024_3_cuda.txt"), [], _study_mdp(tmp_path, "nvt"))
    assert plan.mdrun_args() == ["-nb", "cpu"] and "no GPU visible" in plan.reasons["all"]
    off = G.plan_offload(_build("conda_2024_3_cuda.txt"), GPU, _study_mdp(tmp_path, "nvt"), mode="off")
    assert off.mdrun_args() == ["-nb", "cpu"] and off.reasons["all"] == "MDBENCH_GPU=off"
    dbl = G.plan_offload(_build("double_cuda.txt"), GPU, _study_mdp(tmp_path, "nvt"))
    assert dbl.mdrun_args() == ["-nb", "cpu"] and "double-precision" in dbl.reasons["all"]


def test_required_gpu_that_is_missing_is_an_infrastructure_blocker(tmp_path):
    with pytest.raises(G.GpuUnavailable, match="MDBENCH_GPU=on but this GROMACS build has no GPU support.*blocker"):
        G.plan_offload(_build("debian_2022_5_cpu.txt"), GPU, _study_mdp(tmp_path, "nvt"), mode="on")
    with pytest.raises(G.GpuUnavailable, match="no GPU visible"):
        G.plan_offload(_build("conda_2024_3_cuda.txt"), [], _study_mdp(tmp_path, "nvt"), mode="on")
    with pytest.raises(Exception, match="MDBENCH_GPU='maybe' is not one of auto, on, off"):
        G.gpu_mode({"MDBENCH_GPU": "maybe"})


def test_visible_devices_follow_cuda_visible_devices(tmp_path):
    tools = fake_gpu_tools(tmp_path / "bin", "conda_2024_3_cuda.txt")
    smi = str(tools["nvidia-smi"])
    (dev,) = G.detect_gpus({}, nvidia_smi=smi)
    assert dev.name == "NVIDIA H100 80GB HBM3" and dev.memory_total_MiB == 81559 and dev.driver_version == "550.54.15"
    assert G.detect_gpus({"CUDA_VISIBLE_DEVICES": ""}, nvidia_smi=smi) == []
    assert G.detect_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, nvidia_smi=smi) == []
    assert G.detect_gpus({"CUDA_VISIBLE_DEVICES": "1"}, nvidia_smi=smi) == []
    assert G.detect_gpus({"CUDA_VISIBLE_DEVICES": "0"}, nvidia_smi=smi) == [dev]
    assert G.detect_gpus({"PATH": str(tmp_path / "empty")}) == []


def test_pinning_follows_the_held_thread_slots():
    args, why = G.pin_args([2, 3], 2, uses_gpu=True, cpus=range(8))
    assert args == ["-pin", "on", "-pinoffset", "2", "-pinstride", "1"] and "CPUs 2-3" in why
    args, why = G.pin_args([0, 1], 2, uses_gpu=True, cpus=[8, 9, 10, 11])  # a Slurm cgroup's CPUs 8-11
    assert args[:4] == ["-pin", "on", "-pinoffset", "8"]
    assert G.pin_args([0, 2], 2, uses_gpu=True, cpus=range(4))[0] == ["-pin", "off"]
    assert G.pin_args([0], 1, uses_gpu=False, cpus=range(4))[0] == ["-pin", "off"]  # shared CPU machine
    assert G.pin_args([0], 1, uses_gpu=False, mode="on", cpus=range(4))[0][:2] == ["-pin", "on"]
    assert G.pin_args([5], 1, uses_gpu=True, cpus=range(2))[0] == ["-pin", "off"]


# ----------------------------------------------------------------------------- the runner, end to end
@pytest.fixture
def water_tprs(tmp_path) -> dict[str, Path]:
    """Real grompp of the study's NVT and EM protocols on a water box, in a run directory with a record."""
    if GMX is None:
        pytest.skip("GROMACS (gmx) not on PATH")
    import subprocess  # noqa: PLC0415

    run = tmp_path / "run"
    setup = make_water_case(run)
    RunRecord(run)  # creates run_record/
    out = {}
    for name in ("nvt", "em"):
        wd = run / "cases" / "W" / name
        wd.mkdir(parents=True)
        P.write_mdp(P.load_protocol(name), wd / f"{name}.mdp", {"rcoulomb": 0.8, "rvdw": 0.8})
        subprocess.run([GMX, "grompp", "-f", f"{name}.mdp", "-c", setup / "system.gro", "-p", setup / "topol.top",
                        "-o", f"{name}.tpr", "-po", f"{name}.mdout.mdp", "-maxwarn", "1"], cwd=wd, check=True,
                       capture_output=True)
        out[name] = wd / f"{name}.tpr"
    out["run"] = run
    return out


def _fake_env(monkeypatch, tmp_path: Path, version: str, gpu: bool = True) -> dict:
    tools = fake_gpu_tools(tmp_path / "bin", version, gpu=gpu)
    env = {"MDBENCH_GMX": str(tools["gmx"]), "PATH": f"{tools['gmx'].parent}{os.pathsep}{os.environ['PATH']}"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("MDBENCH_GPU", raising=False)
    monkeypatch.setenv("MDBENCH_THREAD_CAP", "1")
    G.build_info.cache_clear()
    return {**env, "calls": tools["calls"]}


@needs_gmx
def test_runner_passes_the_offload_flags_from_a_cuda_gmx(water_tprs, tmp_path, monkeypatch):
    env = _fake_env(monkeypatch, tmp_path, "conda_2024_3_cuda.txt")
    res = CliRunner().mdrun(water_tprs["nvt"], "nvt", threads=1)
    assert res.ok
    (call,) = read_calls(env["calls"])
    argv = call["argv"]
    assert " ".join(ALL_GPU) in " ".join(argv)
    cpus = sorted(os.sched_getaffinity(0))
    assert argv[argv.index("-pin"):argv.index("-pin") + 6] == ["-pin", "on", "-pinoffset", str(cpus[0]),
                                                               "-pinstride", "1"]
    gpu = res.extra["resources"]["gpu"]
    assert gpu["uses_gpu"] and gpu["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["lock"] == str(water_tprs["run"] / "run_record" / "gpu.lock")
    assert any("Mapping of GPU IDs" in ln for ln in gpu["gromacs_log"]) and gpu["gpu_hours"] > 0
    # minimisation of the same system: only the non-bonded task, with the reasons logged
    em = CliRunner().mdrun(water_tprs["em"], "em", threads=1)
    em_argv = read_calls(env["calls"])[-1]["argv"]
    assert em_argv[-8:] == ["-nb", "gpu", "-pme", "cpu", "-bonded", "cpu", "-update", "cpu"]
    assert "not dynamical" in em.extra["resources"]["gpu"]["reasons"]["pme"]


@needs_gmx
def test_runner_without_gpu_support_runs_todays_command_line(water_tprs, tmp_path, monkeypatch):
    env = _fake_env(monkeypatch, tmp_path, "debian_2022_5_cpu.txt")
    res = CliRunner().mdrun(water_tprs["nvt"], "nvt", threads=1)
    (call,) = read_calls(env["calls"])
    assert not {"-nb", "-pme", "-bonded", "-update"} & set(call["argv"])
    assert call["argv"][call["argv"].index("-pin") + 1] == "off"
    assert res.extra["resources"]["gpu"]["uses_gpu"] is False
    assert res.extra["resources"]["gpu"]["lock"] is None


@needs_gmx
def test_gpu_lock_admits_one_gpu_job_at_a_time(water_tprs, tmp_path, monkeypatch):
    """Three GPU jobs of one study with enough CPU threads for all: they run one after another; the same
    three with MDBENCH_GPU=off overlap (so the test can see an overlap when there is one)."""
    env = _fake_env(monkeypatch, tmp_path, "conda_2024_3_cuda.txt")
    ctx = multiprocessing.get_context("spawn")

    def run_three(extra: dict, tag: str) -> list[dict]:
        child_env = {k: v for k, v in env.items() if k != "calls"}
        child_env.update({"MDBENCH_THREAD_CAP": "3", "FAKE_MDRUN_SECONDS": "1.0",
                          "MDBENCH_LOCK_DIR": str(tmp_path / f"slots-{tag}"), **extra})
        env["calls"].unlink(missing_ok=True)
        procs = [ctx.Process(target=run_mdrun_job, args=(child_env, str(water_tprs["nvt"]), f"job{i}"))
                 for i in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert all(p.exitcode == 0 for p in procs)
        return sorted(read_calls(env["calls"]), key=lambda c: c["start"])

    def peak(calls: list[dict]) -> int:
        events = sorted([(c["start"], 1) for c in calls] + [(c["end"], -1) for c in calls])
        running = top = 0
        for _, step in events:
            running += step
            top = max(top, running)
        return top

    gpu_calls = run_three({}, "gpu")
    assert len(gpu_calls) == 3 and all("gpu" in c["argv"] for c in gpu_calls)
    assert peak(gpu_calls) == 1
    cpu_calls = run_three({"MDBENCH_GPU": "off"}, "cpu")
    assert all("gpu" not in c["argv"] for c in cpu_calls)
    assert peak(cpu_calls) >= 2


def test_gpu_lock_times_out_while_another_job_holds_it(tmp_path):
    lock = G.GpuLock(tmp_path / "gpu.lock", poll_s=0.05)
    assert not lock.is_held()
    with lock.hold() as waited:
        assert waited < 1.0 and lock.is_held()
        ctx = multiprocessing.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=_try_lock, args=(str(tmp_path / "gpu.lock"), q))
        p.start()
        p.join(60)
        assert q.get(timeout=5) == "timed out"
    assert not lock.is_held()  # released on leaving the block
    p = ctx.Process(target=_try_lock, args=(str(tmp_path / "gpu.lock"), q))
    p.start()
    p.join(60)
    assert q.get(timeout=5) == "held"


def _try_lock(path: str, q) -> None:
    try:
        with G.GpuLock(path, poll_s=0.05).hold(timeout_s=0.5):
            q.put("held")
    except Exception as exc:  # noqa: BLE001 - the message is the result
        q.put("timed out" if "waited 0.5 s for the GPU lock" in str(exc) else repr(exc))


def test_lock_path_is_study_wide(tmp_path, monkeypatch):
    monkeypatch.delenv("MDBENCH_GPU_LOCK", raising=False)
    RunRecord(tmp_path / "run")
    a = tmp_path / "run" / "cases" / "DE" / "prod" / "prod.tpr"
    b = tmp_path / "run" / "cases" / "HCE" / "equil" / "nvt.tpr"
    assert G.gpu_lock_path(a) == G.gpu_lock_path(b) == tmp_path / "run" / "run_record" / "gpu.lock"
    assert G.gpu_lock_path(a, {"MDBENCH_GPU_LOCK": "/shared/gpu.lock"}) == Path("/shared/gpu.lock")


@needs_gmx
def test_gpu_use_reaches_the_ledger_and_the_hardware_audit(water_tprs, tmp_path, monkeypatch):
    from mdbench.engine.segments import run_segment  # noqa: PLC0415

    env = _fake_env(monkeypatch, tmp_path, "conda_2024_3_cuda.txt")
    rec = RunRecord(water_tprs["run"])
    audit = record_hardware_audit(rec, water_tprs["run"], env["MDBENCH_GMX"], 1)
    assert audit["gpu"]["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert audit["gpu"]["backend"] == "CUDA" and audit["gpu"]["offload_possible"] is True
    assert audit["gromacs"]["gpu_support"] == "CUDA"
    # the fake mdrun writes no checkpoint, so the segment ends "interrupted": its ledger row still says
    # what ran where, which is the point here
    run_segment(rec, CliRunner(), "W", water_tprs["nvt"], "nvt", target_step=10, dt_ps=0.002, stage="equilibration",
                kind="nvt", parent=None, relation=None, threads=1)
    row = rec.attempts()[-1]
    assert row["resources"]["gpu"]["tasks"] == {"nb": "gpu", "pme": "gpu", "bonded": "gpu", "update": "gpu"}
    assert row["resources"]["gpu"]["devices"][0]["uuid"].startswith("GPU-")
    assert row["resources"]["threads"] == 1 and "pinned to CPUs" in row["resources"]["pinning"]
    from mdbench.record.validate import validate_run  # noqa: PLC0415

    assert not [f for f in validate_run(water_tprs["run"]) if "attempts.jsonl" in str(f)]


@needs_gmx
def test_reproducible_mode_gives_bit_identical_cpu_runs(water_tprs, tmp_path, monkeypatch):
    """MDBENCH_REPRODUCIBLE=1 adds -reprod: two runs of one tpr write the same energy file, byte for byte."""
    import shutil  # noqa: PLC0415

    monkeypatch.setenv("MDBENCH_REPRODUCIBLE", "1")
    monkeypatch.setenv("MDBENCH_THREAD_CAP", "1")
    G.build_info.cache_clear()
    edrs = []
    for k in range(2):
        wd = tmp_path / f"rep{k}"
        wd.mkdir()
        shutil.copy(water_tprs["nvt"], wd / "nvt.tpr")
        res = CliRunner().mdrun(wd / "nvt.tpr", "nvt", threads=1, nsteps=300)
        assert res.ok and "-reprod" in res.argv
        edrs.append((wd / "nvt.edr").read_bytes())
    assert edrs[0] == edrs[1]


@needs_gmx
def test_real_cpu_mdrun_records_its_resources_and_can_be_pinned(water_tprs, monkeypatch):
    """Real Debian GROMACS: no GPU flags, and MDBENCH_PIN=on gives GROMACS' own pinning (its log says so)."""
    monkeypatch.setenv("MDBENCH_PIN", "on")
    monkeypatch.setenv("MDBENCH_THREAD_CAP", "1")
    G.build_info.cache_clear()
    res = CliRunner().mdrun(water_tprs["em"], "em", threads=1, nsteps=20)
    assert res.ok and "-pinoffset" in res.argv and "-nb" not in res.argv
    log = (water_tprs["em"].parent / "em.log").read_text()
    assert "Pinning threads" in log, log[:3000]
    assert res.extra["resources"]["gpu"]["backend"] is None and res.extra["resources"]["cpu_hours"] > 0
    assert gromacs_build_info(GMX)["gpu_support"] == "disabled"
    assert json.loads(Path(res.console_path).with_name("em.mdrun.cmd.json").read_text().splitlines()[-1])["argv"] == res.argv
