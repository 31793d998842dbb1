"""Start an untrusted process — an evaluated agent, a campaign coordinator, a task solver — confined by the OS.

Whatever an agent runs must not read evaluator-private files, write the frozen inputs, reach the network or
outlive its episode. Conventions cannot promise that; the kernel can. :func:`spawn_confined` starts ``argv``
under a :class:`Confinement`:

* **PID namespace.** The command runs below a reaper that is process 1 of a fresh PID namespace. When the
  command's main process ends (or the caller ends it), the reaper exits and the kernel kills every process left
  in the namespace — ``setsid`` or double-forked daemons included.
* **Mount namespace.** ``hidden`` paths become an empty read-only tmpfs (folders) or ``/dev/null`` (files);
  ``readonly`` paths are bind-mounted read-only (even their owner cannot write); ``/tmp``, ``/dev/shm``,
  ``/var/tmp`` and ``/run/lock`` are private, size-capped tmpfs (nothing one session leaves there reaches the
  next); the caller's home (``/root``) is hidden by default. Paths nest either way: an exposed path inside a
  hidden folder is bound back from a file descriptor opened before the folder was covered.
* **IPC and UTS namespaces.** System V semaphores, shared memory and message queues are the sandbox's own.
* **User.** When the caller is root the command runs as an unprivileged account (created when missing), with
  no supplementary groups and ``no_new_privs`` (set-uid programs cannot give root back).
* **Network namespace.** Only a loopback interface (up), unless ``network=True``. ``loopback_listen`` ports
  are bound on that loopback by the supervisor and the listening sockets handed to the caller
  (:attr:`ConfinedProcess.listeners`): the caller serves them from the host side (a metering model proxy), so the
  command reaches exactly those ports and nothing else.
* **Resources.** A CPU set (cpuset cgroup where writable, else ``sched_setaffinity``), a wall-clock timeout
  (SIGTERM to every process of the tree, SIGKILL after a grace period), CPU time and peak memory of the whole
  tree (cgroup v1 ``cpuacct``/``memory`` where writable, else ``getrusage`` of the reaped children), a memory
  limit and a process-count limit (cgroup ``memory``/``pids``), a largest file size (``RLIMIT_FSIZE``),
  stdout/stderr files capped to their head and tail, and a hard byte quota on the workdir
  (``workdir_quota_mib``: a sparse ext4 image loop-mounted in the sandbox's mount namespace only, copied back
  when the tree has ended; :mod:`mdbench.sandbox_quota`).
* **Lifetime.** The supervisor dies with its caller (``PR_SET_PDEATHSIG``): a runner killed even with SIGKILL
  takes the tree with it at once (SIGKILL to the namespace's process 1; no grace period, nobody is left to audit
  it), and the supervisor then removes the cgroup folders and its
  ``/tmp/mdbench-sandbox-*`` folder. The spec file (which holds the command's environment) is deleted as soon as
  the supervisor has read it.

Without root, a user namespace with the caller mapped to root gives the same namespaces where the kernel allows
it; otherwise the command runs in its own session with nothing enforced and ``method["isolation"] == "none"`` —
callers record that, tests that need isolation skip. Linux only.

Process layout: caller → *supervisor* (this module's ``__main__``, which entered the new namespaces before it
started, prepares the mounts) → *reaper* (PID 1 of the new PID namespace; mounts ``/proc``, forwards SIGTERM to
every process of the namespace) → the command (dropped to the unprivileged user).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import json
import os
import pwd
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import IO, Any, Mapping, Sequence

from mdbench import sandbox_quota  # imported before the mounts hide this installation
from mdbench.errors import MdbenchError

__all__ = ["Confinement", "SandboxResult", "ConfinedProcess", "SandboxError", "spawn_confined", "run_confined",
           "capabilities", "runtime_paths", "DEFAULT_USER"]

DEFAULT_USER = "mdbench-sandbox"
#: Top-level folders a process keeps under ``minimal_root`` (deny by default): the system's read-only tools
#: (programs, libraries, configuration, devices, kernel views) and ``/tmp`` (private when ``private_tmp``).
#: Everything else at the top — homes, /work, /srv, /mnt, /run with its sockets, and /var and /opt, where other
#: episodes, checkouts and services' data lie (``/var/lib/X/cfgB``) — is hidden unless a path of the
#: confinement re-exposes part of it (``readonly``/``writable``, bound back; a private ``/var/tmp`` is remade).
SYSTEM_DIRS = frozenset({"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "proc", "sys",
                         "tmp"})
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Folders every confined tree gets as its own empty tmpfs when ``private_tmp`` (shared state between sessions).
_PRIVATE_TMP = ("/tmp", "/dev/shm", "/var/tmp", "/run/lock")
_CGROUP_CONTROLLERS = ("cpuacct", "memory", "cpuset", "pids")
#: How often the fallback quota (no loop device) measures the workdir [s].
_QUOTA_POLL_S = 1.0

# Linux constants (include/uapi/linux/sched.h, mount.h, prctl.h).
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
_CLONE_NEWUTS, _CLONE_NEWIPC = 0x04000000, 0x08000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_O_PATH = getattr(os, "O_PATH", 0o10000000)


class SandboxError(MdbenchError):
    """The confinement could not be set up as asked (a path missing, a user that cannot be created, …)."""


@dataclass(frozen=True)
class Confinement:
    """What an untrusted process may see and do. Paths must be absolute and exist (except ``hidden`` ones)."""

    workdir: Path
    env: Mapping[str, str]
    readonly: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    network: bool = False
    cpus: tuple[int, ...] | None = None
    user: str | None = DEFAULT_USER
    private_tmp: bool = True
    hide_home: bool = True
    minimal_root: bool = False
    timeout_s: float | None = None
    grace_s: float = 10.0
    tag: str = "sandbox"
    #: Give the sandbox user ownership of ``workdir`` (False where the working folder itself holds frozen
    #: inputs at its top level, e.g. a Harbor task's ``/app``: an owner could rename them away).
    chown_workdir: bool = True
    #: Own IPC (System V / POSIX shared memory, semaphores) and UTS (host name) namespaces.
    private_ipc: bool = True
    #: Size of the private ``/tmp`` [MiB]; ``/dev/shm``, ``/var/tmp`` and ``/run/lock`` get ``shm_size_mib``.
    tmp_size_mib: int = 2048
    shm_size_mib: int = 256
    #: Memory limit of the whole tree [MiB] (cgroup ``memory.limit_in_bytes``; tmpfs pages count); None: none.
    memory_mib: int | None = None
    #: Most processes (and threads) the tree may hold at once (cgroup ``pids.max``); None: no limit.
    pids_max: int | None = 4096
    #: Largest file any process of the tree may write [MiB] (``RLIMIT_FSIZE``, per file); None: no limit.
    file_size_max_mib: int | None = None
    #: stdout/stderr given as a path keep their first and last ``output_cap_bytes / 2`` bytes; None: no cap.
    output_cap_bytes: int | None = 8 * 1024 * 1024
    #: TCP ports bound on 127.0.0.1 inside the sandbox's network namespace; their listening sockets are handed
    #: to the caller (:attr:`ConfinedProcess.listeners`), who serves them from the host side.
    loopback_listen: tuple[int, ...] = ()
    #: Hard byte quota of ``workdir`` [MiB] (None: none). As root with loop devices: the workdir becomes a sparse
    #: ext4 image (``workdir_image``) loop-mounted in the sandbox's own mount namespace, copied back afterwards
    #: (:mod:`mdbench.quota`); elsewhere a poll of the total. Either way ``RLIMIT_FSIZE`` of the quota per file: the
    #: quota counts *logical* sizes (a sparse file is as big as it says). The result records which.
    workdir_quota_mib: int | None = None
    #: Where the quota image lives while the tree runs (hidden from the command; removed afterwards). Default:
    #: ``.<workdir name>.quota.img`` beside the workdir.
    workdir_image: Path | None = None


@dataclass
class SandboxResult:
    """How a confined process tree ended and what it used."""

    status: str  # "exited" | "timeout" | "terminated" | "failed_to_start"
    exit_code: int | None
    wall_s: float
    cpu_s: float | None
    peak_memory_mib: float | None
    stragglers_killed: int
    method: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------------- probing

@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    # Not ctypes.util.find_library: it forks ldconfig, and inside a new PID namespace the first child forked
    # becomes its process 1 — when that child exits, the namespace is dead and every later fork fails.
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _unshare(flags: int) -> None:
    if _libc().unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")


@lru_cache(maxsize=1)
def capabilities() -> dict[str, Any]:
    """What this machine lets us enforce, probed once in a throw-away child process."""
    root = os.geteuid() == 0
    caps: dict[str, Any] = {"root": root, "platform": sys.platform}
    if not sys.platform.startswith("linux"):
        return {**caps, "namespaces": False, "user_namespace": False, "cgroup": False}
    flags = _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | (0 if root else _CLONE_NEWUSER)
    probe = subprocess.run([sys.executable, "-c", f"import mdbench.sandbox as s; s._unshare({flags})"],
                           capture_output=True, text=True, env=_probe_env())
    caps["namespaces"] = probe.returncode == 0
    if caps["namespaces"]:
        ipc = subprocess.run([sys.executable, "-c", "import mdbench.sandbox as s; "
                              f"s._unshare({flags | _CLONE_NEWIPC | _CLONE_NEWUTS})"],
                             capture_output=True, text=True, env=_probe_env())
        caps["ipc_namespace"] = ipc.returncode == 0
    caps["user_namespace"] = (not root) and caps["namespaces"]
    caps["cgroup"] = root and _cgroup_writable()
    if probe.returncode != 0:
        caps["namespace_error"] = (probe.stderr.strip().splitlines() or ["unknown"])[-1]
    return caps


def _probe_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME", "LANG")}
    return env


def _cgroup_writable() -> bool:
    return all(os.access(CGROUP_ROOT / c, os.W_OK) for c in ("cpuacct", "memory"))


def runtime_paths() -> tuple[Path, ...]:
    """Folders a Python process of this installation needs (read-only): interpreter prefixes, site and lib/."""
    paths: set[Path] = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent.parent}
    for entry in sys.path[1:]:  # sys.path[0] is the running script's folder, not the runtime
        p = Path(entry)
        if entry and p.is_absolute() and p.exists():
            paths.add(p if p.is_dir() else p.parent)
    # Keep the outermost folders only.
    ordered = sorted(paths, key=lambda p: len(p.parts))
    keep: list[Path] = []
    for p in ordered:
        if not any(p == k or k in p.parents for k in keep):
            keep.append(p)
    return tuple(keep)


# ------------------------------------------------------------------------------------------------ accounts

def ensure_user(name: str) -> tuple[int, int]:
    """uid, gid of the unprivileged account ``name``, created (system, nologin, no home) when missing."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        nologin = shutil.which("nologin") or "/usr/sbin/nologin"
        proc = subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                               "--shell", nologin, name], capture_output=True, text=True)
        try:  # a concurrent creator may have won the race
            entry = pwd.getpwnam(name)
        except KeyError:
            raise SandboxError(f"cannot create the sandbox user {name!r}: {proc.stderr.strip() or 'useradd failed'}"
                               " — run as root with useradd available, or pass user=None") from None
    if entry.pw_uid == 0:
        raise SandboxError(f"sandbox user {name!r} has uid 0; choose an unprivileged account")
    return entry.pw_uid, entry.pw_gid


