"""Pure rules of the audit checked against analytic values."""

from __future__ import annotations

import math

import pytest

from mdbench.analysis import onsager
from mdbench.audit.analysis_items import r5_agrees, r5_interval, tplus_conventions
from mdbench.audit.model import DIMENSIONS, ITEMS, composite_score


def test_composite_score_equation():
    assert composite_score({i: 1.0 for i in ITEMS})[0] == pytest.approx(100.0)
    assert composite_score({i: 0.0 for i in ITEMS})[0] == pytest.approx(0.0)
    r = {i: 1.0 for i in ITEMS}
    r.update({i: 0.0 for i in DIMENSIONS["S"]})           # S mean 0 → 75
    assert composite_score(r)[0] == pytest.approx(75.0)
    r = {i: 1.0 for i in ITEMS}
    r["A1"] = 0.5                                          # A mean 6.5/7 → 100/4·(3 + 6.5/7)
    score, means = composite_score(r)
    assert means["A"] == pytest.approx(6.5 / 7)
    assert score == pytest.approx(25 * (3 + 6.5 / 7))
    with pytest.raises(ValueError):
        composite_score({"Sim1": 1.0})


def test_r5_interval_uses_blocks_or_five_percent():
    # blocks 1,2,3,4: s = 1.29099, h = 3.182·s/2 = 2.05397
    assert r5_interval(10.0, [1, 2, 3, 4]) == pytest.approx(3.182 * 1.2909944487 / 2)
    assert r5_interval(100.0, [100, 100, 100, 100]) == pytest.approx(5.0)   # too narrow → 5 %
    assert r5_interval(100.0, [100, None, 100, 100]) == pytest.approx(5.0)  # non-finite blocks → 5 %
    assert r5_agrees(104.9, 100.0, [100] * 4) and not r5_agrees(105.1, 100.0, [100] * 4)


def test_tplus_conventions_analytic():
    # independent walkers: L+- = 0 → both formulas give L++/(L++ + L--)
    c = tplus_conventions(3.0, 1.0, 0.0)
    assert c["correct"] == pytest.approx(0.75) and c["mixed"] == pytest.approx(0.75)
    # correlated: L++=3, L--=2, L+-=1 → correct (3-1)/(3+2-2)=2/3, mixed (3+1)/(3+2+2)=4/7
    c = tplus_conventions(3.0, 2.0, 1.0)
    assert c["correct"] == pytest.approx(2 / 3) and c["mixed"] == pytest.approx(4 / 7)
    # t+ + t- = 1 holds under the mix-up too (why that check cannot catch it)
    t_minus_mixed = tplus_conventions(2.0, 3.0, 1.0)["mixed"]
    assert c["mixed"] + t_minus_mixed == pytest.approx(1.0)
    assert math.isnan(tplus_conventions(1.0, 1.0, 1.0)["correct"])


def test_tplus_agrees_with_analysis_room():
    L = [[3.0, 1.0], [1.0, 2.0]]
    chk = onsager.transference_conventions(L, ["Li", "FSI"], {"Li": 1.0, "FSI": -1.0})
    ours = tplus_conventions(3.0, 2.0, 1.0)
    d = chk.as_dict()
    assert d["unweighted_L"] == pytest.approx(ours["correct"])
    assert any(k.startswith("mixed") and v == pytest.approx(ours["mixed"]) for k, v in d.items())


def test_sigma_with_unit_charges_in_a_scaled_charge_model_is_recognised_by_its_value():
    """Analytic case: a ±0.72 e model, σ_ij = e² z_i z_j L^ij; σ computed with formal ±1 charges is σ / 0.72²
    for every Onsager matrix, and the audit names the weighting (A2), not a numerical fault."""
    import numpy as np

    from mdbench.analysis.observables import CONDUCTIVITY_GROUP
    from mdbench.audit.analysis_items import charge_weighting_checks, sigma_weightings
    from mdbench.audit.runread import Entry

    rng = np.random.default_rng(18)
    q = np.array([0.0, 0.72, -0.72])
    L = rng.uniform(0.5, 2.0, (3, 3))
    L = (L + L.T) / 2
    L[1, 2] = L[2, 1] = -0.2                      # anticorrelated ions
    S = np.outer(q, q) * L
    sigma = float(S.sum())
    blocks = [sigma * f for f in (0.97, 1.02, 1.0, 1.01)]
    canon = {"system": {"species": ["DMC", "LI", "FSI"], "charges_e": {"DMC": 0.0, "LI": 0.72, "FSI": -0.72}},
             "observables": {"conductivity/sigma": {"category": "conductivity", "value": sigma, "blocks": blocks,
                                                    "details": {"sigma_ij_S_m": S.tolist()}}}}
    sig_c, h, alts = sigma_weightings(canon)
    assert sig_c == sigma and alts["unit (formal) charges"] == pytest.approx(sigma / 0.72 ** 2)
    charges = {"LI": 0.72, "FSI": -0.72}

    def flagged(value: float) -> bool:
        e = Entry("observables.conductivity", value, [value] * 4, {"value": value})
        return bool(charge_weighting_checks(CONDUCTIVITY_GROUP, [e], charges, canon, "", "r.json"))

    assert flagged(sigma / 0.72 ** 2)                              # unit charges
    assert not flagged(sigma)                                      # the topology's charges
    assert not flagged(sigma * 1.3)                                # another discrepancy: not this class
