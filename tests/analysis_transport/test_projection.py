"""Projections of the production length that would earn an SI result, and the extend-or-stop rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mdbench.analysis.projection import (MIN_BLOCK_CORRELATION_TIMES, block_variance_fraction, cheapest_first,
                                         blocks_outlast_correlation, decide, half_width_rose, half_width_snapshot,
                                         half_width_range_factor, judge_production_decisions, precision_length,
                                         project_graph, project_result)
from mdbench.record import state_graph as sg

from _testseed import seed_for

#: The simulated series of the correlation-time and history tests follow MDBENCH_TEST_SEED.
SEED = seed_for("analysis/projection-simulations")

WINDOWS = {"guard_ps": 0.0, "whole_range_ps": [0.0, 39.5], "dt_ps": 0.5, "n_blocks": 4}
SETTINGS = {"diffusion_beta_range": [0.9, 1.1], "diffusion_min_decades": 0.9, "diffusion_max_lag_fraction": 0.5}


def _obs(hw: float, value: float, reason_checks: dict[str, str], window: dict | None = None) -> tuple[dict, str]:
    obs = {"value": value, "uncertainty": {"half_width_95": hw}, "window": window or {},
           "diagnostics": {"analysis_windows": WINDOWS, "check_details": reason_checks,
                           "sampling_checks": {k: False for k in reason_checks}}}
    reason = "valid estimator, sampling diagnostic(s) failed: " + "; ".join(f"{k} ({v})"
                                                                            for k, v in reason_checks.items())
    return obs, reason


def test_block_variance_scaling_meets_the_bound_at_the_projected_length():
    t_c, lo, hi = precision_length(40.0, 0.4, 0.2, 4)
    assert t_c == pytest.approx(160.0) and lo < t_c < hi
    lo_f, hi_f = half_width_range_factor(4)
    assert lo_f < 1 < hi_f and half_width_range_factor(40)[1] < hi_f  # more blocks, a narrower range
    # the scaling itself on white-noise block means: hw at 4x the length is half the hw
    rng = np.random.default_rng(7)
    x = rng.normal(size=(4000, 4 * 400))
    hw1 = np.std(x[:, :400].reshape(4000, 4, 100).mean(axis=2), axis=1, ddof=1).mean()
    hw4 = np.std(x.reshape(4000, 4, 400).mean(axis=2), axis=1, ddof=1).mean()
    assert hw1 / hw4 == pytest.approx(2.0, rel=0.05)


def test_precision_projection_reads_the_registered_bound_stated_with_the_check():
    obs, reason = _obs(0.4, 1.0, {"block_precision": "95 % half-width 0.4 = 40% of |value| for value 1 m^2/s; "
                                                     "accepted <= 20% of |value|"})
    p = project_result(obs, reason, SETTINGS, production_ns=0.04)
    assert p["credible"] and p["limiting_check"] == "block_precision"
    assert p["ns_to_C"] == pytest.approx(40.0 * 4 / 1000)  # (0.4 / 0.2)^2 = 4 windows of 40 ps
    assert p["ns_to_C_low"] < p["ns_to_C"] < p["ns_to_C_high"]
    obs, reason = _obs(0.3, 0.5, {"t_plus_block_precision": "95 % half-width 0.3; accepted <= 0.1"})
    assert project_result(obs, reason, SETTINGS, 0.04)["ns_to_C"] == pytest.approx(0.040 * 9)


def test_diffusive_window_projection_needs_a_rising_beta_and_a_trend_is_not_projectable():
    rising = {"lo_ps": 1.58, "hi_ps": 5.0, "decades": 0.5, "beta_min": 0.6, "beta_max": 0.8, "found": False}
    obs, reason = _obs(0.1, 1.0, {"diffusive_window": "beta 0.6-0.8 over 0.50 decades"}, rising)
    p = project_result(obs, reason, SETTINGS, 0.04)
    # beta rises 0.4 per decade: 0.9 at 5 x 10^0.25 ps; the window needs 0.9 decades more, below half a block
    t_band = 5.0 * 10 ** 0.25
    assert p["credible"] and p["ns_to_C"] == pytest.approx(4 * t_band * 10 ** 0.9 / 0.5 / 1000)
    flat = {**rising, "beta_min": 0.5, "beta_max": 0.5}
    obs, reason = _obs(0.1, 1.0, {"diffusive_window": "beta 0.5"}, flat)
    assert not project_result(obs, reason, SETTINGS, 0.04)["credible"]
    obs, reason = _obs(0.1, 1.0, {"block_trend": "block slope ... p = 0.01 (< 0.05)"})
    p = project_result(obs, reason, SETTINGS, 0.04)
    assert not p["credible"] and p["ns_to_C"] is None and "cannot be projected" in p["basis"]


def _graph(d_hw: float, sigma_state: str = "SI") -> tuple[dict, dict]:
    g = sg.new_graph()
    sg.add_node(g, "stage:A/production", "stage", "valid", "", case="A")
    d_obs, d_reason = _obs(d_hw, 1.0, {"block_precision": f"95 % half-width {d_hw}; accepted <= 20% of |value|"})
    s_obs, s_reason = _obs(0.5, 1.0, {"collective_regime": "charge-MSD beta 0.59 (accepted (0.8, 1.2))"})
    for name, state, reason in (("self_diffusion/LI", "SI", d_reason), ("conductivity/sigma", sigma_state, s_reason),
                                ("conductivity/sigma_NE", "SI", "input self_diffusion/LI is SI (...)")):
        sg.add_node(g, f"observable:A/{name}", "observable", state, reason, case="A", name=name)
        sg.add_edge(g, f"observable:A/{name}", "stage:A/production", sg.UPSTREAM)
    sg.add_edge(g, "observable:A/conductivity/sigma_NE", "observable:A/self_diffusion/LI", sg.INPUT)
    sg.settle_claim(g, ["A"])
    results = {"A": {"observables": {"self_diffusion/LI": d_obs, "conductivity/sigma": s_obs,
                                     "conductivity/sigma_NE": {}}, "settings": SETTINGS}}
    return g, results


def test_decision_extends_to_the_nearest_reachable_result_and_a_derived_result_waits_for_its_input():
    g, results = _graph(0.4)
    project_graph(g, results, {"A": 0.04}, budget_ns={"A": 100.0})
    ne = g["nodes"]["observable:A/conductivity/sigma_NE"]["projection"]
    assert ne["credible"] and ne["ns_to_C"] == pytest.approx(0.16) and ne["limiting_check"].startswith("input:")
    assert not g["nodes"]["observable:A/conductivity/sigma"]["projection"]["credible"]
    d = decide(g, "A", production_ns=0.04, remaining_ns=99.9)
    assert d["action"] == "extend" and d["target_ns"] == pytest.approx(0.16)
    assert {t["node"] for t in d["targets"]} == {"observable:A/self_diffusion/LI", "observable:A/conductivity/sigma_NE"}
    assert [t["node"] for t in d["not_projectable"]] == ["observable:A/conductivity/sigma"]


def test_decision_stops_when_out_of_reach_and_never_extends_for_f():
    g, results = _graph(40.0)  # (40/0.2)^2 x 40 ps = 1600 ns: beyond 100 ns
    project_graph(g, results, {"A": 0.04}, budget_ns={"A": 100.0})
    d = decide(g, "A", production_ns=0.04, remaining_ns=99.9)
    assert d["action"] == "stop" and "out of reach" in d["reason"] and "1.6e+03 ns" in d["reason"]
    assert g["nodes"]["observable:A/self_diffusion/LI"]["projection"]["reachable_in_budget"] is False
    g, results = _graph(0.4, sigma_state="F")
    g["nodes"]["observable:A/self_diffusion/LI"]["own_state"] = "F"
    sg.settle_claim(g, ["A"])
    project_graph(g, results, {"A": 0.04}, budget_ns={"A": 100.0})
    d = decide(g, "A", production_ns=0.04, remaining_ns=99.9)
    assert d["action"] == "stop" and not d["targets"]
    assert {t["node"] for t in d["never_extended"]} >= {"observable:A/self_diffusion/LI", "observable:A/conductivity/sigma"}
    assert all(math.isfinite(x["ns_to_C"]) for x in d["out_of_reach"])


def _cip_like(tau_ps: float) -> tuple[dict, str]:
    """A frame-average fraction whose precision failed, with its series' correlation time recorded; the
    analysed window is 40 ps, so a block is 10 ps."""
    obs, reason = _obs(0.3, 0.35, {"CIP_block_precision": "95 % half-width 0.3; accepted <= 0.1"})
    obs["uncertainty"]["correlation_time_ps"] = tau_ps
    return obs, reason


def test_precision_is_corrected_for_the_correlation_time_and_credible_only_for_blocks_of_three():
    plain = project_result(*_obs(0.3, 0.35, {"CIP_block_precision": "95 % half-width 0.3; accepted <= 0.1"}),
                           SETTINGS, production_ns=0.0)
    ok = project_result(*_cip_like(2.0), SETTINGS, production_ns=0.0)  # blocks of 5 tau: f = 0.80
    assert ok["credible"] and ok["block_length_ps"] == pytest.approx(10.0) and ok["correlation_time_ps"] == 2.0
    assert ok["ns_to_C"] == pytest.approx(plain["ns_to_C"] / block_variance_fraction(10.0, 2.0))
    assert ok["ns_to_C"] > plain["ns_to_C"] * 1.2  # the short blocks understated the half-width: a longer run
    short = project_result(*_cip_like(5.0), SETTINGS, production_ns=0.0)  # blocks of 2 tau
    assert not short["credible"] and short["ns_to_C"] is not None  # the length stays recorded
    assert f"shorter than {MIN_BLOCK_CORRELATION_TIMES:g} correlation times" in short["basis"]
    assert "tau 5 ps" in short["basis"]
    assert blocks_outlast_correlation(10.0, None) is None  # no series, no condition (D, sigma: their own rules)


def test_the_decision_does_not_extend_for_blocks_shorter_than_the_correlation_time_and_the_audit_agrees():
    g, results = _graph(40.0)  # D out of reach: only the CIP-like result could be a target
    obs, reason = _cip_like(5.0)
    sg.add_node(g, "observable:A/association/FSI/CIP", "observable", "SI", reason, case="A",
                name="association/FSI/CIP")
    sg.add_edge(g, "observable:A/association/FSI/CIP", "stage:A/production", sg.UPSTREAM)
    sg.settle_claim(g, ["A"])
    results["A"]["observables"]["association/FSI/CIP"] = obs
    project_graph(g, results, {"A": 0.04}, budget_ns={"A": 100.0})
    d = decide(g, "A", production_ns=0.04, remaining_ns=99.9)
    assert d["action"] == "stop" and "observable:A/association/FSI/CIP" in {t["node"] for t in d["not_projectable"]}
    results["A"]["observables"]["association/FSI/CIP"]["uncertainty"]["correlation_time_ps"] = 2.0
    project_graph(g, results, {"A": 0.04}, budget_ns={"A": 100.0})
    d = decide(g, "A", production_ns=0.04, remaining_ns=99.9)
    assert d["action"] == "extend" and d["targets"][0]["correlation_time_ps"] == 2.0
    # the audit applies the same condition to the inputs the decision recorded
    d["half_widths"] = half_width_snapshot(results["A"])  # as the study records it (engine.adaptive)
    events = [{"id": 1, "type": "production_decision", "payload": {**d, "targets": [
        {**d["targets"][0], "correlation_time_ps": 5.0}]}},
        {"id": 2, "type": "production_extension", "payload": {"case": "A"}}]
    assert [f["code"] for f in judge_production_decisions(events, g)["findings"]] == ["extension_on_unearnable"]
    events[0]["payload"] = {**d, "event_id": None}
    assert judge_production_decisions(events, g)["findings"] == []
    events[0]["payload"] = {k: v for k, v in d.items() if k != "half_widths"}  # its inputs left out
    assert [f["code"] for f in judge_production_decisions(events, g)["findings"]] == ["decision_without_inputs"]


def test_short_blocks_understate_the_block_variance_as_the_correction_assumes():
    """Block variance × block length of an AR(1) series (τ = 5 frames) relative to long blocks (40 τ): the
    exponential-correlation factor f(L/τ) the projection divides by (0.57 at 2 τ, 0.68 at 3 τ, 0.90 at 10 τ)
    within the scatter of 3,000 replicas of four blocks each."""
    rng = np.random.default_rng(SEED)
    tau, reps = 5.0, 3000
    a = math.exp(-1.0 / tau)

    def var_times_length(block: int) -> float:
        x = np.empty((reps, 4 * block))
        x[:, 0] = rng.normal(size=reps)
        noise = rng.normal(scale=math.sqrt(1 - a * a), size=(reps, 4 * block))
        for i in range(1, 4 * block):
            x[:, i] = a * x[:, i - 1] + noise[:, i]
        means = x.reshape(reps, 4, block).mean(axis=2)
        return float(np.var(means, axis=1, ddof=1).mean() * block)

    long_ = var_times_length(int(40 * tau)) / block_variance_fraction(40 * tau, tau)
    for k in (2, MIN_BLOCK_CORRELATION_TIMES, 10):
        measured = var_times_length(int(k * tau)) / long_
        assert measured == pytest.approx(block_variance_fraction(k * tau, tau), abs=0.12), k
    assert var_times_length(int(2 * tau)) < 0.75 * long_


def test_a_round_decides_the_cheapest_extension_first():
    """Two cases compete for one study budget: the case whose nearest credible target needs the fewer ns is
    decided first; a case with nothing reachable goes last; the order among equals is kept."""
    g = sg.new_graph()
    results = {}
    for case, hw in (("FAR", 0.8), ("NEAR", 0.3), ("NONE", 40.0)):  # T_C = 40 ps (hw/0.2)^2
        sg.add_node(g, f"stage:{case}/production", "stage", "valid", "", case=case)
        obs, reason = _obs(hw, 1.0, {"block_precision": f"95 % half-width {hw}; accepted <= 20% of |value|"})
        sg.add_node(g, f"observable:{case}/viscosity", "observable", "SI", reason, case=case, name="viscosity")
        sg.add_edge(g, f"observable:{case}/viscosity", f"stage:{case}/production", sg.UPSTREAM)
        results[case] = {"observables": {"viscosity": obs}, "settings": SETTINGS}
    cases = ["NONE", "FAR", "NEAR"]
    sg.settle_claim(g, cases)
    done, left = dict.fromkeys(cases, 0.04), dict.fromkeys(cases, 2.0)
    project_graph(g, results, done, budget_ns={c: 2.04 for c in cases})
    assert cheapest_first(g, cases, production_ns=done, remaining_ns=left) == ["NEAR", "FAR", "NONE"]
    assert cheapest_first(g, ["FAR", "NONE"], production_ns=done, remaining_ns=dict.fromkeys(cases, 0.0)) == [
        "FAR", "NONE"]  # nothing left to spend: nothing to order by


def _four_block_half_widths(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], 4, -1).mean(axis=2).std(axis=1, ddof=1)


def test_a_half_width_that_rose_after_an_extension_flags_a_slow_mode_at_the_stated_rate():
    """q = (hw'/hw)(T'/T)^1/2 after extending 4x: white noise (blocks >> tau) exceeds the threshold in ~5 % of
    runs (the first window is a prefix of the second, as in a study); a slow mode (tau = 2 x the first window's
    length) in about half of them."""
    rng = np.random.default_rng(SEED + 1)
    reps, t = 3000, 200

    def rate(x: np.ndarray) -> float:
        h0, h1 = _four_block_half_widths(x[:, :t]), _four_block_half_widths(x)
        flags = [half_width_rose({"half_width_95": a, "analysed_ps": t}, {"half_width_95": b, "analysed_ps": 4 * t,
                                                                          "n_blocks": 4}) for a, b in zip(h0, h1)]
        return float(np.mean([f is not None for f in flags]))

    assert rate(rng.normal(size=(reps, 4 * t))) < 0.07
    a = math.exp(-1.0 / (2 * t))
    y = np.empty((reps, 4 * t))
    y[:, 0] = rng.normal(size=reps)
    noise = rng.normal(scale=math.sqrt(1 - a * a), size=(reps, 4 * t))
    for i in range(1, 4 * t):
        y[:, i] = a * y[:, i - 1] + noise[:, i]
    assert rate(y) > 0.35
    same = {"half_width_95": 0.1, "analysed_ps": 100.0}
    assert half_width_rose(same, {"half_width_95": 0.3, "analysed_ps": 110.0}) is None  # window barely grew
    assert half_width_rose(same, {"half_width_95": 0.05, "analysed_ps": 400.0}) is None  # fell as expected
    assert half_width_rose("junk", {"half_width_95": "x"}) is None


def test_the_decision_and_the_audit_do_not_extend_for_a_half_width_that_rose():
    g, results = _graph(40.0)
    obs, reason = _cip_like(0.5)  # blocks of 20 tau: the correlation-time condition holds
    sg.add_node(g, "observable:A/association/FSI/CIP", "observable", "SI", reason, case="A",
                name="association/FSI/CIP")
    sg.add_edge(g, "observable:A/association/FSI/CIP", "stage:A/production", sg.UPSTREAM)
    sg.settle_claim(g, ["A"])
    results["A"]["observables"]["association/FSI/CIP"] = obs
    before = {"association/FSI/CIP": {"half_width_95": 0.05, "analysed_ps": 10.0, "n_blocks": 4}}  # now 0.3 at 40 ps
    project_graph(g, results, {"A": 0.04}, budget_ns={"A": 100.0}, history={"A": before})
    p = g["nodes"]["observable:A/association/FSI/CIP"]["projection"]
    assert not p["credible"] and p["half_width_rose"] == pytest.approx(0.3 / 0.05 * 2) and "since the last decision" in p["basis"]
    assert decide(g, "A", production_ns=0.04, remaining_ns=99.9)["action"] == "stop"
    project_graph(g, results, {"A": 0.04}, budget_ns={"A": 100.0})  # no history: a target again
    d = decide(g, "A", production_ns=0.04, remaining_ns=99.9)
    assert d["action"] == "extend"
    now = {"association/FSI/CIP": {"half_width_95": 0.3, "analysed_ps": 40.0, "n_blocks": 4}}
    events = [{"id": 1, "type": "production_decision", "payload": {"case": "A", "action": "stop", "targets": [],
                                                                   "half_widths": before}},
              {"id": 2, "type": "production_decision", "payload": {**d, "half_widths": now}},
              {"id": 3, "type": "production_extension", "payload": {"case": "A"}}]
    assert [f["code"] for f in judge_production_decisions(events, g)["findings"]] == ["extension_on_unearnable"]
    events[0]["payload"]["half_widths"] = {}
    assert judge_production_decisions(events, g)["findings"] == []
