"""Harbor task folders: load ``task.toml`` and check a task's structure against the schema.

A Harbor task folder holds ``task.toml``, ``instruction.md``, ``environment/Dockerfile``,
``solution/solve.sh`` and ``tests/test.sh``. This project's tasks also carry ``tests/process.toml``
(rewardkit-style process criteria), a Python verifier module under ``tests/`` and, optionally,
``environment/app/`` (files copied to ``/app``) and ``environment/build.sh`` (run at image build time
and by the local runner to generate inputs, e.g. with GROMACS).
"""

from __future__ import annotations

import logging
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdbench.arena.grading import load_process_criteria
from mdbench.errors import InputError
from mdbench.paths import TEMPLATES_DIR

log = logging.getLogger(__name__)

#: Where this project's suite lives.
TASKS_DIR = TEMPLATES_DIR / "arena" / "tasks"

DIFFICULTIES = ("easy", "medium", "hard")

#: JSON Schema of ``task.toml`` (Harbor schema_version 1.3 plus this project's metadata).
TASK_TOML_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["schema_version", "task", "metadata", "verifier", "agent", "environment"],
    "properties": {
        "schema_version": {"const": "1.3"},
        "task": {
            "type": "object",
            "required": ["name", "authors", "keywords"],
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_.-]*/[a-z0-9][a-z0-9_.-]*$"},
                "description": {"type": "string"},
                "authors": {"type": "array", "items": {"type": ["string", "object"]}},
                "keywords": {"type": "array", "items": {"type": "string"}},
            },
        },
        "metadata": {
            "type": "object",
            "required": ["difficulty", "category", "packages", "system"],
            "properties": {
                "difficulty": {"enum": list(DIFFICULTIES)},
                "category": {"type": "string", "minLength": 1},
                "packages": {"type": "array", "items": {"type": "string"}},
                "system": {"type": "string", "minLength": 1},
                "kind": {"enum": ["standard", "negative", "underspecified"]},
            },
        },
        "verifier": {
            "type": "object",
            "required": ["timeout_sec"],
            "properties": {"timeout_sec": {"type": "number", "exclusiveMinimum": 0}},
        },
        "agent": {
            "type": "object",
            "required": ["timeout_sec"],
            "properties": {"timeout_sec": {"type": "number", "exclusiveMinimum": 0}},
        },
        "environment": {
            "type": "object",
            "properties": {
                "build_timeout_sec": {"type": "number", "exclusiveMinimum": 0},
                "cpus": {"type": "integer", "minimum": 1},
                "memory_mb": {"type": "integer", "minimum": 1},
                "storage_mb": {"type": "integer", "minimum": 1},
                "gpus": {"type": "integer", "minimum": 0},
            },
        },
    },
}

REQUIRED_FILES = ("instruction.md", "environment/Dockerfile", "solution/solve.sh", "tests/test.sh",
                  "tests/process.toml")


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
        return float(self.config.get("agent", {}).get("timeout_sec", 900.0))

    @property
    def verifier_timeout_sec(self) -> float:
        return float(self.config.get("verifier", {}).get("timeout_sec", 900.0))

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


def validate_task(task_dir: str | Path) -> list[str]:
    """Check a task folder's structure and ``task.toml``; return a list of problems (empty = valid).

    Each problem names the file and what to do. Checked: required files, ``task.toml`` against
    :data:`TASK_TOML_SCHEMA`, executable-or-bash scripts, a Python verifier module under ``tests/``,
    and parseable ``tests/process.toml`` criteria.
    """
    task_dir = Path(task_dir)
    problems: list[str] = []
    if not task_dir.is_dir():
        return [f"{task_dir}: not a directory; pass a task folder containing task.toml"]
    try:
        config = read_task_toml(task_dir / "task.toml")
    except InputError as exc:
        return [str(exc)]
    import jsonschema  # imported here: its format checkers take seconds to import

    validator = jsonschema.Draft202012Validator(TASK_TOML_SCHEMA)
    for err in sorted(validator.iter_errors(config), key=lambda e: list(e.path)):
        where = ".".join(str(p) for p in err.path) or "(top level)"
        problems.append(f"{task_dir / 'task.toml'}: {where}: {err.message}")
    for rel in REQUIRED_FILES:
        if not (task_dir / rel).is_file():
            problems.append(f"{task_dir / rel}: missing; a Harbor task needs this file")
    instr = task_dir / "instruction.md"
    if instr.is_file() and not instr.read_text(encoding="utf-8").strip():
        problems.append(f"{instr}: empty; write the task instruction")
    for rel in ("solution/solve.sh", "tests/test.sh"):
        p = task_dir / rel
        if p.is_file() and not p.read_text(encoding="utf-8").startswith("#!"):
            problems.append(f"{p}: no shebang line; start it with #!/bin/bash")
    if (task_dir / "tests").is_dir() and not list((task_dir / "tests").glob("*.py")):
        problems.append(f"{task_dir / 'tests'}: no Python verifier module (tests/*.py) found")
    proc = task_dir / "tests" / "process.toml"
    if proc.is_file():
        try:
            load_process_criteria(proc)
        except InputError as exc:
            problems.append(str(exc))
    dockerfile = task_dir / "environment" / "Dockerfile"
    if dockerfile.is_file() and not re.search(r"^\s*FROM\s+\S+", dockerfile.read_text(encoding="utf-8"), re.M):
        problems.append(f"{dockerfile}: no FROM line; a Dockerfile must name its base image")
    return problems


def list_tasks(root: str | Path = TASKS_DIR) -> list[Task]:
    """Load every task folder (a folder with ``task.toml``) under ``root``, sorted by name."""
    root = Path(root)
    if (root / "task.toml").is_file():
        return [load_task(root)]
    return [load_task(p.parent) for p in sorted(root.glob("*/task.toml"))]
