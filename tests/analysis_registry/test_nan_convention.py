"""One convention for "no number": NaN and ±inf are written as ``null`` in results.json and in the run record
(events and snapshots) alike — never as the strings ``"nan"``/``"inf"`` in one place and ``null`` in another."""

from __future__ import annotations

import json
import math

import numpy as np

from mdbench.analysis.results import write_results
from mdbench.jsonsafe import json_safe
from mdbench.record import RunRecord
from mdbench.record.validate import validate_run

NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "minus_inf": -np.inf, "np_nan": np.float32("nan"),
              "array": np.array([1.0, np.nan]), "nested": {"tuple": (2.0, float("nan"))}}
EXPECTED = {"nan": None, "inf": None, "minus_inf": None, "np_nan": None, "array": [1.0, None],
            "nested": {"tuple": [2.0, None]}}


def _no_nan_strings(obj):
    if isinstance(obj, dict):
        return all(_no_nan_strings(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_no_nan_strings(v) for v in obj)
    if isinstance(obj, float):
        return math.isfinite(obj)
    return not (isinstance(obj, str) and obj.lower() in {"nan", "inf", "-inf", "infinity", "-infinity"})


def test_results_and_record_write_non_finite_numbers_as_null(tmp_path):
    assert json_safe(NON_FINITE) == EXPECTED
    results = json.loads(write_results(tmp_path / "results.json", {"payload": NON_FINITE}).read_text())
    assert results["payload"] == EXPECTED

    rec = RunRecord(tmp_path / "run")
    event = rec.append_event("note", {"payload": NON_FINITE})
    lines = (tmp_path / "run" / "run_record" / "events.jsonl").read_text().splitlines()
    written = next(json.loads(line) for line in lines if json.loads(line)["id"] == event["id"])
    assert written["payload"]["payload"] == EXPECTED == results["payload"]
    assert _no_nan_strings(written)
    rec.register("analysis", {"bound_nm": float("nan"), "blocks": np.array([np.inf, 1.0])})
    for line in (tmp_path / "run" / "run_record" / "registrations.jsonl").read_text().splitlines():
        assert _no_nan_strings(json.loads(line))
    # null is a clean "no number": the record validator has nothing non-finite to report
    assert not [f for f in validate_run(tmp_path / "run") if "non-finite" in str(f)]
