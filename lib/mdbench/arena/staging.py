"""A task's container on this machine: path mapping, Dockerfile replay and the agent's sandbox.

Both ways of running a task without Docker use this module, so they stage a task identically:
the local runner (:mod:`mdbench.arena.runner`, Python 3.11, no Harbor) and the Harbor host
environment plug-in (:mod:`mdbench.arena.harbor_env`, run by ``harbor run -e …``).

**Path mapping.** A trial gets a private workspace folder; every container root the tasks and
Harbor use (:data:`CONTAINER_ROOTS`: ``/app``, ``/tests``, ``/solution``, ``/logs``, ``/tmp``,
``/home``) maps to the same path under it (``/logs/verifier`` → ``<ws>/logs/verifier``). Commands and
staged text files have their container paths rewritten in one pass (whole path components only:
``/app/x`` changes, ``/apple`` does not), and scripts also see the folders as ``ARENA_APP_DIR``,
``ARENA_TESTS_DIR``, ``ARENA_SOLUTION_DIR``, ``ARENA_VERIFIER_DIR`` and ``ARENA_AGENT_DIR``.

**Dockerfile replay.** ``environment/Dockerfile`` is the one definition of a task's inputs: Docker
builds it, and :func:`replay_dockerfile` replays its ``WORKDIR``, ``COPY``, ``RUN`` and ``ENV`` lines
in the workspace. Its ``FROM`` must name this suite's base image (:data:`BASE_IMAGE_REPO`), whose
contents — the ``mdbench`` package, GROMACS, packmol — this machine provides instead.

**Sandbox.** :func:`sandbox_argv` wraps a command so that, when this process is root, it runs as an
unprivileged user in its own mount, PID and network namespaces (``unshare``), with the task's source
folder and the job folder hidden under empty tmpfs mounts: the agent can read neither the solution,
the tests nor earlier trials' verifier logs, cannot write the frozen inputs (root-owned, read-only
in a sticky ``/app``), and has no network when the task says ``network_mode = "no-network"``.
Without root only the network cut is attempted (``unshare -n`` may be refused), and the result says so.
"""

from __future__ import annotations

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
from functools import lru_cache
from pathlib import Path

from mdbench.errors import InputError

log = logging.getLogger(__name__)

#: Container folders that map into a trial's workspace.
CONTAINER_ROOTS = ("/app", "/tests", "/solution", "/logs", "/tmp", "/home")

#: Image repository every task's Dockerfile must build FROM (built from templates/arena/base.Dockerfile).
BASE_IMAGE_REPO = "mdbench-arena-base"

#: Host account that stands in for a task's non-root agent user (created on first use, root only).
HOST_AGENT_USER = "mdbench-arena-agent"

#: Host variables a task's commands inherit; a container starts from its image's environment, not the
#: host's, so everything else comes from the task, the runner or the workspace (no host secrets leak in).
HOST_ENV_PASSED = ("PATH", "LANG", "LC_ALL", "TZ", "TERM", "OMP_NUM_THREADS", "MDBENCH_LOCK_DIR", "GMXLIB",
                   "GMXDATA")

#: Text files whose container paths are rewritten when they are staged into a workspace.
TEXT_SUFFIXES = {".sh", ".md", ".toml", ".py", ".txt", ".json", ".mdp", ""}

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
        """Make a fresh workspace with every container root present (``/tmp`` and ``/home`` sticky, 1777)."""
        root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        root.chmod(0o755)
        ws = cls(root=root)
        for r in CONTAINER_ROOTS:
            ws.host(r).mkdir(parents=True, exist_ok=True)
        for sub in ("/logs/agent", "/logs/verifier", "/logs/artifacts"):
            ws.host(sub).mkdir(parents=True, exist_ok=True)
            ws.host(sub).chmod(0o777)
        for sticky in ("/tmp", "/home"):   # /app as Docker makes it: the Dockerfile sets its mode
            ws.host(sticky).chmod(0o1777)
        return ws

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
            "ARENA_AGENT_DIR": str(self.host("/logs/agent")), "TMPDIR": str(self.host("/tmp")),
            **self.env,
        }

    def copy_in(self, src: Path, container_dst: str, *, into: bool = False) -> None:
        """Copy a host file or folder to a container path, rewriting container paths in text files.

        A folder's *contents* go to ``container_dst`` (Docker's ``COPY dir/ dst``); a file goes to
        ``container_dst``, or into it when ``into`` is true or the destination is an existing folder.
        """
        dst = self.host(container_dst)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            files = [p for p in dst.rglob("*") if p.is_file()]
        else:
            if into or container_dst.endswith("/") or dst.is_dir():
                dst = dst / src.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
            files = [dst]
        for p in files:
            _rewrite_file(p, self)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def command_env(ws: Workspace, python: str, *, task: str = "") -> dict[str, str]:
    """Environment of a staged command: :data:`HOST_ENV_PASSED`, the workspace variables, ``MDBENCH_PYTHON``.

    ``python`` (the interpreter with mdbench, numpy, MDAnalysis …, standing in for the base image's
    ``python3``) is also put first on ``PATH``.
    """
    env = {k: os.environ[k] for k in HOST_ENV_PASSED if k in os.environ}
    env.update(ws.script_env())
    env.update({"MDBENCH_PYTHON": python, "HOME": str(ws.host("/home")), "ARENA_TASK": task})
    env["PATH"] = str(Path(python).parent) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    return env


