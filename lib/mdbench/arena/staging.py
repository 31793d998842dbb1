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
CONTAINER_ROOTS = ("/app", "/tests", "/solution", "/logs")

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

#: Files whose container paths are rewritten when staged into a workspace: scripts and prose (the
#: instruction). Data files (.json, .toml, .mdp, ...) are copied as they are, as Docker would.
TEXT_SUFFIXES = {".sh", ".py", ".md", ""}

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
        for own in (ws.tmp, ws.home):   # /app as Docker makes it: the Dockerfile sets its mode
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
        for private in PRIVATE_ROOTS:    # copytree copies the source folder's mode: close it again
            if container_dst.rstrip("/") == private or container_dst.startswith(private + "/"):
                self.host(private).chmod(0o700)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


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
    runtime: tuple[Path, ...] = ()          # folders the user must reach (interpreter, venv, mdbench source)
    stage: Path | None = None               # a folder outside every closed one, for the mount shuffle

    @property
    def confined(self) -> bool:
        return self.user is not None or bool(self.hide) or self.no_network


def _blocked_ancestor(path: Path) -> Path | None:
    """The outermost ancestor of ``path`` that others cannot enter (no ``o+x``), e.g. ``/root``."""
    for anc in reversed(path.parents):
        if anc != Path("/") and anc.is_dir() and not anc.stat().st_mode & 0o001:
            return anc
    return None


def _runtime_mounts(box: Sandbox) -> list[str]:
    """Shell steps that let the unprivileged user reach ``box.runtime`` inside folders closed to it.

    A closed ancestor (``/root`` with mode 700 holding pyenv's interpreters) is covered by an empty
    tmpfs — so nothing else in it is visible — and each needed folder is bound back inside it.
    """
    covers: dict[Path, list[Path]] = {}
    for r in box.runtime:
        r = Path(r).resolve()
        anc = _blocked_ancestor(r)
        if anc is not None and r.exists():
            covers.setdefault(anc, []).append(r)
    if not covers or box.stage is None:
        return []
    stage = shlex.quote(str(box.stage))   # covered by a tmpfs of this namespace only while the mounts move
    steps = [f"mount -t tmpfs -o mode=0700 mdbench-stage {stage}"]
    k = 0
    for anc, keep in covers.items():
        moved = []
        for r in keep:
            steps += [f"mkdir -p {stage}/{k}", f"mount --rbind {shlex.quote(str(r))} {stage}/{k}"]
            moved.append((k, r))
            k += 1
        steps.append(f"mount -t tmpfs -o mode=0755 mdbench-cover {shlex.quote(str(anc))}")
        for i, r in moved:
            steps += [f"mkdir -p {shlex.quote(str(r))}", f"mount --move {stage}/{i} {shlex.quote(str(r))}"]
    steps.append(f"umount {stage}")
    return steps


def sandbox_argv(command: str, box: Sandbox) -> list[str]:
    """The argv that runs ``bash -c command`` under ``box``.

    As root: ``unshare --mount --pid --fork --kill-child [--net]``; the runtime folders made reachable
    (:func:`_runtime_mounts`), an empty tmpfs over each hidden folder, then ``setpriv`` to the
    unprivileged user with no groups and ``no_new_privs``; when the command ends, the PID namespace
    ends and no process of it survives. Without root only ``unshare --map-root-user --net`` (the
    caller checks :func:`unshare_permitted` first and records what it could not enforce).
    """
    inner = ["bash", "-c", command]
    if not box.confined:
        return inner
    if not is_root():
        return ["unshare", "--map-root-user", "--net", "--", *inner] if box.no_network else inner
    steps = ["set -e", "mount --make-rprivate /"]
    if box.user is not None:
        steps += _runtime_mounts(box)
    # a hidden folder inside a covered closed ancestor is already gone: mount only where it still exists
    steps += [f"if [ -e {shlex.quote(str(p))} ]; then mount -t tmpfs -o size=4k,mode=0700 mdbench-hidden "
              f"{shlex.quote(str(p))}; fi" for p in box.hide]
    drop = ""
    if box.user is not None:
        uid, gid = box.user
        drop = f"setpriv --reuid={uid} --regid={gid} --clear-groups --no-new-privs -- "
    steps.append(f"exec {drop}bash -c {shlex.quote(command)}")
    flags = ["--mount", "--pid", "--fork", "--kill-child", "--mount-proc"] + (["--net"] if box.no_network else [])
    return ["unshare", *flags, "--", "bash", "-c", "\n".join(steps)]


