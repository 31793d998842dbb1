"""What real Harbor makes of our files, asked from Python 3.11 (Harbor itself needs ≥ 3.12).

The project runs on Python 3.11; Harbor (pinned in ``make harbor-env``) lives in ``.venv-harbor/``.
The functions here run :mod:`mdbench.arena.harbor_probe` in that environment and return its answer,
so any room can check a Harbor task or trial against Harbor's own models::

    from mdbench.arena.harbor_compat import harbor_python, validate_task_dir
    if harbor_python() is not None:
        problems = validate_task_dir("templates/arena/tasks/rdf-coordination")   # [] when Harbor loads it

:func:`docker_path` restates, without Harbor, the rule Harbor 0.25/0.26 applies when it starts a task
under Docker (``harbor/environments/definition.py``: ``should_use_prebuilt_docker_image`` and
``should_upload_environment_dir``): with ``[environment] docker_image`` set and no ``--force-build``
the named image is used as it is — the Dockerfile is not built; the environment folder is uploaded
only when there is no Dockerfile or compose file. Tests compare it with Harbor's functions.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from mdbench.errors import MdbenchError
from mdbench.paths import PROJECT_ROOT

#: Harbor release the project is tested with (``make harbor-env`` installs it).
HARBOR_VERSION = "0.26.0"

#: Where ``make harbor-env`` puts the interpreter; ``MDBENCH_HARBOR_PYTHON`` overrides it.
HARBOR_VENV = PROJECT_ROOT / ".venv-harbor"


class HarborUnavailable(MdbenchError):
    """The Harbor environment is missing (``make harbor-env``) or cannot answer."""


@lru_cache(maxsize=1)
def harbor_python() -> Path | None:
    """The Harbor environment's interpreter, or ``None`` when it is not installed or does not run."""
    cand = Path(os.environ.get("MDBENCH_HARBOR_PYTHON") or HARBOR_VENV / "bin" / "python")
    if not cand.is_file():
        return None
    try:
        ok = subprocess.run([str(cand), "-c", "import harbor, mdbench.arena.harbor_probe"], capture_output=True,
                            timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return cand if ok else None


def harbor_bin() -> Path | None:
    """The ``harbor`` command of the Harbor environment (``None`` without it)."""
    py = harbor_python()
    return None if py is None else py.parent / "harbor"


def probe(command: str, *paths: str | os.PathLike[str], timeout_s: float = 300) -> dict[str, Any]:
    """Run ``harbor_probe COMMAND PATHS…`` in the Harbor environment and return its JSON answer."""
    py = harbor_python()
    if py is None:
        raise HarborUnavailable(f"no Harbor environment at {HARBOR_VENV}: run `make harbor-env` (needs python3.12)")
    proc = subprocess.run([str(py), "-m", "mdbench.arena.harbor_probe", command, *map(str, paths)],
                          capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise HarborUnavailable(f"harbor_probe {command} failed (exit {proc.returncode}): {tail}")
    return json.loads(proc.stdout)


def harbor_lint(*task_dirs: str | os.PathLike[str], select: tuple[str, ...] = (),
                timeout_s: float = 300) -> tuple[int, list[dict[str, Any]]]:
    """Run Harbor's own linter (``harbor lint --json``, default rules unless ``select``) on task folders.

    Returns ``(exit code, findings)``; each finding is Harbor's ``{rule, path, message, line, column}``.
    """
    exe = harbor_bin()
    if exe is None:
        raise HarborUnavailable(f"no Harbor environment at {HARBOR_VENV}: run `make harbor-env` (needs python3.12)")
    args = [str(exe), "lint", "--json", *(a for r in select for a in ("--select", r)), *map(str, task_dirs)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    try:
        findings = json.loads(proc.stdout or "[]")
    except ValueError:
        raise HarborUnavailable(f"harbor lint printed no JSON (exit {proc.returncode}): "
                                f"{(proc.stderr or proc.stdout).strip()[-300:]}") from None
    return proc.returncode, findings if isinstance(findings, list) else []


def _problems(answer: dict[str, Any]) -> list[str]:
    return [f"{i['path']}: {i['error']}" for i in answer["items"] if not i["ok"]]


def validate_task_dir(path: str | os.PathLike[str]) -> list[str]:
    """Load a task folder with Harbor's ``Task``; return its problems (empty: Harbor accepts it)."""
    return _problems(probe("task", path))


@dataclass(frozen=True)
class DockerPath:
    """What Harbor's Docker environment does with a task folder (no ``--force-build``)."""

    uses_prebuilt_image: bool       # docker_image used as it is; environment/Dockerfile not built
    uploads_environment_dir: bool   # environment/ copied into the container after start
    builds_dockerfile: bool         # environment/Dockerfile built (COPY/RUN lines take effect)

    @property
    def environment_reaches_container(self) -> bool:
        """Whether the files and build steps under ``environment/`` end up in the container."""
        return self.builds_dockerfile or self.uploads_environment_dir


def docker_path(task_dir: str | os.PathLike[str], *, force_build: bool = False) -> DockerPath:
    """Harbor's Docker-path decision for a task folder, restated (see the module docstring)."""
    from mdbench.arena.task import read_task_toml

    task_dir = Path(task_dir)
    env_dir = task_dir / "environment"
    image = (read_task_toml(task_dir / "task.toml").get("environment") or {}).get("docker_image")
    has_dockerfile = (env_dir / "Dockerfile").is_file()
    has_compose = (env_dir / "docker-compose.yaml").is_file()
    prebuilt = bool(image) and (not force_build or not has_dockerfile)
    uploads = (bool(image) and not has_dockerfile and not has_compose and env_dir.is_dir()
               and any(env_dir.iterdir()))
    return DockerPath(uses_prebuilt_image=prebuilt, uploads_environment_dir=uploads,
                      builds_dockerfile=has_dockerfile and not prebuilt)
