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
  other assignments of the compile are never visible to a session) — the policy's own folder, granted
  explicitly (``policy_dir``, ``mdbench sdl run --policy-dir``), and what the caller adds (``expose``);
* writable: a fresh, empty working folder (``HOME``), removed when the session ends.

Nothing a command line *names* is mounted: a file given as an argument of ``--policy-cmd`` is visible inside
the sandbox only when it lies inside a granted folder (``policy_dir`` or ``expose``), and then through that
folder's mount — a symlink in it resolves inside the sandbox's own view, where the evaluator's files are hidden.
A granted folder that lies inside, or holds, a hidden evaluator folder is refused (:class:`GrantError`), and
:meth:`CoordinatorSandbox.readonly_paths` drops any read-only path that lies inside a hidden folder (the
sandbox would bind it back over the cover). Second line of defence: the compile's ``evaluator/`` files are mode
0600 and its folders 0700, owned by the evaluator's account (:func:`mdbench.sdl.bundle.protect_evaluator`), so
the coordinator's account cannot open them whatever path, link or mount order reaches them.

Session folders (``HOME``, the view, the stderr capture) are named ``mdbench-sdl-<kind>-<pid>-…`` after the
runner's process id: a session removes its own when it ends, an interrupted runner removes what is left at
exit (:func:`remove_session_folders`), and a later run removes those of runners that are gone
(:func:`sweep_orphans`, e.g. after a SIGKILL). ``mdbench sdl run`` keeps all of them, and the sandbox's own
folders, inside one such folder per run (:func:`run_folder`).

Every session is fresh: besides its own ``HOME``, the shared sandbox gives it private ``/tmp``, ``/dev/shm``,
``/var/tmp`` and ``/run/lock`` and its own IPC namespace, so nothing one session writes is there for the next
(a coordinator that remembered an earlier assignment's initial context could otherwise forecast a later
rotation's held-out panel). Resource limits (:class:`SessionLimits`: memory, pids, tmpfs size, captured
output) are passed to the sandbox and recorded in the trace with the isolation method.

Nesting is resolved by the sandbox (a hidden folder inside a re-exposed one is hidden again). The method that
was enforced (user, namespaces, what was hidden) is returned for the trace.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from mdbench.errors import InputError

#: Top-level folders a Python program needs from the operating system; every other one is hidden.
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "sys", "run", "tmp")
#: The unprivileged account coordinators run as when the evaluator is root.
COORDINATOR_USER = "mdbench-sdl-coordinator"
#: Tag of the coordinator sessions' sandboxes (their cgroups are ``mdbench-<tag>-<runner pid>-…``).
CGROUP_TAG = "sdl-coordinator"
#: Seconds a coordinator tree gets between SIGTERM and SIGKILL when it is ended.
GRACE_S = 2.0


#: Prefix of every session folder (HOME, view, stderr) made by this module; the runner's pid follows the kind.
SESSION_PREFIX = "mdbench-sdl-"
_SESSION_RE = re.compile(r"^mdbench-sdl-(coord|view|stderr|run)-(\d+)-")
#: Session folders of this process still in use (removed at exit if the runner is interrupted).
_LIVE: set[Path] = set()


class GrantError(InputError):
    """A folder granted to the coordinator (``policy_dir``, ``expose``) would reveal an evaluator folder."""


def session_folder(kind: str) -> Path:
    """A fresh private folder ``/tmp/mdbench-sdl-<kind>-<pid>-…`` (mode 0700), registered for removal at exit."""
    p = Path(tempfile.mkdtemp(prefix=f"{SESSION_PREFIX}{kind}-{os.getpid()}-"))
    _LIVE.add(p)
    return p


def remove_session_folder(p: Path) -> None:
    """Remove a session folder, read-only views included."""
    _LIVE.discard(p)
    try:
        os.chmod(p, 0o700)
    except OSError:
        pass
    shutil.rmtree(p, ignore_errors=True)


