"""Li⁺ residence times and ion-pair contact lifetimes against hand-placed partners with known stays.

One Li⁺ at the centre of a 3 nm box, 400 frames 1 ps apart, four 100-frame blocks, lags up to 50 frames.
In every block, partner A stays in the shell for frames 10–29 (20 frames); partner B for 50–59 and 62–69
(10 and 8 frames, absent for 2); partner C never comes. The continuous lifetime is then exact:
τ_C = Δt ΣL² / (2ΣL) = 564/76 ps without tolerance, and 800/80 = 10 ps once the 2-frame absence is
tolerated (B's stays join into one of 20 frames). The intermittent one is checked against the definition
evaluated by hand, pair by pair and origin by origin.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from mdbench.analysis.blocks import block_windows
from mdbench.analysis.reduce import reduce_universe
from mdbench.analysis.residence import (continuous_correlation, fill_absences, intermittent_correlation,
                                        lifetime_ps, lifetimes)

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: make the helper importable
from structure_synth import make_universe  # noqa: E402

F, BOX, CENTRE = 400, 3.0, np.array([1.5, 1.5, 1.5])
LI = [("Li", 6.94, 1.0)]
WATER = [("O", 16.0, -0.8), ("H", 1.008, 0.4), ("H", 1.008, 0.4)]
FSI = [("O", 16.0, -0.5), ("S", 32.06, 0.0), ("O", 16.0, -0.5)]
STAYS = {0: [(10, 30)], 1: [(50, 60), (62, 70)], 2: []}  # partner → [start, end) frames within each block


def _in_shell(partner: int) -> np.ndarray:
    inside = np.zeros(F, dtype=bool)
    for block in range(4):
        for a, b in STAYS[partner]:
            inside[100 * block + a:100 * block + b] = True
    return inside


def _universe(partner_atoms, resname):
    """Li + three partner molecules; a partner's first atom 0.2 nm from the Li while in the shell, 1.2 nm away
    otherwise (each along its own axis)."""
    n = 1 + 3 * len(partner_atoms)
    x = np.zeros((F, n, 3))
    x[:, 0] = CENTRE
    for p, axis in enumerate((0, 1, 2)):
        inside = _in_shell(p)
        first = 1 + p * len(partner_atoms)
        direction = np.eye(3)[axis] * (1 if p < 2 else -1)
        x[:, first] = CENTRE + np.where(inside[:, None], 0.2, 1.2) * direction
        for j in range(1, len(partner_atoms)):  # the molecule's other atoms 0.1 nm further out
            x[:, first + j] = x[:, first] + 0.1 * j * direction
    bonds = [(1 + p * len(partner_atoms) + j, 1 + p * len(partner_atoms) + j + 1)
             for p in range(3) for j in range(len(partner_atoms) - 1)]
    return make_universe(["LI", resname, resname, resname], [LI] + [partner_atoms] * 3, x, np.full((F, 3), BOX),
                         dt_ps=1.0, bonds=bonds)


@pytest.fixture(scope="module")
def water_shell():
    rd = reduce_universe(_universe(WATER, "SOL"))
    return rd, block_windows(rd.time_ps, 0.0, 4)


def _intermittent_by_hand(h: np.ndarray, n_pairs: int, max_lag: int) -> np.ndarray:
    """The definition, origin by origin: (⟨h(0)h(t)⟩ − ⟨h⟩²) / (⟨h⟩ − ⟨h⟩²) over every pair."""
    n = h.shape[1]
    mean = h.sum() / (n_pairs * n)
    out = []
    for k in range(max_lag + 1):
        joint = sum(int(h[p, t]) * int(h[p, t + k]) for p in range(h.shape[0]) for t in range(n - k))
        out.append((joint / (n_pairs * (n - k)) - mean ** 2) / (mean - mean ** 2))
    return np.array(out)


def _tau_by_hand(c: np.ndarray, dt: float) -> float:
    z = next(i for i, v in enumerate(c) if v <= 0)
    area = sum(0.5 * (c[i] + c[i + 1]) * dt for i in range(z - 1))
    return area + 0.5 * c[z - 1] * (c[z - 1] / (c[z - 1] - c[z])) * dt


def test_continuous_residence_time_is_exact(water_shell):
    rd, w = water_shell
    strict = lifetimes(rd, w, ["SOL:O"], 0.35, "SOL", tolerance_ps=0.0)["continuous"]
    assert strict.tau.whole == pytest.approx(564 / 76, abs=1e-12)
    assert strict.tau.blocks == pytest.approx([564 / 76] * 4, abs=1e-12)
    tolerant = lifetimes(rd, w, ["SOL:O"], 0.35, "SOL", tolerance_ps=2.0)["continuous"]
    assert tolerant.tau.whole == pytest.approx(10.0, abs=1e-12) and tolerant.tau.blocks == pytest.approx([10.0] * 4)
    # C_C(k) = Σ (L − k)_+ / Σ L on the stays 20, 10, 8 (no tolerance)
    k = np.arange(25)
    want = (np.clip(20 - k, 0, None) + np.clip(10 - k, 0, None) + np.clip(8 - k, 0, None)) / 38
    np.testing.assert_allclose(strict.correlation[:25], want, atol=1e-12)
    assert strict.decayed == [True] * 5 and strict.sampling_checks() == {
        "decays_within_max_lag": True, "time_resolution": True, "block_precision": True, "block_trend": True}
    assert strict.dt_ps == 1.0 and strict.max_lag_ps == 50.0 and strict.n_pairs_in_contact == 2


def test_intermittent_residence_time_matches_the_definition(water_shell):
    rd, w = water_shell
    res = lifetimes(rd, w, ["SOL:O"], 0.35, "SOL")["intermittent"]
    h = np.array([_in_shell(p) for p in range(3)])
    for span, tau in zip([w.whole, *w.blocks], [res.tau.whole, *res.tau.blocks]):
        c = _intermittent_by_hand(h[:, span], 3, 50)
        assert tau == pytest.approx(_tau_by_hand(c, 1.0), abs=1e-9)
    np.testing.assert_allclose(res.correlation, _intermittent_by_hand(h[:, w.whole], 3, 50), atol=1e-12)
    assert res.correlation[0] == pytest.approx(1.0)
    # the intermittent function forgives B's short absence: it decays more slowly than the strict continuous one
    strict = lifetimes(rd, w, ["SOL:O"], 0.35, "SOL", tolerance_ps=0.0)["continuous"]
    assert res.tau.whole > strict.tau.whole


def test_contact_lifetime_of_the_registered_contact(tmp_path):
    """The contact lifetime estimator uses the registered cation–anion contact (FSI:O within 0.30 nm): an FSI
    touching the Li through either O is one pair."""
    from mdbench.analysis.estimator import CaseInputs
    from mdbench.analysis.observables import CONTACT_LIFETIME
    from mdbench.analysis.residence import ContactLifetimeEstimator
    from mdbench.analysis.settings import AnalysisSettings

    rd = reduce_universe(_universe(FSI, "FSI"))
    w = block_windows(rd.time_ps, 0.0, 4)
    s = AnalysisSettings(lifetime_tolerance_ps=0.0)
    case = CaseInputs(s, "X", structure_frames=rd, structure_windows=w, treatment={"pbc": "minimum image"},
                      products={"cutoffs": {}, "contacts": {"FSI": (["FSI:O"], 0.30, "registered contact cutoff")}})
    est = ContactLifetimeEstimator(case, (CONTACT_LIFETIME,))
    got = {m.name: m for m in est.run().measurements}
    assert set(got) == {"contact_lifetime/FSI/intermittent", "contact_lifetime/FSI/continuous"}
    cont = got["contact_lifetime/FSI/continuous"]
    assert cont.payload["value"] == pytest.approx(564 / 76, abs=1e-12)
    assert cont.payload["diagnostics"]["time_resolution_ps"] == 1.0 and "pbc" in cont.payload["diagnostics"]
    assert est.sampling_checks(cont.name)["decays_within_max_lag"]
    h = np.array([_in_shell(p) for p in range(3)])
    assert got["contact_lifetime/FSI/intermittent"].payload["value"] == pytest.approx(
        _tau_by_hand(_intermittent_by_hand(h[:, w.whole], 3, 50), 1.0), abs=1e-9)


def test_absences_are_filled_as_mdanalysis_does():
    """Tolerance = MDAnalysis' intermittency: an absence of at most t* frames between two presences is filled."""
    from MDAnalysis.lib.correlations import correct_intermittency

    rng = np.random.default_rng(3)
    h = rng.random((6, 80)) < 0.4
    for tol in (0, 1, 2, 3):
        ours = fill_absences(h, tol)
        sets = [set(np.flatnonzero(h[:, t]).tolist()) for t in range(h.shape[1])]
        theirs = correct_intermittency([set(s) for s in sets], tol)
        assert [set(np.flatnonzero(ours[:, t]).tolist()) for t in range(h.shape[1])] == theirs