def _rewrite_file(p: Path, ws: Workspace) -> None:
    if p.suffix not in TEXT_SUFFIXES or p.is_symlink():
        return
    try:
        text = p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return
    new = ws.rewrite(text)
    if new != text:
        p.write_text(new, encoding="utf-8")


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
            if image.split(":")[0].split("/")[-1] != BASE_IMAGE_REPO:
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

@lru_cache(maxsize=None)
def unshare_permitted(*flags: str) -> bool:
    """Whether ``unshare <flags> true`` works here (root, or unprivileged user namespaces)."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", *flags, "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def is_root() -> bool:
    return os.geteuid() == 0


def ensure_host_user(name: str = HOST_AGENT_USER) -> tuple[int, int]:
    """(uid, gid) of the unprivileged host account for agents; created idempotently (root only)."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        if not is_root():
            raise InputError(f"host user {name!r} does not exist and only root can create it") from None
        subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", "--user-group", name], capture_output=True)
        pw = pwd.getpwnam(name)
    return pw.pw_uid, pw.pw_gid


@dataclass
class Sandbox:
    """How one command is confined (see :func:`sandbox_argv`)."""

    user: tuple[int, int] | None = None     # (uid, gid) to run as; None = this process's user
    hide: tuple[Path, ...] = ()             # folders covered by an empty tmpfs (root only)
    no_network: bool = False                # run in a fresh network namespace (loopback only, down)

    @property
    def confined(self) -> bool:
        return self.user is not None or bool(self.hide) or self.no_network


def sandbox_argv(command: str, box: Sandbox) -> list[str]:
    """The argv that runs ``bash -c command`` under ``box``.

    As root: ``unshare --mount --pid --fork --kill-child [--net]`` + tmpfs over the hidden folders +
    ``setpriv`` to the unprivileged user (so no process of the agent outlives the command). Without
    root, only ``unshare --net`` (refused where user namespaces are off; the caller checks
    :func:`unshare_permitted` first and records what it could not enforce).
    """
    inner = ["bash", "-c", command]
    if not box.confined:
        return inner
    if not is_root():
        return ["unshare", "--map-root-user", "--net", "--", *inner] if box.no_network else inner
    steps = ["mount --make-rprivate / 2>/dev/null || true"]
    steps += [f"mount -t tmpfs -o size=4k,mode=0700 mdbench-hidden {shlex.quote(str(p))}" for p in box.hide
              if p.exists()]
    drop = ""
    if box.user is not None:
        uid, gid = box.user
        drop = f"setpriv --reuid={uid} --regid={gid} --clear-groups -- "
    steps.append(f"exec {drop}bash -c {shlex.quote(command)}")
    flags = ["--mount", "--pid", "--fork", "--kill-child", "--mount-proc"] + (["--net"] if box.no_network else [])
    return ["unshare", *flags, "--", "bash", "-c", " && ".join(steps[:1]) + "; " + " && ".join(steps[1:])]


def hidden_folders(task_dir: Path, *extra: Path) -> tuple[Path, ...]:
    """Folders an agent must not see: the task, its dataset folder when it holds other tasks, ``extra``."""
    task_dir = task_dir.resolve()
    out = [task_dir]
    parent = task_dir.parent
    if any(p != task_dir and (p / "task.toml").is_file() for p in parent.iterdir() if p.is_dir()):
        out.append(parent)
    out += [Path(e).resolve() for e in extra]
    # hide the outermost folders only (a tmpfs over a parent already covers its children)
    return tuple(p for p in out if not any(q != p and p.is_relative_to(q) for q in out))
