"""How a coordinator process is confined: what it may read, what is hidden, built on :mod:`mdbench.sandbox`.

A coordinator that is not a shipped baseline runs as a separate process started by
:func:`mdbench.sandbox.spawn_confined` — a separate unprivileged user (``mdbench-sdl-coordinator``) when the
evaluator is root, mount/PID/network namespaces, a private ``/tmp``, nothing of the evaluator's environment.
What it can see is decided here, deny-first:

* hidden: every top-level folder of ``/`` except the operating system's own (``/usr``, ``/etc``, ``/lib*``,
  ``/bin``, ``/sbin``, ``/dev``, ``/proc``, ``/sys``, ``/run``, ``/tmp``) — so checkouts, other worktrees,
  shared data areas, home folders and ``/var`` are gone; the packaged records inside the installed
  ``mdbench`` package (:func:`record_data_dirs`); the compile's ``evaluator/`` tree and the results folder;
  anything the caller adds;
* read-only: the Python runtime (:func:`mdbench.sandbox.runtime_paths`), a *per-session view* — a fresh
  folder holding only this session's assignment file (``<assignment_id>.json``), the two schemas and the
  README (:func:`mdbench.sdl.bundle.session_view_files`); the compile's ``agent/`` tree itself is hidden (the
  other assignments of the compile are never visible to a session) — the policy program's own files
  (command-line arguments that are existing files) and what the caller adds;
* writable: a fresh, empty working folder (``HOME``), removed when the session ends.

Every session is fresh: besides its own ``HOME``, the shared sandbox gives it private ``/tmp``, ``/dev/shm``,
``/var/tmp`` and ``/run/lock`` and its own IPC namespace, so nothing one session writes is there for the next
(a coordinator that remembered an earlier assignment's initial context could otherwise forecast a later
rotation's held-out panel). Resource limits (:class:`SessionLimits`: memory, pids, tmpfs size, captured
output) are passed to the sandbox and recorded in the trace with the isolation method.

Nesting is resolved by the sandbox (a hidden folder inside a re-exposed one is hidden again). The method that
was enforced (user, namespaces, what was hidden) is returned for the trace.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

#: Top-level folders a Python program needs from the operating system; every other one is hidden.
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "sys", "run", "tmp")
#: The unprivileged account coordinators run as when the evaluator is root.
COORDINATOR_USER = "mdbench-sdl-coordinator"


def record_data_dirs() -> list[Path]:
    """Folders of the installed package that hold recorded experiment maps (evaluator-private)."""
    return [Path(str(resources.files("mdbench.sdl") / "data"))]


def deny_by_default() -> list[Path]:
    """Every real (non-symlink) top-level folder that is not an operating-system folder."""
    out = []
    for p in sorted(Path("/").iterdir()):
        if p.name not in SYSTEM_DIRS and p.is_dir() and not p.is_symlink():
            out.append(p)
    return out


@dataclass(frozen=True)
class SessionLimits:
    """Resource limits of one coordinator session (passed to :class:`mdbench.sandbox.Confinement`).

    Attributes
    ----------
    memory_mib : int or None
        Memory limit of the session's process tree [MiB] (cgroup).
    pids_max : int
        Most processes/threads the session may hold at once.
    tmp_size_mib : int
        Size of each private tmpfs (``/tmp``, ``/dev/shm``, …) [MiB].
    output_cap_bytes : int
        Captured stderr kept per session [bytes] (head and tail, with a cut marker).
    file_size_max_mib : int
        Largest file the session may write [MiB] (RLIMIT_FSIZE).
    """

    memory_mib: int | None = 4096
    pids_max: int = 256
    tmp_size_mib: int = 512
    output_cap_bytes: int = 1 << 20
    file_size_max_mib: int = 1024

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _confinement_limits(limits: SessionLimits) -> tuple[dict[str, Any], list[str]]:
    """The keyword arguments of :class:`mdbench.sandbox.Confinement` that carry ``limits`` and the private
    IPC/tmp settings, and the names the installed sandbox does not know (recorded as not enforced)."""
    from mdbench.sandbox import Confinement

    known = {f.name for f in dataclasses.fields(Confinement)}
    want = {"private_tmp": True, "private_ipc": True, **limits.to_dict()}
    return {k: v for k, v in want.items() if k in known}, sorted(k for k in want if k not in known)


@dataclass
class CoordinatorSandbox:
    """Confinement settings of coordinator sessions (one fresh process per session).

    Parameters
    ----------
    agent_dir : path, optional
        The compile's ``agent/`` tree. Hidden as a whole; a session sees only its view (see module docstring)
        in ``MDBENCH_SDL_AGENT_DIR`` (and its assignment file in ``MDBENCH_SDL_ASSIGNMENT``).
    assignment_id : str, optional
        The assignment of the sessions (set per campaign with :meth:`for_assignment`).
    hide : paths
        Extra evaluator-private paths (the compile's ``evaluator/``, the results folder).
    expose : paths
        Extra read-only paths the policy program needs.
    network : bool
        Allow network access (default: own network namespace with loopback only).
    confine : bool
        False runs the process unconfined (recorded as ``isolation: none``; never ranked) — for comparisons.
    limits : SessionLimits
        Resource limits of every session.
    """

    agent_dir: Path | None = None
    assignment_id: str | None = None
    hide: tuple[Path, ...] = ()
    expose: tuple[Path, ...] = ()
    network: bool = False
    confine: bool = True
    cpus: tuple[int, ...] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    limits: SessionLimits = field(default_factory=SessionLimits)

    def for_assignment(self, assignment_id: str) -> "CoordinatorSandbox":
        """The same settings for the sessions of one assignment."""
        return dataclasses.replace(self, assignment_id=assignment_id)

    def _env(self, home: Path, view: Path | None) -> dict[str, str]:
        env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
               "HOME": str(home), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
        if view is not None:
            env["MDBENCH_SDL_AGENT_DIR"] = str(view)
            if self.assignment_id is not None:
                env["MDBENCH_SDL_ASSIGNMENT"] = str(view / f"{self.assignment_id}.json")
        env.update(self.extra_env)
        return env

    def make_view(self) -> Path | None:
        """A fresh folder holding this session's view of the agent tree (copies), or None without an agent tree."""
        if self.agent_dir is None:
            return None
        from mdbench.sdl.bundle import session_view_files

        view = Path(tempfile.mkdtemp(prefix="mdbench-sdl-view-"))
        for src in session_view_files(self.agent_dir, self.assignment_id):
            shutil.copyfile(src, view / src.name, follow_symlinks=False)
            os.chmod(view / src.name, 0o444)
        os.chmod(view, 0o555)
        return view

    def hidden_paths(self) -> list[Path]:
        """Everything hidden from the coordinator (see module docstring)."""
        own = [Path(self.agent_dir).resolve()] if self.agent_dir is not None else []
        return deny_by_default() + record_data_dirs() + own + [Path(p).resolve() for p in self.hide]

    def readonly_paths(self, argv: list[str], view: Path | None = None) -> list[Path]:
        """The runtime, the session's view, the program's own files and the caller's extra paths."""
        from mdbench.paths import PROJECT_ROOT
        from mdbench.sandbox import runtime_paths

        root = PROJECT_ROOT.resolve()
        needed = sorted({Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), root / "lib"})
        ro = []
        for p in runtime_paths():
            if p == root or p in root.parents or root in p.parents:
                # never the checkout (results, outputs, tests on sys.path): only its lib/ and the interpreters
                ro += [q for q in needed if q.exists() and (q == p or p in q.parents) and q not in ro]
            else:
                ro.append(p)
        if view is not None:
            ro.append(view)
        ro += [Path(a).resolve() for a in argv[1:] if os.path.isfile(a)]
        if os.path.isfile(argv[0]) and not any(_inside(Path(argv[0]).resolve(), r) for r in ro):
            ro.append(Path(argv[0]).resolve())
        ro += [Path(p).resolve() for p in self.expose]
        return ro

    def spawn(self, argv: list[str], stderr: Path) -> "CoordinatorProcess":
        """Start ``argv`` with JSON-lines pipes, confined (or not, when ``confine`` is False).

        Relative paths that name existing files are made absolute first (the process starts in its own
        working folder).
        """
        argv = [os.path.abspath(a) if not os.path.isabs(a) and os.path.exists(a) and ("/" in a or i > 0) else a
                for i, a in enumerate(argv)]
        home = Path(tempfile.mkdtemp(prefix="mdbench-sdl-coord-"))
        view = self.make_view()
        cleanup = [home] + ([view] if view is not None else [])
        if not self.confine:
            with stderr.open("wb") as err:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                        bufsize=1, cwd=home, env=self._env(home, view))
            return CoordinatorProcess(proc, cleanup, {"method": "unconfined_process", "isolation": "none",
                                                      "reason": "confinement disabled by the caller"},
                                      sandboxed=False)
        from mdbench.sandbox import Confinement, spawn_confined

        limits, unsupported = _confinement_limits(self.limits)
        conf = Confinement(workdir=home, env=self._env(home, view), readonly=tuple(self.readonly_paths(argv, view)),
                           writable=(), hidden=tuple(self.hidden_paths()), network=self.network, cpus=self.cpus,
                           user=COORDINATOR_USER, timeout_s=None, grace_s=5.0, tag="sdl-coordinator", **limits)
        try:
            proc = spawn_confined(argv, conf, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        except BaseException:
            for p in cleanup:
                shutil.rmtree(p, ignore_errors=True)
            raise
        method = {"method": "confined_process", **{k: v for k, v in proc.method.items() if not k.startswith("_")},
                  "session_limits": self.limits.to_dict(), "fresh_session": {
                      "private": ["HOME", "/tmp", "/dev/shm", "/var/tmp", "/run/lock", "ipc"],
                      "not_enforced": unsupported},
                  "agent_view": sorted(p.name for p in view.iterdir()) if view is not None else []}
        return CoordinatorProcess(proc, cleanup, method, sandboxed=True)


def _inside(p: Path, root: Path) -> bool:
    try:
        p.relative_to(root)
        return True
    except ValueError:
        return False


class CoordinatorProcess:
    """A running coordinator: text pipes, and a uniform way to end it and report what happened."""

    def __init__(self, proc: Any, cleanup: list[Path], method: dict[str, Any], sandboxed: bool):
        self._proc = proc
        self.home = cleanup[0]
        self._cleanup = cleanup
        self.method = method
        self.sandboxed = sandboxed
        self.stdin = proc.stdin
        self.stdout = proc.stdout

    def poll(self) -> int | None:
        return self._proc.poll()

    def finish(self, wait_s: float = 5.0) -> dict[str, Any]:
        """Wait up to ``wait_s`` for a voluntary exit, then terminate the whole tree; remove the work folder."""
        try:
            if self.sandboxed:
                try:
                    res = self._proc.wait(timeout=wait_s)
                except subprocess.TimeoutExpired:
                    res = self._proc.terminate()
                out = res.to_json()
                # the method is recorded once, as the session's isolation; keep what the limits did
                out["limits"] = (out.pop("method", None) or {}).get("limits")
            else:
                try:
                    code = self._proc.wait(timeout=wait_s)
                    out = {"status": "exited", "exit_code": code}
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    out = {"status": "terminated", "exit_code": self._proc.wait()}
                for stream in (self._proc.stdin, self._proc.stdout):
                    try:
                        stream.close()
                    except (OSError, ValueError):
                        pass
        finally:
            for p in self._cleanup:
                _remove_tree(p)
        return out


def _remove_tree(p: Path) -> None:
    """Remove a session folder, read-only views included."""
    try:
        os.chmod(p, 0o700)
    except OSError:
        pass
    shutil.rmtree(p, ignore_errors=True)
