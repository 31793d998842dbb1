"""Ion association: CIP / SSIP(free) / AGG classes and clusters from cation–anion contact graphs.

Definitions (registered; molecules, not atoms):

* contact: a cation (centre, e.g. Li⁺) and an anion molecule are in contact when any registered anion
  site (FSI: its O atoms) lies within ``r_c`` of the cation (FSI: 0.30 nm; other anions: the first
  minimum of the cation–site g(r), by the registered rule);
* anion-centred class, per anion and frame, from the number n of *distinct* cations in contact:
  n = 0 → ``free_or_SSIP`` (no contact; a solvent-separated pair is not distinguished here), n = 1 →
  ``CIP``, n ≥ 2 → ``AGG``. An FSI touching one Li through two O atoms has n = 1: CIP, not AGG;
* cation-centred: mean number of distinct anions in contact per cation;
* clusters: connected components of the bipartite cation–anion contact graph, size = number of ions in
  the component (a free ion is a cluster of size 1); reported as the fraction of ions in clusters of each
  size, and the fraction of all ions in the largest cluster (percolation indicator).

Populations are frame averages; whole interval and four blocks. The block spread of correlated frames
understates the uncertainty when contacts live longer than a block: the contact lifetimes of the same
contact definition (:mod:`mdbench.analysis.residence`) say how long they live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mdbench.analysis.adequacy import PrecisionBound, adequacy_checks
from mdbench.analysis.blocks import BlockEstimate, BlockWindows, frame_mean_estimate
from mdbench.analysis.coordination import distinct_keys
from mdbench.analysis.estimator import Estimate, EstimatorBase, Measurement, new_figure
from mdbench.analysis.observables import ASSOCIATION
from mdbench.analysis.reduce import ReducedTrajectory, divmod_by_scalar
from mdbench.analysis.settings import AnalysisSettings, registered

CLASSES = ("free_or_SSIP", "CIP", "AGG")
#: Nodes (frames × ions) of one cluster graph; frames are batched to bound memory.
GRAPH_BATCH_NODES = 1_000_000


@dataclass
class AssociationFrames:
    """Per-frame association data (F frames)."""

    class_fraction: dict[str, np.ndarray]
    anions_per_cation: np.ndarray
    largest_cluster_fraction: np.ndarray
    size_counts: list[np.ndarray]  # per frame: number of ions in clusters of size s (index s)


def association_frames(rd: ReducedTrajectory, anion: str, channels: list[str], cutoff_nm: float) -> AssociationFrames:
    """Classify every anion and build the cluster graph in every frame."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    names = [c.name for c in rd.channels]
    codes = np.array([names.index(c) for c in channels], dtype=np.int64)
    ct = rd.contacts
    listed = np.zeros(len(names), dtype=bool)
    listed[codes] = True
    keep = listed[ct["channel"]] & (ct["dmin_nm"] < cutoff_nm)
    frame = ct["frame"][keep].astype(np.int64)
    cation_mol = rd.centre_mol[ct["centre"][keep]]
    anion_mol = ct["partner"][keep].astype(np.int64)
    cations = np.unique(rd.centre_mol)
    anions = np.flatnonzero(rd.mol_species == anion)
    n_cat, n_an = cations.size, anions.size
    cat_idx = np.searchsorted(cations, cation_mol)
    an_idx = np.searchsorted(anions, anion_mol)
    # distinct (frame, cation, anion) edges
    key = distinct_keys((frame * n_cat + cat_idx) * max(n_an, 1) + an_idx)
    rest, e_an = divmod_by_scalar(key, max(n_an, 1))
    e_frame, e_cat = divmod_by_scalar(rest, n_cat)
    n_frames = rd.n_frames
    n_ions = n_cat + n_an
    # per frame and anion: number of distinct cations in contact
    n_li_per_an = np.bincount(e_frame * n_an + e_an, minlength=n_frames * n_an).reshape(n_frames, n_an)
    cls = {c: np.zeros(n_frames) for c in CLASSES}
    if n_an:
        cls["free_or_SSIP"] = np.mean(n_li_per_an == 0, axis=1)
        cls["CIP"] = np.mean(n_li_per_an == 1, axis=1)
        cls["AGG"] = np.mean(n_li_per_an >= 2, axis=1)
    per_cat = np.bincount(e_frame, minlength=n_frames) / max(n_cat, 1)
    # one graph per batch of frames: node f·n_ions + i, so the components never cross frames
    largest = np.zeros(n_frames)
    by_size = np.zeros((n_frames, n_ions + 1))
    batch = max(1, GRAPH_BATCH_NODES // max(n_ions, 1))
    bounds = np.searchsorted(e_frame, np.arange(0, n_frames + batch, batch))
    for b, f0 in enumerate(range(0, n_frames, batch)):
        nf = min(batch, n_frames - f0)
        lo, hi = bounds[b], bounds[b + 1]
        ef = e_frame[lo:hi] - f0
        n_nodes = nf * n_ions
        graph = coo_matrix((np.ones(hi - lo), (ef * n_ions + e_cat[lo:hi], ef * n_ions + n_cat + e_an[lo:hi])),
                           shape=(n_nodes, n_nodes))
        _, labels = connected_components(graph, directed=False)
        csize = np.bincount(labels)
        comp_frame = np.zeros(csize.size, dtype=np.int64)
        comp_frame[labels] = np.repeat(np.arange(nf), n_ions)
        np.maximum.at(largest[f0:f0 + nf], comp_frame, csize / n_ions)
        by_size[f0:f0 + nf] = np.bincount(comp_frame * (n_ions + 1) + csize, weights=csize,
                                          minlength=nf * (n_ions + 1)).reshape(nf, n_ions + 1)
    # each frame's size distribution up to its largest cluster (at least sizes 0 and 1)
    nonzero = by_size != 0
    last = np.where(nonzero.any(axis=1), by_size.shape[1] - 1 - np.argmax(nonzero[:, ::-1], axis=1), 0)
    sizes = [row[:n] for row, n in zip(by_size, np.maximum(2, last + 1).tolist())]
    return AssociationFrames(cls, per_cat, largest, sizes)


@dataclass
class AssociationResult:
    """Association populations of one cation/anion pair: whole interval and blocks."""

    cation: str
    anion: str
    channels: list[str]
    cutoff_nm: float
    cutoff_rule: str
    fractions: dict[str, BlockEstimate]
    anions_per_cation: BlockEstimate
    largest_cluster_fraction: BlockEstimate
    cluster_size_fraction: dict[int, float]
    n_cations: int
    n_anions: int
    failures: list[str] = field(default_factory=list)
    #: sampling thresholds: 95 % block half-width of each class fraction (absolute), the block-trend p-value
    fraction_max_half_width: float = field(
        default_factory=lambda: registered(None, "association_fraction_max_half_width"))
    trend_alpha: float = field(default_factory=lambda: registered(None, "block_trend_alpha"))

    def _checks(self) -> tuple[dict[str, bool], dict[str, str]]:
        checks: dict[str, bool] = {}
        details: dict[str, str] = {}
        for c, e in self.fractions.items():
            ok, why = adequacy_checks(f"{c}_", e, PrecisionBound(abs=self.fraction_max_half_width), self.trend_alpha)
            checks.update(ok)
            details.update(why)
        return checks, details

    def sampling_checks(self) -> dict[str, bool]:
        """Precision (registered absolute bound: fractions sit near 0) and no block trend of every class
        fraction (``<class>_block_precision``, ``<class>_block_trend``)."""
        return self._checks()[0]

    def check_details(self) -> dict[str, str]:
        """The numbers behind each sampling check."""
        return self._checks()[1]

    def state_inputs(self) -> dict[str, Any]:
        """Inputs of :func:`mdbench.analysis.states.classify_observable`."""
        fails = list(self.failures)
        total = sum(e.whole for e in self.fractions.values())
        if self.n_anions and abs(total - 1.0) > 1e-9:
            fails.append(f"class fractions sum to {total}, not 1")
        checks, details = self._checks()
        return {"values": {c: [e.whole, *e.blocks] for c, e in self.fractions.items()}, "failures": fails,
                "sampling_checks": checks, "check_details": details}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {
            "cation": self.cation, "anion": self.anion, "contact_channels": self.channels,
            "cutoff_nm": self.cutoff_nm, "cutoff_rule": self.cutoff_rule,
            "n_cations": self.n_cations, "n_anions": self.n_anions,
            "class_definition": "per anion: distinct cations in contact 0 -> free_or_SSIP, 1 -> CIP, >=2 -> AGG",
            "fractions": {c: e.to_dict() for c, e in self.fractions.items()},
            "anions_per_cation": self.anions_per_cation.to_dict(),
            "largest_cluster_fraction": self.largest_cluster_fraction.to_dict(),
            "cluster_size_fraction_of_ions": {str(k): v for k, v in self.cluster_size_fraction.items()},
        }


def association(rd: ReducedTrajectory, windows: BlockWindows, anion: str, channels: list[str],
                cutoff_nm: float, cutoff_rule: str, *,
                fraction_max_half_width: float | None = None, trend_alpha: float | None = None
                ) -> AssociationResult:
    """Association populations and clusters for the centres of ``rd`` and ``anion`` (whole + blocks).
    ``fraction_max_half_width`` and ``trend_alpha`` left None are the registered settings
    (``association_fraction_max_half_width``, ``block_trend_alpha``)."""
    fraction_max_half_width = registered(fraction_max_half_width, "association_fraction_max_half_width")
    trend_alpha = registered(trend_alpha, "block_trend_alpha")
    fr = association_frames(rd, anion, channels, cutoff_nm)

    whole_frames = range(*windows.whole.indices(rd.n_frames))
    n_max = max(s.size for s in fr.size_counts)
    tot = np.zeros(n_max)
    for f in whole_frames:
        tot[: fr.size_counts[f].size] += fr.size_counts[f]
    tot /= max(tot.sum(), 1.0)
    return AssociationResult(
        cation="+".join(rd.centre_species), anion=anion, channels=list(channels), cutoff_nm=float(cutoff_nm),
        cutoff_rule=cutoff_rule,
        fractions={c: frame_mean_estimate(v, windows, "fraction of anions") for c, v in fr.class_fraction.items()},
        anions_per_cation=frame_mean_estimate(fr.anions_per_cation, windows, "anions per cation"),
        largest_cluster_fraction=frame_mean_estimate(fr.largest_cluster_fraction, windows, "fraction of ions"),
        cluster_size_fraction={int(s): float(v) for s, v in enumerate(tot) if v > 0},
        n_cations=int(np.unique(rd.centre_mol).size), n_anions=int(np.sum(rd.mol_species == anion)),
        fraction_max_half_width=fraction_max_half_width, trend_alpha=trend_alpha,
    )


def contact_definition(rd: ReducedTrajectory, anion: str, settings: AnalysisSettings, cutoffs: dict[str, float]
                       ) -> tuple[list[str], float, str] | None:
    """(site channels, cutoff [nm], rule) of the registered cation–``anion`` contact, or None without sites.

    The registered sites of the anion (``contact_channels``; all its sites when none are registered) and the
    registered cutoff (``contact_cutoffs_nm``, the smallest of its channels), else the first minimum of the
    cation–site g(r) (``cutoffs``), else the fixed cutoff.
    """
    labels = settings.contact_channels.get(anion)
    chans = [c.name for c in rd.channels if c.species == anion and (labels is None or c.label in labels)]
    if not chans:
        return None
    registered = [settings.contact_cutoffs_nm[c] for c in chans if c in settings.contact_cutoffs_nm]
    if registered:
        return chans, float(min(registered)), "registered contact cutoff"
    return (chans, float(min(cutoffs.get(c, settings.fixed_cn_cutoff_nm) for c in chans)),
            "first minimum of the cation-site g(r)")


def anion_species(rd: ReducedTrajectory) -> list[str]:
    """Species whose molecules carry a net negative charge (beyond the registered neutral tolerance)."""
    return rd.anions()


class AssociationEstimator(EstimatorBase):
    """Registered estimator of :data:`mdbench.analysis.observables.ASSOCIATION`: class fractions and the
    largest cluster per anion (shares the contact definition in force as ``contacts``)."""

    inputs = ("structure_frames", "structure_windows", "treatment", "products.cutoffs")

    def compute(self) -> Estimate:
        from mdbench.analysis.states import F, classify_observable

        s, c, entry = self.settings, self.case, self.entries[0]
        rd, win = c.structure_frames, c.structure_windows
        out, details, contacts = [], {}, {}
        for an in anion_species(rd):
            definition = contact_definition(rd, an, s, c.products["cutoffs"])
            if definition is None:
                continue
            chans, rc, rule = definition
            contacts[an] = definition
            ar = association(rd, win, an, chans, rc, rule, fraction_max_half_width=s.association_fraction_max_half_width,
                             trend_alpha=s.block_trend_alpha)
            whole = classify_observable(**ar.state_inputs())
            details[an] = ar.to_dict()
            for cls, est in ar.fractions.items():
                out.append(Measurement(
                    entry, (an, cls), dict(est.to_dict(), diagnostics=dict(c.treatment)),
                    ar.to_dict()["class_definition"] + f"; contact = {'/'.join(chans)} within {rc} nm of a cation",
                    {"values": [est.whole, *est.blocks], "failures": whole.failed_checks if whole.state == F else (),
                     "sampling_checks": {k: v for k, v in ar.sampling_checks().items() if k.startswith(cls + "_")},
                     "check_details": ar.check_details()}))
            lc = ar.largest_cluster_fraction
            out.append(Measurement(
                entry, (an, "largest_cluster_fraction"), dict(lc.to_dict(), diagnostics=dict(c.treatment)),
                "ions in the largest connected component / all ions", {"values": [lc.whole, *lc.blocks]},
                details={"cluster_size_fraction_of_ions": details[an]["cluster_size_fraction_of_ions"]}))
        return Estimate(out, sections={entry.details_section: details}, figure_data={"clusters": details},
                        products={"contacts": contacts})


    @classmethod
    def definition(cls, settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
        """Registered as ``analysis_contacts_clusters``."""
        s = settings
        return {"analysis_contacts_clusters": {
            "contact_cutoffs_nm": s.contact_cutoffs_nm, "contact_sites": s.contact_channels,
            "other_anions": "all sites of the anion; cutoff = first minimum of the cation-site g(r), else "
                            f"{s.fixed_cn_cutoff_nm} nm",
            "classes": "per anion, distinct cations in contact: 0 free_or_SSIP, 1 CIP, >=2 AGG",
            "clusters": "connected components of the cation-anion contact graph; size in ions",
        }}

    @classmethod
    def figures(cls, estimate: Estimate, settings: AnalysisSettings) -> dict[str, Any]:
        """The cation–anion cluster-size distribution of each anion."""
        clusters = estimate.figure_data.get("clusters")
        if not clusters:
            return {}
        fig, ax = new_figure()
        for an, d in clusters.items():
            sizes = {int(k): v for k, v in d["cluster_size_fraction_of_ions"].items()}
            ax.bar(list(sizes), list(sizes.values()), alpha=0.6, label=f"{d['cation']}–{an}")
        ax.set_xlabel("cluster size [ions]")
        ax.set_ylabel("fraction of ions")
        ax.legend(fontsize=7)
        return {ASSOCIATION.figure: fig}
