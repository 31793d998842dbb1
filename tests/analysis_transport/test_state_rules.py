"""Issue 35: one resolved-zero rule for sigma, sigma/sigma_NE and t+; derived observables (sigma_NE, the
ionicity) go through the precision and trend rules and inherit the weakest state of their inputs."""

from __future__ import annotations

import numpy as np
import pytest

from mdbench.analysis.onsager import onsager_transport
from mdbench.analysis.states import (SEVERITY, StateDecision, classify_observable, resolved_zero,
                                     weakest_input)

from .conftest import brownian

Z = {"Li": 0.72, "FSI": -0.72}
V_NM3, T_K, WINDOW = 27.0, 300.0, (1.0, 5.0)


def test_resolved_zero_needs_zero_inside_and_a_small_interval():
    assert resolved_zero(0.001, 0.02, 1.0, 0.1) is not None          # |v| + hw = 0.021 <= 0.1
    assert resolved_zero(0.05, 0.02, 1.0, 0.1) is None                # zero outside the interval
    assert resolved_zero(0.0, 0.2, 1.0, 0.1) is None                  # zero inside, but not resolved (SI)
    assert resolved_zero(0.0, 0.01, float("nan"), 0.1) is None        # no scale, no resolved zero
    assert resolved_zero(0.0, 0.01, -1.0, 0.1) is None


def test_derived_takes_the_weakest_input_state_naming_it():
    si = StateDecision("SI", "valid estimator, sampling diagnostic(s) failed: D_block_precision", 6)
    c = StateDecision("C", "ok", 7)
    d = classify_observable(values=[1.0, 1.0, 1.0, 1.0, 1.0], sampling_checks={"x": True},
                            inputs={"self_diffusion/Li": c, "self_diffusion/FSI": si})
    assert d.state == "SI" and "self_diffusion/FSI" in d.reason and d.rule == 8
    f = classify_observable(values=[1.0] * 5, inputs={"a": {"state": "F", "reason": "broken"}, "b": si})
    assert f.state == "F" and "input a" in f.reason
    own_si = classify_observable(values=[1.0] * 5, sampling_checks={"own": False}, inputs={"a": c})
    assert own_si.state == "SI" and own_si.rule == 6                 # an input never improves a state
    assert classify_observable(values=[1.0] * 5, inputs={"a": c}).state == "C"
    assert weakest_input({"a": c, "b": si})[0] == "b"
    assert SEVERITY["SI"] < SEVERITY["F"]


@pytest.fixture(scope="module")
def bound_pairs():
    """Every ion in a rigid neutral Li-FSI pair that vibrates: sigma is zero, resolved against sigma_NE."""
    rng = np.random.default_rng(11)
    li = brownian(rng, 4000, 50, 2e-3, 1.0)
    fsi = li + np.array([0.25, 0.0, 0.0]) + rng.normal(0, 0.01, size=li.shape)
    return onsager_transport({"Li": li, "FSI": fsi}, Z, np.arange(4000) * 1.0, V_NM3, T_K,
                             mass_by_species_amu={"Li": 6.94, "FSI": 180.1}, fit_window_ps=WINDOW)


def _d(r, name, te=None, **kw):
    return classify_observable(**r.state_inputs(name, te, **kw))


def test_a_resolved_zero_is_one_statement_for_sigma_ionicity_and_t_plus(bound_pairs):
    r = bound_pairs
    zero = r.sigma_resolved_zero_reason()
    assert zero is not None and "zero within its interval" in zero
    sigma, ionicity = _d(r, "sigma"), _d(r, "ionicity")
    # never "insufficient sampling" for a zero that more sampling can only confirm
    assert sigma.state != "SI" and ionicity.state != "SI", (sigma.reason, ionicity.reason)
    assert sigma.state == "C" and "resolved zero" in sigma.reason
    assert ionicity.state == "C" and "resolved zero" in ionicity.reason
    for te in r.transference:
        t = _d(r, "t_plus", te)
        assert t.state == "not_estimable" and zero.split(":")[0] in t.reason


def test_an_input_withheld_keeps_sigma_ne_and_the_ionicity_from_c(bound_pairs):
    r = bound_pairs
    si = StateDecision("SI", "valid estimator, sampling diagnostic(s) failed: D_block_precision (0.4 > 0.2)", 6)
    d = _d(r, "sigma_NE", input_states={"self_diffusion/Li": si})
    assert d.state == "SI" and "self_diffusion/Li" in d.reason
    ion = _d(r, "ionicity", input_states={"self_diffusion/Li": si})
    assert ion.state == "SI" and "conductivity/sigma_NE" in ion.reason


def test_sigma_ne_gets_the_precision_bound():
    """A short, few-ion run: sigma_NE's half-width above 20 % makes it SI (it had no check before)."""
    rng = np.random.default_rng(3)
    ions = {"Li": brownian(rng, 300, 4, 2e-3, 1.0), "FSI": brownian(rng, 300, 4, 1e-3, 1.0)}
    r = onsager_transport(ions, Z, np.arange(300) * 1.0, V_NM3, T_K, system_com_nm=np.zeros((300, 3)))
    d = _d(r, "sigma_NE")
    rel = r.sigma_NE.half_width_95 / abs(r.sigma_NE.whole)
    assert rel > 0.2 and d.state == "SI" and "sigma_NE_block_precision" in d.reason