# ------------------------------------------------------------------------------------------------- cgroups

class _Cgroups:
    """cgroup v1 folders for one confined tree: CPU time, peak memory, CPU set, process list."""

    def __init__(self, tag: str, cpus: tuple[int, ...] | None, memory_mib: int | None = None,
                 pids_max: int | None = None):
        self.dirs: dict[str, Path] = {}
        #: the limits the kernel took (recorded in the result); a limit that could not be set is absent
        self.limits: dict[str, Any] = {}
        name = f"mdbench-{tag}-{os.getpid()}-{time.monotonic_ns()}"
        for ctrl in _CGROUP_CONTROLLERS:
            if ctrl == "cpuset" and cpus is None:
                continue
            base = CGROUP_ROOT / ctrl
            if not os.access(base, os.W_OK):
                continue
            d = base / name
            try:
                d.mkdir()
                if ctrl == "cpuset":
                    (d / "cpuset.mems").write_text((base / "cpuset.mems").read_text())
                    (d / "cpuset.cpus").write_text(",".join(str(c) for c in cpus or ()))
                if ctrl == "memory" and memory_mib is not None:
                    (d / "memory.limit_in_bytes").write_text(str(int(memory_mib) * 2**20))
                    self.limits["memory_mib"] = int(memory_mib)
                if ctrl == "pids" and pids_max is not None:
                    (d / "pids.max").write_text(str(int(pids_max)))
                    self.limits["pids_max"] = int(pids_max)
                self.dirs[ctrl] = d
            except OSError:
                _rmdir_quiet(d)

    def attach(self, pid: int) -> None:
        for d in self.dirs.values():
            (d / "cgroup.procs").write_text(str(pid))

    def cpu_s(self) -> float | None:
        d = self.dirs.get("cpuacct")
        return int((d / "cpuacct.usage").read_text()) / 1e9 if d else None

    def peak_memory_mib(self) -> float | None:
        d = self.dirs.get("memory")
        return int((d / "memory.max_usage_in_bytes").read_text()) / 2**20 if d else None

    def pids(self) -> list[int]:
        d = self.dirs.get("pids") or self.dirs.get("cpuacct")
        if not d:
            return []
        return [int(x) for x in (d / "cgroup.procs").read_text().split()]

    def remove(self) -> None:
        for d in self.dirs.values():
            for _ in range(50):
                if _rmdir_quiet(d):
                    break
                time.sleep(0.02)