def test_continuous_correlation_equals_mdanalysis_when_the_shell_never_empties():
    """With a constant number in the shell, the ratio of sums equals MDAnalysis' mean of per-origin ratios."""
    from MDAnalysis.lib.correlations import autocorrelation

    h = np.zeros((4, 60), dtype=bool)
    h[0, :30], h[1, 30:], h[2, :45], h[3, 45:] = True, True, True, True  # always two partners in the shell
    ours = continuous_correlation(h, 10, 0)
    sets = [set(np.flatnonzero(h[:, t]).tolist()) for t in range(60)]
    _, theirs, _ = autocorrelation(sets, 10)
    np.testing.assert_allclose(ours, theirs, atol=1e-12)


def test_no_contact_is_too_short_not_a_failure(water_shell):
    from mdbench.analysis.states import classify_observable

    rd, w = water_shell
    res = lifetimes(rd, w, ["SOL:O"], 0.05, "SOL")  # nothing within 0.05 nm
    for r in res.values():
        assert r.n_pairs_in_contact == 0 and r.too_short
        assert classify_observable(**r.state_inputs()).state == "SI"


def test_a_lifetime_shorter_than_the_resolution_fails_its_check(water_shell):
    rd, w = water_shell
    coarse = lifetimes(rd, w, ["SOL:O"], 0.35, "SOL", tolerance_ps=0.0, min_frames_per_tau=10.0)["continuous"]
    assert coarse.sampling_checks()["time_resolution"] is False  # 7.4 ps < 10 frames of 1 ps
    assert lifetime_ps(np.array([1.0, 0.5, 0.25]), 1.0) == (pytest.approx(1.125), False)  # never reaches 0
    assert np.isnan(intermittent_correlation(np.zeros((2, 10), dtype=bool), 4, 3)).all()  # no contact at all


def test_pairs_taken_a_few_at_a_time_give_the_same_lifetimes(water_shell, monkeypatch):
    """The indicator is built one block of pairs at a time (bounded memory); one pair per block: same τ."""
    from mdbench.analysis import residence

    rd, w = water_shell
    whole = lifetimes(rd, w, ["SOL:O"], 0.35, "SOL")
    monkeypatch.setattr(residence, "FFT_BLOCK_ELEMENTS", rd.n_frames)
    assert len(list(residence.contact_series(rd, ["SOL:O"], 0.35, "SOL").dense_chunks())) == 2
    one_by_one = lifetimes(rd, w, ["SOL:O"], 0.35, "SOL")
    for d in whole:
        assert one_by_one[d].tau.whole == pytest.approx(whole[d].tau.whole, abs=1e-12)
        assert one_by_one[d].tau.blocks == pytest.approx(whole[d].tau.blocks, abs=1e-12)
