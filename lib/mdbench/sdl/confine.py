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
* read-only: the Python runtime (:func:`mdbench.sandbox.runtime_paths`), the compile's ``agent/`` tree,
  the policy program's own files (command-line arguments that are existing files) and what the caller adds;
* writable: a fresh, empty working folder (``HOME``), removed when the session ends.

Nesting is resolved by the sandbox (a hidden folder inside a re-exposed one is hidden again). The method that
was enforced (user, namespaces, what was hidden) is returned for the trace.
"""

from __future__ import annotations

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


@dataclass
class CoordinatorSandbox:
    """Confinement settings of coordinator sessions (one fresh process per session).

    Parameters
    ----------
    agent_dir : path, optional
        The compile's ``agent/`` tree (read-only inside, and in ``MDBENCH_SDL_AGENT_DIR``).
    hide : paths
        Extra evaluator-private paths (the compile's ``evaluator/``, the results folder).
    expose : paths
        Extra read-only paths the policy program needs.
    network : bool
        Allow network access (default: own network namespace with loopback only).
    confine : bool
        False runs the process unconfined (recorded as ``isolation: none``; never ranked) — for comparisons.
    """

    agent_dir: Path | None = None
    hide: tuple[Path, ...] = ()
    expose: tuple[Path, ...] = ()
    network: bool = False
    confine: bool = True
    cpus: tuple[int, ...] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    def _env(self, home: Path) -> dict[str, str]:
        env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
               "HOME": str(home), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
        if self.agent_dir is not None:
            env["MDBENCH_SDL_AGENT_DIR"] = str(self.agent_dir)
        env.update(self.extra_env)
        return env

    def hidden_paths(self) -> list[Path]:
        """Everything hidden from the coordinator (see module docstring)."""
        return deny_by_default() + record_data_dirs() + [Path(p).resolve() for p in self.hide]

    def readonly_paths(self, argv: list[str]) -> list[Path]:
        """The runtime, the agent tree, the program's own files and the caller's extra paths."""
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
        if self.agent_dir is not None:
            ro.append(Path(self.agent_dir).resolve())
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
        if not self.confine:
            with stderr.open("wb") as err:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                        bufsize=1, cwd=home, env=self._env(home))
            return CoordinatorProcess(proc, home, {"method": "unconfined_process", "isolation": "none",
                                                   "reason": "confinement disabled by the caller"}, sandboxed=False)
        from mdbench.sandbox import Confinement, spawn_confined

        conf = Confinement(workdir=home, env=self._env(home), readonly=tuple(self.readonly_paths(argv)),
                           writable=(), hidden=tuple(self.hidden_paths()), network=self.network, cpus=self.cpus,
                           user=COORDINATOR_USER, private_tmp=True, timeout_s=None, grace_s=5.0,
                           tag="sdl-coordinator")
        proc = spawn_confined(argv, conf, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        method = {"method": "confined_process", **{k: v for k, v in proc.method.items() if not k.startswith("_")}}
        return CoordinatorProcess(proc, home, method, sandboxed=True)


def _inside(p: Path, root: Path) -> bool:
    try:
        p.relative_to(root)
        return True
    except ValueError:
        return False


class CoordinatorProcess:
    """A running coordinator: text pipes, and a uniform way to end it and report what happened."""

    def __init__(self, proc: Any, home: Path, method: dict[str, Any], sandboxed: bool):
        self._proc = proc
        self.home = home
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
                out.pop("method", None)   # recorded once, as the session's isolation
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
            shutil.rmtree(self.home, ignore_errors=True)
        return out