@contextmanager
def run_folder():
    """Put every temporary folder of this process — session folders and the sandbox's own ``mdbench-sandbox-*``
    folders — inside one ``mdbench-sdl-run-<pid>-…`` folder for the duration (``tempfile.tempdir``), removed
    at the end; a runner killed with SIGKILL leaves only that folder, which :func:`sweep_orphans` removes."""
    sweep_orphans()
    folder = session_folder("run")
    before = tempfile.tempdir
    tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = before
        remove_session_folders()


@atexit.register
def remove_session_folders() -> None:
    """Remove the session folders this process still holds (an interrupted run)."""
    for p in list(_LIVE):
        remove_session_folder(p)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_orphans(tmp: str | Path | None = None) -> list[Path]:
    """Remove what coordinator sessions of runners that are gone left behind (a SIGKILLed runner cannot clean
    up); returns what was removed.

    * session folders ``mdbench-sdl-<kind>-<pid>-…`` of a process ``pid`` that no longer exists;
    * empty cgroups ``mdbench-sdl-coordinator-<pid>-…`` of such a process;
    * sandbox folders ``mdbench-sandbox-*`` whose supervisor never started (``spec.json`` still there), whose
      caller is gone and whose cgroups are all coordinator cgroups (a runner killed while starting a session).
    """
    base = Path(tmp or tempfile.gettempdir())
    gone = []
    try:
        entries = list(base.iterdir())
    except OSError:
        entries = []
    for p in entries:
        m = _SESSION_RE.match(p.name)
        if m and int(m.group(2)) != os.getpid() and not _alive(int(m.group(2))) and p.is_dir() \
                and not p.is_symlink():
            remove_session_folder(p)
            gone.append(p)
        elif p.name.startswith("mdbench-sandbox-") and _stale_sandbox_folder(p):
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p)
    gone += _sweep_cgroups()
    return gone


def _stale_sandbox_folder(p: Path) -> bool:
    spec = p / "spec.json"
    if p.is_symlink() or spec.is_symlink() or not spec.is_file():
        return False
    try:
        body = json.loads(spec.read_text(encoding="utf-8"))
        pid = int(body["caller_pid"])
        cgroups = [Path(c).name for c in body.get("cgroups") or []]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return pid != os.getpid() and not _alive(pid) and all(c.startswith(f"mdbench-{CGROUP_TAG}-") for c in cgroups)


def _sweep_cgroups() -> list[Path]:
    from mdbench.sandbox import CGROUP_ROOT

    gone = []
    try:
        ctrls = [c for c in CGROUP_ROOT.iterdir() if c.is_dir() and not c.is_symlink()]
    except OSError:
        return gone
    for ctrl in ctrls:
        for d in ctrl.glob(f"mdbench-{CGROUP_TAG}-*"):
            m = re.match(rf"^mdbench-{CGROUP_TAG}-(\d+)-", d.name)
            if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
                try:
                    d.rmdir()          # only an empty cgroup goes
                    gone.append(d)
                except OSError:
                    pass
    return gone


def _inside(p: Path, root: Path) -> bool:
    return p == root or root in p.parents


