"""Harbor task folders: load ``task.toml``, and check a folder against two separate sets of rules.

**Harbor's rules** (:func:`harbor_problems`) are what Harbor's ``Task`` model needs to load and run
a folder (Harbor 0.26): a parseable ``task.toml`` (any ``schema_version`` string; ``version`` is
its old name), ``[task] name`` in ``org/name`` form when given, an ``instruction.md`` (or, for
``[[steps]]``, ``steps/<name>/instruction.md``), a test script ``tests/test.sh`` (``.bat`` on Windows;
per step, ``steps/<name>/tests/test.sh`` or the shared one), and an environment definition
(``environment/Dockerfile``, ``environment/docker-compose.yaml`` or ``[environment] docker_image``).
Harbor's own tasks and anyone's third-party tasks pass them.

**This suite's rules** (:func:`suite_problems`) are what an mdbench arena task adds:
``[metadata]`` (difficulty, category, packages, system, kind), agent/verifier timeouts,
``tests/process.toml`` (rewardkit ``[[criterion]]`` entries, ``[judge] files``), a Python verifier,
``solution/solve.sh``, a Dockerfile ``FROM`` the pinned base image and no ``docker_image`` beside it
(Harbor would then skip the Dockerfile, see :func:`mdbench.arena.harbor_compat.docker_path`), a
non-root ``[agent] user``, ``network_mode = "no-network"`` and ``/app/output`` collected as artifact.
"""

from __future__ import annotations

import logging
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdbench.arena.judge import load_process_spec
from mdbench.errors import InputError
from mdbench.paths import TEMPLATES_DIR

log = logging.getLogger(__name__)

#: Where this project's suite lives.
TASKS_DIR = TEMPLATES_DIR / "arena" / "tasks"
#: Files produced by this project's pipeline that tasks use as inputs (one master copy).
INPUTS_DIR = TEMPLATES_DIR / "arena" / "inputs"

DIFFICULTIES = ("easy", "medium", "hard")
KINDS = ("standard", "negative", "underspecified")

#: The base image every task builds FROM (templates/arena/base.Dockerfile).
BASE_IMAGE = "mdbench-arena-base:0.2"
#: The same image pinned to the digest of a pushed copy (``mdbench arena pin-base``):
#: ``[registry/path/]mdbench-arena-base:0.2@sha256:<64 hex>``.
PINNED_BASE_RE = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9.:_-]*/)*" + re.escape(BASE_IMAGE) + r"@sha256:[0-9a-f]{64}")

#: Harbor's package-name pattern for ``[task] name`` (``harbor/constants.py``: ORG_NAME_PATTERN).
ORG_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")

#: JSON Schema of this suite's additions to ``task.toml`` (Harbor ignores what it does not know).
SUITE_TOML_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["schema_version", "task", "metadata", "verifier", "agent", "environment", "artifacts"],
    "properties": {
        "schema_version": {"type": "string"},
        "task": {
            "type": "object",
            "required": ["name", "description", "authors", "keywords"],
            "properties": {
                "name": {"type": "string", "pattern": r"^mdbench/[a-z0-9][a-z0-9_.-]*$"},
                "description": {"type": "string", "minLength": 10},
                "authors": {"type": "array", "items": {"type": "object", "required": ["name"]}},
                "keywords": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
        },
        "metadata": {
            "type": "object",
            "required": ["difficulty", "category", "packages", "system", "kind"],
            "properties": {
                "difficulty": {"enum": list(DIFFICULTIES)},
                "category": {"type": "string", "minLength": 1},
                "packages": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "system": {"type": "string", "minLength": 1},
                "kind": {"enum": list(KINDS)},
                "steps": {"type": "integer", "minimum": 1},
                "inputs": {"type": "string"},
            },
        },
        "verifier": {
            # the grader never shares the agent's sandbox (Harbor lint rule shared-verifier)
            "type": "object", "required": ["timeout_sec", "environment_mode"],
            "properties": {"timeout_sec": {"type": "number", "exclusiveMinimum": 0},
                           "environment_mode": {"const": "separate"},
                           "user": {"not": {"const": "agent"}}},
        },
        "agent": {
            "type": "object", "required": ["timeout_sec", "user"],
            "properties": {"timeout_sec": {"type": "number", "exclusiveMinimum": 0},
                           "user": {"type": "string", "not": {"enum": ["root", "0"]}}},
        },
        "environment": {
            "type": "object", "required": ["network_mode"],
            "not": {"required": ["docker_image"]},
            "properties": {
                "network_mode": {"const": "no-network"},
                "build_timeout_sec": {"type": "number", "exclusiveMinimum": 0},
                "cpus": {"type": "integer", "minimum": 1},
                "memory_mb": {"type": "integer", "minimum": 1},
                "storage_mb": {"type": "integer", "minimum": 1},
                "gpus": {"type": "integer", "minimum": 0},
            },
        },
        "artifacts": {"type": "array", "contains": {
            "anyOf": [{"const": "/app/output"},
                      {"type": "object", "properties": {"source": {"const": "/app/output"}}, "required": ["source"]}]}},
    },
}

