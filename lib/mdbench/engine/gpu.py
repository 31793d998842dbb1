"""GROMACS GPU offload: which mdrun tasks go to the GPU, why a task stays on the CPU, one GPU job at a time.

The seed's rules: at most 16 CPU threads in total (:mod:`mdbench.engine.threads`) and **at most one GPU MD
job at any time**. :func:`plan_offload` decides, before ``mdrun`` starts, which of GROMACS' offloadable tasks
(``-nb``, ``-pme``, ``-bonded``, ``-update``) run on the GPU, from three facts:

* the build (``gmx --version``: ``GPU support: CUDA | SYCL | OpenCL | HIP | disabled``, precision);
* the devices this process may use (``nvidia-smi``, filtered by ``CUDA_VISIBLE_DEVICES``);
* the run's processed mdp (``<tpr stem>.mdout.mdp``, written by grompp beside the tpr): GROMACS' own rules
  (``decidegpuusage.cpp``, ``pme_gpu_supports_input``, ``inputSupportsListedForcesGpu``, 2022–2024) — PME on
  the GPU needs a dynamical integrator, Coulomb PME, ``pme-order = 4`` and no LJ-PME; bondeds need a
  dynamical integrator and a CUDA or SYCL build; the update needs the ``md`` integrator, no Nosé–Hoover, a
  barostat among no/Berendsen/C-rescale/Parrinello–Rahman, no SHAKE, acceleration, box deformation,
  surface correction or frozen atoms, and a CUDA or SYCL build.

Every task kept on the CPU carries its reason, which the runner logs and records. A GPU job holds the
study-wide :class:`GpuLock` (a file lock in the run record's folder, or ``$MDBENCH_GPU_LOCK``) while mdrun
runs, and its CPU threads are pinned (``-pin on -pinoffset … -pinstride 1``) to the cores its thread slots
name. ``MDBENCH_GPU`` selects the mode: ``auto`` (default: offload what can be offloaded, else CPU),
``on`` (a GPU is required; without one the stage stops with an infrastructure blocker) or ``off``.
``MDBENCH_PIN`` = ``auto`` (pin GPU jobs only) | ``on`` | ``off``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from functools import lru_cache
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from filelock import FileLock, Timeout

from mdbench.errors import MdbenchError
from mdbench.threads import lock_is_held

log = logging.getLogger(__name__)

#: mdrun's offloadable tasks, in the order GROMACS' options are given.
TASKS = ("nb", "pme", "bonded", "update")
GPU_MODES = ("auto", "on", "off")
PIN_MODES = ("auto", "on", "off")
#: ``integrator`` values GROMACS counts as dynamical (``EI_DYNAMICS``).
_DYNAMICAL = {"md", "md-vv", "md-vv-avek", "sd", "bd"}
_PME_COULOMB = {"pme", "pme-switch", "pme-user", "pme-user-switch", "p3m-ad"}
_UPDATE_BAROSTATS = {"no", "berendsen", "c-rescale", "parrinello-rahman"}


class GpuUnavailable(MdbenchError):
    """``MDBENCH_GPU=on`` but no GPU can be used: an infrastructure blocker, not a scientific failure."""


@dataclass(frozen=True)
class GpuDevice:
    """One GPU this process may use (``nvidia-smi --query-gpu``)."""

    index: int
    name: str
    uuid: str = ""
    memory_total_MiB: float | None = None
    driver_version: str = ""


def gpu_mode(env: dict | None = None) -> str:
    """``$MDBENCH_GPU`` (``auto`` when unset); a clear error for anything else."""
    value = (env if env is not None else os.environ).get("MDBENCH_GPU", "auto").strip().lower() or "auto"
    if value not in GPU_MODES:
        raise MdbenchError(f"MDBENCH_GPU={value!r} is not one of {', '.join(GPU_MODES)}")
    return value


def pin_mode(env: dict | None = None) -> str:
    """``$MDBENCH_PIN`` (``auto`` when unset: pin GPU jobs only)."""
    value = (env if env is not None else os.environ).get("MDBENCH_PIN", "auto").strip().lower() or "auto"
    if value not in PIN_MODES:
        raise MdbenchError(f"MDBENCH_PIN={value!r} is not one of {', '.join(PIN_MODES)}")
    return value


def gpu_backend(build: dict) -> str | None:
    """The build's GPU API (``CUDA``, ``SYCL``, ``OpenCL``, ``HIP``) from ``gmx --version``; None for CPU-only."""
    support = str(build.get("gpu_support") or "").strip()
    if not support or support.lower() in ("disabled", "none", "no"):
        return None
    for api in ("CUDA", "SYCL", "OpenCL", "HIP"):
        if support.lower().startswith(api.lower()):
            return api
    return support.split()[0]