def _rmdir_quiet(d: Path) -> bool:
    try:
        d.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------- the caller

class ConfinedProcess:
    """A running confined tree. ``stdin``/``stdout`` are text pipes when asked for."""

    def __init__(self, popen: subprocess.Popen, conf: Confinement, method: dict[str, Any],
                 cgroups: _Cgroups | None, started: float,
                 rusage0: resource.struct_rusage, files: list[IO], report_path: Path):
        self.popen, self.conf, self.method, self._report_path = popen, conf, method, report_path
        self._cgroups, self._started, self._rusage0, self._files = cgroups, started, rusage0, files
        self._result: SandboxResult | None = None
        self._status: str | None = None
        self._stragglers = 0
        #: listening sockets on the sandbox's loopback (``Confinement.loopback_listen``), port → socket
        self.listeners: dict[int, socket.socket] = {}
        self._sinks: list[_CappedSink] = []
        #: the workdir's quota image while the tree runs (copied back and removed by ``_finish``)
        self._image: Path | None = None
        self._image_names: list[str] = []

    @property
    def workdir_view(self) -> Path:
        """The workdir as the command sees it, readable by the caller while the tree runs (with a quota image
        it is mounted only in the sandbox's namespace: ``/proc/<supervisor>/root/<workdir>``)."""
        if self._image is None or self._result is not None:
            return Path(self.conf.workdir)
        return Path(f"/proc/{self.popen.pid}/root") / Path(self.conf.workdir).relative_to("/")

    @property
    def stdin(self) -> IO[str] | None:
        return self.popen.stdin

    @property
    def stdout(self) -> IO[str] | None:
        return self.popen.stdout

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> SandboxResult:
        """Wait for the tree to end and return its result.

        The confinement's own ``timeout_s`` ends the tree (status ``"timeout"``). A shorter ``timeout`` given
        here only stops waiting: :class:`subprocess.TimeoutExpired` is raised and the tree keeps running.
        """
        if self._result is not None:
            return self._result
        own = None if self.conf.timeout_s is None else self._started + self.conf.timeout_s
        mine = None if timeout is None else time.monotonic() + timeout
        deadline = min((d for d in (own, mine) if d is not None), default=None)
        try:
            self.popen.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            if own is not None and deadline == own:
                return self._end("timeout")
            raise
        return self._finish("exited")

    def terminate(self) -> SandboxResult:
        """End the whole tree now: SIGTERM to every process, SIGKILL after the grace period."""
        if self._result is not None:
            return self._result
        return self._end("terminated")

    def _end(self, status: str) -> SandboxResult:
        self._status = status
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)  # the supervisor passes it to every process inside
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(self.conf.grace_s + 2.0)  # the reaper gives the tree grace_s itself
            except subprocess.TimeoutExpired:
                self.popen.kill()  # supervisor gone → reaper gets SIGKILL (pdeathsig) → namespace dies
                self.popen.wait()
        return self._finish(status)

    def _finish(self, status: str) -> SandboxResult:
        wall = time.monotonic() - self._started
        code = self.popen.returncode
        report = self._read_report()
        stragglers = int(report.get("stragglers", 0))
        if self.method.get("isolation") == "none":
            stragglers += _kill_group(self.popen.pid)
        cpu = peak = None
        if self._cgroups is not None:
            stragglers += self._kill_cgroup_leftovers()
            cpu, peak = self._cgroups.cpu_s(), self._cgroups.peak_memory_mib()
            self._cgroups.remove()
        if cpu is None:
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (r1.ru_utime - self._rusage0.ru_utime) + (r1.ru_stime - self._rusage0.ru_stime)
            peak = r1.ru_maxrss / 1024.0  # kB → MiB; the largest reaped child, a lower bound for the tree
        if self._image is not None:
            self._copy_back()
        if report.get("workspace_quota_exceeded_bytes"):
            quota = self.method.setdefault("limits", {}).get("workspace_quota") or {}
            quota.update(quota_reached=True, used_bytes=int(report["workspace_quota_exceeded_bytes"]))
        if "exit_code" in report:
            code = report["exit_code"]  # the command's own status (128 + signal when a signal ended it)
        elif code is not None and code < 0:
            code = None  # the supervisor itself was killed: the command's status is unknown
        for sink in self._sinks:
            sink.join(timeout=10.0)
        if self._sinks:
            self.method.setdefault("limits", {})["output_cut_bytes"] = sum(k.cut for k in self._sinks)
        for f in self._files:
            f.close()
        for sk in self.listeners.values():
            try:
                sk.close()
            except OSError:
                pass
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        if report.get("setup_error"):
            status = "failed_to_start"
            self.method["setup_error"] = report["setup_error"]
        self._result = SandboxResult(status=status, exit_code=code, wall_s=round(wall, 3),
                                     cpu_s=None if cpu is None else round(cpu, 3),
                                     peak_memory_mib=None if peak is None else round(peak, 1),
                                     stragglers_killed=stragglers, method=dict(self.method))
        return self._result

    def _copy_back(self) -> None:
        """The quota image's tree into the workdir, usage into ``limits["workspace_quota"]``; the image goes."""
        image, self._image = self._image, None
        skip = tuple(p.name for p in self.conf.readonly if Path(p).parent == Path(self.conf.workdir))
        try:
            info = sandbox_quota.copy_out(image, Path(self.conf.workdir), skip, tuple(self._image_names))
        finally:
            _unlink_quiet(image)
        quota = self.method.setdefault("limits", {}).setdefault("workspace_quota", {}) or {}
        quota.update(info)
        self.method["limits"]["workspace_quota"] = quota

    def _read_report(self) -> dict[str, Any]:
        try:
            return json.loads(self._report_path.read_text())
        except (OSError, ValueError):
            return {}
        finally:
            shutil.rmtree(self._report_path.parent, ignore_errors=True)

    def _kill_cgroup_leftovers(self) -> int:
        killed = 0
        for _ in range(100):
            pids = self._cgroups.pids() if self._cgroups else []
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        return killed


