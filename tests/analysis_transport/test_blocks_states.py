"""Guard/blocks, block spread, statistical inefficiency and the state classifier (table-driven)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mdbench.analysis import states
from mdbench.analysis.blocks import (T_975_DOF3, block_estimate, block_windows, frame_mean_estimate,
                                     statistical_inefficiency)
from mdbench.errors import InputError

from .conftest import ou_series


def test_block_windows_guard_and_equal_blocks():
    t = np.arange(103) * 2.0  # 0..204 ps
    w = block_windows(t, guard_ps=10.0)
    assert w.whole.start == 5  # t = 10 ps is the first kept frame
    sizes = [s.stop - s.start for s in w.blocks]
    assert sizes == [24, 24, 24, 24]
    assert w.blocks[0].start == w.whole.start and w.blocks[-1].stop == w.whole.stop
    assert all(a.stop == b.start for a, b in zip(w.blocks, w.blocks[1:]))
    assert w.block_ranges_ps[0] == (10.0, 56.0)


def test_block_windows_too_short_and_bad_time():
    with pytest.raises(InputError, match="frames after the guard"):
        block_windows(np.arange(10.0), guard_ps=5.0)
    with pytest.raises(InputError, match="strictly increasing"):
        block_windows(np.array([0.0, 1.0, 1.0, 2.0, 3, 4, 5, 6, 7, 8]))


def test_block_estimate_half_width_definition():
    est = block_estimate(2.5, [1.0, 2.0, 3.0, 4.0], "u")
    s = np.std([1, 2, 3, 4], ddof=1)
    assert est.mean == 2.5
    assert est.half_width_95 == pytest.approx(3.182 * s / 2.0)
    assert T_975_DOF3 == 3.182
    d = est.to_dict()
    assert d["value"] == 2.5 and d["unit"] == "u" and "3.182" in d["uncertainty"]["definition"]
    bad = block_estimate(float("nan"), [1.0, float("inf"), 2.0, 3.0], "u")
    assert not bad.finite and bad.to_dict()["value"] is None and math.isnan(bad.half_width_95)


def test_statistical_inefficiency_ar1(rng):
    # AR(1) with a = exp(-dt/tau): g = (1 + a)/(1 - a)
    dt, tau = 1.0, 5.0
    a = math.exp(-dt / tau)
    x = ou_series(rng, 200_000, 1.0, tau, dt)
    g = statistical_inefficiency(x.astype(np.float32))
    assert g == pytest.approx((1 + a) / (1 - a), rel=0.1)
    assert statistical_inefficiency(np.ones(100)) == 1.0
    # same estimator as pymbar (direct sum, fast=False, mintime=3) — reference implementation
    from mdbench.analysis.blocks import _pymbar_timeseries

    ts = _pymbar_timeseries()
    for y in (x[:5000], ou_series(rng, 3000, 2.0, 30.0, 1.0), rng.normal(size=2000)):
        assert statistical_inefficiency(y) == pytest.approx(ts.statistical_inefficiency(y, fast=False), rel=1e-8)
    assert math.isnan(statistical_inefficiency(np.array([1.0, np.nan, 2.0, 3.0])))


S = states
TABLE = [
    # (kwargs, expected state)
    (dict(upstream_state="not_reached"), S.NOT_REACHED),
    (dict(values=None, not_estimable="denominator consistent with zero"), S.NOT_ESTIMABLE),
    (dict(upstream_state="running", values=1.0), S.NOT_REACHED),
    (dict(upstream_state="invalid", values=1.0), S.INVALID_UPSTREAM),
    (dict(upstream_state="invalid_upstream", failures=["x"]), S.INVALID_UPSTREAM),
    (dict(upstream_state="invalid", sampling_checks={"plateau": False}), S.INVALID_UPSTREAM),
    (dict(delivered=False), S.M),
    (dict(delivered=False, failures=["bad"]), S.M),
    (dict(values=[1.0, 2.0], failures=["wrong charge convention"]), S.F),
    (dict(values=[float("nan"), 1.0]), S.F),
    (dict(values={"whole": 1.0, "blocks": [1.0, float("inf")]}), S.F),
    (dict(values=[1.0], failures=["x"], sampling_checks={"plateau": False}), S.F),  # F wins over SI
    (dict(values=[float("nan")], sampling_checks={"plateau": False}), S.F),
    (dict(values=[1.0, 1.1], sampling_checks={"plateau": False, "block_precision": True}), S.SI),
    (dict(values=[1.0, 1.1], sampling_checks={"plateau": True, "block_precision": True}), S.C),
    (dict(values=1.0), S.C),
    (dict(values=[-399.0, 5.0], not_estimable="sigma consistent with zero"), S.NOT_ESTIMABLE),
    (dict(values=[float("nan")], not_estimable="sigma consistent with zero"), S.NOT_ESTIMABLE),  # not F
    (dict(values=[1.0], failures=["x"], not_estimable="sigma ~ 0"), S.F),  # a recorded failure still wins
    (dict(upstream_state="invalid", not_estimable="sigma ~ 0"), S.INVALID_UPSTREAM),
]


@pytest.mark.parametrize("kwargs,expected", TABLE)
def test_state_table(kwargs, expected):
    d = states.classify_observable(**kwargs)
    assert d.state == expected
    assert d.reason
    assert d.state in states.OBSERVABLE_STATES


def test_state_table_covers_every_state():
    assert {e for _, e in TABLE} == set(states.OBSERVABLE_STATES)


def test_state_reasons_name_the_cause():
    d = states.classify_observable(values=[1.0], sampling_checks={"diffusive_window": False})
    assert d.state == "SI" and "diffusive_window" in d.reason and d.failed_checks == ("diffusive_window",)
    d = states.classify_observable(values=[1.0, float("nan")])
    assert d.state == "F" and "non-finite" in d.reason
    with pytest.raises(ValueError):
        states.classify_observable(upstream_state="great")
    assert states.classify_result(None).state == "M"


def test_si_reason_carries_the_numbers_that_failed():
    d = states.classify_observable(values=[1.0], sampling_checks={"block_precision": False, "block_trend": True},
                                   check_details={"block_precision": "95 % half-width 0.4 = 40% of |value|"})
    assert d.state == "SI" and "block_precision (95 % half-width 0.4 = 40% of |value|)" in d.reason
    d = states.classify_observable(values=[1.0], not_estimable="sigma = 2e-08 +- 5e-08 S/m")
    assert d.state == "not_estimable" and d.reason.startswith("not estimable: sigma")


def test_frame_mean_estimate_records_the_series_correlation_time(rng):
    """A frame average carries τ = (g − 1)/2 · Δt of its series over the analysed window: for an
    Ornstein–Uhlenbeck series of correlation time τ sampled every Δt, g = (1 + a)/(1 − a), a = e^(−Δt/τ)."""
    dt, tau = 0.5, 4.0
    x = ou_series(rng, 80_000, 1.0, tau, dt)
    win = block_windows(np.arange(x.size) * dt, guard_ps=100.0)
    est = frame_mean_estimate(x, win, "u")
    a = math.exp(-dt / tau)
    assert est.correlation_time_ps == pytest.approx(((1 + a) / (1 - a) - 1) / 2 * dt, rel=0.15)
    assert est.to_dict()["uncertainty"]["correlation_time_ps"] == pytest.approx(est.correlation_time_ps)
    same = block_estimate(x[win.whole].mean(), [x[b].mean() for b in win.blocks], "u")
    assert est.whole == pytest.approx(same.whole) and est.half_width_95 == pytest.approx(same.half_width_95)
    assert "correlation_time_ps" not in same.to_dict()["uncertainty"]  # not a frame average: nothing claimed