SUITE_FILES = ("instruction.md", "environment/Dockerfile", "environment/build.sh", "solution/solve.sh",
               "tests/test.sh", "tests/process.toml")


@dataclass(frozen=True)
class Problem:
    """One rule a task folder breaks: whose rule (``harbor`` or ``suite``), where, and what to do."""

    rules: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class Task:
    """A loaded Harbor task folder.

    Attributes
    ----------
    path : Path
        The task folder.
    config : dict
        Parsed ``task.toml``.
    """

    path: Path
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Full task name, e.g. ``mdbench/scale-charges-072``."""
        return self.config.get("task", {}).get("name") or self.path.name

    @property
    def short_name(self) -> str:
        """Name without the dataset prefix (the trial-name stem)."""
        return self.name.split("/")[-1]

    @property
    def metadata(self) -> dict[str, Any]:
        return self.config.get("metadata", {})

    @property
    def agent_timeout_sec(self) -> float:
        return float(self.config.get("agent", {}).get("timeout_sec") or 900.0)

    @property
    def verifier_timeout_sec(self) -> float:
        return float(self.config.get("verifier", {}).get("timeout_sec") or 600.0)

    @property
    def instruction(self) -> str:
        return (self.path / "instruction.md").read_text(encoding="utf-8")


def read_task_toml(path: Path) -> dict[str, Any]:
    """Parse a ``task.toml``; a syntax error becomes an :class:`InputError` naming file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read task.toml ({exc.strerror}); every task folder needs one", str(path)) from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise InputError(f"malformed TOML: {exc}", str(path), int(m.group(1)) if m else None) from exc


def load_task(task_dir: str | Path) -> Task:
    """Load a task folder (``task.toml`` parsed, nothing else checked; see :func:`validate_task`)."""
    task_dir = Path(task_dir)
    if not task_dir.is_dir():
        raise InputError("not a task folder (expected a directory with task.toml)", str(task_dir))
    return Task(path=task_dir.resolve(), config=read_task_toml(task_dir / "task.toml"))


def _problem_of(rules: str, exc: InputError) -> Problem:
    """A :class:`Problem` from an :class:`InputError` (its file and line, then its message)."""
    where = f"{exc.path}:{exc.line}" if exc.line is not None else str(exc.path)
    text = str(exc)
    return Problem(rules, where, text[len(where) + 2:] if text.startswith(where + ": ") else text)


def _test_script(tests: Path, windows: bool) -> bool:
    names = ("test.bat", "test.ps1", "test.cmd") if windows else ("test.sh",)
    return any((tests / n).is_file() for n in names)


