"""House rules for notebooks: thin templates, kernelspec set, no committed outputs, parameters documented."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from mdbench.execute.parameters import read_schema
from mdbench.paths import NOTEBOOKS_DIR, TEMPLATES_DIR

TEMPLATES = sorted(TEMPLATES_DIR.rglob("*.ipynb"))
NOTEBOOKS = sorted(NOTEBOOKS_DIR.rglob("*.ipynb"))


def _code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c.get("source", [])) for c in nb["cells"] if c.get("cell_type") == "code"]


@pytest.mark.parametrize("path", TEMPLATES + NOTEBOOKS, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_notebook_house_rules(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["metadata"].get("kernelspec", {}).get("name") == "mdbench", "kernelspec must name the 'mdbench' kernel"
    code_cells = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    assert all(not c.get("outputs") for c in code_cells), "commit notebooks without outputs"
    assert all(c.get("execution_count") is None for c in code_cells), "commit notebooks without execution counts"
    sources = _code_cells(path)
    assert sum(len(s.splitlines()) for s in sources) <= 150, "too much code in a notebook: move it to lib/mdbench"
    for source in sources:
        tree = ast.parse(source)
        defined = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))]
        assert not defined, "no def/class in notebooks: logic belongs in lib/mdbench"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: str(p.relative_to(TEMPLATES_DIR)))
def test_template_parameters_are_documented(path):
    schema = read_schema(path)
    assert schema, "a template needs parameters"
    for name, spec in schema.items():
        assert spec.type_name != "Any", f"parameter {name!r} needs a type annotation"
        assert spec.help, f"parameter {name!r} needs a '# help [unit]' comment"


def test_there_are_templates():
    assert TEMPLATES, "no templates found"