def default_python() -> str:
    """The interpreter task scripts get as ``MDBENCH_PYTHON``: the project's ``.venv`` when present.

    It carries mdbench and every scientific dependency; the Harbor environment's own interpreter
    (Python 3.12) would do as well, but the project is tested on 3.11.
    """
    from mdbench.paths import PROJECT_ROOT

    venv = PROJECT_ROOT / ".venv" / "bin" / "python"
    import sys

    return str(venv) if venv.is_file() else sys.executable


def runtime_folders(python: str) -> tuple[Path, ...]:
    """Folders a confined ``python`` needs: its venv, the real interpreter's prefix, this package's source."""
    exe = Path(python)
    out = {exe.parent.parent, exe.resolve().parent.parent, Path(__file__).resolve().parents[2]}
    return tuple(sorted(out))


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


def network_cut_available() -> bool:
    """Whether commands can be put in a network namespace of their own here."""
    return unshare_permitted("--net") if is_root() else unshare_permitted("--map-root-user", "--net")


def make_sandbox(ws: Workspace, *, user: str | int | None, no_network: bool, python: str,
                 hide: tuple[Path, ...] = (), host_user: str = HOST_AGENT_USER) -> Sandbox:
    """The confinement of one command of a trial.

    ``user`` is the task's user for the phase (``[agent] user``; ``None``/``root`` for the verifier and
    the build). A non-root user becomes ``host_user`` when this process is root; ``hide`` is then
    covered (never a folder that holds the workspace). The network is cut when the task asks for it
    and :func:`network_cut_available`.
    """
    no_net = no_network and network_cut_available()
    if not is_root() or user in (None, "root", 0):
        return Sandbox(no_network=no_net)
    hide = tuple(h for h in hide if not ws.root.is_relative_to(h))
    # the mount shuffle's scratch folder must lie outside every closed folder: the workspace's tmp/, or else
    # /mnt (covered inside the namespace only)
    stage = ws.tmp if _blocked_ancestor(ws.tmp) is None else Path("/mnt")
    return Sandbox(user=ensure_host_user(host_user), hide=hide, no_network=no_net,
                   runtime=(*runtime_folders(python), ws.root), stage=stage)


def describe(box: Sandbox, *, requested_user: str | int | None, no_network: bool) -> dict[str, object]:
    """What a sandbox enforced, for the trial record (``mdbench.sandbox`` in ``result.json``)."""
    return {"requested_user": requested_user,
            "ran_as": HOST_AGENT_USER if box.user is not None else pwd.getpwuid(os.geteuid()).pw_name,
            "hidden": [str(p) for p in box.hide], "network_cut": box.no_network,
            "network_requested_off": no_network}


def run_sync(command: str, box: Sandbox, *, cwd: Path, env: dict[str, str], timeout_s: float | None,
             log_path: Path | None = None) -> tuple[int | None, bool, str]:
    """Run ``command`` under ``box`` in its own process group; return (returncode, timed_out, output).

    Output goes to ``log_path`` when given (and is returned, last 20,000 characters). On timeout the
    whole group is killed (and, as root, the PID namespace ends with it).
    """
    import signal

    argv = sandbox_argv(command, box)
    out = open(log_path, "w", encoding="utf-8") if log_path else tempfile.TemporaryFile("w+", encoding="utf-8")
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc, timed_out = proc.wait(timeout=timeout_s), False
        except subprocess.TimeoutExpired:
            rc, timed_out = None, True
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # the group this call started, and nothing left in it
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        out.flush()
        out.seek(0) if not log_path else None
        text = Path(log_path).read_text(encoding="utf-8", errors="replace") if log_path else out.read()
    finally:
        out.close()
    return rc, timed_out, text[-20000:]


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