def _kill_group(pgid: int) -> int:
    try:
        os.killpg(pgid, signal.SIGKILL)
        return 1
    except (ProcessLookupError, PermissionError):
        return 0


class _CappedSink:
    """Copies a pipe into a file, keeping the first and the last ``cap / 2`` bytes with a marker between.

    A confined command that writes 300 MB to stderr leaves a file of ``cap`` bytes, never a full disk; the
    thread ends when every process of the tree has closed the pipe (the tree is dead).
    """

    def __init__(self, path: str | Path, cap: int):
        self.path = Path(path)
        self.head_cap = max(int(cap) // 2, 1)
        self.tail_cap = max(int(cap) - self.head_cap, 1)
        self.cut = 0
        self._rfd, self._wfd = os.pipe()
        self._out = open(self.path, "wb")  # noqa: SIM115 — closed by the thread
        self._thread = threading.Thread(target=self._copy, name=f"sandbox-sink-{self.path.name}", daemon=True)
        self._thread.start()

    @property
    def write_fd(self) -> int:
        return self._wfd

    def close_writer(self) -> None:
        if self._wfd >= 0:
            os.close(self._wfd)
            self._wfd = -1

    def abandon(self) -> None:
        self.close_writer()
        self._thread.join(5.0)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _copy(self) -> None:
        head = 0
        tail: deque[bytes] = deque()
        tail_len = 0
        try:
            while True:
                try:
                    chunk = os.read(self._rfd, 1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                if head < self.head_cap:
                    take = chunk[: self.head_cap - head]
                    self._out.write(take)
                    self._out.flush()  # a log is read while the command runs (progress, READY lines)
                    head += len(take)
                    chunk = chunk[len(take):]
                    if not chunk:
                        continue
                tail.append(chunk)
                tail_len += len(chunk)
                while tail and tail_len - len(tail[0]) >= self.tail_cap:
                    self.cut += len(tail[0])
                    tail_len -= len(tail.popleft())
            data = b"".join(tail)
            if tail_len > self.tail_cap:
                self.cut += tail_len - self.tail_cap
                data = data[tail_len - self.tail_cap:]
            if self.cut:
                self._out.write(f"\n[... mdbench sandbox: {self.cut} bytes cut here (output cap "
                                f"{self.head_cap + self.tail_cap} bytes: head and tail kept) ...]\n".encode())
            self._out.write(data)
        finally:
            os.close(self._rfd)
            self._out.close()


def _open_capped(target: Any, cap: int, files: list[IO], sinks: list[_CappedSink]) -> Any:
    if isinstance(target, (str, Path)):
        sink = _CappedSink(target, cap)
        sinks.append(sink)
        return sink.write_fd
    return _open_stream(target, "w", files)


def _open_stream(target: Any, mode: str, files: list[IO]) -> Any:
    if isinstance(target, (str, Path)):
        f = open(target, mode)  # noqa: SIM115 — closed by the ConfinedProcess
        files.append(f)
        return f
    return target


def spawn_confined(argv: Sequence[str], conf: Confinement, *, stdin: Any = None, stdout: Any = None,
                   stderr: Any = None) -> ConfinedProcess:
    """Start ``argv`` confined by ``conf``; streams are a path, a file, ``subprocess.PIPE`` or ``None``.

    A stream given as a path is capped to its head and tail (``conf.output_cap_bytes``).
    Raises :class:`SandboxError` for a confinement that cannot be honoured (missing path, relative path).
    """
    if not argv:
        raise SandboxError("spawn_confined: empty command")
    _check_paths(conf)
    caps = capabilities()
    isolate = bool(caps.get("namespaces"))
    if conf.loopback_listen and (not isolate or conf.network):
        raise SandboxError("loopback_listen needs the sandbox's own network namespace (network=False, and "
                           f"namespaces here: {caps.get('namespace_error', 'available')})")
    uid_gid = ensure_user(conf.user) if (caps["root"] and conf.user) else None
    private_ipc = bool(isolate and conf.private_ipc and caps.get("ipc_namespace", True))
    method = _method(conf, caps, uid_gid, isolate, private_ipc)
    if uid_gid:
        for p in ((conf.workdir,) if conf.chown_workdir else ()) + tuple(conf.writable):
            os.chown(p, *uid_gid)
    cgroups = (_Cgroups(conf.tag, conf.cpus, conf.memory_mib, conf.pids_max)
               if (caps["root"] and caps.get("cgroup")) else None)
    method["cgroup"] = bool(cgroups and cgroups.dirs)
    if cgroups is not None:
        method["limits"].update(cgroups.limits)
    image, image_names = _prepare_quota(conf, isolate, uid_gid, method["limits"])
    report_dir = Path(tempfile.mkdtemp(prefix="mdbench-sandbox-"))
    spec_path = _write_spec(argv, conf, method, report_dir, uid_gid=uid_gid, isolate=isolate, cgroups=cgroups,
                            image=image)
    flags = (_CLONE_NEWNS | _CLONE_NEWPID | (0 if conf.network else _CLONE_NEWNET)
             | (_CLONE_NEWIPC | _CLONE_NEWUTS if private_ipc else 0) | (0 if caps["root"] else _CLONE_NEWUSER))
    ports = tuple(int(p) for p in conf.loopback_listen)
    handoff = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) if ports else None
    enter = _child_setup(flags, isolate=isolate, root=caps["root"], cgroups=cgroups, handoff=handoff, ports=ports)
    files: list[IO] = []
    sinks: list[_CappedSink] = []
    cap = conf.output_cap_bytes
    streams = [_open_capped(stdout, cap, files, sinks) if cap else _open_stream(stdout, "w", files),
               _open_capped(stderr, cap, files, sinks) if cap else _open_stream(stderr, "w", files)]
    rusage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    supervisor_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": _package_parent(),
                      "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    try:
        popen = subprocess.Popen(
            [sys.executable, "-s", "-m", "mdbench.sandbox", str(spec_path)],
            stdin=_open_stream(stdin, "r", files), stdout=streams[0], stderr=streams[1], env=supervisor_env,
            preexec_fn=enter, close_fds=True, text=True,
            bufsize=1 if (stdin is subprocess.PIPE or stdout is subprocess.PIPE) else -1)
    except BaseException:
        shutil.rmtree(report_dir, ignore_errors=True)
        if cgroups is not None:
            cgroups.remove()
        if image is not None:
            _unlink_quiet(image)
        for sink in sinks:
            sink.abandon()
        raise
    finally:
        for sink in sinks:
            sink.close_writer()  # the supervisor holds the write end now
    proc = ConfinedProcess(popen, conf, method, cgroups, started, rusage0, files, report_dir / "report.json")
    proc.listeners = _receive_listeners(handoff, ports, popen) if handoff is not None else {}
    proc._sinks = sinks
    proc._image, proc._image_names = image, image_names
    return proc


def _method(conf: Confinement, caps: dict[str, Any], uid_gid: tuple[int, int] | None, isolate: bool,
            private_ipc: bool) -> dict[str, Any]:
    """What the confinement applies (``SandboxResult.method``), ``limits`` included (cgroups add theirs)."""
    tmp = isolate and conf.private_tmp
    limits: dict[str, Any] = {
        "tmp_size_mib": conf.tmp_size_mib if tmp else None, "shm_size_mib": conf.shm_size_mib if tmp else None,
        "private_paths": list(_PRIVATE_TMP) if tmp else [],
        "file_size_max_mib": conf.file_size_max_mib, "output_cap_bytes": conf.output_cap_bytes,
        "memory_mib": None, "pids_max": None,
    }
    method: dict[str, Any] = {
        "isolation": "namespaces" if isolate else "none",
        "user": conf.user if uid_gid else None, "uid": uid_gid[0] if uid_gid else os.geteuid(),
        "pid_namespace": isolate, "mount_namespace": isolate, "network_namespace": isolate and not conf.network,
        "ipc_namespace": private_ipc, "uts_namespace": private_ipc,
        "user_namespace": isolate and not caps["root"], "cpus": list(conf.cpus) if conf.cpus is not None else None,
        "hidden": [str(p) for p in _hidden_list(conf)], "readonly": [str(p) for p in conf.readonly],
        "loopback_listen": list(conf.loopback_listen), "limits": limits,
    }
    if not isolate:
        method["why_not"] = caps.get("namespace_error", "namespaces unavailable")
    return method


def _prepare_quota(conf: Confinement, isolate: bool, uid_gid: tuple[int, int] | None,
                   limits: dict[str, Any]) -> tuple[Path | None, list[str]]:
    """The workdir's quota image (loop mount), or the per-file ``RLIMIT_FSIZE`` fallback; recorded in
    ``limits["workspace_quota"]``. Returns the image path (None without one) and the names copied into it."""

    if conf.workdir_quota_mib is None:
        limits["workspace_quota"] = None
        return None, []
    quota = int(conf.workdir_quota_mib)
    ok, why = sandbox_quota.available()
    if ok and not isolate:
        ok, why = False, "no mount namespace of the sandbox's own"
    if not ok:
        limits["workspace_quota"] = {"method": "poll_and_rlimit_fsize", "quota_mib": quota, "why_not_loop": why,
                                     "poll_s": _QUOTA_POLL_S, "enforced": "each file by RLIMIT_FSIZE; the total by a "
                                     "poll that ends the tree (it may overshoot between polls)"}
        return None, []
    image = Path(conf.workdir_image) if conf.workdir_image else sandbox_quota.default_image(Path(conf.workdir))
    try:
        names = sandbox_quota.make_image(image, quota, Path(conf.workdir), uid_gid)
    except OSError as exc:
        raise SandboxError(f"cannot make the workspace quota image {image}: {exc}") from None
    limits["workspace_quota"] = {"method": "loop_ext4", "quota_mib": quota, "image": str(image)}
    return image, names


def _write_spec(argv: Sequence[str], conf: Confinement, method: dict[str, Any], report_dir: Path, *,
                uid_gid: tuple[int, int] | None, isolate: bool, cgroups: _Cgroups | None,
                image: Path | None) -> Path:
    """``report_dir/spec.json`` for the supervisor (0600; it holds the env and is deleted once read)."""
    quota = method["limits"].get("workspace_quota") or {}
    fsize = conf.file_size_max_mib
    if quota.get("quota_mib"):  # the quota counts logical sizes: no file, sparse or not, larger than the quota
        fsize = min(x for x in (fsize, quota["quota_mib"]) if x is not None)
        method["limits"]["file_size_max_mib"] = fsize
    spec = {"argv": list(argv), "workdir": str(conf.workdir), "env": dict(conf.env),
            "readonly": [str(p) for p in conf.readonly], "writable": [str(p) for p in conf.writable],
            "hidden": method["hidden"], "private_tmp": conf.private_tmp, "network": conf.network,
            "tmp_size_mib": conf.tmp_size_mib, "shm_size_mib": conf.shm_size_mib, "file_size_max_mib": fsize,
            "cpus": list(conf.cpus) if conf.cpus is not None else None,
            "uid_gid": list(uid_gid) if uid_gid else None, "isolate": isolate,
            "report": str(report_dir / "report.json"), "grace_s": conf.grace_s, "caller_pid": os.getpid(),
            "cgroups": [str(d) for d in cgroups.dirs.values()] if cgroups else [],
            "quota_image": None if image is None else str(image),
            "quota_poll_bytes": (quota["quota_mib"] * 2**20 if quota.get("method") == "poll_and_rlimit_fsize"
                                 else None),
            # the supervisor's own backstop: the tree ends even if the caller's clock never fires
            "deadline_s": None if conf.timeout_s is None else float(conf.timeout_s) + conf.grace_s + 5.0}
    spec_path = report_dir / "spec.json"
    fd = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(spec))
    os.chmod(report_dir, 0o700)
    return spec_path


