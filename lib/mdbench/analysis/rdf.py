"""Species-resolved radial distribution functions and the registered first-minimum rule.

The pair histograms are accumulated per frame by :mod:`mdbench.analysis.reduce` (one pass); this module
normalises them for any frame window:

.. math::

    g_{AB}(r) = \\frac{\\langle n_{AB}(r, r+\\delta r)\\rangle_{\\text{frames}}}
                     {N_{\\text{pairs}} \\langle 1/V \\rangle \\; \\tfrac{4}{3}\\pi[(r+\\delta r)^3 - r^3]}

with ``N_pairs = N_A N_B`` (``N_A(N_A−1)`` when A = B, self pairs excluded). In NVT this is identical to
MDAnalysis ``InterRDF`` (which uses the mean volume). The running coordination integral
``n(r) = ρ_B ∫_0^r 4π r'^2 g(r') dr'`` equals the mean number of B *sites* within r of an A atom.

First-minimum rule (registered): smooth g with a centred 5-bin (0.025 nm at the default bin) moving
average; the first peak is the first local maximum of the smoothed g that is *significant*: its height
exceeds the registered ``rdf_first_peak_min_height`` (above 1) even at the lower end of its counting
interval, ``g (1 - 2/sqrt(n))`` with ``n`` the pair counts in the smoothing window (a handful of counts at
r → 0, where a shell holds almost no volume, is noise however high its g); the first minimum is the first
local minimum of the smoothed g after that peak, at least ``rdf_first_min_min_depth`` below it; it must lie
at r ≤ 0.60 nm. Otherwise no first minimum is reported (NaN), the reason is stated, and the fixed cutoff
of the registration is used instead.

Reference: Allen & Tildesley, Computer Simulation of Liquids, 2nd ed. (2017), §8.2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mdbench.analysis.blocks import BlockWindows
from mdbench.analysis.estimator import Estimate, EstimatorBase, Measurement, new_figure
from mdbench.analysis.observables import RDF
from mdbench.analysis.reduce import ReducedTrajectory
from mdbench.analysis.settings import AnalysisSettings, registered

#: The first-minimum search limit [nm]: the registered ``rdf_first_min_max_nm`` of ``params/analysis/default.yaml``
#: (read from there: the YAML is the one place a default lives).
FIRST_MIN_MAX_NM = registered(None, "rdf_first_min_max_nm")
SMOOTH_BINS = 5
#: The peak significance: the registered ``rdf_first_peak_min_height`` and ``rdf_first_min_min_depth`` of
#: ``params/analysis/default.yaml``.
FIRST_PEAK_MIN_HEIGHT = registered(None, "rdf_first_peak_min_height")
FIRST_MIN_MIN_DEPTH = registered(None, "rdf_first_min_min_depth")


def first_min_rule(max_nm: float = FIRST_MIN_MAX_NM, *, min_peak_height: float = FIRST_PEAK_MIN_HEIGHT,
                   min_depth: float = FIRST_MIN_MIN_DEPTH) -> str:
    """Text of the first-minimum rule with its search limit and significance thresholds (what gets registered)."""
    return ("g(r) smoothed by a centred 5-bin moving average; first peak = first local maximum of the smoothed "
            f"g whose height exceeds {min_peak_height:g} at the lower end of its counting interval "
            "g (1 - 2/sqrt(n)), n = pair counts in the smoothing window; first minimum = first local minimum "
            f"of the smoothed g after the first peak, at least {min_depth:g} below the peak, accepted only at "
            f"r <= {max_nm:.2f} nm (else not found: NaN, reason stated, fixed cutoff used)")


FIRST_MIN_RULE = first_min_rule()


@dataclass
class RdfCurve:
    """One g(r) curve over a frame window.

    Attributes
    ----------
    channel : str
        ``"<partner species>:<site label>"`` (or ``"LI:LI"`` for centre–centre).
    r_nm : ndarray (B,)
        Bin centres [nm].
    g : ndarray (B,)
        g(r) [dimensionless].
    n_sites_cumulative : ndarray (B,)
        ρ∫4πr²g dr up to the bin's upper edge: mean number of sites within r of a centre.
    first_peak_nm, first_min_nm : float
        Registered-rule first peak and first minimum [nm] (NaN when not found).
    """

    channel: str
    r_nm: np.ndarray
    g: np.ndarray
    n_sites_cumulative: np.ndarray
    first_peak_nm: float
    first_min_nm: float
    not_found_reason: str | None = None

    def n_sites_upper_bound(self, r_c_nm: float) -> float:
        """ρ∫4πr²g dr up to the upper edge of the bin that holds r_c: an upper bound of the site count
        within r_c that no within-bin interpolation can undercut."""
        width = self.r_nm[1] - self.r_nm[0]
        upper_edges = self.r_nm + 0.5 * width
        index = int(np.searchsorted(upper_edges, r_c_nm - 1e-12))
        return float(self.n_sites_cumulative[min(index, self.n_sites_cumulative.size - 1)])

    def n_sites_within(self, r_c_nm: float) -> float:
        """ρ∫_0^{r_c} 4πr²g dr (linear interpolation between bin edges)."""
        edges = np.concatenate([[0.0], self.r_nm + 0.5 * (self.r_nm[1] - self.r_nm[0])])
        return float(np.interp(r_c_nm, edges, np.concatenate([[0.0], self.n_sites_cumulative])))


def rdf_curve(rd: ReducedTrajectory, channel: str, frames: slice | np.ndarray = slice(None), *,
              first_min_max_nm: float = FIRST_MIN_MAX_NM, min_peak_height: float = FIRST_PEAK_MIN_HEIGHT,
              min_depth: float = FIRST_MIN_MIN_DEPTH) -> RdfCurve:
    """Normalised g(r) of one channel over the frames ``frames`` of a reduced trajectory (first minimum
    searched up to ``first_min_max_nm`` [nm], peak significance and depth as registered)."""
    counts = np.asarray(rd.rdf_counts[channel][frames], dtype=np.float64)
    vol = rd.volume_nm3[frames]
    n_frames = counts.shape[0]
    edges = rd.rdf_edges_nm
    shell = 4.0 / 3.0 * np.pi * (edges[1:] ** 3 - edges[:-1] ** 3)
    hist = counts.sum(axis=0)
    n_pairs = rd.rdf_n_pairs[channel]
    with np.errstate(divide="ignore", invalid="ignore"):
        g = hist / (n_pairs * np.sum(1.0 / vol) * shell)
    n_centre = max(int(rd.centre_mol.size), 1)
    ncum = np.cumsum(hist) / (n_centre * max(n_frames, 1))
    r = 0.5 * (edges[1:] + edges[:-1])
    fm = find_first_minimum(r, g, max_nm=first_min_max_nm, counts=hist, min_peak_height=min_peak_height,
                            min_depth=min_depth)
    return RdfCurve(channel, r, g, ncum, fm.peak_nm, fm.min_nm, fm.reason)


@dataclass(frozen=True)
class FirstMinimum:
    """Outcome of the first-minimum rule: positions [nm] (NaN when not found) and why not found."""

    peak_nm: float
    min_nm: float
    reason: str | None = None


def find_first_minimum(r_nm: np.ndarray, g: np.ndarray, *, max_nm: float = FIRST_MIN_MAX_NM,
                       smooth_bins: int = SMOOTH_BINS, counts: np.ndarray | None = None,
                       min_peak_height: float = FIRST_PEAK_MIN_HEIGHT,
                       min_depth: float = FIRST_MIN_MIN_DEPTH) -> FirstMinimum:
    """Apply the registered first-minimum rule (see :func:`first_min_rule`).

    Parameters
    ----------
    r_nm, g : array_like, shape (B,)
        Bin centres [nm] and g(r).
    max_nm : float
        Largest accepted first-minimum position [nm].
    smooth_bins : int
        Width of the centred moving average [bins].
    counts : array_like, shape (B,), optional
        Pair counts behind each bin (summed over frames). With them a peak must be significant: the lower
        end of its counting interval, ``g_s (1 - 2/sqrt(n))`` with ``n`` the counts in the smoothing window,
        must exceed ``min_peak_height``. Without them only the height itself is tested.
    min_peak_height : float
        Registered minimum first-peak height (> 1).
    min_depth : float
        Registered minimum depth of the first minimum below the first peak (smoothed g units).

    Returns
    -------
    FirstMinimum
    """
    g = np.nan_to_num(np.asarray(g, dtype=np.float64))
    if g.size < 3:
        return FirstMinimum(float("nan"), float("nan"), "fewer than 3 bins")
    k = max(1, int(smooth_bins))
    gs = np.convolve(np.pad(g, k // 2, mode="edge"), np.ones(k) / k, mode="valid")[: g.size]
    n_win = None
    if counts is not None:
        c = np.nan_to_num(np.asarray(counts, dtype=np.float64))
        n_win = np.convolve(np.pad(c, k // 2, mode="constant"), np.ones(k), mode="valid")[: g.size]
    peak = None
    highest = 0.0
    for i in range(1, gs.size - 1):
        if r_nm[i] > max_nm:
            break
        if not (gs[i] >= gs[i - 1] and gs[i] > gs[i + 1]):
            continue
        low = gs[i] if n_win is None else (gs[i] * max(0.0, 1.0 - 2.0 / np.sqrt(n_win[i])) if n_win[i] > 0 else 0.0)
        highest = max(highest, float(low))
        if low > min_peak_height:
            peak = i
            break
    if peak is None:
        return FirstMinimum(float("nan"), float("nan"),
                            f"no significant first peak within {max_nm:.2f} nm (highest local maximum "
                            f"{highest:.2f} at the lower end of its counting interval; needed > {min_peak_height:g})")
    for j in range(peak + 1, gs.size - 1):
        if r_nm[j] > max_nm:
            break
        if gs[j] <= gs[j - 1] and gs[j] < gs[j + 1]:
            depth = float(gs[peak] - gs[j])
            if depth < min_depth:
                return FirstMinimum(float(r_nm[peak]), float("nan"),
                                    f"first minimum at {r_nm[j]:.3f} nm is {depth:.2f} below the peak "
                                    f"(needed >= {min_depth:g}): no first shell")
            return FirstMinimum(float(r_nm[peak]), float(r_nm[j]))
    return FirstMinimum(float(r_nm[peak]), float("nan"),
                        f"no local minimum after the first peak within {max_nm:.2f} nm")


def first_minimum(r_nm: np.ndarray, g: np.ndarray, *, max_nm: float = FIRST_MIN_MAX_NM,
                  smooth_bins: int = SMOOTH_BINS, counts: np.ndarray | None = None,
                  min_peak_height: float = FIRST_PEAK_MIN_HEIGHT,
                  min_depth: float = FIRST_MIN_MIN_DEPTH) -> tuple[float, float]:
    """(first_peak_nm, first_min_nm) of :func:`find_first_minimum` (NaN where not found)."""
    res = find_first_minimum(r_nm, g, max_nm=max_nm, smooth_bins=smooth_bins, counts=counts,
                             min_peak_height=min_peak_height, min_depth=min_depth)
    return res.peak_nm, res.min_nm


@dataclass
class RdfResult:
    """g(r) of one channel over the whole interval and each block, with the first-minimum diagnostics.

    ``state_inputs`` gives the classifier: failures (no first peak: the channel has no structure to
    report is NOT a failure, but a non-finite g is), and the sampling check that the first minimum of
    every block lies within ``tolerance_nm`` of the whole-interval minimum.
    """

    channel: str
    whole: RdfCurve
    blocks: list[RdfCurve]
    tolerance_nm: float = 0.05
    failures: list[str] = field(default_factory=list)
    first_min_max_nm: float = FIRST_MIN_MAX_NM
    min_peak_height: float = FIRST_PEAK_MIN_HEIGHT
    min_depth: float = FIRST_MIN_MIN_DEPTH

    @property
    def block_first_min_nm(self) -> list[float]:
        """First minimum of each block [nm]."""
        return [b.first_min_nm for b in self.blocks]

    def sampling_checks(self) -> dict[str, bool]:
        """Block stability of the first minimum (only when the whole interval has one)."""
        if not np.isfinite(self.whole.first_min_nm):
            return {}
        ok = all(np.isfinite(m) and abs(m - self.whole.first_min_nm) <= self.tolerance_nm
                 for m in self.block_first_min_nm)
        return {f"block first minima within {self.tolerance_nm} nm of whole": ok}

    def state_inputs(self) -> dict[str, Any]:
        """Inputs of :func:`mdbench.analysis.states.classify_observable`."""
        fails = list(self.failures)
        if not np.all(np.isfinite(self.whole.g[self.whole.r_nm > 0.05])):
            fails.append(f"non-finite g(r) in channel {self.channel}")
        return {"values": None, "failures": fails, "sampling_checks": self.sampling_checks()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe summary (curve on a 0.01 nm grid to keep results.json small)."""
        stride = max(1, int(round(0.01 / (self.whole.r_nm[1] - self.whole.r_nm[0]))))
        return {
            "channel": self.channel,
            "first_peak_nm": _f(self.whole.first_peak_nm),
            "first_min_nm": _f(self.whole.first_min_nm),
            "block_first_min_nm": [_f(m) for m in self.block_first_min_nm],
            "block_first_peak_nm": [_f(b.first_peak_nm) for b in self.blocks],
            "first_min_not_found": self.whole.not_found_reason,
            "rule": first_min_rule(self.first_min_max_nm, min_peak_height=self.min_peak_height,
                                   min_depth=self.min_depth),
            "r_nm": [round(float(x), 5) for x in self.whole.r_nm[::stride]],
            "g": [_f(x) for x in self.whole.g[::stride]],
        }