def check_grant(path: str | Path, hidden: list[Path], what: str = "--policy-dir") -> Path:
    """``path`` resolved, or :class:`GrantError` when it lies inside, or holds, one of ``hidden``."""
    p = Path(path).resolve()
    for h in hidden:
        h = Path(h).resolve()
        if _inside(p, h) or _inside(h, p):
            rel = "lies inside" if _inside(p, h) else "holds"
            raise GrantError(f"{what} {p} {rel} the evaluator-private folder {h}; give the policy's own folder, "
                             "apart from the compile and the results", str(path))
    return p


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
    policy_dir : path, optional
        The policy's own folder (its program, weights, …), read-only. Files named on the command line are
        visible only inside it (or inside ``expose``); nothing else they name is mounted.
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
    policy_dir: Path | None = None
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

        view = session_folder("view")
        for src in session_view_files(self.agent_dir, self.assignment_id):
            shutil.copyfile(src, view / src.name, follow_symlinks=False)
            os.chmod(view / src.name, 0o444)
        os.chmod(view, 0o555)
        return view

    def evaluator_paths(self) -> list[Path]:
        """The evaluator-private folders (the agent tree, the caller's ``hide``), resolved."""
        own = [Path(self.agent_dir).resolve()] if self.agent_dir is not None else []
        return [Path(p).resolve() for p in self.hide] + own + record_data_dirs()

    def hidden_paths(self) -> list[Path]:
        """Everything hidden from the coordinator (see module docstring)."""
        return deny_by_default() + self.evaluator_paths()

    def granted(self) -> list[Path]:
        """The folders granted to the policy (``policy_dir``, ``expose``), checked (:func:`check_grant`)."""
        ev = self.evaluator_paths()
        out = [check_grant(self.policy_dir, ev)] if self.policy_dir is not None else []
        return out + [check_grant(p, ev, "--expose") for p in self.expose]

    def readonly_paths(self, view: Path | None = None) -> list[Path]:
        """The runtime, the session's view and the granted folders; never a file the command line names (it is
        visible only through a granted folder that holds it), never a path inside a hidden evaluator folder."""
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
        ro += self.granted()
        ev = self.evaluator_paths()
        return [p for p in ro if not any(_inside(Path(p).resolve(), h) for h in ev)]

    def not_granted(self, argv: list[str]) -> list[str]:
        """Arguments of ``argv`` that name existing files the sandbox does not show: outside every granted
        folder, the runtime and the operating system's folders (the private ``/tmp`` excluded)."""
        grants = self.readonly_paths() + [Path("/", d) for d in SYSTEM_DIRS if d != "tmp"]
        out = []
        for i, a in enumerate(argv):
            if (i > 0 or "/" in a) and os.path.lexists(a):
                if not any(_inside(Path(a).resolve(), g) for g in grants):
                    out.append(a)
        return out

    def spawn(self, argv: list[str], stderr: Path) -> "CoordinatorProcess":
        """Start ``argv`` with JSON-lines pipes, confined (or not, when ``confine`` is False).

        Relative paths that name existing files are made absolute first (the process starts in its own
        working folder).
        """
        argv = [os.path.abspath(a) if not os.path.isabs(a) and os.path.exists(a) and ("/" in a or i > 0) else a
                for i, a in enumerate(argv)]
        sweep_orphans()
        home = session_folder("coord")
        try:
            view = self.make_view()
        except BaseException:
            remove_session_folder(home)
            raise
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
        conf = Confinement(workdir=home, env=self._env(home, view), readonly=tuple(self.readonly_paths(view)),
                           writable=(), hidden=tuple(self.hidden_paths()), network=self.network, cpus=self.cpus,
                           user=COORDINATOR_USER, timeout_s=None, grace_s=GRACE_S, tag=CGROUP_TAG, **limits)
        try:
            proc = spawn_confined(argv, conf, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        except BaseException:
            for p in cleanup:
                remove_session_folder(p)
            raise
        method = {"method": "confined_process", **{k: v for k, v in proc.method.items() if not k.startswith("_")},
                  "session_limits": self.limits.to_dict(), "fresh_session": {
                      "private": ["HOME", "/tmp", "/dev/shm", "/var/tmp", "/run/lock", "ipc"],
                      "not_enforced": unsupported},
                  "agent_view": sorted(p.name for p in view.iterdir()) if view is not None else [],
                  "granted": [str(p) for p in self.granted()], "not_granted": self.not_granted(argv)}
        return CoordinatorProcess(proc, cleanup, method, sandboxed=True)


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
                remove_session_folder(p)
        return out
