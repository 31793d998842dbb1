"""Parameter schemas read from a template's ``parameters`` cell, and validation before any kernel starts.

A template declares its parameters papermill-style, one per line::

    run_dir: str = ""        # required: the run directory
    system: str = "DE"       # case name
    guard_ps: float = 100.0  # excluded start of the trajectory [ps]

The annotation is the type, the value the default, the comment the help. A help text that begins with
the word ``required`` means the caller must supply the parameter. The schema is derived from the cell
itself, so it can never drift from the notebook.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mdbench.errors import InputError, MdbenchError
from mdbench.paths import PARAMS_DIR

_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (float, int), "bool": (bool,),
    "list": (list, tuple), "dict": (dict,), "Any": (object,),
}


class ParameterError(MdbenchError):
    """Parameters given to a template do not match its schema; ``parameter`` names the culprit."""

    def __init__(self, template: str, parameter: str, message: str):
        self.template = template
        self.parameter = parameter
        super().__init__(f"{template}: parameter {parameter!r}: {message}")


@dataclass(frozen=True)
class ParameterSpec:
    """One declared template parameter."""

    name: str
    type_name: str
    optional: bool
    default: Any
    help: str
    required: bool

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.optional
        allowed = _TYPES.get(self.type_name, (object,))
        if isinstance(value, bool) and bool not in allowed:
            return False  # True is an int in Python; not a valid int/float parameter
        return isinstance(value, allowed)


def _type_of(annotation: ast.expr) -> tuple[str, bool]:
    """(base type name, optional?) from an annotation such as ``str``, ``float | None``, ``list[str]``."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        left, left_opt = _type_of(annotation.left)
        right, right_opt = _type_of(annotation.right)
        if right == "None":
            return left, True
        if left == "None":
            return right, True
        return "Any", left_opt or right_opt
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return "None", True
    if isinstance(annotation, ast.Subscript):
        base, _ = _type_of(annotation.value)
        if base == "Optional":
            inner, _ = _type_of(annotation.slice)
            return inner, True
        return base, False
    if isinstance(annotation, ast.Name):
        return annotation.id, False
    if isinstance(annotation, ast.Attribute):
        return annotation.attr, False
    return "Any", False


def parameters_cell(notebook_path: str | Path) -> tuple[str, list[str]]:
    """Source of the cell tagged ``parameters`` (and its lines); an error if there is none."""
    path = Path(notebook_path)
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read notebook ({exc})", str(path)) from exc
    for cell in nb.get("cells", []):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source = "".join(cell.get("source", []))
            return source, source.splitlines()
    raise InputError("no cell tagged 'parameters'; add the tag so papermill can inject values", str(path))


def read_schema(notebook_path: str | Path) -> dict[str, ParameterSpec]:
    """Parse the ``parameters`` cell of a template into a schema ``name → ParameterSpec``."""
    source, lines = parameters_cell(notebook_path)
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise InputError(f"parameters cell is not valid Python ({exc.msg})", str(notebook_path), exc.lineno) from exc
    specs: dict[str, ParameterSpec] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            type_name, optional = _type_of(node.annotation)
            try:
                default = ast.literal_eval(node.value) if node.value is not None else None
            except ValueError:
                default = None
            line = lines[node.lineno - 1]
            help_text = line.split("#", 1)[1].strip() if "#" in line else ""
            specs[node.target.id] = ParameterSpec(
                name=node.target.id, type_name=type_name, optional=optional, default=default, help=help_text,
                required=help_text.lower().startswith("required"),
            )
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for name in names:
                specs[name] = ParameterSpec(name, "Any", True, None, "", False)
    return specs


def validate_parameters(template: str | Path, params: dict[str, Any]) -> dict[str, Any]:
    """Check ``params`` against the template's schema; returns them unchanged or raises ParameterError.

    Unknown names, missing required names and values of the wrong type are each reported with the
    parameter's name, before any kernel starts.
    """
    schema = read_schema(template)
    label = Path(template).name
    for name in params:
        if name not in schema:
            known = ", ".join(sorted(schema)) or "none"
            raise ParameterError(label, name, f"unknown (the template declares: {known})")
    for name, spec in schema.items():
        if spec.required and name not in params:
            raise ParameterError(label, name, f"missing (required: {spec.help})")
        if name in params and not spec.accepts(params[name]):
            raise ParameterError(label, name, f"expected {spec.type_name}{' or None' if spec.optional else ''}, "
                                              f"got {type(params[name]).__name__} {params[name]!r}")
    preset = params.get("preset")
    if "preset" in schema and isinstance(preset, str) and preset:
        known = known_presets()
        if preset not in known:
            raise ParameterError(label, "preset", f"{preset!r} is not a preset; choose one of {', '.join(known)} "
                                                  f"(params/presets/<preset>.yaml)")
    return params


def known_presets() -> list[str]:
    """Names of the size presets, ``params/presets/<name>.yaml``, smallest first (:func:`mdbench.choices.preset_names`)."""
    from mdbench.choices import preset_names

    return list(preset_names())


def check_preset(preset: str | None, what: str = "--preset") -> None:
    """Raise :class:`InputError` naming ``preset`` and the choices when it is not in ``params/presets``."""
    if preset is not None and preset not in known_presets():
        raise InputError(f"{what} {preset!r} is not a preset; choose one of {', '.join(known_presets())}",
                         str(PARAMS_DIR / "presets"))
