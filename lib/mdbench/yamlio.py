"""YAML loading that names the file and line of a syntax error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mdbench.errors import InputError

#: libyaml's safe loader where PyYAML was built with it (5-10 x the pure-Python one; same documents).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` with libyaml where available."""
    return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader


def load_yaml(path: str | Path) -> Any:
    """Load a YAML file; a syntax error becomes an :class:`InputError` with file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read YAML file ({exc.strerror})", str(path)) from exc
    try:
        return safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"malformed YAML: {exc.problem or exc}", str(path), line) from exc
    except yaml.YAMLError as exc:
        raise InputError(f"malformed YAML: {exc}", str(path)) from exc