def _child_setup(flags: int, *, isolate: bool, root: bool, cgroups: _Cgroups | None,
                 handoff: tuple[socket.socket, socket.socket] | None, ports: tuple[int, ...]) -> Any:
    """The supervisor's ``preexec_fn``: new session, parent-death signal, cgroups, namespaces, loopback ports."""
    in_main_thread = threading.current_thread() is threading.main_thread()

    def enter() -> None:  # runs in the child between fork and exec
        os.setsid()
        if in_main_thread:  # PDEATHSIG follows the forking *thread*; other callers rely on the supervisor's poll
            die_with_parent(signal.SIGTERM)  # the supervisor ends the tree, then cleans up, when the caller dies
        if cgroups is not None:
            cgroups.attach(os.getpid())
        if isolate:
            ids = os.getuid(), os.getgid()  # before unshare: inside a new user namespace they read as 65534
            _unshare(flags)
            if not root:
                _map_root_user(*ids)
            if handoff is not None:
                _loopback_up()
                socks = [socket.create_server(("127.0.0.1", port), backlog=64) for port in ports]
                socket.send_fds(handoff[1], [json.dumps(ports).encode()], [s.fileno() for s in socks])
                for sk in socks:
                    sk.close()

    return enter


def _receive_listeners(handoff: tuple[socket.socket, socket.socket], ports: tuple[int, ...],
                       popen: subprocess.Popen) -> dict[int, socket.socket]:
    """The listening sockets the supervisor bound on the sandbox's loopback, port → socket."""
    try:
        handoff[0].settimeout(30)
        _msg, fds, _flags, _addr = socket.recv_fds(handoff[0], 1024, len(ports))
        return {port: socket.socket(fileno=fd) for port, fd in zip(ports, fds)}
    except OSError as exc:
        popen.kill()
        popen.wait()
        raise SandboxError(f"could not bind the sandbox's loopback ports {list(ports)}: {exc}") from None
    finally:
        handoff[0].close()
        handoff[1].close()


