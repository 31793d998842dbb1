"""JSON Schemas made cheaper to apply: local references written out in place.

jsonschema resolves a ``$ref`` anew at every use, which is about half the time of validating a document
against a schema built from ``$defs``; every validator of the project's own schemas (results, run record,
SAEO report) is built from the inlined copy, once per process.
"""

from __future__ import annotations

from typing import Any


def inline_local_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` in which every ``{"$ref": "#/$defs/NAME"}`` (a reference alone in its object)
    is replaced by the definition itself, recursively. Recursive definitions and references with sibling
    keywords stay references; ``$defs`` is kept, so that those still resolve."""
    defs = schema.get("$defs", {})

    def inline(node: Any, active: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if len(node) == 1 and isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref[len("#/$defs/"):]
                if name in defs and "/" not in name and name not in active:
                    return inline(defs[name], (*active, name))
            return {k: (v if k == "$defs" else inline(v, active)) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v, active) for v in node]
        return node

    return inline(schema, ())
