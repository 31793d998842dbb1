"""What stage notebooks glue is JSON that jupyter_client accepts (``allow_nan=False``): NaN/inf become null."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from mdbench.execute.scraps import json_ready


def test_non_finite_numbers_become_null_everywhere() -> None:
    frame = pd.DataFrame({"value": [1.5, np.nan, np.inf], "state": ["C", None, "F"]})
    data = {"records": frame.to_dict("records"), "frame": frame, "scalar": np.float32("nan"), "neg": -math.inf,
            "array": np.array([[1.0, np.nan]]), "ints": np.arange(2), "tuple": (np.int64(3), float("inf")),
            "path": Path("a/b"), 7: True}
    text = json.dumps(json_ready(data), allow_nan=False)  # raises on any NaN/inf left
    back = json.loads(text)
    assert back["records"] == [{"value": 1.5, "state": "C"}, {"value": None, "state": None},
                               {"value": None, "state": "F"}]
    assert back["frame"] == back["records"]
    assert back["scalar"] is None and back["neg"] is None and back["array"] == [[1.0, None]]
    assert back["ints"] == [0, 1] and back["tuple"] == [3, None] and back["path"] == "a/b" and back["7"] is True


def test_finite_values_are_kept_exactly() -> None:
    data = {"x": 0.1, "n": 12, "s": "text", "b": False, "none": None, "nested": [[1e-300, -2.5]]}
    assert json_ready(data) == data
