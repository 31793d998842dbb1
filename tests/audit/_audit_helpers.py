"""Helpers of the audit tests (kept out of conftest.py so that imports are unambiguous)."""

from __future__ import annotations

import json
from pathlib import Path

import _runbuilder as rb


def edit_results(run: Path, fn) -> dict:
    """Apply ``fn`` to the run's results.json, rewrite it and re-record its checksum in the inventory."""
    from mdbench.record import RunRecord

    path = run / "analysis" / rb.CASE / "results.json"
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc, indent=1))
    RunRecord(run).add_artifact(f"analysis/{rb.CASE}/results.json")
    return doc


def saeo(out: Path) -> dict:
    return json.loads((out / "saeo.json").read_text())


def judgment(doc: dict, item: str, case: str | None = None, observable: str | None = None) -> dict:
    for j in doc["judgments"]:
        if j["item"] == item and j["case"] == case and j["observable"] == observable:
            return j
    raise KeyError((item, case, observable))


def state(doc: dict, case: str, observable: str) -> str:
    return next(o["state"] for o in doc["observables"] if o["case"] == case and o["observable"] == observable)


def reanalysed(run: Path, bundle: Path, out: Path):
    """(AuditResult, saeo.json) of an audit with the canonical reanalysis; the test is skipped where the
    reanalysis could not run on this trajectory."""
    import pytest

    from mdbench.audit import audit_run

    res = audit_run(run, bundle, out, reanalysis=True)
    if res.reanalysis["cases"][rb.CASE]["status"] != "ok":
        pytest.skip("canonical reanalysis unavailable for this trajectory")
    return res, saeo(out)
