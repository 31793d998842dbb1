"""Audit of our own electrolyte micro-preset run (opt-in: several minutes on 2 cores)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from _testseed import seed_for
from mdbench.analysis import pipeline
from mdbench.audit import audit_run
from mdbench.inputs.bundle import build_bundle


@pytest.mark.slow
@pytest.mark.gromacs
def test_audit_of_our_micro_DE_run(tmp_path):
    bundle = build_bundle("micro", tmp_path / "bundle")
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "mdbench.cli", "study", "run", "--preset", "micro", "--systems",
                           "DE", "--out", str(run), "--threads", "1", "--workers", "1", "--seed",
                           str(seed_for("audit/micro-DE")), "--quiet"],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    prod = run / "cases/DE/prod"
    out = run / "analysis/DE"
    pipeline.analyze_files(str(prod / "prod.tpr"), str(prod / "prod.xtc"), str(prod / "prod.edr"), str(out))
    res = audit_run(run, bundle, tmp_path / "audit", reanalysis=True)
    de = {j.item: j for j in res.judgments if j.case == "DE" and j.observable is None}
    for item in ("Sim1", "Sim2", "Sim3", "Sim4", "A1"):
        assert de[item].rating == 1.0, (item, de[item].reason)
    states = {o.observable: o.state for o in res.observables if o.case == "DE"}
    assert "M" not in states.values() and "invalid_upstream" not in states.values(), states
    assert {o.state for o in res.observables if o.case in ("HCE", "LHCE")} == {"not_reached"}
    assert json.loads((tmp_path / "audit/saeo.json").read_text())["reanalysis"]["cases"]["DE"]["status"] == "ok"
