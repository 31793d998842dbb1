"""Projection of a collective-regime failure (sigma, ionicity, t+; issue 46): where the registered charge-MSD
window would lie past the lag at which the ions' own MSDs turn diffusive."""

from __future__ import annotations

import pytest

from mdbench.analysis.projection import collective_length, project_result

DETAIL = "charge-MSD beta 0.59 over [0.5, 2.5] ps (accepted (0.8, 1.2))"
WINDOWS = {"guard_ps": 0.0, "whole_range_ps": [0.0, 39.5], "dt_ps": 0.5, "n_blocks": 4}


def _doc(beta_li: tuple[float, float], beta_fsi: tuple[float, float]) -> dict:
    def d(beta: tuple[float, float]) -> dict:
        return {"value": 3e-10, "window": {"lo_ps": 1.58, "hi_ps": 5.0, "decades": 0.5, "beta_min": beta[0],
                                           "beta_max": beta[1], "found": False}}
    return {"system": {"charges_e": {"LI": 0.72, "FSI": -0.72, "DMC": 0.0}},
            "onsager": {"window": {"fit_window_ps": [0.5, 2.5],
                                   "rule": "linear fit over lags [0.05, 0.25] x block length (10 ps)"}},
            "observables": {"self_diffusion/LI": d(beta_li), "self_diffusion/FSI": d(beta_fsi),
                            "self_diffusion/DMC": d((0.2, 0.2))}}  # a neutral species does not count


def test_collective_window_projected_past_the_ions_diffusive_onset():
    # LI: beta 0.5 -> 0.6 over 0.5 decades: 0.8 at 5 ps x 10^((0.8 - 0.6) / 0.2) = 50 ps; FSI already there
    t_c, basis = collective_length(_doc((0.5, 0.6), (0.85, 0.9)), DETAIL, 4)
    assert t_c == pytest.approx(4 * 50.0 / 0.05) and "50 ps" in basis
    # an ion whose beta does not rise: not projectable
    assert collective_length(_doc((0.5, 0.5), (0.85, 0.9)), DETAIL, 4) is None
    # no registered window rule to read the lag fractions from: not projectable
    assert collective_length({**_doc((0.5, 0.6), (0.85, 0.9)), "onsager": {}}, DETAIL, 4) is None


def test_sigma_projection_names_the_collective_regime():
    doc = _doc((0.5, 0.6), (0.85, 0.9))
    obs = {"value": 1.7, "uncertainty": {"half_width_95": 0.2},
           "diagnostics": {"analysis_windows": WINDOWS, "check_details": {"collective_regime": DETAIL}}}
    reason = f"valid estimator, sampling diagnostic(s) failed: collective_regime ({DETAIL})"
    p = project_result(obs, reason, {}, 0.04, doc=doc)
    assert p["credible"] and p["limiting_check"] == "collective_regime"
    assert p["ns_to_C"] == pytest.approx(4.0) and p["ns_to_C_low"] < 4.0 < p["ns_to_C_high"]
    # without the case's results the regime cannot be projected (as before)
    assert not project_result(obs, reason, {}, 0.04)["credible"]


def test_hostile_results_give_no_projection_and_no_crash():
    """A results.json of the wrong shapes (a hostile or broken run): pooled and collective projections are
    absent, never an exception."""
    from mdbench.analysis.projection import pooled_half_width

    bad = [{"system": [], "observables": "x", "windows": {"n_blocks": "many"}},
           {"system": {"n_molecules": [1, 2], "charges_e": "LI"}, "onsager": {"window": []}},
           {"system": {"n_molecules": {"LI": True, "FSI": 1e300}, "charges_e": {"LI": 1, "FSI": -1}},
            "windows": {"n_blocks": 1e9}, "onsager": {"window": {"rule": "lags [0, 0.25] x block length"}},
            "observables": {"self_diffusion/LI": {"value": 1e-300, "uncertainty": {"half_width_95": 1e300},
                                                  "window": {"lo_ps": 1, "hi_ps": 2, "decades": 1e-300,
                                                             "beta_min": 0.0, "beta_max": 1e-3}},
                            "self_diffusion/FSI": {"value": "fast"}}}]
    for doc in bad:
        assert collective_length(doc, DETAIL, 4) is None
        for name in ("self_diffusion/LI", "conductivity/sigma_NE"):
            out = pooled_half_width(doc, name)
            assert out is None or (out[0] >= 0 and out[1] >= 3)
    # a beta that barely rises is not extrapolated over astronomically many decades (17 here): not projectable
    assert collective_length(_doc((0.1, 0.12), (0.85, 0.9)), DETAIL, 4) is None
    assert collective_length(_doc((0.1, 0.3), (0.85, 0.9)), DETAIL, 4) is not None
