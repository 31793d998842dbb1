"""Every check/finding code the audit emits is named in docs/saeo-rules.md with its seed sentence and item."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AUDIT = ROOT / "lib" / "mdbench" / "audit"
CODE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")


def _codes_in(node: ast.AST) -> set[str]:
    """String literals of ``node`` that look like codes, not counting the tests of a conditional."""
    if isinstance(node, ast.IfExp):
        return _codes_in(node.body) | _codes_in(node.orelse)
    if isinstance(node, ast.BoolOp):
        return set().union(*(_codes_in(v) for v in node.values))
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE.match(node.value):
        return {node.value}
    return set()


def emitted_codes(lib: Path = AUDIT) -> dict[str, set[str]]:
    """Code → modules, for every code literal given to ``Finding``/``Check``/``_check`` (first argument or
    ``code=``), to ``RunFS.add`` (``fs.add``, ``self.add``), to the record checks' local ``add`` (first
    argument), or assigned to a variable ``code``."""
    out: dict[str, set[str]] = {}
    for f in sorted(lib.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            got: set[str] = set()
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                recv = fn.value.id if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) else None
                if name in ("Finding", "Check", "_check", "check"):
                    got = _codes_in(node.args[0]) if node.args else set()
                    got |= set().union(*(_codes_in(k.value) for k in node.keywords if k.arg == "code"))
                elif name == "add" and recv is not None and (recv.endswith("fs") or recv == "self") and node.args:
                    got = _codes_in(node.args[0])
                elif name == "add" and recv is None and len(node.args) >= 4:
                    got = _codes_in(node.args[0])
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "code" for t in node.targets):
                got = _codes_in(node.value)
            for c in got:
                out.setdefault(c, set()).add(f.name)
    return out


def test_the_scan_finds_the_codes_of_every_kind_of_emitter():
    codes = emitted_codes()
    for c in ("missing_target", "block_layout_invalid", "symlink_not_followed", "production_force_field_differs",
              "trajectory_treatment_differs", "required_not_compared", "judge_output"):
        assert c in codes, c
    assert "stage_states" not in codes          # a conditional's test is no code


def test_every_emitted_code_is_documented():
    doc = (ROOT / "docs" / "saeo-rules.md").read_text(encoding="utf-8")
    missing = {c: sorted(m) for c, m in emitted_codes().items() if f"`{c}`" not in doc}
    assert not missing, f"codes the audit emits but docs/saeo-rules.md does not name (code, item, seed): {missing}"
