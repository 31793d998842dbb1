"""Audit checks are structured: states and ratings follow from check codes, never from message wording."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mdbench.audit import analysis_items, canonical, definitions, sampling
from mdbench.audit.analysis_items import CODES, assess_case
from mdbench.audit.bundle import load_bundle
from mdbench.audit.model import CHECK_SEVERITIES, Check
from mdbench.audit.runread import load_run
from mdbench.audit.safeio import RunFS
from mdbench.record import RunRecord


def _run(tmp_path: Path) -> Path:
    """Foreign-format results (no categories): a finite D with a failing β, a viscosity without plateau,
    a density with a non-finite block, and nothing for conductivity."""
    run = tmp_path / "run"
    rec = RunRecord(run)
    rec.set_stage_state("W", "production", "valid", "fixture")
    unc = {"half_width_95": 0.1, "definition": "4 blocks"}
    thermo = {t: {"value": 1.0, "blocks": [1.0] * 4, "uncertainty": unc}
              for t in ("temperature", "pressure", "potential_energy", "total_energy", "volume")}
    obs = {
        "thermodynamics": {"density": {"value": 1000.0, "blocks": [1000.0, None, 1000.0, 1000.0],
                                       "uncertainty": unc}, **thermo},
        "self_diffusion": {"D_na": {"value": 1e-9, "blocks": [1e-9] * 4, "beta": 0.6, "fit_window_ps": [1, 2],
                                    "uncertainty": unc, "frame": "barycentric"}},
        "viscosity": {"value": 0.9, "blocks": [0.9] * 4, "plateau": {"reached": False}, "uncertainty": unc,
                      "ensemble": "NVT"},
    }
    (run / "analysis" / "W").mkdir(parents=True)
    (run / "analysis" / "W" / "results.json").write_text(json.dumps({"observables": obs}))
    return run


def _assess(run: Path):
    js, groups = assess_case(load_run(RunFS(run)), load_bundle(None), "W", None, None)
    by = {g.assessment.observable: g.assessment for g in groups}
    ratings = {(j.item, j.observable): j.rating for j in js}
    return by, ratings


def test_every_code_has_a_known_severity():
    assert set(CODES.values()) <= set(CHECK_SEVERITIES)
    assert analysis_items.REGIME_CODES <= set(CODES)
    with pytest.raises(ValueError, match="severity"):
        Check("x", "serious", "m")


def test_states_and_ratings_follow_the_codes(tmp_path):
    by, ratings = _assess(_run(tmp_path))
    codes = {name: {c.code for c in a.checks} for name, a in by.items()}
    assert by["thermodynamics"].state == "F" and "nonfinite_blocks" in codes["thermodynamics"]
    assert ratings[("A6", "thermodynamics")] == 0.0 and ratings[("A3", "thermodynamics")] == 0.0
    assert by["self_diffusion"].state == "SI" and "msd_exponent_outside" in codes["self_diffusion"]
    assert ratings[("A5", "self_diffusion")] == 0.5 and ratings[("A6", "self_diffusion")] == 0.5
    assert by["viscosity"].state == "SI" and "plateau_not_reached" in codes["viscosity"]
    assert ratings[("A5", "viscosity")] == 0.5
    assert by["conductivity"].state == "M" and codes["conductivity"] == {"missing_target"}
    assert by["coordination"].state == "M"
    # the structured checks are in saeo.json
    d = by["viscosity"].to_dict()
    assert d["checks"][0]["code"] == "plateau_not_reached" and d["checks"][0]["severity"] == "sampling"


def test_rewording_every_message_changes_no_verdict(tmp_path, monkeypatch):
    run = _run(tmp_path)
    before, ratings_before = _assess(run)
    real = analysis_items._check

    def reworded(code, message, *e, path=""):
        return real(code, "zzz", *e, path=path)

    for module in (analysis_items, canonical, definitions, sampling):  # every module of the split that words checks
        monkeypatch.setattr(module, "_check", reworded, raising=False)
    after, ratings_after = _assess(run)
    assert {k: a.state for k, a in after.items()} == {k: a.state for k, a in before.items()}
    assert ratings_after == ratings_before
    assert all(c.message in ("zzz",) or c.code == "missing_target" for a in after.values() for c in a.checks)


def test_every_code_is_documented_with_its_seed_sentence():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "saeo-rules.md").read_text(encoding="utf-8")
    table = doc[doc.index("## Check codes"):]
    missing = [code for code in CODES if f"| `{code}` | {CODES[code]} |" not in table]
    assert not missing, f"codes not in docs/saeo-rules.md's table (code, severity, item, rule, seed): {missing}"
