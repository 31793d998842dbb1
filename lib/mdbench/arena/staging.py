"""A task's container on this machine: path mapping, Dockerfile replay and the agent's sandbox.

Both ways of running a task without Docker use this module, so they stage a task identically:
the local runner (:mod:`mdbench.arena.runner`, Python 3.11, no Harbor) and the Harbor host
environment plug-in (:mod:`mdbench.arena.harbor_env`, run by ``harbor run -e …``).

**Path mapping.** A trial gets a private workspace folder; every container root the tasks and
Harbor use (:data:`CONTAINER_ROOTS`: ``/app``, ``/tests``, ``/solution``, ``/logs``) maps to the same
path under it (``/logs/verifier`` → ``<ws>/logs/verifier``). Commands, environment values and staged
scripts have their container paths rewritten in one pass (whole path components only: ``/app/x``
changes, ``/apple`` does not); scripts also see the folders as ``ARENA_APP_DIR``, ``ARENA_TESTS_DIR``,
``ARENA_SOLUTION_DIR``, ``ARENA_VERIFIER_DIR`` and ``ARENA_AGENT_DIR``, and get a private ``TMPDIR``
and ``HOME`` inside the workspace. ``/tmp`` and ``/home`` are *not* mapped, so host paths there (a
score file, a job folder) keep their meaning. Workspaces live in one folder others may traverse but
not list (mode 0711), under unguessable names, and ``/tests`` is readable by root only.

**Dockerfile replay.** ``environment/Dockerfile`` is the one definition of a task's inputs: Docker
builds it, and :func:`replay_dockerfile` replays its ``WORKDIR``, ``COPY``, ``RUN`` and ``ENV`` lines
in the workspace. Its ``FROM`` must name this suite's base image (:data:`BASE_IMAGE_REPO`), whose
contents — the ``mdbench`` package, GROMACS, packmol — this machine provides instead.

**Sandbox.** :func:`make_sandbox` describes how one command of a trial is confined (a :class:`Sandbox`);
:func:`start` / :func:`run_sync` run it through :func:`mdbench.sandbox.spawn_confined`. When this process is
root, an agent step runs as an unprivileged user in its own mount, PID and network namespaces, with only the
system folders, its workspace, the toolchain and the read-only folders visible (the task's source folder,
the project checkout and the job folder are covered): the agent can read neither the solution, the tests
nor earlier trials' verifier logs, cannot write the frozen inputs (root-owned, read-only in a sticky
``/app``), and has no network when the task says ``network_mode = "no-network"``. Without root only the
network cut is attempted (it may be refused), and :func:`describe` says so.

The module holds these three jobs because the local runner and the Harbor plug-in need all three, in this
order, for every trial (:func:`build_workspace` replays the Dockerfile inside a sandbox).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import pwd
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mdbench.errors import InputError

log = logging.getLogger(__name__)

#: Container folders that map into a trial's workspace.
#: Where ``/tmp`` paths that Harbor's installed agents keep across commands (:data:`HARBOR_TMP_PATHS`) are
#: mapped: every command has a private ``/tmp`` of its own, a container one ``/tmp`` (sticky, 1777).
AGENT_TMP = "/installed-agent/tmp"
#: ``/tmp`` folders Harbor's installed agents write in one command and read in a later one (codex's auth.json).
HARBOR_TMP_PATHS = ("/tmp/codex-secrets",)
#: ``/installed-agent``: where Harbor's installed agents (codex, …) keep their private home
CONTAINER_ROOTS = ("/app", "/tests", "/solution", "/logs", "/installed-agent")

#: Container folders only root (the verifier) may read.
PRIVATE_ROOTS = ("/tests",)

#: Parent of every workspace (traversable, not listable by other users).
WORKSPACES_DIR = Path(tempfile.gettempdir()) / "mdbench-arena-workspaces"

#: Image repository every task's Dockerfile must build FROM (built from templates/arena/base.Dockerfile).
BASE_IMAGE_REPO = "mdbench-arena-base"

#: Host account that stands in for a task's non-root agent user (created on first use, root only).
HOST_AGENT_USER = "mdbench-arena-agent"

#: Host variables a task's commands inherit; a container starts from its image's environment, not the
#: host's, so everything else comes from the task, the runner or the workspace (no host secrets leak in).
HOST_ENV_PASSED = ("PATH", "LANG", "LC_ALL", "TZ", "TERM", "OMP_NUM_THREADS", "MDBENCH_LOCK_DIR", "GMXLIB",
                   "GMXDATA")

#: Files whose container paths are rewritten when staged into a workspace: scripts, prose (the instruction)
#: and GROMACS topologies and parameter files, whose ``#include`` / ``include`` lines name ``/app/…`` (an
#: agent's repaired ``topol.top`` reaches the separate verifier as an artifact). Other data files (.json,
#: .toml, ...) are copied as they are, as Docker would. On the way out (:meth:`Workspace.unrewrite`) every
#: copied file gets container paths back.
TEXT_SUFFIXES = {".sh", ".py", ".md", "", ".top", ".itp", ".mdp"}

#: Agent workspaces of running Harbor trials by trial folder (the host plug-in's separate verifier starts from
#: the same build).
AGENT_WORKSPACES: dict[str, "Workspace"] = {}


def _drop_pristine_copies() -> None:
    """At exit (an interrupted ``harbor run`` included): pristine copies no verifier took are removed."""
    for ws in list(AGENT_WORKSPACES.values()):
        ws.remove_pristine()
    AGENT_WORKSPACES.clear()


atexit.register(_drop_pristine_copies)

_ROOTS_RE = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(r) for r in CONTAINER_ROOTS) + r")(?![\w.-])")


@dataclass
class Workspace:
    """A trial's private stand-in for the container file system.

    Attributes
    ----------
    root : Path
        The workspace folder; ``/app`` is ``root/app`` and so on.
    workdir : str
        The container working directory (the Dockerfile's last ``WORKDIR``; ``/app`` by default).
    env : dict
        ``ENV`` values of the replayed Dockerfile (container paths already rewritten).
    """

    root: Path
    workdir: str = "/app"
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(cls, prefix: str = "arena-", parent: str | Path | None = None) -> Workspace:
        """Make a fresh workspace: every container root, a private ``tmp/`` and ``home/`` (sticky, 1777)."""
        parent = Path(parent) if parent is not None else WORKSPACES_DIR
        parent.mkdir(parents=True, exist_ok=True)
        if parent == WORKSPACES_DIR:
            parent.chmod(0o711)
        root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        root.chmod(0o711)
        ws = cls(root=root)
        for r in CONTAINER_ROOTS:
            ws.host(r).mkdir(parents=True, exist_ok=True)
        for sub in ("/logs/agent", "/logs/verifier", "/logs/artifacts"):
            ws.host(sub).mkdir(parents=True, exist_ok=True)
            ws.host(sub).chmod(0o777)
        for private in PRIVATE_ROOTS:
            ws.host(private).chmod(0o700)
        for own in (ws.tmp, ws.home, ws.host(AGENT_TMP)):   # /app as Docker makes it: the Dockerfile sets its mode
            own.mkdir()
            own.chmod(0o1777)
        return ws

    @property
    def tmp(self) -> Path:
        """The trial's own temporary folder (``TMPDIR``)."""
        return self.root / "tmp"

    @property
    def home(self) -> Path:
        """The trial's ``HOME``."""
        return self.root / "home"

    def host(self, container_path: str | os.PathLike[str]) -> Path:
        """The workspace path of a container path (absolute, or relative to :attr:`workdir`)."""
        p = str(container_path)
        if not p.startswith("/"):
            p = f"{self.workdir.rstrip('/')}/{p}"
        p = os.path.normpath(p)
        if not any(p == r or p.startswith(r + "/") for r in CONTAINER_ROOTS):
            raise InputError(f"container path {p!r} is outside the mapped folders {', '.join(CONTAINER_ROOTS)}")
        return self.root / p.lstrip("/")

    def rewrite(self, text: str) -> str:
        """Replace container paths in ``text`` by their workspace paths (one pass, whole components)."""
        return _ROOTS_RE.sub(lambda m: str(self.root) + m.group(1), text)

    def script_env(self) -> dict[str, str]:
        """The ``ARENA_*`` variables scripts use to find the mapped folders, plus ``HOME``/``TMPDIR``."""
        return {
            "ARENA_APP_DIR": str(self.host("/app")), "ARENA_TESTS_DIR": str(self.host("/tests")),
            "ARENA_SOLUTION_DIR": str(self.host("/solution")), "ARENA_VERIFIER_DIR": str(self.host("/logs/verifier")),
            "ARENA_AGENT_DIR": str(self.host("/logs/agent")), "TMPDIR": str(self.tmp),
            **self.env,
        }

    def copy_in(self, src: Path, container_dst: str, *, into: bool = False) -> None:
        """Copy a host file or folder to a container path, rewriting container paths in text files.

        A folder's *contents* go to ``container_dst`` (Docker's ``COPY dir/ dst``); a file goes to
        ``container_dst``, or into it when ``into`` is true or the destination is an existing folder.
        Nothing is written through a link an agent may have left at the destination: a link or file where
        a folder belongs is removed first, every file is created fresh (:func:`mdbench.untrusted.write_new`).
        Links in the (trusted) source are skipped.
        """
        dst = self.host(container_dst)
        dir_modes: list[tuple[Path, int]] = []
        if src.is_dir():
            pairs = []
            _real_dir(dst)
            for dirpath, dirnames, filenames in os.walk(src):
                rel = Path(dirpath).relative_to(src)
                dirnames[:] = [d for d in dirnames if d != "__pycache__" and not os.path.islink(Path(dirpath) / d)]
                for d in dirnames:
                    _real_dir(dst / rel / d)
                    dir_modes.append((dst / rel / d, (Path(dirpath) / d).stat().st_mode & 0o777))
                pairs += [(Path(dirpath) / f, dst / rel / f) for f in filenames
                          if not os.path.islink(Path(dirpath) / f)]
        else:
            if into or container_dst.endswith("/") or (dst.is_dir() and not dst.is_symlink()):
                dst = dst / src.name
            _real_dir(dst.parent)
            pairs = [(src, dst)]
        from mdbench.untrusted import write_new

        for s_path, d_path in pairs:
            data = s_path.read_bytes()
            if s_path.suffix in TEXT_SUFFIXES:
                try:
                    data = self.rewrite(data.decode("utf-8")).encode("utf-8")
                except UnicodeDecodeError:
                    pass
            write_new(d_path, data, mode=s_path.stat().st_mode & 0o777)
            os.chmod(d_path, s_path.stat().st_mode & 0o777)
        for d_path, mode in sorted(dir_modes, key=lambda x: -len(x[0].parts)):
            os.chmod(d_path, mode)
        for private in PRIVATE_ROOTS:
            if container_dst.rstrip("/") == private or container_dst.startswith(private + "/"):
                self.host(private).chmod(0o700)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # --- the separate verifier's fresh workspace -------------------------------------------------------
    @property
    def pristine(self) -> Path:
        """Root-only copy of ``/app`` as the build left it (before any agent ran); a sibling of the workspace,
        so that it outlives the agent's workspace until the separate verifier has used it."""
        return self.root.with_name(self.root.name + ".pristine")

    def keep_pristine(self) -> None:
        """Copy the built ``/app`` aside (mode 0700; the agent's sandbox never shows it) for the verifier."""
        shutil.rmtree(self.pristine, ignore_errors=True)
        shutil.copytree(self.host("/app"), self.pristine, symlinks=True)
        self.app_mode = self.host("/app").stat().st_mode & 0o7777
        self.pristine.chmod(0o700)

    def fresh_copy(self, prefix: str = "arena-verifier-", parent: str | Path | None = None) -> Workspace:
        """A new workspace holding the pristine ``/app`` (the build's, untouched by the agent) and no logs.

        This is Harbor's separate verifier environment on this machine: the grader sees the task's inputs
        as built, the agent's declared outputs (copied in afterwards) and the tests — nothing the agent
        left anywhere else, no link it planted, no process it started.
        """
        if not self.pristine.is_dir():
            raise InputError("no pristine copy of /app was kept after the build", str(self.root))
        new = Workspace.create(prefix=prefix, parent=parent if parent is not None else self.root.parent)
        shutil.rmtree(new.host("/app"))
        shutil.copytree(self.pristine, new.host("/app"), symlinks=True)
        new.host("/app").chmod(getattr(self, "app_mode", 0o1777))
        new.workdir, new.env = self.workdir, {k: v.replace(str(self.root), str(new.root)) for k, v in self.env.items()}
        return new

    def remove_pristine(self) -> None:
        shutil.rmtree(self.pristine, ignore_errors=True)

    def unrewrite(self, data: bytes) -> bytes:
        """Workspace paths in ``data`` back to container paths (``<ws>/app/x`` → ``/app/x``)."""
        return data.replace(str(self.root).encode() + b"/", b"/")


#: Largest single file and largest total copied out of (or into) a workspace from an agent's folders [bytes].
COPY_MAX_FILE_BYTES = 256 * 1024 * 1024
COPY_MAX_TOTAL_BYTES = 2 * 1024 * 1024 * 1024


def copy_untrusted(src: Path, dst: Path, *, rewrite=None, max_file_bytes: int = COPY_MAX_FILE_BYTES,
                   max_total_bytes: int = COPY_MAX_TOTAL_BYTES, max_entries: int = 20_000) -> list[str]:
    """Copy what an agent left under ``src`` to ``dst``: folders and regular files only, nothing followed.

    Links, FIFOs, sockets and devices are skipped (never opened, never recreated), files are read through
    :func:`mdbench.untrusted.read_bytes` (``O_NOFOLLOW``, size-capped) and written with
    :func:`mdbench.untrusted.write_new` (never through a link), the walk is depth- and entry-capped.
    ``rewrite(bytes) -> bytes`` is applied to each file's content (container paths). A missing ``src`` copies
    nothing. Returns one line per entry left out (``relpath: reason``).
    """
    from mdbench import untrusted

    skipped: list[str] = []
    if not os.path.lexists(src):
        return skipped
    if os.path.islink(src) or not os.path.isdir(src):
        if os.path.islink(src):
            return [f"{src.name}: symlink"]
        entries = None
    else:
        entries = untrusted.walk(src, max_depth=32, max_entries=max_entries)
    dst.mkdir(parents=True, exist_ok=True)
    total = 0
    dir_modes: list[tuple[Path, int]] = []      # permission bits are kept (an integrity check may compare them;
    file_modes: dict[Path, int] = {}            # set-id bits never are)
    if entries is None:   # a single file
        items = [(src, dst / src.name)]
    else:
        if entries.truncated:
            skipped.append(f".: walk stopped ({entries.reason})")
        items = []
        for e in entries.entries:
            if e.kind == "dir":
                (dst / e.relpath).mkdir(parents=True, exist_ok=True)
                dir_modes.append((dst / e.relpath, e.mode & 0o777))
            elif e.kind == "file":
                items.append((src / e.relpath, dst / e.relpath))
                file_modes[src / e.relpath] = e.mode & 0o777
            else:
                skipped.append(f"{e.relpath}: {e.kind}")
    for s, d in items:
        try:
            data = untrusted.read_bytes(s, max_bytes=max_file_bytes)
        except untrusted.Refused as exc:
            skipped.append(f"{s.relative_to(src) if s != src else s.name}: {exc.reason}")
            continue
        total += len(data)
        if total > max_total_bytes:
            skipped.append(f"{s.relative_to(src) if s != src else s.name}: total_too_large")
            break
        if rewrite is not None:
            data = rewrite(data)
        d.parent.mkdir(parents=True, exist_ok=True)
        untrusted.write_new(d, data, mode=file_modes.get(s, 0o644))
        os.chmod(d, file_modes.get(s, 0o644))
    for d, mode in sorted(dir_modes, key=lambda x: -len(x[0].parts)):
        os.chmod(d, mode)
    return skipped


def command_env(ws: Workspace, python: str, *, task: str = "") -> dict[str, str]:
    """Environment of a staged command: :data:`HOST_ENV_PASSED`, the workspace variables, ``MDBENCH_PYTHON``.

    ``python`` (the interpreter with mdbench, numpy, MDAnalysis …, standing in for the base image's
    ``python3``) is also put first on ``PATH``.
    """
    env = {k: os.environ[k] for k in HOST_ENV_PASSED if k in os.environ}
    env.update(ws.script_env())
    env.update({"MDBENCH_PYTHON": python, "HOME": str(ws.home), "ARENA_TASK": task})
    env["PATH"] = str(Path(python).parent) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    return env


def _real_dir(path: Path) -> None:
    """Make ``path`` a real folder: whatever non-folder (a planted link, a file) is there is removed first."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    if not os.path.lexists(path):
        _real_dir(path.parent) if not os.path.isdir(path.parent) or os.path.islink(path.parent) else None
        path.mkdir(exist_ok=True)


# --- Dockerfile replay ---------------------------------------------------------------------------

@dataclass
class Instruction:
    """One Dockerfile instruction (continuation lines joined)."""

    keyword: str
    args: str
    line: int


def parse_dockerfile(path: Path) -> list[Instruction]:
    """Split a Dockerfile into instructions: comments dropped, ``\\`` continuations joined."""
    out: list[Instruction] = []
    buf, start = "", 0
    for i, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if not buf:
            start = i
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        keyword, _, args = buf.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
        buf = ""
    if buf:
        raise InputError("Dockerfile ends inside a continued line", str(path))
    return out


def image_repo(image: str) -> str:
    """The repository name of an image reference, without registry, path, tag or digest
    (``ghcr.io:443/org/mdbench-arena-base:0.2@sha256:…`` → ``mdbench-arena-base``)."""
    return image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]


def base_image(dockerfile: Path) -> str | None:
    """The image a Dockerfile builds ``FROM`` (its first ``FROM``), or ``None``."""
    for ins in parse_dockerfile(dockerfile):
        if ins.keyword == "FROM":
            return ins.args.split()[0]
    return None


def _shell_form(args: str) -> str:
    """``RUN``/``CMD`` arguments as one shell command (exec form ``["a", "b"]`` is quoted)."""
    if args.startswith("["):
        try:
            return shlex.join(json.loads(args))
        except (ValueError, TypeError):
            pass
    return args


def _env_pairs(args: str) -> dict[str, str]:
    parts = shlex.split(args)
    if len(parts) >= 2 and "=" not in parts[0]:
        return {parts[0]: " ".join(parts[1:])}
    return dict(p.split("=", 1) for p in parts)


def replay_dockerfile(env_dir: Path, ws: Workspace, run, *, timeout_s: float) -> None:
    """Replay ``env_dir/Dockerfile`` in a workspace; raise :class:`InputError` naming the line that fails.

    ``run(command, cwd, timeout_s)`` executes one ``RUN`` line (already rewritten) and returns
    ``(returncode, output)``. Supported: ``FROM`` (the suite's base image only), ``WORKDIR``, ``COPY``
    (build-context sources, optional ``--chown``/``--chmod`` ignored), ``RUN``, ``ENV``, ``ARG``,
    ``LABEL``, ``USER`` (recorded; build steps run as this process's user). Anything else needs Docker.
    """
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file():
        raise InputError("no environment/Dockerfile; the host environment builds a task from its Dockerfile",
                         str(env_dir))
    for ins in parse_dockerfile(dockerfile):
        where = f"{dockerfile}:{ins.line}"
        if ins.keyword == "FROM":
            image = ins.args.split()[0]
            if image_repo(image) != BASE_IMAGE_REPO:
                raise InputError(f"FROM {image}: the host environment provides only {BASE_IMAGE_REPO} "
                                 "(this machine's mdbench, GROMACS and packmol); build other images with Docker",
                                 where)
        elif ins.keyword == "WORKDIR":
            ws.workdir = os.path.normpath(os.path.join(ws.workdir, ins.args))
            ws.host(ws.workdir).mkdir(parents=True, exist_ok=True)
        elif ins.keyword in ("COPY", "ADD"):
            parts = [p for p in shlex.split(ins.args) if not p.startswith("--")]
            if len(parts) < 2:
                raise InputError(f"{ins.keyword} needs a source and a destination", where)
            *srcs, dst = parts
            for s in srcs:
                src = (env_dir / s).resolve()
                if not src.is_relative_to(env_dir.resolve()) or not src.exists():
                    raise InputError(f"{ins.keyword} source {s!r} is not in the build context {env_dir}", where)
                ws.copy_in(src, dst, into=len(srcs) > 1)
        elif ins.keyword == "RUN":
            rc, output = run(ws.rewrite(_shell_form(ins.args)), ws.host(ws.workdir), timeout_s)
            if rc != 0:
                tail = " | ".join(output.strip().splitlines()[-3:])
                raise InputError(f"RUN exited with code {rc}: {tail}", where)
        elif ins.keyword == "ENV":
            ws.env.update({k: ws.rewrite(v) for k, v in _env_pairs(ins.args).items()})
        elif ins.keyword in ("ARG", "LABEL", "USER", "EXPOSE", "CMD", "ENTRYPOINT", "HEALTHCHECK", "SHELL"):
            continue
        else:
            raise InputError(f"{ins.keyword}: the host environment cannot replay this instruction; use Docker", where)


# --- the agent's sandbox ----------------------------------------------------------------------------

#: Environment variables naming the agent toolchain (a virtualenv with GROMACS-era scientific Python and no
#: mdbench, built by ``scripts/agent_env.sh``): the interpreter itself, or the virtualenv folder.
AGENT_PYTHON_ENV, AGENT_ENV_ENV = "MDBENCH_AGENT_PYTHON", "MDBENCH_AGENT_ENV"


def agent_python() -> str:
    """The interpreter an agent gets as ``MDBENCH_PYTHON`` / first on ``PATH``: the agent toolchain.

    ``$MDBENCH_AGENT_PYTHON``, else ``$MDBENCH_AGENT_ENV/bin/python``, else the project's ``.agent-env/``
    (``scripts/agent_env.sh``), else the project's ``.venv`` interpreter — whose editable ``mdbench`` points
    into the project checkout, which the sandbox hides, so ``import mdbench`` fails there too.
    """
    from mdbench.paths import PROJECT_ROOT

    if os.environ.get(AGENT_PYTHON_ENV):
        return os.environ[AGENT_PYTHON_ENV]
    if os.environ.get(AGENT_ENV_ENV):
        return str(Path(os.environ[AGENT_ENV_ENV]) / "bin" / "python")
    own = PROJECT_ROOT / ".agent-env" / "bin" / "python"
    return str(own) if own.is_file() else default_python()


def network_cut_available() -> bool:
    """Whether commands can be put in namespaces of their own here (network, PID, mount)."""
    from mdbench.sandbox import capabilities

    return bool(capabilities().get("namespaces"))


def is_root() -> bool:
    return os.geteuid() == 0


@dataclass
class Sandbox:
    """How one command of a trial is confined (:func:`make_sandbox`; run by :func:`start`).

    A *root step* (the build, Harbor's bookkeeping, the verifier in its own fresh workspace) runs as this
    process's user in its own PID (and, for ``no-network`` tasks, network) namespace. An *agent step* runs as
    ``user`` through :func:`mdbench.sandbox.spawn_confined` with ``minimal_root``: only the system folders,
    the workspace's ``/app`` (working folder, not chowned), its agent-writable folders, the toolchain and
    ``readonly`` folders are visible; ``hidden`` (project checkout, task and dataset folders, the jobs tree)
    and the host's ``/tmp`` and homes are covered.
    """

    user: str | None = None                 # host account of an agent step; None = a root step
    no_network: bool = False
    hidden: tuple[Path, ...] = ()
    readonly: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    python: str = ""                        # the interpreter the step gets (MDBENCH_PYTHON)
    #: TCP ports on 127.0.0.1 inside the step's own network namespace handed to the caller (network cut)
    loopback_listen: tuple[int, ...] = ()
    path_prepend: tuple[Path, ...] = ()     # folders put first on the step's PATH (e.g. the agent's CLIs)

    @property
    def confined(self) -> bool:
        return self.user is not None

    def confinement(self, *, cwd: Path, env: dict[str, str], timeout_s: float | None, tag: str = "arena"):
        from mdbench.sandbox import Confinement

        if not self.confined:
            return Confinement(workdir=Path(cwd), env=env, network=not self.no_network, user=None,
                               private_tmp=False, hide_home=False, minimal_root=False, chown_workdir=False,
                               timeout_s=timeout_s, grace_s=5.0, tag=tag, loopback_listen=self.loopback_listen)
        return Confinement(workdir=Path(cwd), env=env, readonly=self.readonly, writable=self.writable,
                           hidden=self.hidden, network=not self.no_network, user=self.user, private_tmp=True,
                           hide_home=True, minimal_root=True, chown_workdir=False, timeout_s=timeout_s,
                           grace_s=5.0, tag=tag, loopback_listen=self.loopback_listen)


def default_python() -> str:
    """The interpreter of root steps and the oracle (``MDBENCH_PYTHON``): the project's ``.venv`` when present.

    It carries mdbench and every scientific dependency; the Harbor environment's own interpreter
    (Python 3.12) would do as well, but the project is tested on 3.11.
    """
    from mdbench.paths import PROJECT_ROOT

    venv = PROJECT_ROOT / ".venv" / "bin" / "python"
    import sys

    return str(venv) if venv.is_file() else sys.executable


def toolchain_folders(python: str, *, with_mdbench: bool = False) -> tuple[Path, ...]:
    """Folders a confined ``python`` needs (read-only): its virtualenv and the real interpreter's prefix.

    ``with_mdbench`` adds this package's source folder (the oracle's interpreter: its ``solve.py`` records
    its trajectory with :mod:`mdbench.arena.atif`); an agent's toolchain never gets it.
    """
    exe = Path(python)
    out = {exe.parent.parent, exe.resolve().parent.parent}
    if with_mdbench:
        out.add(Path(__file__).resolve().parents[2])
    return tuple(sorted(p for p in out if p.exists()))


def hidden_folders(task_dir: Path, *extra: Path) -> tuple[Path, ...]:
    """Folders an agent must not see: the project checkout, the task, its dataset folder, ``extra`` (jobs).

    The sandbox's ``minimal_root`` already covers everything outside the system folders (``/work``, homes,
    ``/srv``, …) and its private ``/tmp`` the host's; these are named as well for checkouts that lie under a
    system folder (``/opt``, ``/var``).
    """
    from mdbench.paths import PROJECT_ROOT

    task_dir = task_dir.resolve()
    out = [task_dir, PROJECT_ROOT.resolve()]
    parent = task_dir.parent
    if any(p != task_dir and (p / "task.toml").is_file() for p in parent.iterdir() if p.is_dir()):
        out.append(parent)
    out += [Path(e).resolve() for e in extra]
    return tuple(dict.fromkeys(out))


#: System folders an agent step also loses (re-exposed parts, e.g. a toolchain under /opt, stay visible);
#: /tmp, /var/tmp, /dev/shm are private to the sandbox already.
EXTRA_HIDDEN = (Path("/opt"), Path("/srv"), Path("/mnt"), Path("/media"))


def make_sandbox(ws: Workspace, *, user: str | int | None, no_network: bool, python: str,
                 hide: tuple[Path, ...] = (), host_user: str = HOST_AGENT_USER, oracle: bool = False,
                 expose: tuple[Path, ...] = (), loopback_listen: tuple[int, ...] = (),
                 path_prepend: tuple[Path, ...] = ()) -> Sandbox:
    """The confinement of one command of a trial.

    ``user`` is the task's user for the phase (``[agent] user``; ``None``/``root`` for the build and the
    verifier). A non-root user becomes ``host_user`` when this process is root, with the agent toolchain
    ``python`` (or, for the ``oracle``, the project's interpreter and package source) and ``expose`` (the
    agent's own install) read-only; ``/solution`` is visible only to the oracle. The network is cut when the
    task asks for it (and namespaces are available). ``loopback_listen`` ports (a Harbor ``allowlist``, see
    :mod:`mdbench.arena.relay`) cut the network and open those ports on the step's own loopback; it raises
    :class:`InputError` where the network cannot be cut. ``path_prepend`` folders (the agent's CLIs) are put
    first on ``PATH`` and, for an agent step, shown read-only.
    """
    if loopback_listen and not network_cut_available():
        raise InputError("network_mode='allowlist' needs network namespaces (run as root on Linux); the "
                         "mdbench host plug-in cannot enforce an allow-list here")
    no_net = (no_network or bool(loopback_listen)) and network_cut_available()
    ports = tuple(int(p) for p in loopback_listen)
    prepend = tuple(Path(p) for p in path_prepend)
    if not is_root() or user in (None, "root", 0):
        return Sandbox(no_network=no_net, python=python, loopback_listen=ports, path_prepend=prepend)
    readonly = [*toolchain_folders(python, with_mdbench=oracle), *(Path(e).resolve() for e in expose),
                *(p.resolve() for p in prepend)]
    if oracle:   # the reference solution is this project's own code: its templates and parameters, read-only
        from mdbench.paths import PROJECT_ROOT

        readonly.append(PROJECT_ROOT.resolve())
    if oracle and ws.host("/solution").is_dir():
        readonly.append(ws.host("/solution"))
    writable = tuple(p for p in (ws.host("/logs/agent"), ws.host("/logs/artifacts"), ws.tmp, ws.home,
                                  ws.host("/installed-agent"))
                     if p.is_dir())
    # beyond minimal_root (which hides /var, /opt, homes, /work): where other checkouts and scratch copies often lie
    hidden = tuple(dict.fromkeys([*(h for h in hide if h.is_absolute()), *EXTRA_HIDDEN]))
    return Sandbox(user=host_user, no_network=no_net, hidden=hidden, readonly=tuple(dict.fromkeys(readonly)),
                   writable=writable, python=python, loopback_listen=ports, path_prepend=prepend)


def describe(box: Sandbox, *, requested_user: str | int | None, no_network: bool) -> dict[str, object]:
    """What a sandbox enforced, for the trial record (``mdbench.sandbox`` in ``result.json``)."""
    return {"requested_user": requested_user,
            "ran_as": box.user if box.confined else pwd.getpwuid(os.geteuid()).pw_name,
            "via": "mdbench.sandbox.spawn_confined", "minimal_root": box.confined,
            "hidden": [str(p) for p in box.hidden], "readonly": [str(p) for p in box.readonly],
            "writable": [str(p) for p in box.writable], "python": box.python,
            "network_cut": box.no_network, "network_requested_off": no_network}


def start(command: str, box: Sandbox, *, cwd: Path, env: dict[str, str], timeout_s: float | None):
    """Start ``bash -c command`` under ``box``; return ``(process, output_file)`` for :func:`finish`.

    Output (stdout and stderr) goes to an anonymous root-only temporary file — never to a path an agent
    could have replaced by a link.
    """
    from mdbench.sandbox import spawn_confined

    out = tempfile.TemporaryFile("w+b")
    env = {**env, "MDBENCH_PYTHON": box.python or env.get("MDBENCH_PYTHON", "")}
    if box.python:   # the step's interpreter (the agent toolchain, or the project's) first on PATH
        env["PATH"] = str(Path(box.python).parent) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    if box.path_prepend:
        env["PATH"] = os.pathsep.join([*(str(p) for p in box.path_prepend), env.get("PATH", "/usr/bin:/bin")])
    proc = spawn_confined(["bash", "-c", command], box.confinement(cwd=cwd, env=env, timeout_s=timeout_s),
                          stdout=out, stderr=subprocess.STDOUT)
    return proc, out


def finish(proc, out, *, log_path: Path | None = None, max_chars: int = 20000) -> tuple[int | None, bool, str]:
    """Wait for a started command; return (returncode, timed_out, the last ``max_chars`` of its output)."""
    try:
        res = proc.wait()
        out.seek(0, os.SEEK_END)
        size = out.tell()
        out.seek(max(0, size - 4 * max_chars))
        text = out.read().decode("utf-8", errors="replace")[-max_chars:]
    finally:
        out.close()
    if res.status == "failed_to_start":
        text += f"\nsandbox setup failed: {res.method.get('setup_error')}"
    if log_path is not None:
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(text)
    rc = res.exit_code if res.status != "failed_to_start" else 1
    return rc, res.status == "timeout", text


def run_sync(command: str, box: Sandbox, *, cwd: Path, env: dict[str, str], timeout_s: float | None,
             log_path: Path | None = None) -> tuple[int | None, bool, str]:
    """Run ``command`` under ``box`` to its end; return (returncode, timed_out, output).

    The whole process tree ends with the command (its PID namespace), on timeout too.
    """
    proc, out = start(command, box, cwd=cwd, env=env, timeout_s=timeout_s)
    return finish(proc, out, log_path=log_path)


def build_workspace(env_dir: Path, ws: Workspace, *, env: dict[str, str], log_path: Path, timeout_s: float,
                    no_network: bool) -> Sandbox:
    """Replay a task's Dockerfile in ``ws`` as root-less Docker would: every ``RUN`` logged to ``log_path``.

    Build steps run as this process's user, in a network namespace of their own when the task has no
    network (and the kernel allows it). Raises :class:`InputError` naming the Dockerfile line that failed.
    Returns the sandbox the steps ran in (for the trial record).
    """
    box = make_sandbox(ws, user=None, no_network=no_network, python=env.get("MDBENCH_PYTHON", ""))

    def run(command: str, cwd: Path, limit_s: float) -> tuple[int, str]:
        rc, timed_out, out = run_sync(command, box, cwd=cwd, env=env, timeout_s=limit_s)
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(f"$ {command}\n{out}")
        return (124 if timed_out else rc if rc is not None else 1), out

    replay_dockerfile(env_dir, ws, run, timeout_s=timeout_s)
    return box
