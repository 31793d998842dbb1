"""What a stage notebook glues: JSON-ready data only, so the kernel never sends a non-JSON message.

``scrapbook.glue`` publishes its data in a display message; jupyter_client serialises messages with
``allow_nan=False`` and, for a NaN or an infinity (a pandas frame's missing value, an estimate that could not be
computed), prints "Message serialization failed with: Out of range float values are not JSON compliant" into the
executed notebook. :func:`glue` turns every non-finite float into ``null`` (JSON's "no value") first.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def json_ready(value: Any) -> Any:
    """``value`` as plain JSON data: non-finite floats become ``None``; numpy scalars and arrays, tuples and
    paths become Python numbers, lists and strings; mapping keys become strings; pandas frames become records."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_ready(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "to_dict") and callable(value.to_dict):  # pandas objects
        try:
            return json_ready(value.to_dict(orient="records"))
        except TypeError:
            return json_ready(value.to_dict())
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy arrays and scalars
        return json_ready(value.tolist())
    if value is not None and not isinstance(value, (str, int, bool)) and hasattr(value, "item"):
        try:
            return json_ready(value.item())
        except (TypeError, ValueError):
            pass
    return value


def glue(name: str, value: Any) -> None:
    """``scrapbook.glue(name, json_ready(value))``: record a scrap in the executing notebook."""
    import scrapbook as sb

    sb.glue(name, json_ready(value))
