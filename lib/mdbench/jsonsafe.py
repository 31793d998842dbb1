"""JSON-safe copies, below every room: the one convention for numbers JSON cannot hold.

A non-finite float (NaN, ±inf) is written as ``null`` — in ``results.json``, in the run record and in a
stage's scraps alike — so a reader meets one spelling of "no number" (the record's ``"nan"`` strings of
earlier versions are still reported by ``mdbench record validate``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np


def json_safe(value: Any) -> Any:
    """A JSON-safe copy of ``value``: non-finite floats → None, numpy scalars and arrays → Python numbers and
    lists, tuples → lists, paths → strings, dictionary keys → strings.

    >>> json_safe({"D_m2_s": float("nan"), "blocks": (1.0, float("inf")), 3: np.float32(0.5)})
    {'D_m2_s': None, 'blocks': [1.0, None], '3': 0.5}
    >>> json_safe(np.array([1.0, np.nan]))
    [1.0, None]
    """
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biu" or (value.dtype.kind == "f" and np.isfinite(value).all()):
            return value.tolist()  # already JSON-safe Python numbers (the common case: curves, blocks)
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # other numpy-like scalars
        try:
            return json_safe(value.item())
        except (TypeError, ValueError):
            pass
    if hasattr(value, "tolist"):
        return json_safe(value.tolist())
    return value
