"""Issue 37 part B: the new own-number checks on hostile or malformed input — never a crash, never a finding built
on garbage (fast; no GROMACS)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _testseed import seed_for
from mdbench.audit.consistency import charge_weightings, classify_sigma, rdf_integral, recorded_rdf
from mdbench.audit.diffusion_vs_msd import band, rederived_window
from mdbench.audit.frozen_ff import differences, parse_itp
from mdbench.audit.gmx_dump import parse_dump_topology

HOSTILE_LISTS = [None, "x", 1e308, [], [1, 2], [[1, 2], [3, 4], [5, 6]], [1, "a", 3], [float("nan")] * 5,
                 [3.0, 2.0, 1.0], [-1.0, 0.0, 1.0], [True, False, True], list(range(300_000))]


@pytest.mark.parametrize("r", HOSTILE_LISTS)
@pytest.mark.parametrize("g", HOSTILE_LISTS[:9])
def test_recorded_rdf_refuses_malformed_curves(r, g):
    for key in ("rdf", "g_r", "curves"):
        assert recorded_rdf(None, "W", {key: {"r_nm": r, "g_r": g}}) is None


def test_rdf_integral_of_an_ideal_gas_is_the_number_in_the_sphere():
    """g = 1 everywhere: CN = 4/3 π ρ r_c³ (the integral, not a hard-coded number: drawn ρ and r_c)."""
    rng = np.random.default_rng(seed_for("audit-own-numbers-hostile/ideal"))
    rho, rc = float(rng.uniform(5, 50)), float(rng.uniform(0.2, 0.6))
    r = np.linspace(0.0, 1.0, 401)
    cn, allow = rdf_integral(r, np.ones_like(r), rho, rc)
    assert cn == pytest.approx(4.0 / 3.0 * math.pi * rho * rc ** 3, rel=1e-3)
    assert 0 < allow < 0.05 * cn
    with np.errstate(all="ignore"):
        cn, _ = rdf_integral(r, np.full_like(r, 1e308), rho, rc)
    assert not math.isfinite(cn)   # cn_checks skips a non-finite integral


def test_charge_classifier_on_bad_matrices_and_ratios():
    assert charge_weightings(np.ones((2, 3)), ["A", "B"], {"A": 1, "B": -1}) == {}
    assert charge_weightings(np.full((2, 2), np.nan), ["A", "B"], {"A": 1, "B": -1}) == {}
    assert charge_weightings(np.zeros((2, 2)), ["A", "B"], {"A": 0.7, "B": -0.7}) == {}
    ks = charge_weightings(np.array([[2.0, -0.5], [-0.5, 1.0]]), ["A", "B"], {"A": 0.8, "B": -0.8})
    for bad in (float("nan"), float("inf"), 0.0, -1.93, 1e308):
        assert classify_sigma(bad, ks) is None


@pytest.mark.parametrize("text", ["", "garbage\n" * 1000, "functype[0]=LJ_SR, c6= 1e0, c12= 2e0\n",
                                  "moltype (0):\n name=\"X\"\n atom[ 0]={type= 99, q= 1}\n",
                                  "functype[0]=LJ_SR, c6= nan, c12= 1\n" * 4 + "moltype (",
                                  "\x00\xff" * 1000])
def test_dump_and_itp_parsers_never_crash(text):
    ff = parse_dump_topology(text)
    assert ff is None or differences(ff, {}, {}) == []
    types, mols, _ = parse_itp(text)
    assert isinstance(types, dict) and isinstance(mols, dict)
    parse_itp("[ atomtypes ]\nX 1 1.0 0.0 A nan inf\n[ moleculetype ]\n[ atoms ]\n1 X 1 R A 1 zz 1\n")


def test_d_band_and_window_on_hostile_curves():
    lag = np.linspace(0.0, 1.0, 51)
    for msd in (np.zeros(51), np.full(51, np.nan), np.full(51, 1e308), -lag, lag ** 40):
        with np.errstate(all="ignore"):
            w, _found = rederived_window(lag, msd)
            b = band(lag, msd, [w, (0.1, 0.5), (0.5, 0.1), (float("nan"), 1.0), (0.0, 1e9)])
        assert b is None or (b[0] <= b[1] and all(math.isfinite(x) for x in b[:2]))
    w, _ = rederived_window(lag, 6e-3 * lag)          # a purely diffusive MSD: D = slope / 6
    lo, hi, got = band(lag, 6e-3 * lag, [w])
    assert all(d == pytest.approx(1e-3 * 1e-6, rel=1e-6) for _, d in got) and lo < 1e-9 < hi


def test_a_finite_size_corrected_d_is_compared_without_its_own_correction():
    """A Yeh–Hummer D is the trajectory's D plus ξk_BT/(6πηL): the MSD check compares it less the correction it
    records, and leaves alone a corrected D that records none (found as a false F on the oracle's own run)."""
    from mdbench.analysis.observables import SELF_DIFFUSION, SELF_DIFFUSION_YH
    from mdbench.audit.diffusion_vs_msd import _uncorrected
    from mdbench.audit.runread import Entry

    plain = Entry(f"observables.{SELF_DIFFUSION.key('LI')}", 2.0e-10, None, {})
    assert _uncorrected(plain) == 2.0e-10
    yh = Entry(f"observables.{SELF_DIFFUSION_YH.key('LI')}", 3.0e-10, None,
               {"diagnostics": {"D_pbc_m2_s": 2.0e-10, "correction_m2_s": 1.0e-10}})
    assert abs(_uncorrected(yh) - 2.0e-10) < 1e-22
    for corr in (None, float("nan"), "1e-10", True):
        assert _uncorrected(Entry(yh.key, 3.0e-10, None, {"diagnostics": {"correction_m2_s": corr}})) is None
    assert abs(_uncorrected(Entry("observables.d_li", 3.0e-10, None, {"diagnostics": {"correction_m2_s": 1e-10}}))
               - 2.0e-10) < 1e-22