def rdf_analysis(rd: ReducedTrajectory, windows: BlockWindows, *, first_min_max_nm: float = FIRST_MIN_MAX_NM,
                 tolerance_nm: float = 0.05, min_peak_height: float = FIRST_PEAK_MIN_HEIGHT,
                 min_depth: float = FIRST_MIN_MIN_DEPTH) -> dict[str, RdfResult]:
    """g(r) for every channel of ``rd``: whole interval and each block of ``windows`` (first minimum searched
    up to ``first_min_max_nm`` [nm] after a significant peak; block minima within ``tolerance_nm`` [nm] of the
    whole's pass)."""
    out = {}
    for ch in rd.rdf_counts:
        kw = {"first_min_max_nm": first_min_max_nm, "min_peak_height": min_peak_height, "min_depth": min_depth}
        out[ch] = RdfResult(ch, rdf_curve(rd, ch, windows.whole, **kw), [rdf_curve(rd, ch, b, **kw)
                                                                         for b in windows.blocks],
                            tolerance_nm=tolerance_nm, first_min_max_nm=first_min_max_nm,
                            min_peak_height=min_peak_height, min_depth=min_depth)
    return out


class RdfEstimator(EstimatorBase):
    """Registered estimator of :data:`mdbench.analysis.observables.RDF`: g(r) of every channel, the first
    minimum by the registered rule, and the coordination cutoffs it gives (shared as ``rdf_results``,
    ``cutoffs`` and ``cutoff_rules``: the first minimum, else the fixed cutoff)."""

    inputs = ("structure_frames", "structure_windows")

    def compute(self) -> Estimate:
        s, c, entry = self.settings, self.case, self.entries[0]
        rd, win = c.structure_frames, c.structure_windows
        rdfs = rdf_analysis(rd, win, first_min_max_nm=s.rdf_first_min_max_nm,
                            tolerance_nm=s.rdf_block_first_min_tolerance_nm,
                            min_peak_height=s.rdf_first_peak_min_height,
                            min_depth=s.rdf_first_min_min_depth) if rd.rdf_counts else {}
        out, curves = [], {}
        cutoffs: dict[str, float] = {}
        rules: dict[str, str] = {}
        site_channels = {ch.name for ch in rd.channels}
        for ch, res in rdfs.items():
            d = res.to_dict()
            curves[ch] = d
            note = (f"; no first minimum by the registered rule ({d['first_min_not_found']}): coordination uses "
                    f"the fixed cutoff {s.fixed_cn_cutoff_nm:g} nm") if d["first_min_nm"] is None else ""
            out.append(Measurement(
                entry, (ch,), {"value": d["first_min_nm"], "unit": "nm", "blocks": d["block_first_min_nm"],
                               "window": win.to_dict(), "diagnostics": {"first_peak_nm": d["first_peak_nm"],
                                                                        "sampling_checks": res.sampling_checks()}},
                "first minimum of g(r) by the registered rule "
                f"(centres {'+'.join(rd.centre_species)}, sites {ch})", res.state_inputs(),
                details={"curve": {"r_nm": d["r_nm"], "g": d["g"]}}, note=note))
            m = res.whole.first_min_nm
            if ch in site_channels:
                cutoffs[ch] = float(m) if np.isfinite(m) else s.fixed_cn_cutoff_nm
                rules[ch] = ("first minimum" if np.isfinite(m) else
                             f"fixed {s.fixed_cn_cutoff_nm} nm (no first minimum: {res.whole.not_found_reason})")
        return Estimate(out, sections={entry.details_section: {entry.name: curves, "abundance": {}}},
                        figure_data={"rdfs": rdfs, "cutoffs": cutoffs},
                        products={"rdf_results": rdfs, "cutoffs": cutoffs, "cutoff_rules": rules})


    @classmethod
    def definition(cls, settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
        """Registered as ``analysis_rdf_coordination`` (shared with the coordination numbers)."""
        s = settings
        return {"analysis_rdf_coordination": {
            "rdf_rmax_nm": s.rdf_rmax_nm, "rdf_bin_nm": s.rdf_bin_nm,
            "first_minimum_rule": first_min_rule(s.rdf_first_min_max_nm, min_peak_height=s.rdf_first_peak_min_height,
                                                 min_depth=s.rdf_first_min_min_depth),
            "cn_definition": "distinct partner molecules with any site of the channel within r_c",
            "cn_cutoffs": "first minimum of each channel's g(r) (registered rule); fixed "
                          f"{s.fixed_cn_cutoff_nm} nm reported for every channel as well",
            "cross_check": "rho * integral 4 pi r^2 g(r) dr (site count) at the same r_c",
            "abundance": "mean distinct molecules of each species in the first shell / shell total",
            "structure_frames": ("every frame" if not s.structure_max_frames else
                                 f"every k-th frame, k = ceil(frames / {s.structure_max_frames}) (at most "
                                 f"{s.structure_max_frames} frames; consecutive frames 1 ps apart are strongly "
                                 "correlated for first-shell contacts); blocks and guard as for every analysis"),
        }}

    @classmethod
    def figures(cls, estimate: Estimate, settings: AnalysisSettings) -> dict[str, Any]:
        """The RDFs with their first minima and the first-minimum search limit."""
        if not estimate.figure_data.get("rdfs"):
            return {}
        fig, ax = new_figure()
        rdfs = estimate.figure_data["rdfs"]
        for ch, res in rdfs.items():
            line, = ax.plot(res.whole.r_nm, res.whole.g, label=ch, lw=1.2)
            if np.isfinite(res.whole.first_min_nm):
                ax.axvline(res.whole.first_min_nm, color=line.get_color(), ls=":", lw=1)
        ax.axvline(settings.rdf_first_min_max_nm, color="0.6", ls="--", lw=0.8, label="first-minimum search limit")
        ax.set_xlabel("r [nm]")
        ax.set_ylabel("g(r)")
        ax.legend(fontsize=7)
        return {RDF.figure: fig}


def _f(x: Any) -> float | None:
    v = float(x)
    return v if np.isfinite(v) else None
