"""Joint log loss, floor, row validation and the closed-loop metrics against hand-worked values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mdbench.errors import InputError
from mdbench.sdl.ledger import Outcome
from mdbench.sdl.scoring import (ForecastError, acceleration_factor, adaptive_auc, check_floor, first_passage,
                                 geometric_mean, joint_log_loss, learning_curve, loss_bound, mean_loss,
                                 sign_agreement, sustained_passage, uniform_row, unsupported_crossings,
                                 validate_panel, validate_row)

CATS = ("a", "b", "c", "d")


def _row(pv, pc, eid="X"):
    return validate_row({"experiment_id": eid, "p_valid": pv, "p_category": dict(zip(CATS, pc))}, CATS, True)


@pytest.mark.parametrize("validity_axis", [True, False])
def test_uniform_forecast_scores_exactly_ln_K(validity_axis):
    K = len(CATS) + (1 if validity_axis else 0)
    outcomes = [Outcome(True, c) for c in CATS] + ([Outcome(False, None)] if validity_axis else [])
    for out in outcomes:
        row = validate_row(uniform_row("X", CATS, validity_axis), CATS, validity_axis)
        assert joint_log_loss(row, out, CATS, validity_axis) == pytest.approx(math.log(K), rel=1e-12, abs=0)


def test_uniform_on_whole_vapdiff_record_is_ln4(vapdiff):
    rows = {e.experiment_id: validate_row(uniform_row(e.experiment_id, vapdiff.categories, False),
                                          vapdiff.categories, False) for e in vapdiff.experiments}
    assert mean_loss(rows, vapdiff) == pytest.approx(math.log(4), rel=1e-12)


def test_uniform_on_pg_fixture_is_ln5(pg_ledger):
    rows = {e.experiment_id: validate_row(uniform_row(e.experiment_id, pg_ledger.categories, True),
                                          pg_ledger.categories, True) for e in pg_ledger.experiments}
    assert mean_loss(rows, pg_ledger) == pytest.approx(math.log(5), rel=1e-12)


def test_perfect_forecast_scores_zero():
    for k, c in enumerate(CATS):
        pc = [0.0] * 4
        pc[k] = 1.0
        assert joint_log_loss(_row(1.0, pc), Outcome(True, c), CATS, True) == 0.0
    assert joint_log_loss(_row(0.0, [0.25] * 4), Outcome(False, None), CATS, True) == 0.0


def test_floor_bounds_the_loss_exactly():
    floor = 1e-4
    # all mass on the wrong category and on "invalid" for a valid outcome: both terms hit the floor
    row = _row(0.0, [0.0, 1.0, 0.0, 0.0])
    loss = joint_log_loss(row, Outcome(True, "a"), CATS, True, floor)
    assert loss == pytest.approx(-2 * math.log(floor)) == pytest.approx(loss_bound(True, floor))
    assert joint_log_loss(_row(1.0, [0.25] * 4), Outcome(False, None), CATS, True, floor) == pytest.approx(
        -math.log(floor))


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 1), st.lists(st.floats(0, 1), min_size=4, max_size=4).filter(lambda v: sum(v) > 0.01),
       st.sampled_from([Outcome(True, c) for c in CATS] + [Outcome(False, None)]),
       st.floats(1e-12, 0.19))
def test_floor_bounds_any_forecast(pv, raw, outcome, floor):
    pc = [x / sum(raw) for x in raw]
    pc[-1] = 1.0 - sum(pc[:-1])
    if pc[-1] < 0:
        return
    loss = joint_log_loss(_row(pv, pc), outcome, CATS, True, floor)
    assert 0.0 <= loss <= loss_bound(True, floor) + 1e-12


def test_floor_must_be_below_one_over_K():
    check_floor(0.1, 5)
    for bad in (0.0, 0.2, 0.5, -1e-3):
        with pytest.raises(InputError, match="floor"):
            check_floor(bad, 5)


@pytest.mark.parametrize("row,match", [
    ({"experiment_id": "X", "p_valid": 0.5, "p_category": {"a": 0.5, "b": 0.5, "c": 0.0}}, "keys must be exactly"),
    ({"experiment_id": "X", "p_valid": 0.5, "p_category": {"a": 0.5, "b": 0.5, "c": 0.2, "d": 0.0}}, "sums to"),
    ({"experiment_id": "X", "p_valid": 1.5, "p_category": dict(zip(CATS, [0.25] * 4))}, "p_valid"),
    ({"experiment_id": "X", "p_valid": 0.5, "p_category": dict(zip(CATS, [1.25, -0.25, 0, 0]))}, r"\[0, 1\]"),
    ({"experiment_id": "X", "p_category": dict(zip(CATS, [0.25] * 4))}, "p_valid' is required"),
    ({"experiment_id": "X", "p_valid": 0.5, "p_category": dict(zip(CATS, [0.25] * 4)), "note": 1}, "unknown keys"),
    ({"p_valid": 0.5, "p_category": dict(zip(CATS, [0.25] * 4))}, "experiment_id"),
    ({"experiment_id": "X", "p_valid": float("nan"), "p_category": dict(zip(CATS, [0.25] * 4))}, "p_valid"),
])
def test_malformed_rows_are_rejected_with_the_reason(row, match):
    with pytest.raises(ForecastError, match=match):
        validate_row(row, CATS, True)


def test_no_validity_axis_refuses_p_valid_below_one():
    with pytest.raises(ForecastError, match="no validity axis"):
        validate_row({"experiment_id": "X", "p_valid": 0.9, "p_category": dict(zip(CATS, [0.25] * 4))}, CATS, False)


def test_panel_must_be_covered_exactly():
    rows = [uniform_row("A", CATS, True), uniform_row("B", CATS, True)]
    assert set(validate_panel(rows, ["A", "B"], CATS, True)) == {"A", "B"}
    with pytest.raises(ForecastError, match="missing"):
        validate_panel(rows[:1], ["A", "B"], CATS, True)
    with pytest.raises(ForecastError, match="duplicate"):
        validate_panel(rows + rows[:1], ["A", "B"], CATS, True)


def test_learning_curve_auc_and_passages_by_hand():
    curve = learning_curve([-1.0, -0.9, -0.95, -0.8], budget=5)   # stopped after 3: carried forward
    assert curve.tolist() == [-1.0, -0.9, -0.95, -0.8, -0.8, -0.8]
    # trapezoids: (-0.95 - 0.925 - 0.875 - 0.8 - 0.8) / 5
    assert adaptive_auc(curve) == pytest.approx((-0.95 - 0.925 - 0.875 - 0.8 - 0.8) / 5)
    assert adaptive_auc([-2.0, -2.0, -2.0]) == pytest.approx(-2.0)
    assert first_passage(curve, -0.92) == 1
    assert sustained_passage(curve, -0.92) == 3
    assert first_passage(curve, -0.5) is None and sustained_passage(curve, -0.5) is None


def test_acceleration_factor_and_censoring():
    s0 = -1.0
    target_ratio = math.exp(0.1)                      # target = s0 + 0.1
    adaptive = [s0, -0.95, -0.85, -0.85]              # first reaches at k=2
    random = [s0, -0.95, -0.95, -0.88]                # reaches at k=3
    acc = acceleration_factor(adaptive, random, target_ratio)
    assert (acc.k_adaptive, acc.k_random, acc.factor) == (2, 3, 1.5)
    never = acceleration_factor(adaptive, [s0, -1, -1, -1], target_ratio)
    assert never.factor is None and never.k_adaptive == 2 and never.k_random is None
    sus = acceleration_factor([s0, -0.8, -0.95, -0.85], random, target_ratio, "sustained")
    assert (sus.k_adaptive, sus.k_random, sus.factor) == (3, 3, 1.0)
    assert geometric_mean([2.0, 0.5]) == pytest.approx(1.0) and geometric_mean([]) is None


def test_sign_agreement_counts():
    res = sign_agreement([0.1, -0.2, None, 0.3, 0.0], [0.2, 0.1, 0.5, 0.1, 0.4])
    assert res == {"n_both_changed": 3, "n_same_sign": 2, "n_opposite": 1, "fraction_same": pytest.approx(2 / 3)}


def test_unsupported_crossings():
    prior = _row(0.6, [0.4, 0.3, 0.2, 0.1])
    update = _row(0.6, [0.7, 0.1, 0.1, 0.1])          # category crosses 0.5 on "a"
    assert unsupported_crossings(prior, update, set(), ["validity", "category"]) == ["category"]
    assert unsupported_crossings(prior, update, {"category"}, ["validity", "category"]) == []
    flip = _row(0.4, [0.4, 0.3, 0.2, 0.1])            # validity: p(invalid) 0.4 -> 0.6 crosses
    assert unsupported_crossings(prior, flip, {"category"}, ["validity", "category"]) == ["validity"]
    assert np.isfinite(joint_log_loss(update, Outcome(True, "d"), CATS, True))


def test_empirical_frequencies_score_the_entropy_of_the_record(vapdiff):
    """Oracle: forecasting the record's own class frequencies scores its Shannon entropy (README counts)."""
    counts = {"clear_solution": 375, "fine_powder": 68, "small_crystallites": 118, "large_crystallites": 357}
    p = np.array([counts[c] for c in vapdiff.categories]) / 918
    row = {"p_category": dict(zip(vapdiff.categories, p))}
    rows = {e.experiment_id: validate_row({"experiment_id": e.experiment_id, **row}, vapdiff.categories, False)
            for e in vapdiff.experiments}
    assert mean_loss(rows, vapdiff) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-12)
    assert mean_loss(rows, vapdiff) == pytest.approx(1.18950, abs=1e-5)


def test_joint_loss_of_the_precursor_genome_class_prior_matches_the_reference():
    """The joint decomposition -ln p(valid) - ln p(c|valid) of the PG class prior equals the flat 5-outcome
    entropy quoted for that record (≈ 1.343 nats; counts from the format notes)."""
    cats = ("completely_reacted", "transformed", "partially_reacted", "unreacted")
    n_cat = np.array([143, 384, 113, 369])
    n_fail, n = 26, 1035
    row = validate_row({"experiment_id": "X", "p_valid": (n - n_fail) / n,
                        "p_category": dict(zip(cats, n_cat / n_cat.sum()))}, cats, True)
    total = sum(k * joint_log_loss(row, Outcome(True, c), cats, True) for c, k in zip(cats, n_cat))
    total += n_fail * joint_log_loss(row, Outcome(False, None), cats, True)
    assert total / n == pytest.approx(1.343, abs=5e-4)