def _unlink_quiet(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def run_confined(argv: Sequence[str], conf: Confinement, *, stdout: Any = None, stderr: Any = None,
                 stdin: Any = None) -> SandboxResult:
    """Run ``argv`` confined by ``conf`` to its end (or its timeout) and return the result."""
    return spawn_confined(argv, conf, stdin=stdin, stdout=stdout, stderr=stderr).wait()


def _package_parent() -> str:
    return str(Path(__file__).resolve().parent.parent)


def _hidden_list(conf: Confinement) -> list[Path]:
    hidden = list(conf.hidden)
    if conf.minimal_root:
        for entry in sorted(Path("/").iterdir()):
            if entry.name not in SYSTEM_DIRS and not entry.is_symlink() and entry not in hidden:
                hidden.append(entry)
    home = Path(os.path.expanduser("~"))
    if conf.hide_home and home != Path("/") and home.is_dir() and home not in hidden:
        hidden.append(home)
    return hidden


def _check_paths(conf: Confinement) -> None:
    for label, paths in (("workdir", (conf.workdir,)), ("readonly", conf.readonly), ("writable", conf.writable)):
        for p in paths:
            if not Path(p).is_absolute():
                raise SandboxError(f"sandbox {label} path {p} is not absolute")
            if not Path(p).exists():
                raise SandboxError(f"sandbox {label} path {p} does not exist")
    for p in conf.hidden:
        if not Path(p).is_absolute():
            raise SandboxError(f"sandbox hidden path {p} is not absolute")


def _map_root_user(uid: int, gid: int) -> None:
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
    Path("/proc/self/gid_map").write_text(f"0 {gid} 1")


# ----------------------------------------------------------------------------- inside: supervisor and reaper

def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = _libc()
    rc = libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                    data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _prctl(option: int, arg: int) -> None:
    _libc().prctl(option, ctypes.c_ulong(arg), 0, 0, 0)


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Have the kernel send ``signum`` to this process when its parent ends, however it ends (Linux
    ``PR_SET_PDEATHSIG``): the reaper with its supervisor, the audit's reanalysis child with the audit."""
    _prctl(_PR_SET_PDEATHSIG, signum)


def _prepare_mounts(spec: dict[str, Any]) -> None:
    """Private /tmp, hidden paths covered, exposed paths bound back (from fds opened first), read-only remounts."""
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    entries: list[tuple[str, str]] = ([(p, "hidden") for p in spec["hidden"]]
                                      + [(p, "readonly") for p in spec["readonly"]]
                                      + [(p, "writable") for p in [spec["workdir"], *spec["writable"]]])
    if spec["private_tmp"]:
        entries.extend((p, "tmp") for p in _PRIVATE_TMP)
    entries = list(dict.fromkeys(entries))  # the workdir may be listed as writable too: mounted once
    fds = {p: os.open(p, _O_PATH) for p, kind in entries if kind in ("readonly", "writable")}
    image_fd = spec.get("_image_fd")
    covered: list[str] = []  # tmpfs we made (read-only at the end)
    for path, kind in sorted(entries, key=lambda e: (len(Path(e[0]).parts), e[1] != "tmp")):
        if kind in ("hidden", "tmp"):
            if kind == "hidden" and not os.path.lexists(path):
                continue
            if kind == "hidden" and not os.path.isdir(path):
                _mount("/dev/null", path, None, _MS_BIND)
                continue
            if kind == "tmp" and not os.path.isdir(path):
                if os.path.lexists(path) or not any(path.startswith(c + "/") for c in covered):
                    continue  # never create a folder on the host's file system
                os.makedirs(path, exist_ok=True)  # inside a tmpfs of ours (e.g. /run/lock under a hidden /run)
            if kind == "tmp":
                size = spec.get("tmp_size_mib", 2048) if path == "/tmp" else spec.get("shm_size_mib", 256)
                data = f"mode=1777,size={int(size)}m"
            else:
                data = "mode=0755,size=64m"
            _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, data)
            if kind == "hidden":
                covered.append(path)
        else:
            _ensure_mountpoint(path, os.path.isdir(f"/proc/self/fd/{fds[path]}"))
            if image_fd is not None and path == spec["workdir"]:
                sandbox_quota.mount_image(image_fd, path)  # the quota: the workdir is the image, in this namespace only
                continue
            _mount(f"/proc/self/fd/{fds[path]}", path, None, _MS_BIND | _MS_REC)
            if kind == "readonly":
                _mount("none", path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _kept_flags(path))
    for path in covered:
        _mount("none", path, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    for fd in fds.values():
        os.close(fd)


def _kept_flags(path: str) -> int:
    """Flags of the mount under ``path`` a remount must keep (a user namespace may not drop locked ones)."""
    f = os.statvfs(path).f_flag
    flags = f & (_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    flags |= 1024 if f & os.ST_NOATIME else 0          # MS_NOATIME
    flags |= 2048 if f & os.ST_NODIRATIME else 0       # MS_NODIRATIME
    flags |= (1 << 21) if f & os.ST_RELATIME else 0    # MS_RELATIME
    return flags


def _ensure_mountpoint(path: str, is_dir: bool) -> None:
    if os.path.lexists(path):
        return
    os.makedirs(path if is_dir else os.path.dirname(path), exist_ok=True)
    if not is_dir:
        Path(path).touch()


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, ifr))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 0x1 | 0x40))  # SIOCSIFFLAGS: UP|RUNNING


