"""Issue 35: the RDF first minimum is accepted only after a significant first peak.

A structureless fluid (uniform random sites, the counting noise of real histograms at r -> 0, where a shell
holds almost no volume) must give no first minimum, so no C minimum and no coordination number at a spurious
cutoff; a water/NaCl-like Na-O g(r) sampled with the counting noise of a 1 M box keeps its ~0.32 nm minimum.
"""

from __future__ import annotations

import numpy as np
import pytest

from mdbench.analysis.rdf import find_first_minimum, first_minimum
from mdbench.analysis.settings import AnalysisSettings

from _testseed import seed_for

BIN, RMAX, BOX = 0.005, 1.0, 3.0


def _histogram(centres: np.ndarray, sites: np.ndarray) -> np.ndarray:
    edges = np.arange(0.0, RMAX + BIN / 2, BIN)
    counts = np.zeros(edges.size - 1)
    for c_f, s_f in zip(centres, sites):
        d = s_f[None, :, :] - c_f[:, None, :]
        d -= BOX * np.round(d / BOX)
        counts += np.histogram(np.linalg.norm(d, axis=-1).ravel(), bins=edges)[0]
    return counts


def _ideal(n_frames: int, n_centres: int, n_sites: int) -> tuple[np.ndarray, np.ndarray]:
    edges = np.arange(0.0, RMAX + BIN / 2, BIN)
    shell = 4.0 / 3.0 * np.pi * (edges[1:] ** 3 - edges[:-1] ** 3)
    return 0.5 * (edges[1:] + edges[:-1]), n_frames * n_centres * n_sites / BOX ** 3 * shell


@pytest.mark.parametrize("k", range(4))
def test_structureless_g_of_r_has_no_first_minimum(k):
    rng = np.random.default_rng(seed_for(f"rdf_structureless/{k}"))
    F, NC, NS = 40, 20, 300
    counts = _histogram(rng.uniform(0, BOX, (F, NC, 3)), rng.uniform(0, BOX, (F, NS, 3)))
    r, ideal = _ideal(F, NC, NS)
    g = counts / ideal
    s = AnalysisSettings.from_yaml()
    res = find_first_minimum(r, g, counts=counts, max_nm=s.rdf_first_min_max_nm,
                             min_peak_height=s.rdf_first_peak_min_height, min_depth=s.rdf_first_min_min_depth)
    assert np.isnan(res.min_nm) and res.reason, res
    assert "no significant first peak" in res.reason or "below the peak" in res.reason


def test_the_old_rule_would_find_a_spurious_minimum_on_the_same_noise():
    """The test above can fail: without the significance test (height > 1 only, no counts) the counting
    noise at small r is a 'first peak' on at least one of these histograms."""
    found = 0
    for k in range(4):
        rng = np.random.default_rng(seed_for(f"rdf_structureless/{k}"))
        counts = _histogram(rng.uniform(0, BOX, (40, 20, 3)), rng.uniform(0, BOX, (40, 300, 3)))
        r, ideal = _ideal(40, 20, 300)
        found += np.isfinite(first_minimum(r, counts / ideal, min_peak_height=1.0, min_depth=0.0)[1])
    assert found >= 1


def _na_o_like(r: np.ndarray) -> np.ndarray:
    """A Na-O(water) g(r) of SPC/E + 1 M NaCl shape: first peak ~7 at 0.236 nm, minimum ~0.32 nm."""
    g = (1.0 + 6.5 * np.exp(-((r - 0.236) / 0.013) ** 2) - 0.8 * np.exp(-((r - 0.322) / 0.035) ** 2)
         + 0.3 * np.exp(-((r - 0.45) / 0.04) ** 2))
    return g / (1.0 + np.exp(-(r - 0.215) / 0.004))


@pytest.mark.parametrize("n_frames", [25, 1000])
def test_a_water_nacl_like_g_of_r_keeps_its_first_minimum(n_frames):
    rng = np.random.default_rng(seed_for(f"rdf_nao/{n_frames}"))
    r, ideal = _ideal(n_frames, 18, 1000)  # ~1 M NaCl: 18 Na+ among 1,000 waters
    counts = rng.poisson(_na_o_like(r) * ideal).astype(float)
    s = AnalysisSettings.from_yaml()
    res = find_first_minimum(r, counts / ideal, counts=counts, max_nm=s.rdf_first_min_max_nm,
                             min_peak_height=s.rdf_first_peak_min_height, min_depth=s.rdf_first_min_min_depth)
    assert res.reason is None
    assert res.peak_nm == pytest.approx(0.236, abs=0.01)
    assert res.min_nm == pytest.approx(0.32, abs=0.02)


def test_a_weak_shallow_first_shell_is_not_a_minimum():
    r = np.arange(BIN / 2, RMAX, BIN)
    g = 1.0 + 0.15 * np.exp(-((r - 0.4) / 0.05) ** 2) - 0.05 * np.exp(-((r - 0.5) / 0.03) ** 2)
    g[r < 0.3] = 0.0
    res = find_first_minimum(r, g, min_peak_height=1.2, min_depth=0.2)
    assert np.isnan(res.min_nm) and "no significant first peak" in res.reason


def test_a_peak_followed_by_a_shallow_dip_is_not_a_minimum():
    r = np.arange(BIN / 2, RMAX, BIN)
    g = 1.0 + 0.3 * np.exp(-((r - 0.4) / 0.03) ** 2) + 0.25 * np.exp(-((r - 0.48) / 0.03) ** 2)
    g[r < 0.3] = 0.0
    res = find_first_minimum(r, g, min_peak_height=1.2, min_depth=0.2)
    assert np.isnan(res.min_nm) and "below the peak" in res.reason, res
