"""Start-up hardware and software audit: what the machine is before anything runs on it.

The contract asks to inspect and record CPU, GPU, memory, free disk, GROMACS and dependency versions,
GPU support and other users' load before computing; :func:`hardware_audit` gathers these facts and
:func:`record_hardware_audit` appends them to the run record as one ``hardware_audit`` event.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from mdbench.engine.gpu import audit_summary, detect_gpus, gromacs_build_info

log = logging.getLogger(__name__)

_PACKAGES = ("mdbench", "numpy", "scipy", "MDAnalysis", "pyedr", "pymbar", "papermill", "gmxapi")


@dataclass
class HardwareAudit:
    """Facts about the machine and the GROMACS build (units in field names).

    Attributes
    ----------
    cpu_model : str
    logical_cpus : int
        Logical CPUs of the machine.
    usable_cpus : int
        CPUs this process may run on (affinity mask).
    load_average_1_5_15 : list of float
        Run-queue load averages; a proxy for other users' jobs.
    memory_total_GiB, memory_available_GiB : float
    disk_free_GiB : float
        Free space where the run directory lives.
    gpus : list of str
        ``nvidia-smi -L`` lines (empty when none).
    gpu : dict
        Devices visible to the run (model, memory, driver), the build's GPU API, the ``MDBENCH_GPU`` mode and
        whether (else why not) mdrun can offload here (:func:`mdbench.engine.gpu.audit_summary`).
    gromacs : dict
        ``gmx --version`` fields: version, precision, SIMD instructions, GPU support, MPI library, FFT.
    packages : dict
        Versions of the Python packages the pipeline uses.
    thread_cap : int
        Threads that concurrent GROMACS jobs may use together.
    """

    cpu_model: str
    logical_cpus: int
    usable_cpus: int
    load_average_1_5_15: list[float]
    memory_total_GiB: float
    memory_available_GiB: float
    disk_free_GiB: float
    gpus: list[str]
    gromacs: dict
    packages: dict
    thread_cap: int
    os_platform: str = field(default_factory=platform.platform)
    python: str = field(default_factory=platform.python_version)
    other_gmx_processes: int = 0
    gpu: dict = field(default_factory=dict)


def _meminfo_GiB() -> tuple[float, float]:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return float("nan"), float("nan")
    kb = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+):\s+(\d+) kB", text, re.M)}
    return kb.get("MemTotal", 0) / 2**20, kb.get("MemAvailable", 0) / 2**20


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _other_gmx_processes() -> int:
    n = 0
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(cmd) > 1 and os.path.basename(cmd[0]).startswith(b"gmx") and cmd[1] == b"mdrun":
                n += 1
    return n


def hardware_audit(run_dir: str | Path, gmx: str, thread_cap: int) -> HardwareAudit:
    """Collect a :class:`HardwareAudit` for a run in ``run_dir`` using the GROMACS driver ``gmx``."""
    total, avail = _meminfo_GiB()
    gpus: list[str] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
            gpus = [ln for ln in out.splitlines() if ln.strip()]
        except (OSError, subprocess.SubprocessError):
            gpus = []
    packages = {}
    for name in _PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)

    build = gromacs_build_info(gmx)
    return HardwareAudit(
        cpu_model=cpu_model(),
        logical_cpus=os.cpu_count() or 1,
        usable_cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
        load_average_1_5_15=list(os.getloadavg()) if hasattr(os, "getloadavg") else [],
        memory_total_GiB=round(total, 3),
        memory_available_GiB=round(avail, 3),
        disk_free_GiB=round(shutil.disk_usage(path).free / 2**30, 3),
        gpus=gpus,
        gromacs=build,
        packages=packages,
        thread_cap=thread_cap,
        other_gmx_processes=_other_gmx_processes(),
        gpu=audit_summary(build, detect_gpus()),
    )


def record_hardware_audit(rec, run_dir: str | Path, gmx: str, thread_cap: int) -> dict:
    """Append a ``hardware_audit`` event to ``rec`` (once per run directory) and return its payload."""
    for event in rec.events():
        if event.get("type") == "hardware_audit":
            return event["payload"]
    payload = asdict(hardware_audit(run_dir, gmx, thread_cap))
    rec.append_event("hardware_audit", payload)
    log.info("hardware audit: %s CPUs, GROMACS %s (%s, GPU %s)", payload["usable_cpus"],
             payload["gromacs"].get("version"), payload["gromacs"].get("simd"),
             payload["gromacs"].get("gpu_support"))
    return payload
