"""The ``inputs`` room: case definitions and presets, the frozen force field, the agent input bundle.

Public API (imported lazily)::

    from mdbench.inputs import load_case, load_preset, build_bundle, verify_bundle, frozen_forcefield_checksum
"""

from __future__ import annotations

import importlib
from typing import Any

_API = {
    "Case": "mdbench.inputs.cases", "Preset": "mdbench.inputs.cases", "load_case": "mdbench.inputs.cases",
    "load_preset": "mdbench.inputs.cases", "build_bundle": "mdbench.inputs.bundle",
    "verify_bundle": "mdbench.inputs.bundle", "frozen_forcefield_checksum": "mdbench.inputs.bundle",
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'mdbench.inputs' has no attribute {name!r}")