def detect_gpus(env: dict | None = None, nvidia_smi: str | None = None) -> list[GpuDevice]:
    """GPUs visible to this process: ``nvidia-smi`` devices filtered by ``CUDA_VISIBLE_DEVICES``.

    ``CUDA_VISIBLE_DEVICES`` set to an empty string or ``-1`` hides every device (as the CUDA runtime does);
    a list of indices or UUIDs keeps those. No ``nvidia-smi`` on PATH means no (NVIDIA) GPU.
    """
    env = env if env is not None else os.environ
    exe = nvidia_smi or shutil.which("nvidia-smi", path=env.get("PATH"))
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=index,name,uuid,memory.total,driver_version",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("nvidia-smi failed (%s); treating the machine as GPU-less", exc)
        return []
    devices = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        try:
            memory = float(parts[3]) if len(parts) > 3 else None
        except ValueError:
            memory = None
        devices.append(GpuDevice(int(parts[0]), parts[1], parts[2] if len(parts) > 2 else "", memory,
                                 parts[4] if len(parts) > 4 else ""))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return devices
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    if not wanted or wanted[0] == "-1":
        return []
    return [d for d in devices if str(d.index) in wanted or d.uuid in wanted]


def read_mdp(path: str | Path) -> dict[str, str]:
    """``key = value`` pairs of an mdp (comments dropped), keys lower-case with ``_`` written as ``-``."""
    options: dict[str, str] = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        line = line.split(";", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            options[key.strip().lower().replace("_", "-")] = value.strip()
    return options


def _mdp_value(mdp: dict[str, str], key: str, default: str = "") -> str:
    return mdp.get(key, default).strip().lower()


def _nonzero(value: str) -> bool:
    try:
        return any(float(v) != 0.0 for v in value.split())
    except ValueError:
        return bool(value)


def task_support(mdp: dict[str, str], backend: str) -> dict[str, str | None]:
    """Per task, why this mdp (with a build of ``backend``) cannot run it on the GPU; None = it can."""
    integrator = _mdp_value(mdp, "integrator", "md")
    dynamical = integrator in _DYNAMICAL
    why: dict[str, list[str]] = {task: [] for task in TASKS}
    if _mdp_value(mdp, "cutoff-scheme", "verlet") != "verlet":
        why["nb"].append("GPU non-bonded kernels need cutoff-scheme = Verlet")
    if integrator == "tpi" or integrator == "tpic":
        why["nb"].append("test-particle insertion runs on the CPU")
    if _mdp_value(mdp, "coulombtype", "cut-off") not in _PME_COULOMB:
        why["pme"].append(f"coulombtype = {mdp.get('coulombtype', 'Cut-off')} is not PME")
    if _mdp_value(mdp, "pme-order", "4") != "4":
        why["pme"].append(f"pme-order = {mdp.get('pme-order')} (GPU PME needs 4)")
    if _mdp_value(mdp, "vdwtype", _mdp_value(mdp, "vdw-type", "cut-off")) == "pme":
        why["pme"].append("LJ-PME is not supported on the GPU")
    if not dynamical:
        why["pme"].append(f"integrator = {integrator} is not dynamical")
        why["bonded"].append(f"integrator = {integrator} is not dynamical")
    if backend not in ("CUDA", "SYCL"):
        why["bonded"].append(f"a {backend} build has no GPU bonded kernels (CUDA or SYCL only)")
        why["update"].append(f"a {backend} build has no GPU update (CUDA or SYCL only)")
    if backend == "HIP":
        why["pme"].append("GPU PME is not implemented for HIP builds")
    if len(_mdp_value(mdp, "energygrps").split()) > 1:
        why["bonded"].append("GPU bondeds need a single energy group")
    if integrator != "md":
        why["update"].append(f"integrator = {integrator} (GPU update needs md, the leap-frog integrator)")
    if _mdp_value(mdp, "tcoupl", "no") in ("nose-hoover",):
        why["update"].append("Nose-Hoover temperature coupling is not supported by the GPU update")
    pcoupl = _mdp_value(mdp, "pcoupl", "no")
    if pcoupl not in _UPDATE_BAROSTATS:
        why["update"].append(f"pcoupl = {mdp.get('pcoupl')} (GPU update: no, Berendsen, C-rescale, "
                             "Parrinello-Rahman)")
    if _mdp_value(mdp, "constraints", "none") != "none" and _mdp_value(mdp, "constraint-algorithm") == "shake":
        why["update"].append("SHAKE constraints are not supported by the GPU update")
    if _mdp_value(mdp, "freezegrps"):
        why["update"].append("frozen atoms are not supported by the GPU update")
    if _nonzero(_mdp_value(mdp, "deform")):
        why["update"].append("box deformation is not supported by the GPU update")
    if _nonzero(_mdp_value(mdp, "cos-acceleration", "0")) or _mdp_value(mdp, "acc-grps"):
        why["update"].append("acceleration is not supported by the GPU update")
    if _nonzero(_mdp_value(mdp, "epsilon-surface", "0")):
        why["update"].append("Ewald surface correction is not supported by the GPU update")
    if _mdp_value(mdp, "pull") == "yes":
        why["update"].append("pulling may constrain; the GPU update is not chosen for pull runs")
    return {task: ("; ".join(reasons) if reasons else None) for task, reasons in why.items()}


@dataclass
class OffloadPlan:
    """What one mdrun will do on the GPU, and why not the rest.

    Attributes
    ----------
    mode : str
        ``MDBENCH_GPU`` mode the plan was made under.
    tasks : dict
        ``{"nb": "gpu" | "cpu", "pme": …, "bonded": …, "update": …}``.
    reasons : dict
        For each task on the CPU, why; ``{"all": why}`` when no GPU is used at all.
    backend : str or None
        The build's GPU API.
    devices : list of GpuDevice
        GPUs visible to the job.
    pass_cpu_flags : bool
        The build has GPU support, so CPU placement is stated explicitly (``-nb cpu``) to keep GROMACS from
        taking a GPU without the study-wide lock.
    """

    mode: str
    tasks: dict[str, str]
    reasons: dict[str, str]
    backend: str | None
    devices: list[GpuDevice] = field(default_factory=list)
    pass_cpu_flags: bool = False

    @property
    def uses_gpu(self) -> bool:
        """True when at least one task runs on the GPU."""
        return any(v == "gpu" for v in self.tasks.values())

    def mdrun_args(self) -> list[str]:
        """The offload options for ``gmx mdrun`` (nothing for a CPU-only build: today's command line)."""
        if self.uses_gpu:
            return [arg for task in TASKS for arg in (f"-{task}", self.tasks[task])]
        return ["-nb", "cpu"] if self.pass_cpu_flags else []

    def summary(self) -> dict:
        """JSON-ready description for the run record."""
        return {"mode": self.mode, "backend": self.backend, "tasks": dict(self.tasks), "reasons": dict(self.reasons),
                "devices": [asdict(d) for d in self.devices], "uses_gpu": self.uses_gpu}


def plan_offload(build: dict, devices: Sequence[GpuDevice], mdp: dict[str, str] | None, *,
                 mode: str = "auto") -> OffloadPlan:
    """Choose each mdrun task's target from the build, the visible GPUs and the run's mdp.

    ``mdp`` None (no processed mdp beside the tpr) keeps only the non-bonded task on the GPU, which every
    Verlet run supports. Mode ``off`` keeps everything on the CPU; ``on`` raises :class:`GpuUnavailable`
    when no GPU can be used.

    Raises
    ------
    GpuUnavailable
        ``mode == "on"`` and the build has no GPU support, is double precision, or sees no device.
    """
    backend = gpu_backend(build)
    cpu = {task: "cpu" for task in TASKS}
    blocker = None
    if mode == "off":
        blocker = "MDBENCH_GPU=off"
    elif backend is None:
        blocker = f"this GROMACS build has no GPU support (GPU support: {build.get('gpu_support', 'unknown')})"
    elif "double" in str(build.get("precision", "")).lower():
        blocker = "double-precision GROMACS runs nothing on the GPU"
    elif not devices:
        blocker = ("no GPU visible to this job (nvidia-smi lists none"
                   + (f", CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}"
                      if "CUDA_VISIBLE_DEVICES" in os.environ else "") + ")")
    if blocker is not None:
        if mode == "on":
            raise GpuUnavailable(f"MDBENCH_GPU=on but {blocker}; this is an infrastructure blocker: run on a GPU "
                                 "machine with a CUDA build of GROMACS (environment-cuda.yml), or set "
                                 "MDBENCH_GPU=auto to run on the CPU")
        return OffloadPlan(mode, cpu, {"all": blocker}, backend, list(devices), pass_cpu_flags=backend is not None)
    if mdp is None:
        support = {"nb": None, **{t: "no processed mdp beside the tpr to check this task against" for t in TASKS[1:]}}
    else:
        support = task_support(mdp, backend)
    tasks, reasons = {}, {}
    for task in TASKS:
        reason = support[task]
        if reason is None and task != "nb" and tasks.get("nb") != "gpu":
            reason = "needs the non-bonded task on the GPU"
        tasks[task] = "gpu" if reason is None else "cpu"
        if reason is not None:
            reasons[task] = reason
    return OffloadPlan(mode, tasks, reasons, backend, list(devices), pass_cpu_flags=True)


def processed_mdp(tpr: str | Path) -> Path:
    """The processed mdp grompp wrote beside ``tpr`` (``-po <tpr stem>.mdout.mdp``)."""
    tpr = Path(tpr)
    return tpr.with_suffix(".mdout.mdp")


# ----------------------------------------------------------------------------- pinning
def pin_args(slots: Sequence[int], threads: int, *, uses_gpu: bool, mode: str = "auto",
             cpus: Sequence[int] | None = None) -> tuple[list[str], str]:
    """``-pin`` options for a job holding thread ``slots``, and why.

    Slot *i* is the *i*-th CPU of this process' affinity mask (all mdbench jobs of a machine share one set
    of slots, so two pinned jobs never share a core). GROMACS pins a stride-1 run of logical cores from
    ``-pinoffset``; slots that do not map to such a run are not pinned (with the reason), and CPU-only jobs
    on a shared machine are not pinned unless ``MDBENCH_PIN=on``.
    """
    if mode == "off" or (mode == "auto" and not uses_gpu):
        return ["-pin", "off"], ("MDBENCH_PIN=off" if mode == "off" else
                                 "CPU-only job on a possibly shared machine (MDBENCH_PIN=on pins it)")
    cpus = sorted(cpus if cpus is not None else (os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity")
                                                 else range(os.cpu_count() or 1)))
    chosen = [cpus[i] for i in sorted(slots) if i < len(cpus)]
    if len(chosen) != threads:
        return ["-pin", "off"], f"thread slots {list(slots)} exceed this job's {len(cpus)} CPUs"
    if chosen != list(range(chosen[0], chosen[0] + threads)):
        return ["-pin", "off"], f"CPUs {chosen} of the held slots are not consecutive (GROMACS pins a stride-1 run)"
    return (["-pin", "on", "-pinoffset", str(chosen[0]), "-pinstride", "1"],
            f"pinned to CPUs {chosen[0]}-{chosen[-1]} (thread slots {sorted(slots)})")


# ----------------------------------------------------------------------------- the study-wide lock
def gpu_lock_path(tpr: str | Path, env: dict | None = None) -> Path:
    """``$MDBENCH_GPU_LOCK``, else ``gpu.lock`` in the run record of the run directory holding ``tpr``.

    The run record's folder is shared by every job of the study (on a cluster it lies on the shared file
    system with the run directory), so the lock admits one GPU MD job across the whole study. Outside a run
    directory the machine-wide lock folder of the thread slots is used.
    """
    env = env if env is not None else os.environ
    if env.get("MDBENCH_GPU_LOCK"):
        return Path(env["MDBENCH_GPU_LOCK"])
    for parent in Path(tpr).resolve().parents:
        if (parent / "run_record").is_dir():
            return parent / "run_record" / "gpu.lock"
    lock_dir = Path(env.get("MDBENCH_LOCK_DIR") or Path(tempfile.gettempdir()) / "mdbench-threads")
    lock_dir.mkdir(parents=True, exist_ok=True)
    return lock_dir / "gpu.lock"


class GpuLock:
    """One GPU MD job at a time: an OS file lock (a killed holder releases it), waited for with a log line.

    Parameters
    ----------
    path : path
        Lock file (see :func:`gpu_lock_path`).
    poll_s : float
        Wait between attempts [s]; a line is logged every ``report_s`` of waiting.
    """

    def __init__(self, path: str | Path, poll_s: float = 0.5, report_s: float = 60.0):
        self.path = Path(path)
        self.poll_s = poll_s
        self.report_s = report_s

    def is_held(self) -> bool:
        """True when a job (this one included) holds the lock right now."""
        return lock_is_held(FileLock(str(self.path)))

    @contextmanager
    def hold(self, timeout_s: float | None = None) -> Iterator[float]:
        """Hold the lock for the ``with`` block; yields the seconds waited for it.

        Raises
        ------
        MdbenchError
            ``timeout_s`` elapsed while another job held the GPU.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.path))
        start = last = time.monotonic()
        while True:
            try:
                lock.acquire(timeout=self.poll_s)
                break
            except Timeout:
                now = time.monotonic()
                if timeout_s is not None and now - start > timeout_s:
                    raise MdbenchError(f"waited {timeout_s:g} s for the GPU lock {self.path}: another GPU MD job "
                                       "of this study is still running") from None
                if now - last >= self.report_s:
                    log.info("waiting %.0f s for the GPU (lock %s held by another job)", now - start, self.path)
                    last = now
        waited = time.monotonic() - start
        try:
            yield waited
        finally:
            lock.release()


# ----------------------------------------------------------------------------- what the GPU did
_LOG_GPU = re.compile(r"GPU|PP:|PME:|Update task", re.I)


def gpu_lines_of_log(log_path: str | Path, limit: int = 30) -> list[str]:
    """GROMACS' own account of GPU detection and task assignment in the latest run of an mdrun log."""
    path = Path(log_path)
    if not path.is_file():
        return []
    text = path.read_text(errors="replace")
    start = text.rfind("Command line:")
    head = text[start if start >= 0 else 0:]
    stop = head.find("Started mdrun")
    head = head[:stop] if stop >= 0 else head[:20000]
    return [ln.strip() for ln in head.splitlines() if _LOG_GPU.search(ln) and ln.strip()][:limit]


def resources_of_run(plan: OffloadPlan, *, wall_s: float, threads: int, pinning: str, lock_path: Path | None,
                     lock_wait_s: float, log_path: str | Path) -> dict:
    """The ledger's ``resources`` entry of one mdrun: threads, pinning and GPU use (model, tasks, GPU-hours)."""
    gpu = plan.summary()
    n_devices = len(plan.devices) if plan.uses_gpu else 0
    gpu.update({"gpu_hours": round(wall_s * n_devices / 3600.0, 6), "lock": str(lock_path) if lock_path else None,
                "lock_wait_s": round(lock_wait_s, 3),
                "gromacs_log": gpu_lines_of_log(log_path) if plan.uses_gpu else []})
    return {"threads": threads, "cpu_hours": round(wall_s * threads / 3600.0, 6), "pinning": pinning, "gpu": gpu}


def audit_summary(build: dict, devices: Sequence[GpuDevice]) -> dict:
    """What the hardware audit records about GPUs: devices (model, memory, driver), the build's GPU API and
    whether, and why not, this study can offload."""
    mode = gpu_mode()
    plan = plan_offload(build, devices, {"integrator": "md", "coulombtype": "PME"},
                        mode="off" if mode == "off" else "auto")
    usable, reason = plan.uses_gpu, (None if plan.uses_gpu else plan.reasons.get("all", plan.reasons.get("nb")))
    return {"devices": [asdict(d) for d in devices], "gromacs_gpu_support": build.get("gpu_support"),
            "backend": gpu_backend(build), "mode": mode, "offload_possible": usable, "reason": reason,
            "rule": "at most one GPU MD job at a time (study-wide GPU lock); <= 16 CPU threads in total"}


def gromacs_build_info(gmx: str) -> dict:
    """Parse ``gmx --version`` into a dict (version, precision, simd, gpu_support, mpi, fft, raw)."""
    try:
        out = subprocess.run([gmx, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": str(exc)}
    keys = {"GROMACS version": "version", "Precision": "precision", "SIMD instructions": "simd",
            "GPU support": "gpu_support", "MPI library": "mpi", "CPU FFT library": "fft",
            "OpenMP support": "openmp", "Executable": "executable"}
    info: dict = {}
    for line in out.splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            if key.strip() in keys:
                info[keys[key.strip()]] = value.strip()
    return info



# ----------------------------------------------------------------------------- what the runner calls
@lru_cache(maxsize=8)
def build_info(gmx: str) -> dict:
    """``gmx --version`` parsed (cached per driver path for the life of the process)."""
    return gromacs_build_info(gmx)


class MdrunOffload:
    """The GPU side of one ``mdrun`` call, for :meth:`mdbench.engine.runner.CliRunner.mdrun`.

    Plans the offload from the build, the devices and the tpr's processed mdp, logs every task kept on the
    CPU with its reason, and gives the runner the lock to hold, the ``-pin`` and offload options, and the
    ``resources`` entry for the ledger.
    """

    def __init__(self, gmx: str, tpr: str | Path, *, env: dict | None = None, devices: Sequence[GpuDevice] | None = None):
        env = env if env is not None else os.environ
        self.mode = gpu_mode(env)
        self.pin_mode = pin_mode(env)
        self.reproducible = env.get("MDBENCH_REPRODUCIBLE", "") not in ("", "0")
        build = build_info(gmx) if self.mode != "off" else {}
        mdp_path = processed_mdp(tpr)
        mdp = read_mdp(mdp_path) if mdp_path.is_file() else None
        if devices is None:
            devices = detect_gpus(env) if self.mode != "off" and gpu_backend(build) else []
        self.plan = plan_offload(build, devices, mdp, mode=self.mode)
        self.lock_path = gpu_lock_path(tpr, env) if self.plan.uses_gpu else None
        self.lock_wait_s = 0.0
        self.pinning = ""
        if self.plan.uses_gpu:
            for task, reason in self.plan.reasons.items():
                log.info("mdrun %s: %s on the CPU: %s", Path(tpr).name, task, reason)
        elif self.plan.backend is not None:  # a GPU build running on the CPU: say why, loudly
            log.warning("mdrun %s runs on the CPU: %s", Path(tpr).name, self.plan.reasons.get("all"))

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the study-wide GPU lock while a GPU job runs (nothing for a CPU job)."""
        if not self.plan.uses_gpu:
            yield
            return
        with GpuLock(self.lock_path).hold() as waited:
            self.lock_wait_s = waited
            yield

    def pin_args(self, slots: Sequence[int], threads: int) -> list[str]:
        """``-pin …`` for the held thread slots (the reason is kept for the ledger)."""
        args, self.pinning = pin_args(slots, threads, uses_gpu=self.plan.uses_gpu, mode=self.pin_mode)
        return args

    def thread_args(self, slots: Sequence[int]) -> list[str]:
        """Every CPU-thread option of one mdrun, from the thread slots it holds: one thread-MPI rank with
        ``len(slots)`` OpenMP threads (``-nt n -ntomp n``) and the pinning of those slots. The one place the
        runners take ``-nt``/``-ntomp``/``-pin`` from."""
        threads = len(slots)
        return ["-nt", str(threads), "-ntomp", str(threads), *self.pin_args(slots, threads)]

    def mdrun_args(self) -> list[str]:
        """The offload options (``-nb gpu -pme gpu -bonded gpu -update gpu`` or fewer; none when CPU-only),
        and ``-reprod`` under ``MDBENCH_REPRODUCIBLE=1``.

        Without ``-reprod`` two runs of one tpr with the same threads on the same CPU can differ after a few
        hundred steps (FFTW chooses its plans by timing them); ``-reprod`` makes CPU runs bit-identical, which
        the executor-equivalence test (``make test-slurm``) needs. GPU runs stay non-deterministic.
        """
        return self.plan.mdrun_args() + (["-reprod"] if self.reproducible else [])

    def resources(self, wall_s: float, threads: int, log_path: str | Path) -> dict:
        """The ledger entry for the finished mdrun."""
        return resources_of_run(self.plan, wall_s=wall_s, threads=threads, pinning=self.pinning,
                                lock_path=self.lock_path, lock_wait_s=self.lock_wait_s, log_path=log_path)
