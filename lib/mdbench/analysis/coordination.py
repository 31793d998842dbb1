"""Coordination numbers counted as distinct partner molecules, and first-shell species abundance.

Definition (registered): for a centre (a Li⁺) and a partner species P with site channels S (e.g. FSI with
its O sites), ``CN_P(r_c)`` is the number of distinct P molecules having at least one site of S within
``r_c`` of the centre, averaged over centres and frames. Molecules, not atoms: an FSI bound through two O
atoms counts once. The cross-check ``ρ∫_0^{r_c} 4πr²g(r)dr`` counts sites (atoms) and is ≥ CN; the two
agree exactly for one-site-per-molecule channels (DMC carbonyl O, a single-atom ion).

First-shell abundance: with a cutoff per channel (first minimum by the registered rule, or the fixed
cutoff when no minimum is found), the mean number of distinct molecules of each species in the shell and
its fraction of the shell total.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mdbench.analysis.adequacy import PrecisionBound, adequacy_checks
from mdbench.analysis.blocks import BlockEstimate, BlockWindows, frame_mean_estimate
from mdbench.analysis.estimator import Estimate, EstimatorBase, Measurement
from mdbench.analysis.reduce import ReducedTrajectory
from mdbench.analysis.settings import registered

#: The sampling check, as registered in ``params/analysis/default.yaml`` (read from there): the 95 % block
#: half-width relative to the CN must not exceed ``cn_max_rel_half_width`` ...
CN_MAX_REL_HALF_WIDTH = registered(None, "cn_max_rel_half_width")
#: ... unless the half-width is below ``cn_abs_half_width_ok`` (CNs near 0).
CN_ABS_HALF_WIDTH_OK = registered(None, "cn_abs_half_width_ok")


def distinct_keys(key: np.ndarray, return_index: bool = False) -> Any:
    """The distinct values of ``key`` in ascending order (and, with ``return_index``, the position of each
    one's first occurrence in ``key``).

    The reduction writes contacts sorted by (frame, centre, partner, channel), so keys built from them in
    that order are already sorted: the distinct ones are then the changes of value (linear time); any
    other order takes ``np.unique`` (a sort).
    """
    if key.size >= 2 and not bool(np.all(key[1:] >= key[:-1])):
        return np.unique(key, return_index=return_index)
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size >= 2 else np.arange(key.size)
    return (key[first], first) if return_index else key[first]


def cn_per_frame(rd: ReducedTrajectory, channels: list[str], cutoff_nm: float | dict[str, float]) -> np.ndarray:
    """Mean number of distinct partner molecules per centre, frame by frame.

    Parameters
    ----------
    rd : ReducedTrajectory
    channels : list of str
        Channel names whose sites count (their union).
    cutoff_nm : float or dict
        One cutoff [nm] or a cutoff per channel name.

    Returns
    -------
    ndarray (F,)
    """
    names = [c.name for c in rd.channels]
    codes = [names.index(c) for c in channels]
    cut = np.full(len(names), -1.0)
    for c, k in zip(channels, codes):
        cut[k] = cutoff_nm[c] if isinstance(cutoff_nm, dict) else cutoff_nm
    if np.any(cut[codes] > rd.r_store_nm + 1e-9):
        raise ValueError(f"cutoff above the stored neighbour range {rd.r_store_nm} nm")
    ct = rd.contacts
    if len(set(codes)) == 1:  # one channel: only its rows (ascending, so the key order is kept)
        rows = rd.channel_rows(codes[0])
        keep = rows[ct["dmin_nm"].take(rows) < np.float64(cut[codes[0]])]  # float64 comparison, as below
    else:
        cut_of_row = cut[ct["channel"]]
        keep = np.flatnonzero((cut_of_row > 0) & (ct["dmin_nm"] < cut_of_row))
    _, first = distinct_keys(rd.contact_pair_key().take(keep), return_index=True)  # (frame, centre, partner)
    frame = ct["frame"].take(keep[first])
    return np.bincount(frame, minlength=rd.n_frames) / max(rd.centre_mol.size, 1)


#: Relative slack between the distinct-molecule CN and the histogram site integral at r_c.
SITE_INTEGRAL_RTOL = 0.02


@dataclass
class CoordinationResult:
    """CN of one partner (species or channel) around the centres at one cutoff, whole and blocks.

    Attributes
    ----------
    partner : str
        Species (all its site channels) or a single channel, e.g. ``"FSI"`` or ``"DMC:O_carbonyl"``.
    channels : list of str
        Site channels used.
    cutoff_nm : float
        r_c [nm]. cutoff_rule says where it came from.
    cn : BlockEstimate
        Distinct partner molecules per centre.
    n_sites_integral : float or None
        ρ∫4πr²g dr at r_c for a single channel (site count, cross-check), whole interval.
    """

    partner: str
    channels: list[str]
    cutoff_nm: float
    cutoff_rule: str
    cn: BlockEstimate
    n_sites_integral: float | None = None
    n_sites_upper_bound: float | None = None
    failures: list[str] = field(default_factory=list)
    max_rel_half_width: float = CN_MAX_REL_HALF_WIDTH
    abs_half_width_ok: float = CN_ABS_HALF_WIDTH_OK
    trend_alpha: float = 0.05

    def _checks(self) -> tuple[dict[str, bool], dict[str, str]]:
        return adequacy_checks("", self.cn, PrecisionBound(rel=self.max_rel_half_width, abs=self.abs_half_width_ok),
                               self.trend_alpha)

    def sampling_checks(self) -> dict[str, bool]:
        """Precision and no block trend of the CN (registered thresholds, :mod:`mdbench.analysis.adequacy`)."""
        return self._checks()[0]

    def state_inputs(self) -> dict[str, Any]:
        """Inputs of :func:`mdbench.analysis.states.classify_observable`."""
        fails = list(self.failures)
        # Distinct molecules can never outnumber sites within the same r_c. The site integral is
        # interpolated inside a histogram bin and normalised by the mean volume, so allow that
        # discretisation (SITE_INTEGRAL_RTOL) before calling it an implementation error.
        bound = self.n_sites_upper_bound if self.n_sites_upper_bound is not None else self.n_sites_integral
        if bound is not None and self.cn.whole > bound * (1.0 + SITE_INTEGRAL_RTOL) + 1e-6:
            fails.append("molecule CN exceeds the site integral beyond its discretisation tolerance "
                         "(impossible: implementation error)")
        checks, details = self._checks()
        return {"values": [self.cn.whole, *self.cn.blocks], "failures": fails,
                "sampling_checks": checks, "check_details": details}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        d = self.cn.to_dict()
        d.update(partner=self.partner, channels=self.channels, cutoff_nm=self.cutoff_nm,
                 cutoff_rule=self.cutoff_rule,
                 n_sites_integral=None if self.n_sites_integral is None else float(self.n_sites_integral),
                 definition="distinct partner molecules with any listed site within cutoff_nm of the "
                            "centre, averaged over centres and frames")
        return d


def coordination(rd: ReducedTrajectory, windows: BlockWindows, partner: str, channels: list[str],
                 cutoff_nm: float, cutoff_rule: str, n_sites_integral: float | None = None,
                 n_sites_upper_bound: float | None = None, *, max_rel_half_width: float = CN_MAX_REL_HALF_WIDTH,
                 abs_half_width_ok: float = CN_ABS_HALF_WIDTH_OK,
                 trend_alpha: float | None = None) -> CoordinationResult:
    """CN of ``partner`` (union of ``channels``) at ``cutoff_nm``: whole interval and blocks (sampling check
    with the given thresholds)."""
    trend_alpha = registered(trend_alpha, "block_trend_alpha")
    per_frame = cn_per_frame(rd, channels, cutoff_nm)
    est = frame_mean_estimate(per_frame, windows, "molecules per centre")
    return CoordinationResult(partner, list(channels), float(cutoff_nm), cutoff_rule, est, n_sites_integral,
                              n_sites_upper_bound, max_rel_half_width=max_rel_half_width,
                              abs_half_width_ok=abs_half_width_ok, trend_alpha=trend_alpha)


def shell_abundance(rd: ReducedTrajectory, windows: BlockWindows,
                    cutoffs_nm: dict[str, float]) -> dict[str, dict[str, Any]]:
    """First-shell composition: mean distinct molecules of each species within its channels' cutoffs.

    Returns
    -------
    dict
        species → {"molecules_per_centre": BlockEstimate dict, "fraction_of_shell": float (whole)}.
    """
    by_species: dict[str, list[str]] = {}
    for c in rd.channels:
        if c.name in cutoffs_nm:
            by_species.setdefault(c.species, []).append(c.name)
    counts = {sp: cn_per_frame(rd, chs, {c: cutoffs_nm[c] for c in chs}) for sp, chs in by_species.items()}
    total = sum(float(v[windows.whole].mean()) for v in counts.values())
    out = {}
    for sp, v in counts.items():
        est = frame_mean_estimate(v, windows, "molecules per centre")
        out[sp] = {"molecules_per_centre": est.to_dict(), "channels": by_species[sp],
                   "cutoffs_nm": {c: cutoffs_nm[c] for c in by_species[sp]},
                   "fraction_of_shell": (float(est.whole) / total) if total > 0 else None}
    return out


class CoordinationEstimator(EstimatorBase):
    """Registered estimator of :data:`mdbench.analysis.observables.COORDINATION`: the CN of every site
    channel at its first-minimum cutoff and at the fixed cutoff, and the first-shell abundance."""

    inputs = ("structure_frames", "structure_windows", "treatment", "products.rdf_results", "products.cutoffs",
              "products.cutoff_rules")

    def compute(self) -> Estimate:
        s, c, entry = self.settings, self.case, self.entries[0]
        rd, win, p = c.structure_frames, c.structure_windows, c.products
        rdfs, cutoffs, rules = p["rdf_results"], p["cutoffs"], p["cutoff_rules"]
        out = []
        fixed = s.fixed_cn_cutoff_nm
        for ch in rd.channels:
            res = rdfs[ch.name]
            for tag, rc, rule in (("first_min", cutoffs[ch.name], rules[ch.name]), (f"{fixed:.2f}nm", fixed, "fixed")):
                cr = coordination(rd, win, ch.species, [ch.name], rc, rule, res.whole.n_sites_within(rc),
                                  res.whole.n_sites_upper_bound(rc), max_rel_half_width=s.cn_max_rel_half_width,
                                  abs_half_width_ok=s.cn_abs_half_width_ok, trend_alpha=s.block_trend_alpha)
                cd = cr.to_dict()
                out.append(Measurement(entry, (f"{ch.name}@{tag}",),
                                       dict(cd, diagnostics=dict(cd.get("diagnostics", {}), **c.treatment)),
                                       cd["definition"], cr.state_inputs(),
                                       details={"cutoff_nm": rc, "cutoff_rule": rule,
                                                "n_sites_integral": cr.n_sites_integral}))
        sections = {entry.details_section: {"abundance": shell_abundance(rd, win, cutoffs)}} if cutoffs else {}
        return Estimate(out, sections=sections)