def harbor_problems(task_dir: str | Path) -> list[Problem]:
    """Harbor's rules for a task folder (see the module docstring); empty when Harbor can load it."""
    task_dir = Path(task_dir)
    bad = lambda path, msg: Problem("harbor", str(path), msg)  # noqa: E731
    if not task_dir.is_dir():
        return [bad(task_dir, "not a directory; pass a task folder containing task.toml")]
    try:
        config = read_task_toml(task_dir / "task.toml")
    except InputError as exc:
        return [_problem_of("harbor", exc)]
    out: list[Problem] = []
    toml = task_dir / "task.toml"
    version = config.get("schema_version", config.get("version"))
    if version is not None and not isinstance(version, str):
        out.append(bad(toml, f"schema_version must be a string such as \"1.4\", not {version!r}"))
    name = (config.get("task") or {}).get("name")
    if "task" in config and not (isinstance(name, str) and ORG_NAME_RE.match(name) and ".." not in name):
        out.append(bad(toml, f"[task] name {name!r} must be 'org/name' (letters, digits, '.', '_', '-')"))
    env = config.get("environment") or {}
    windows = str(env.get("os", "linux")).lower() == "windows"
    steps = config.get("steps")
    if steps:
        for step in steps:
            sname = step.get("name") if isinstance(step, dict) else None
            if not sname:
                out.append(bad(toml, "every [[steps]] entry needs a name"))
                continue
            sdir = task_dir / "steps" / sname
            if not (sdir / "instruction.md").is_file():
                out.append(bad(sdir / "instruction.md", "missing; each step needs its instruction"))
            if not (_test_script(sdir / "tests", windows) or _test_script(task_dir / "tests", windows)):
                out.append(bad(sdir / "tests", "no test script for this step (steps/<name>/tests/test.sh or tests/test.sh)"))
    else:
        if not (task_dir / "instruction.md").is_file():
            out.append(bad(task_dir / "instruction.md", "missing; Harbor shows this file to the agent"))
        if not _test_script(task_dir / "tests", windows) and not (config.get("verifier") or {}).get("environment"):
            out.append(bad(task_dir / "tests" / ("test.bat" if windows else "test.sh"),
                           "missing; Harbor runs it as the verifier"))
    env_dir = task_dir / "environment"
    if not (env.get("docker_image") or (env_dir / "Dockerfile").is_file()
            or (env_dir / "docker-compose.yaml").is_file()):
        out.append(bad(env_dir, "no environment definition: add environment/Dockerfile (or docker-compose.yaml), "
                                "or set [environment] docker_image"))
    for key in ("timeout_sec",):
        for sec in ("agent", "verifier"):
            v = (config.get(sec) or {}).get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                out.append(bad(toml, f"[{sec}] {key} must be a number of seconds, not {v!r}"))
    return out


def suite_problems(task_dir: str | Path) -> list[Problem]:
    """This suite's rules for a task folder (see the module docstring); empty when it meets them."""
    task_dir = Path(task_dir)
    bad = lambda path, msg: Problem("suite", str(path), msg)  # noqa: E731
    try:
        config = read_task_toml(task_dir / "task.toml")
    except InputError:
        return []  # reported under Harbor's rules
    import jsonschema  # imported here: its format checkers take seconds to import

    out: list[Problem] = []
    validator = jsonschema.Draft202012Validator(SUITE_TOML_SCHEMA)
    for err in sorted(validator.iter_errors(config), key=lambda e: list(e.path)):
        where = ".".join(str(p) for p in err.path) or "(top level)"
        hint = {"environment": " (a docker_image beside the Dockerfile makes Harbor skip the Dockerfile)"}.get(
            where, "")
        out.append(bad(task_dir / "task.toml", f"{where}: {err.message}{hint}"))
    for rel in SUITE_FILES:
        if not (task_dir / rel).is_file():
            out.append(bad(task_dir / rel, "missing; every arena task has this file"))
    instr = task_dir / "instruction.md"
    if instr.is_file() and not instr.read_text(encoding="utf-8").strip():
        out.append(bad(instr, "empty; write the task instruction"))
    for rel in ("solution/solve.sh", "tests/test.sh", "environment/build.sh"):
        p = task_dir / rel
        if p.is_file() and not p.read_text(encoding="utf-8").startswith("#!"):
            out.append(bad(p, "no shebang line; start it with #!/bin/bash"))
    if (task_dir / "tests").is_dir() and not list((task_dir / "tests").glob("*.py")):
        out.append(bad(task_dir / "tests", "no Python verifier module (tests/*.py)"))
    proc = task_dir / "tests" / "process.toml"
    if proc.is_file():
        try:
            spec = load_process_spec(proc)
            if not spec.files:
                out.append(bad(proc, "[judge] files is empty; list the output files the process judge reads"))
        except InputError as exc:
            out.append(_problem_of("suite", exc))
    dockerfile = task_dir / "environment" / "Dockerfile"
    if dockerfile.is_file():
        from mdbench.arena.staging import base_image

        image = base_image(dockerfile)
        if not is_base_image(image):
            out.append(bad(dockerfile, f"FROM {image}: arena tasks build FROM {BASE_IMAGE} "
                                       "(templates/arena/base.Dockerfile, pinned versions), or that image "
                                       "pinned to a digest (mdbench arena pin-base)"))
    return out