def _ns_pids() -> list[int]:
    """Every process of this PID namespace but PID 1 (as seen from inside, after /proc was remounted)."""
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) != 1]


def _alive(pids: list[int]) -> list[int]:
    """The processes of ``pids`` that still run (a zombie has ended; only its parent's wait is missing)."""
    out = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2:][:1] not in ("Z", "X"):
            out.append(pid)
    return out


def _exec_command(spec: dict[str, Any]) -> None:
    """In the command's process: drop to the user, pin CPUs, exec. Never returns."""
    try:
        if spec["cpus"] is not None:
            os.sched_setaffinity(0, spec["cpus"])
        if spec["uid_gid"]:
            uid, gid = spec["uid_gid"]
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
        try:
            os.chdir(spec["workdir"])
        except OSError as exc:
            raise OSError(exc.errno, f"cannot enter the workdir {spec['workdir']}: {exc.strerror} (every parent "
                                     "folder must be searchable by the sandbox user)") from None
        os.umask(0o022)
        if spec.get("file_size_max_mib"):
            limit = int(spec["file_size_max_mib"]) * 2**20
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write or truncate past it fails (EFBIG), not kills
        try:
            os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
        except OSError as exc:
            raise OSError(exc.errno, f"cannot start {spec['argv'][0]!r}: {exc.strerror}") from None
    except OSError as exc:
        sys.stderr.write(f"mdbench sandbox: {exc.strerror or exc}\n")
        sys.stderr.flush()
        os._exit(127)


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _drain(deadline: float) -> int:
    """Reap until no other process is left in the namespace or the deadline passes; how many are left."""
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        left = _ns_pids()
        if not left or time.monotonic() >= deadline:
            return len(left)
        time.sleep(0.02)


