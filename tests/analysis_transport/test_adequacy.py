"""The registered adequacy rules (mdbench.analysis.adequacy): precision, block trend, not_estimable."""

from __future__ import annotations

import pytest

from mdbench.analysis import states
from mdbench.analysis.adequacy import (PrecisionBound, adequacy_checks, block_trend, consistent_with_zero,
                                       precision_check, withheld)
from mdbench.analysis.blocks import block_estimate
from mdbench.analysis.definitions import registration_definitions
from mdbench.analysis.settings import AnalysisSettings


def test_registered_thresholds_are_the_ones_an_expert_accepts():
    s = AnalysisSettings()
    for rel in (s.diffusion_max_rel_half_width, s.viscosity_max_rel_half_width, s.sigma_t_plus_max_rel_half_width,
                s.cn_max_rel_half_width, s.lifetime_max_rel_half_width):
        assert rel == 0.20
    assert s.t_plus_max_abs_half_width == s.ionicity_max_abs_half_width == s.association_fraction_max_half_width == 0.10
    assert s.block_trend_alpha == 0.05
    reg = registration_definitions(s)["analysis_adequacy_and_stopping"]
    assert reg["thresholds"]["block_trend_alpha"] == 0.05 and "not_estimable" in reg["state_rules"]
    assert "trend" in reg["trend_rule"] and "20" not in reg["precision_rule"]  # the number lives in thresholds


def test_viscosity_with_forty_percent_half_width_is_si():
    # blocks with s = 0.2493 → 95 % half-width 3.182 s / 2 = 0.397: eta = 1.0 +- 0.40 mPa s
    est = block_estimate(1.0, [0.765, 1.235, 0.805, 1.195], "mPa*s")
    assert est.half_width_95 == pytest.approx(0.40, abs=0.01)
    checks, details = adequacy_checks("", est, PrecisionBound(rel=0.2), 0.05)
    assert checks == {"block_precision": False, "block_trend": True}
    d = states.classify_observable(values=[1.0, *est.blocks], sampling_checks=checks, check_details=details)
    assert d.state == states.SI and "40% of |value|" in d.reason and "<= 20% of |value|" in d.reason
    # the same blocks at +-10 % pass
    tight = block_estimate(1.0, [0.94, 1.06, 0.95, 1.05], "mPa*s")
    assert all(adequacy_checks("", tight, PrecisionBound(rel=0.2), 0.05)[0].values())


def test_a_steady_drift_over_the_blocks_is_si_however_narrow():
    est = block_estimate(1.0, [0.97, 0.99, 1.01, 1.03], "u")  # 2 %/block trend, half-width ~4.5 %
    ok, why = adequacy_checks("", est, PrecisionBound(rel=0.2), 0.05)
    assert ok["block_precision"] and not ok["block_trend"]
    assert "p = 0.000" in why["block_trend"]
    slope, p = block_trend([1.0, 1.2, 0.9, 1.1])
    assert p > 0.5 and slope == pytest.approx(0.0, abs=0.05)
    assert block_trend([2.0, 2.0, 2.0, 2.0]) == (0.0, 1.0)


def test_absolute_bound_for_quantities_near_zero():
    t_plus = block_estimate(0.02, [0.0, 0.05, 0.01, 0.03], "1")  # near zero: relative bound is meaningless
    assert not precision_check(t_plus, PrecisionBound(rel=0.2))[0]
    assert precision_check(t_plus, PrecisionBound(abs=0.1))[0]


def test_denominator_consistent_with_zero_and_withheld_value():
    assert consistent_with_zero(block_estimate(2e-8, [-3e-8, 6e-8, 1e-8, 4e-8], "S/m"))
    assert not consistent_with_zero(block_estimate(0.5, [0.45, 0.55, 0.5, 0.52], "S/m"))
    payload = withheld({"value": -399.0, "uncertainty": {"half_width_95": 900.0, "definition": "d"},
                        "blocks": [1.0, 2.0, 3.0, 4.0], "diagnostics": {"x": 1}})
    assert payload["value"] is None and payload["blocks"] == [None] * 4
    assert payload["uncertainty"]["half_width_95"] is None and payload["diagnostics"]["withheld"]["value"] == -399.0