def is_base_image(image: str | None) -> bool:
    """Whether ``image`` is the suite's base image: :data:`BASE_IMAGE` or a digest-pinned copy of it."""
    return image == BASE_IMAGE or bool(image and PINNED_BASE_RE.fullmatch(image))


def pin_base_image(task_dirs: list[Path], reference: str) -> list[Path]:
    """Rewrite the ``FROM`` of each task's ``environment/Dockerfile`` to ``reference``, the base image pinned to
    the digest of a pushed copy (``harbor lint --select ALL`` then passes its ``unpinned-image`` rule).

    Returns the Dockerfiles changed (one already pinned to ``reference`` is left alone).

    Raises
    ------
    InputError
        ``reference`` is not ``[registry/path/]mdbench-arena-base:0.2@sha256:<64 hex>``, or a task does not
        build FROM the suite's base image.
    """
    if not PINNED_BASE_RE.fullmatch(reference):
        raise InputError(f"not a digest-pinned reference of {BASE_IMAGE}: {reference!r}; push the image built "
                         "from templates/arena/base.Dockerfile and pass REGISTRY/mdbench-arena-base:0.2@sha256:"
                         "<digest> (docker inspect --format '{{index .RepoDigests 0}}')")
    from mdbench.arena.staging import base_image

    changed = []
    for task in task_dirs:
        dockerfile = Path(task) / "environment" / "Dockerfile"
        image = base_image(dockerfile) if dockerfile.is_file() else None
        if not is_base_image(image):
            raise InputError(f"FROM {image}: not the suite's base image, left alone", str(dockerfile))
        if image == reference:
            continue
        lines = dockerfile.read_text(encoding="utf-8").splitlines(keepends=True)
        for i, line in enumerate(lines):
            if re.match(r"\s*FROM\s", line, re.I):
                lines[i] = line.replace(image, reference, 1)
                break
        dockerfile.write_text("".join(lines), encoding="utf-8")
        changed.append(dockerfile)
    return changed


def validate_task(task_dir: str | Path, *, rules: tuple[str, ...] = ("harbor", "suite")) -> list[Problem]:
    """Problems of a task folder under the chosen rule sets (``harbor``, ``suite``); empty = valid."""
    out = harbor_problems(task_dir) if "harbor" in rules else []
    if "suite" in rules and not any(p.path.endswith("task.toml") and "malformed TOML" in p.message for p in out):
        out += suite_problems(task_dir)
    return out


def list_tasks(root: str | Path = TASKS_DIR) -> list[Task]:
    """Load every task folder (a folder with ``task.toml``) under ``root``, sorted by name."""
    root = Path(root)
    if (root / "task.toml").is_file():
        return [load_task(root)]
    return [load_task(p.parent) for p in sorted(root.glob("*/task.toml"))]