def _reaper(spec: dict[str, Any], report_fd: int) -> None:
    """PID 1 of the new namespace: run the command, reap orphans, pass on SIGTERM, exit with its status.

    When the command's main process ends, the processes it left get SIGTERM and a short grace; when the
    caller ends the tree, every process gets SIGTERM and ``grace_s``. Whatever is left when this process
    exits is killed by the kernel with the namespace.
    """
    die_with_parent(signal.SIGKILL)
    isolated = spec["isolate"]
    if isolated:
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    child = os.fork()
    if child == 0:
        os.close(report_fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _exec_command(spec)
    terminating: list[float] = []
    forced: list[int] = []  # processes still alive when the grace period ended (each got SIGKILL)

    def kill_after_grace(_signum: int, _frame: Any) -> None:
        left = _alive(_ns_pids()) if isolated else _alive([child])
        forced.append(len(left))
        _signal_all(left, signal.SIGKILL)

    def forward(_signum: int, _frame: Any) -> None:
        if not terminating:  # the grace period runs from the first SIGTERM; then SIGKILL to whatever is left
            terminating.append(time.monotonic())
            signal.signal(signal.SIGALRM, kill_after_grace)
            signal.setitimer(signal.ITIMER_REAL, max(float(spec["grace_s"]), 0.01))
        _signal_all(_ns_pids() if isolated else [child], signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    code = 1
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            break
    stragglers = 0
    if isolated:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:  # zombies are not stragglers
                pass
        except ChildProcessError:
            pass
        stragglers = len(_ns_pids())  # left behind by the main process; all are ended below
        if terminating:
            deadline = terminating[0] + spec["grace_s"]
        else:
            _signal_all(_ns_pids(), signal.SIGTERM)
            deadline = time.monotonic() + min(spec["grace_s"], 1.0)
        _drain(deadline)
    signal.setitimer(signal.ITIMER_REAL, 0)
    # a tree the caller ended: what outlived SIGTERM and the grace period (the main process too, if it ignored
    # SIGTERM) was killed, and counts as left behind — not only what the main process left when it ended
    stragglers = max(stragglers, forced[0] if forced else 0)
    code = code if code >= 0 else 128 - code
    os.write(report_fd, json.dumps({"exit_code": code, "stragglers": stragglers}).encode())
    os._exit(code)  # the kernel now kills every process left in the namespace


def _supervise(spec_path: str) -> int:
    """Prepare the mounts and the network, start the reaper, wait for it, write the report.

    The spec is deleted as soon as it is read (it holds the command's environment). If the caller dies (its
    SIGTERM through ``PR_SET_PDEATHSIG``, or a poll of the parent id for callers that spawned from a thread),
    the tree is killed at once (no grace period: nobody is left to audit it) and this process removes the cgroup folders, the quota image and
    the report folder itself, since nobody is left to read them.
    """
    spec = _read_spec(spec_path)
    report_fd = os.open(spec["report"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # before /tmp is covered
    try:
        _confine_self(spec)
    except OSError as exc:
        os.write(report_fd, json.dumps({"setup_error": str(exc)}).encode())
        sys.stderr.write(f"mdbench sandbox: could not confine the process: {exc}\n")
        if os.getppid() != spec.get("caller_pid"):
            _orphan_cleanup(spec)
        return 126
    read_fd, write_fd = os.pipe()
    reaper = os.fork()  # with a new PID namespace, this child is its process 1
    if reaper == 0:
        os.close(read_fd)
        _reaper(spec, write_fd)
    os.close(write_fd)
    caller_gone, status = _watch_reaper(spec, reaper)
    data = b""
    while chunk := os.read(read_fd, 65536):
        data += chunk
    info = json.loads(data) if data else {"exit_code": None, "stragglers": 0,
                                          "reaper_status": os.waitstatus_to_exitcode(status)}
    if spec.get("_quota_exceeded_bytes"):
        info["workspace_quota_exceeded_bytes"] = spec["_quota_exceeded_bytes"]
    os.write(report_fd, json.dumps(info).encode())
    os.close(report_fd)
    if caller_gone or os.getppid() != spec.get("caller_pid"):
        _orphan_cleanup(spec)
    code = info["exit_code"]
    return code if isinstance(code, int) and 0 <= code < 256 else 1


def _read_spec(spec_path: str) -> dict[str, Any]:
    """The spec (deleted at once), with descriptors of the folders to clean up opened before any mount."""
    spec = json.loads(Path(spec_path).read_text())
    try:
        os.unlink(spec_path)
    except OSError:
        pass
    folder = os.path.dirname(spec["report"])
    spec["_folder_fds"] = (os.open(folder, os.O_RDONLY | os.O_DIRECTORY),
                           os.open(os.path.dirname(folder), os.O_RDONLY | os.O_DIRECTORY))
    if spec.get("quota_image"):
        image = spec["quota_image"]
        spec["_image_fd"] = os.open(image, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        spec["_image_dir_fd"] = os.open(os.path.dirname(image), os.O_RDONLY | os.O_DIRECTORY)
    return spec


def _confine_self(spec: dict[str, Any]) -> None:
    """Mounts, loopback, host name (this process is already in the new namespaces)."""
    if spec["isolate"]:
        _prepare_mounts(spec)
        if not spec["network"]:
            _loopback_up()
        try:
            socket.sethostname("mdbench-sandbox")
        except OSError:
            pass  # no UTS namespace of our own: leave the host's name alone (it failed, nothing changed)
    if spec.get("_image_fd") is not None:
        os.close(spec.pop("_image_fd"))  # the mount holds the loop device now


def _watch_reaper(spec: dict[str, Any], reaper: int) -> tuple[bool, int]:
    """Wait for the reaper; end its tree when the caller goes or the backstop deadline passes.

    Returns (whether the caller went away, the reaper's wait status).
    """
    state = {"caller_gone": False, "ended": False, "polled": 0.0}
    started = time.monotonic()

    def end_tree(*_: Any) -> None:
        if state["caller_gone"] and spec["isolate"]:
            # nobody is left to audit what the tree leaves: no grace period. SIGKILL to process 1 of the PID
            # namespace ends every process in it at once, so the tree and this supervisor are gone within ~1 s
            try:
                os.kill(reaper, signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif not state["ended"]:
            state["ended"] = True
            try:
                os.kill(reaper, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def on_term(*_: Any) -> None:
        if os.getppid() != spec.get("caller_pid"):
            state["caller_gone"] = True
        end_tree()

    def tick(*_: Any) -> None:  # four times a second: is the caller still there, is the backstop deadline past
        if os.getppid() != spec.get("caller_pid"):
            state["caller_gone"] = True
            end_tree()
        elif spec.get("deadline_s") is not None and time.monotonic() - started > spec["deadline_s"]:
            end_tree()
        elif spec.get("quota_poll_bytes") and time.monotonic() - state["polled"] >= _QUOTA_POLL_S:
            state["polled"] = time.monotonic()
            used = _bytes_used(spec["workdir"], spec["quota_poll_bytes"])
            if used > spec["quota_poll_bytes"]:
                spec["_quota_exceeded_bytes"] = used
                end_tree()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    signal.signal(signal.SIGALRM, tick)
    signal.setitimer(signal.ITIMER_REAL, 0.25, 0.25)
    while True:
        try:
            _, status = os.waitpid(reaper, 0)
            break
        except InterruptedError:
            continue
    signal.setitimer(signal.ITIMER_REAL, 0)
    return state["caller_gone"], status


def _bytes_used(root: str, limit: int, max_entries: int = 1_000_000) -> int:
    """Bytes allocated under ``root`` (a hard-linked file once, links not followed); stops past ``limit``.

    More than ``max_entries`` entries counts as over the quota (a flood of empty files is a disk attack too)."""
    total, seen, entries = 0, set(), 0
    stack = [root]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                entries += 1
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                if total > limit or entries > max_entries:
                    return max(total, limit + 1)
    return total


def _orphan_cleanup(spec: dict[str, Any]) -> None:
    """The caller is gone: leave no cgroup folder and no ``/tmp/mdbench-sandbox-*`` folder behind."""
    me = str(os.getpid())
    for d in spec.get("cgroups", []):
        parent = Path(d).parent
        try:
            (parent / "cgroup.procs").write_text(me)  # out of the folder, so it can be removed
        except OSError:
            pass
        for _ in range(100):
            try:
                for pid in (Path(d) / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
            except OSError:
                pass
            if _rmdir_quiet(Path(d)):
                break
            time.sleep(0.02)
    if spec.get("_image_dir_fd") is not None:  # nobody will copy the workspace back: the image goes
        try:
            os.unlink(os.path.basename(spec["quota_image"]), dir_fd=spec["_image_dir_fd"])
        except OSError:
            pass
    # the report folder was made before our mount namespace covered /tmp: reach it through descriptors opened
    # before the mounts (the folder holds only report.json; spec.json is gone already)
    folder_fd, parent_fd = spec["_folder_fds"]
    for name in os.listdir(folder_fd):
        try:
            os.unlink(name, dir_fd=folder_fd)
        except OSError:
            pass
    try:
        os.rmdir(os.path.basename(os.path.dirname(spec["report"])), dir_fd=parent_fd)
    except OSError:
        pass


if __name__ == "__main__":  # the supervisor, started by spawn_confined inside the new namespaces
    sys.exit(_supervise(sys.argv[1]))
