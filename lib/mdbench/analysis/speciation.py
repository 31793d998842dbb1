"""Li+ first-shell composition (speciation): the distribution of (n_FSI, n_DMC, n_TTE, ...) around each cation.

For every structure frame and every cation centre, the number of distinct molecules of each partner
species with any of that species' registered site channels within the channel's coordination cutoff (the
first minimum of its g(r), else the fixed cutoff: the ``cutoffs`` the RDF estimator shares) is counted;
the tuple of counts is the centre's *species* (solvation_analysis' speciation, Cohen et al., J. Open
Source Softw. 8, 5409 (2023), doi:10.21105/joss.05409). The fraction of (centre, frame) pairs in each
species is computed over the whole analysed interval and over each of the four blocks; the
:data:`TOP_SPECIES` most frequent species of the whole interval are results, with the four-block 95 %
half-width and the analysis' adequacy rules (absolute precision bound of class fractions,
``association_fraction_max_half_width``; no block trend).

Example: two centres over two frames, one partner species with counts 2, 2 (frame 0) and 2, 3 (frame 1)
gives the species ``FSI2`` with fraction 3/4 and ``FSI3`` with 1/4:

>>> import numpy as np
>>> counts = {"FSI": np.array([[2, 2], [2, 3]])}
>>> labels, frac = species_fractions(counts, slice(0, 2))
>>> {k: round(float(v), 2) for k, v in zip(labels, frac)}
{'FSI2': 0.75, 'FSI3': 0.25}
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mdbench.analysis.adequacy import PrecisionBound, adequacy_checks
from mdbench.analysis.blocks import block_estimate
from mdbench.analysis.coordination import distinct_keys
from mdbench.analysis.estimator import Estimate, EstimatorBase, Measurement, new_figure
from mdbench.analysis.reduce import ReducedTrajectory
from mdbench.analysis.settings import AnalysisSettings

#: How many of the most frequent species (whole interval) are reported as results.
TOP_SPECIES = 5
DEFINITION = ("fraction of (cation, structure frame) pairs whose first shell holds exactly the given number of "
              "distinct molecules of each partner species (any site of the species' channels within the "
              "channel's coordination cutoff)")


def shell_counts(rd: ReducedTrajectory, cutoffs_nm: dict[str, float]) -> dict[str, np.ndarray]:
    """Distinct partner molecules of each species around each centre, per frame.

    Parameters
    ----------
    rd : ReducedTrajectory
        The structure frames (:attr:`ReducedTrajectory.contacts` holds every pair closer than ``r_store_nm``).
    cutoffs_nm : dict
        Channel name → cutoff [nm]; channels without a cutoff are not counted.

    Returns
    -------
    dict of str to ndarray (F, C) of int
        Species → counts per frame and centre.
    """
    names = [c.name for c in rd.channels]
    ct, n_c, n_f = rd.contacts, rd.centre_mol.size, rd.n_frames
    key = rd.contact_pair_key()
    out: dict[str, np.ndarray] = {}
    for sp in dict.fromkeys(c.species for c in rd.channels if c.name in cutoffs_nm):
        cut = np.full(len(names), -1.0)
        for k, c in enumerate(rd.channels):
            if c.species == sp and c.name in cutoffs_nm:
                cut[k] = cutoffs_nm[c.name]
        cut_of_row = cut[ct["channel"]]
        keep = np.flatnonzero((cut_of_row > 0) & (ct["dmin_nm"] < cut_of_row))
        _, first = distinct_keys(key.take(keep), return_index=True)  # (frame, centre, partner) once
        rows = keep[first]
        fc = ct["frame"].take(rows).astype(np.int64) * n_c + ct["centre"].take(rows)
        out[sp] = np.bincount(fc, minlength=n_f * n_c).reshape(n_f, n_c)
    return out


def species_label(species: list[str], counts: Any) -> str:
    """``FSI2_DMC2`` (species with a zero count left out; ``none`` for an empty shell)."""
    return "_".join(f"{sp}{int(n)}" for sp, n in zip(species, counts) if n) or "none"


def species_fractions(counts: dict[str, np.ndarray], frames: slice) -> tuple[list[str], np.ndarray]:
    """(species labels, fraction of (centre, frame) pairs of each) over ``frames``, most frequent first."""
    names = list(counts)
    stacked = np.stack([counts[sp][frames].reshape(-1) for sp in names], axis=1)
    if stacked.shape[0] == 0:
        return [], np.zeros(0)
    combos, n = np.unique(stacked, axis=0, return_counts=True)
    order = np.lexsort((np.arange(n.size), -n))
    return [species_label(names, combos[i]) for i in order], n[order] / stacked.shape[0]


class SpeciationEstimator(EstimatorBase):
    """Registered estimator of :data:`mdbench.analysis.observables.SPECIATION`: the fractions of the most
    frequent first-shell compositions of the cations, whole interval and four blocks."""

    inputs = ("structure_frames", "structure_windows", "treatment", "products.cutoffs")

    def compute(self) -> Estimate:
        s, c, entry = self.settings, self.case, self.entries[0]
        rd, win, cutoffs = c.structure_frames, c.structure_windows, c.products["cutoffs"]
        counts = shell_counts(rd, cutoffs)
        if not counts:
            return Estimate()
        labels, whole = species_fractions(counts, win.whole)
        per_block = [dict(zip(*species_fractions(counts, b))) for b in win.blocks]
        bound = PrecisionBound(abs=s.association_fraction_max_half_width)
        out = []
        for label, value in list(zip(labels, whole))[:TOP_SPECIES]:
            est = block_estimate(float(value), [float(b.get(label, 0.0)) for b in per_block], "fraction",
                                 block_ranges_ps=win.block_ranges_ps)
            checks, why = adequacy_checks("", est, bound, s.block_trend_alpha)
            payload = dict(est.to_dict(), window=win.to_dict(),
                           diagnostics=dict(c.treatment, sampling_checks=checks, check_details=why))
            out.append(Measurement(entry, (label,), payload, DEFINITION,
                                   {"values": [est.whole, *est.blocks], "sampling_checks": checks,
                                    "check_details": why},
                                   details={"cutoffs_nm": dict(cutoffs),
                                            "distribution": {k: float(v) for k, v in zip(labels, whole)}}))
        return Estimate(out)

    @classmethod
    def definition(cls, settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
        """Registered as ``analysis_speciation``."""
        return {"analysis_speciation": {
            "composition": DEFINITION, "cutoffs": "each channel's coordination cutoff (analysis_rdf_coordination)",
            "reported": f"the {TOP_SPECIES} most frequent species of the whole interval, four-block 95 % half-width",
            "precision_abs_half_width": settings.association_fraction_max_half_width}}

    @classmethod
    def figures(cls, estimate: Estimate, settings: AnalysisSettings) -> dict[str, Any]:
        """Bar chart of the reported species' fractions with their block 95 % intervals."""
        if not estimate.measurements:
            return {}
        fig, ax = new_figure(figsize=(6, 3.5))
        ms = estimate.measurements
        ax.bar(range(len(ms)), [m.payload["value"] or 0.0 for m in ms],
               yerr=[m.payload["uncertainty"]["half_width_95"] or 0.0 for m in ms], capsize=3)
        ax.set_xticks(range(len(ms)), [m.qualifiers[0] for m in ms], rotation=30, fontsize=7)
        ax.set_ylabel("fraction of cations")
        ax.set_title("first-shell species (whole interval, 95 % block interval)", fontsize=9)
        return {ms[0].entry.figure: fig}
