"""The agent's toolchain: the tools of the task, not this project's installation.

An evaluated agent may use what the seed's agent uses — GROMACS, packmol, Python with the scientific stack
(numpy, scipy, pandas, MDAnalysis, mdtraj, matplotlib, …) and node — and nothing of mdbench: no ``mdbench``,
``mdbench-oracle`` or ``mdbench-buggy-agent`` on its PATH, no ``lib/mdbench``, tests, templates, docs or git
history in its file system. The Python part is a separate virtual environment without the project,
``.agent-env/`` in the checkout (``make agent-env`` = ``bash scripts/agent_env.sh``; ``$MDBENCH_AGENT_ENV``
names another), whose base interpreter is exposed read-only with its own ``site-packages`` hidden.

:func:`agent_toolchain` says what the sandbox must expose and what the agent's PATH is; its package list goes
into ``result.json``. The reference agents (oracle, buggy) *are* this project's pipeline: the runner, not the
sandbox, gives them the installation through :func:`reference_exposure` — an explicit, trusted exposure that
the result marks (``toolchain.reference_exposure``).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdbench.paths import PROJECT_ROOT

#: Where ``make agent-env`` builds the agent's Python environment.
DEFAULT_AGENT_ENV = PROJECT_ROOT / ".agent-env"
#: What to run when the agent environment is missing.
INSTALL_HINT = "make agent-env   (or: bash scripts/agent_env.sh)"
#: Programs an agent of the seed uses, looked up on the runner's PATH and exposed by their folder.
SYSTEM_TOOLS = ("gmx", "gmx_mpi", "packmol", "node")
#: System folders an agent's PATH ends with (those of them on the runner's own PATH).
SYSTEM_BIN = ("/usr/local/bin", "/usr/bin", "/bin")
#: Console scripts of this project: never on an evaluated agent's PATH.
PROJECT_SCRIPTS = ("mdbench", "mdbench-oracle", "mdbench-null-agent", "mdbench-buggy-agent")


@dataclass
class Toolchain:
    """What an agent gets: its PATH, the paths to expose read-only or hide, and the Python packages."""

    env_dir: Path | None
    path: str
    readonly: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    python: str | None = None
    python_version: str | None = None
    packages: list[str] = field(default_factory=list)
    tools: dict[str, str | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    reference_exposure: tuple[Path, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"env_dir": None if self.env_dir is None else str(self.env_dir), "PATH": self.path,
                "python": self.python, "python_version": self.python_version, "packages": list(self.packages),
                "tools": dict(self.tools), "readonly": [str(p) for p in self.readonly],
                "hidden": [str(p) for p in self.hidden], "problems": list(self.problems),
                "reference_exposure": [str(p) for p in self.reference_exposure] or None}


def agent_env_dir() -> Path:
    """``$MDBENCH_AGENT_ENV`` or :data:`DEFAULT_AGENT_ENV`."""
    env = os.environ.get("MDBENCH_AGENT_ENV")
    return Path(env).absolute() if env else DEFAULT_AGENT_ENV


def _pyvenv(env_dir: Path) -> dict[str, str]:
    cfg = env_dir / "pyvenv.cfg"
    out: dict[str, str] = {}
    try:
        for line in cfg.read_text(encoding="utf-8").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip()
    except OSError:
        pass
    return out


def _site_packages(prefix: Path) -> list[Path]:
    return sorted(p for p in (prefix / "lib").glob("python3*/site-packages") if p.is_dir())


def python_packages(env_dir: Path) -> list[str]:
    """``name==version`` of every distribution installed in the environment (read from its metadata)."""
    from importlib.metadata import distributions  # noqa: PLC0415

    found = {}
    for d in distributions(path=[str(p) for p in _site_packages(env_dir)]):
        name = d.metadata["Name"] if d.metadata else None
        if name:
            found[name.lower()] = f"{name}=={d.version}"
    return [found[k] for k in sorted(found)]


def _project_free(env_dir: Path) -> list[str]:
    """Problems when the environment holds this project (a package, a .pth pointing at the checkout, scripts)."""
    problems = []
    for sp in _site_packages(env_dir):
        if (sp / "mdbench").exists() or any(sp.glob("mdbench-*.dist-info")) or any(sp.glob("__editable__*mdbench*")):
            problems.append(f"{sp} holds the mdbench package")
        for pth in sp.glob("*.pth"):
            try:
                if str(PROJECT_ROOT) in pth.read_text(errors="replace"):
                    problems.append(f"{pth} puts this checkout on sys.path")
            except OSError:
                pass
    for name in PROJECT_SCRIPTS:
        if (env_dir / "bin" / name).exists():
            problems.append(f"{env_dir / 'bin' / name} is a project entry point")
    return problems


def agent_toolchain(*, reference: bool = False) -> Toolchain:
    """The toolchain of an evaluated agent (``reference=True``: plus this installation, for oracle/buggy).

    ``problems`` is non-empty when the agent environment is missing or holds the project: the runner then
    blocks the episode (``infrastructure_blocked``) with :data:`INSTALL_HINT`.
    """
    env_dir = agent_env_dir()
    problems: list[str] = []
    readonly: list[Path] = []
    hidden: list[Path] = []
    dirs: list[str] = []
    python = version = None
    packages: list[str] = []
    cfg = _pyvenv(env_dir)
    if not cfg or not (env_dir / "bin" / "python").exists():
        problems.append(f"no agent Python environment at {env_dir}; build it with: {INSTALL_HINT}")
        env = None
    else:
        env = env_dir
        problems += _project_free(env_dir)
        readonly.append(env_dir)
        dirs.append(str(env_dir / "bin"))
        python = str(env_dir / "bin" / "python")
        version = cfg.get("version_info") or cfg.get("version")
        home = cfg.get("home")
        if home:  # the base interpreter: its prefix read-only, its own site-packages hidden
            base = Path(home).resolve().parent
            readonly.append(base)
            hidden += _site_packages(base)
        packages = python_packages(env_dir)
    tools: dict[str, str | None] = {}
    for name in SYSTEM_TOOLS:
        exe = shutil.which(name)
        tools[name] = exe
        if exe:
            dirs.append(str(Path(exe).parent))
    caller = os.environ.get("PATH", "").split(os.pathsep)
    dirs += [d for d in SYSTEM_BIN if d in caller and Path(d).is_dir()]  # as the caller has them
    ref: tuple[Path, ...] = ()
    if reference:
        ref = reference_exposure()
        dirs.insert(0, str(Path(sys.executable).parent))
    path = os.pathsep.join(dict.fromkeys(dirs))
    if not reference:
        for name in PROJECT_SCRIPTS:
            hit = shutil.which(name, path=path)
            if hit:
                problems.append(f"{hit} (a project entry point) is on the agent's PATH; remove it")
    return Toolchain(env_dir=env, path=path, readonly=tuple(dict.fromkeys(readonly)),
                     hidden=tuple(dict.fromkeys(hidden)), python=python, python_version=version,
                     packages=packages, tools=tools, problems=problems, reference_exposure=ref)


def reference_exposure() -> tuple[Path, ...]:
    """What the reference agents need of this installation (read-only): the interpreter prefixes and
    ``sys.path`` folders of this Python, and the checkout's ``lib/``, ``params/``, ``templates/``."""
    from mdbench.sandbox import runtime_paths  # noqa: PLC0415

    paths = [*runtime_paths(), *(PROJECT_ROOT / d for d in ("lib", "params", "templates"))]
    return tuple(dict.fromkeys(p for p in paths if p.exists()))
