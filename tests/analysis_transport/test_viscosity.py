"""Green–Kubo viscosity against an Ornstein–Uhlenbeck stress with a known integral; requirements → F."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mdbench.analysis.states import classify_result
from mdbench.analysis.units import BAR_PA, KB_J_PER_K, NM3_M3, PS_S
from mdbench.analysis.viscosity import PlateauRule, green_kubo_viscosity, traceless_components

from .conftest import ou_series

SIGMA_BAR, TAU_PS, DT_PS, V_NM3, T_K = 100.0, 0.2, 0.01, 30.0, 300.0


def _tensor_from(s: list[np.ndarray], p_bar: float = 1.0) -> np.ndarray:
    """Pressure tensor whose five traceless components are exactly the series s[0..4]."""
    qxx = 2.0 * s[0] / math.sqrt(3.0)
    qyy = -qxx / 2 + s[1]
    qzz = -qxx / 2 - s[1]
    P = np.zeros((s[0].size, 3, 3))
    P[:, 0, 0], P[:, 1, 1], P[:, 2, 2] = p_bar + qxx, p_bar + qyy, p_bar + qzz
    P[:, 1, 2] = P[:, 2, 1] = s[2]
    P[:, 2, 0] = P[:, 0, 2] = s[3]
    P[:, 0, 1] = P[:, 1, 0] = s[4]
    return P


@pytest.fixture(scope="module")
def ou_tensor():
    rng = np.random.default_rng(42)
    return _tensor_from([ou_series(rng, 400_000, SIGMA_BAR, TAU_PS, DT_PS) for _ in range(5)])


def eta_true_mPa_s() -> float:
    # eta = V/(kB T) * sigma^2 * tau  (integral of sigma^2 exp(-t/tau))
    return V_NM3 * NM3_M3 / (KB_J_PER_K * T_K) * (SIGMA_BAR * BAR_PA) ** 2 * TAU_PS * PS_S * 1e3


def test_traceless_components_roundtrip():
    rng = np.random.default_rng(0)
    s = [rng.normal(size=10) for _ in range(5)]
    np.testing.assert_allclose(traceless_components(_tensor_from(s, 5.0)), np.stack(s, axis=1), atol=1e-12)


def test_ou_green_kubo_within_5_percent(ou_tensor):
    # registered rule for this signal: integrate to 100 tau (the default, block/5 = 200 ps, also works but
    # its wider plateau floor sits where the integral's noise is larger)
    rule = PlateauRule(max_lag_ps=100 * TAU_PS)
    r = green_kubo_viscosity(ou_tensor.astype(np.float32), DT_PS, np.float32(V_NM3), T_K, plateau_rule=rule)
    assert r.viscosity_mPa_s == pytest.approx(eta_true_mPa_s(), rel=0.05)
    assert r.einstein_helfand_mPa_s == pytest.approx(eta_true_mPa_s(), rel=0.05)
    assert r.plateau_found and r.plateau_window_ps[0] >= 2 * r.correlation_time_ps
    assert r.correlation_time_ps == pytest.approx(TAU_PS, rel=0.2)
    assert r.running_integral_mPa_s.dtype == np.float64 and r.lag_ps.size == r.acf_bar2.size
    assert r.acf_bar2[0] == pytest.approx(SIGMA_BAR ** 2, rel=0.05)
    assert all(v == pytest.approx(eta_true_mPa_s(), rel=0.15) for v in r.component_viscosity_mPa_s.values())
    assert classify_result(r).state == "C"
    d = r.to_dict(include_curves=True)
    json.dumps(d, allow_nan=False)
    assert d["unit"] == "mPa*s" and d["window"]["plateau_found"] and len(d["blocks"]) == 4


def test_pyedr_style_mapping_equals_array(ou_tensor):
    P = ou_tensor[:20000]
    names = {f"Pres-{a}{b}": P[:, i, j] for i, a in enumerate("XYZ") for j, b in enumerate("XYZ")}
    a = green_kubo_viscosity(P, DT_PS, V_NM3, T_K)
    b = green_kubo_viscosity(names, DT_PS, V_NM3, T_K)
    assert a.viscosity_mPa_s == b.viscosity_mPa_s


def test_no_plateau_is_SI(ou_tensor):
    # a tolerance nothing can meet: the estimator is valid but the plateau diagnostic fails
    r = green_kubo_viscosity(ou_tensor[:40000], DT_PS, V_NM3, T_K, plateau_rule=PlateauRule(rel_tol=1e-9))
    assert not r.plateau_found and np.isfinite(r.viscosity_mPa_s)
    assert classify_result(r).state == "SI"


@pytest.mark.parametrize("case,needle", [
    ("nan", "non-finite"),
    ("coarse", "0.5 ps"),
    ("barostat", "barostat"),
])
def test_requirement_failures_are_F(ou_tensor, case, needle):
    P = ou_tensor[:20000].copy()
    dt, vol = DT_PS, np.full(20000, V_NM3)
    if case == "nan":
        P[100, 0, 1] = np.nan
    elif case == "coarse":
        dt = 1.0
    else:
        vol = V_NM3 * (1 + 0.01 * np.sin(np.arange(20000) / 50.0))
    r = green_kubo_viscosity(P, dt, vol, T_K)
    st = classify_result(r)
    assert st.state == "F" and needle in st.reason


def test_a_viscosity_with_a_wide_interval_is_si_with_its_numbers(ou_tensor):
    """Issue 24: a Green-Kubo eta whose 95 % half-width is 20-50 % of the value (C under the old 50 % rule)
    is SI, and the reason names the half-width and the bound."""
    r = green_kubo_viscosity(ou_tensor[:4000], DT_PS, V_NM3, T_K,
                             plateau_rule=PlateauRule(max_lag_ps=100 * TAU_PS, rel_tol=0.1, min_width_fraction=0.02))
    rel = r.viscosity.half_width_95 / r.viscosity_mPa_s
    assert 0.2 < rel < 0.5 and r.plateau_found
    d = classify_result(r)
    assert d.state == "SI" and d.failed_checks == ("block_precision",)
    assert f"{rel:.0%} of |value|" in d.reason and "<= 20% of |value|" in d.reason


@pytest.mark.parametrize("max_lag_tau", [0.9, 1.5, 2.5])
def test_a_rule_leaving_no_window_in_the_longest_lag_judges_the_last_window_SI(ou_tensor, max_lag_tau):
    """start (2 τ_c) + width (4 τ_c) beyond the longest lag: the estimate is the last window that fits, with a
    failed plateau check (a sampling limitation, SI), never a missing value (F)."""
    rule = PlateauRule(max_lag_ps=max_lag_tau * TAU_PS)
    r = green_kubo_viscosity(ou_tensor[:40000], DT_PS, V_NM3, T_K, plateau_rule=rule)
    lo, hi = r.plateau_window_ps
    assert np.isfinite(r.viscosity_mPa_s) and np.isfinite(lo)
    assert hi == pytest.approx(r.lag_ps[-1]) and lo > 0
    assert 0 < r.viscosity_mPa_s < eta_true_mPa_s()            # the integral has not reached its plateau yet
    assert classify_result(r).state == "SI"


def test_the_plateau_rule_does_not_stop_on_a_shoulder():
    """Issue 35: a running integral that is flat for 0.3 ps (the ACF crossing zero after its fast part) and
    then rises by 50 % with a slow tail (carbonate liquids, docs/validation.md section 2): the rule passes the
    shoulder and takes the final plateau; without the later lags (the last window) the shoulder guard cannot
    apply and the flat stretch is taken, as before."""
    from mdbench.analysis.viscosity import _plateau

    lag = np.arange(0.0, 6.0, 0.01)
    shoulder = 1.0 - np.exp(-lag / 0.02)
    tail = 0.5 / (1.0 + np.exp(-(lag - 1.0) / 0.12))
    I = shoulder + tail
    rng = np.random.default_rng(3)
    comps = I + 0.01 * rng.standard_normal((5, lag.size)) * np.sqrt(lag + 0.01)
    lo, hi, found, _ = _plateau(lag, I, 0.05, 0.3, 0.03, I_components=comps)
    assert found and lo >= 1.2, (lo, hi)  # past the rise (midpoint 1.0 ps), not the 0.1-0.4 ps shoulder
    assert abs(float(I[(lag >= lo) & (lag <= hi)].mean()) - 1.5) < 0.05
    lo0, hi0, found0, _ = _plateau(lag[:40], I[:40], 0.05, 0.3, 0.03, I_components=comps[:, :40])
    assert found0 and hi0 < 0.4  # nothing after it to compare: the old behaviour
