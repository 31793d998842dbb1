"""Issue 35: the model's validation with honest uncertainty.

* replicates: mean +- 95 % interval of the mean between independent seeds (Student t), never a block standard
  error; deviations from sourced experimental values (DOI or handbook) in ``data/experimental_references.json``;
* equilibration detected before the density is averaged;
* docs/forcefield.md's table is the one generated from the committed validation JSON (numbers checked).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from mdbench.analysis.blocks import detect_equilibration
from mdbench.validation import forcefield as vff

ROOT = Path(__file__).parents[2]
COMMITTED = vff.REFERENCES_FILE.parent / "validation" / "ff_validation_replicates.json"


def test_replicate_interval_is_the_t_interval_of_the_mean():
    q = vff.replicate_interval([1.0, 2.0, 3.0])
    assert q["n"] == 3 and q["mean"] == pytest.approx(2.0)
    assert q["hw95"] == pytest.approx(4.302653 * 1.0 / math.sqrt(3), rel=1e-5)  # t(0.975, 2) = 4.3027
    assert vff.replicate_interval([1.0])["hw95"] is None      # one run has no between-replicate interval
    assert vff.replicate_interval([float("nan"), 2.0, 4.0])["n"] == 2


def test_every_reference_names_a_source():
    doc = json.loads(vff.REFERENCES_FILE.read_text())
    for sp in ("DMC", "TTE"):
        for q, ref in doc[sp].items():
            assert ref["source"] and ("verified" in ref), (sp, q)
            assert ref["verified"] is False or ref["doi"], (sp, q)  # a verified value carries its DOI
            assert ref["verified"] is True or len(ref.get("searched", "")) > 100, (sp, q)  # else: what was searched
    assert vff.REFERENCES["DMC"]["density"].doi == "10.1021/cr030203g"


def _result(species: str, seed: int, rho: float, eta: float = float("nan"), d_yh: float = float("nan")):
    return vff.LiquidResult(species, "L", 100, 100.0, 50.0, (40.0, 100.0), rho, 0.003, 1.065, 0.03,
                            rho / 1.065 - 1, True, viscosity_mPa_s=eta, D_yh_m2_s=d_yh, seed=seed)


def test_summary_reports_the_between_replicate_interval_and_the_deviation():
    runs = {"L": {"DMC": [_result("DMC", s, r, 0.6, d) for s, r, d in
                          ((1, 1.09, 1.5e-9), (2, 1.10, 1.7e-9), (3, 1.11, 1.6e-9))]}}
    doc = vff.replicate_summary(runs)
    dens = doc["levels"]["L"]["DMC"]["quantities"]["density"]
    assert dens["mean"] == pytest.approx(1.10) and dens["n"] == 3
    assert dens["hw95"] == pytest.approx(4.302653 * 0.01 / math.sqrt(3), rel=1e-4)
    assert dens["deviation_rel"] == pytest.approx(1.10 / 1.065 - 1)
    assert doc["levels"]["L"]["DMC"]["seeds"] == [1, 2, 3]
    table = vff.replicate_table(doc)
    assert "1.1000 +- 0.0248" in table and "+3.3% +- 2.3%" in table


def test_equilibration_is_detected_before_averaging():
    rng = np.random.default_rng(5)
    rho = np.r_[np.linspace(1.00, 1.10, 200), np.full(800, 1.10)] + 0.004 * rng.standard_normal(1000)
    t0, g, n_eff = detect_equilibration(rho)
    assert 150 <= t0 <= 300 and n_eff > 100


def test_forcefield_doc_table_is_the_committed_validation_json():
    """The numbers of docs/forcefield.md's replicate table are those of the committed JSON (regenerate with
    ``mdbench bundle validate-ff --out DIR --summary`` and copy the JSON to data/validation/)."""
    doc = json.loads(COMMITTED.read_text())
    table = vff.replicate_table(doc)
    text = (ROOT / "docs" / "forcefield.md").read_text()
    assert table in text, "docs/forcefield.md's replicate table differs from the committed validation JSON"
    # and every number in the doc's table rows is one the JSON gives (no hand-edited cell)
    rows = [ln for ln in text.splitlines() if ln.startswith("|") and ln in table.splitlines()]
    assert len(rows) >= 2 + sum(len(v) for v in doc["levels"].values())
    for lv in doc["levels"].values():
        for e in lv.values():
            assert len(e["seeds"]) >= 3, "fewer than 3 independent seeds: no 95 % interval between replicates"
    assert re.search(r"0\.72", text)


def test_validate_ff_is_a_bundle_command_of_the_validation_room(tmp_path):
    """The study moved above build/engine/analysis (issue 35's room cycles); ``mdbench bundle validate-ff`` still
    works, and the inputs room does not import it back."""
    from click.testing import CliRunner

    from mdbench.cli import cli

    runner = CliRunner()
    out = runner.invoke(cli, ["bundle", "validate-ff", "--help"])
    assert out.exit_code == 0 and "--seeds" in out.output
    bad = runner.invoke(cli, ["bundle", "validate-ff", "--out", str(tmp_path), "--seeds", "1,x"])
    assert bad.exit_code != 0 and "comma-separated integers" in bad.output and "Traceback" not in bad.output
    inputs_src = "\n".join(p.read_text() for p in (ROOT / "lib" / "mdbench" / "inputs").rglob("*.py"))
    assert not re.search(r"^\s*(from|import) mdbench\.validation", inputs_src, re.M)
