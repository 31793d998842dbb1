"""Data model of a SAEO audit: items, ratings, evidence references, findings and results.

The 21 SAEO items (seed 000, Tables 3, A1, A2) are grouped in four dimensions:
Simulation (Sim1–Sim4), Analysis (A1–A7), Evidence (E1–E5) and Outcome (O1–O5).
Each item is rated :math:`s \\in \\{1, 1/2, 0\\}` and the composite score is

.. math:: \\mathrm{Score} = \\frac{100}{4} \\sum_{d \\in \\{S,A,E,O\\}} \\frac{1}{n_d} \\sum_{i=1}^{n_d} s_{di}

with :math:`(n_S, n_A, n_E, n_O) = (4, 7, 5, 5)`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mdbench.analysis.states import OBSERVABLE_STATES, C

#: Dimension letter → ordered item ids.
DIMENSIONS: dict[str, tuple[str, ...]] = {
    "S": ("Sim1", "Sim2", "Sim3", "Sim4"),
    "A": ("A1", "A2", "A3", "A4", "A5", "A6", "A7"),
    "E": ("E1", "E2", "E3", "E4", "E5"),
    "O": ("O1", "O2", "O3", "O4", "O5"),
}
ITEMS: tuple[str, ...] = tuple(i for items in DIMENSIONS.values() for i in items)
ITEM_DIMENSION: dict[str, str] = {i: d for d, items in DIMENSIONS.items() for i in items}
ITEM_TITLES: dict[str, str] = {
    "Sim1": "Setup", "Sim2": "Minimization", "Sim3": "Equilibration", "Sim4": "Production",
    "A1": "Coverage", "A2": "Physical definition", "A3": "Implementation", "A4": "Trajectory treatment",
    "A5": "Regime / plateau", "A6": "Block stability", "A7": "Uncertainty",
    "E1": "Canonical lineage", "E2": "Provenance", "E3": "Machine records", "E4": "Delivery",
    "E5": "Consistency",
    "O1": "Detection", "O2": "Classification", "O3": "Action / stopping", "O4": "Propagation",
    "O5": "Final claim",
}
#: Items judged per case (Simulation, Analysis); the others are judged per episode.
PER_CASE_ITEMS: tuple[str, ...] = DIMENSIONS["S"] + DIMENSIONS["A"]
#: Analysis items also judged per (case, observable).
PER_OBSERVABLE_ITEMS: tuple[str, ...] = ("A2", "A3", "A4", "A5", "A6", "A7")
RATINGS: tuple[float, ...] = (1.0, 0.5, 0.0)
#: Observable states (``OBSERVABLE_STATES``, one definition: :mod:`mdbench.analysis.states`); never
#: conflated, never turned into numbers. Every state but C leaves an obligation unresolved.
UNRESOLVED_STATES: frozenset[str] = frozenset(OBSERVABLE_STATES) - {C}
CLAIMED_OUTCOMES: tuple[str, ...] = (
    "clean_valid", "recovered_valid", "partial", "candidate_failure", "infrastructure_blocked",
)
#: Synonyms seen in the field (seed §4.3) → contract outcome.
OUTCOME_SYNONYMS: dict[str, str] = {
    "valid_study_clean": "clean_valid", "valid_study_recovered": "recovered_valid",
    "clean valid": "clean_valid", "recovered valid": "recovered_valid",
}
#: Rule used to aggregate per-case (and per-observable) ratings into one episode rating.
AGGREGATION_RULE = (
    "weakest link: a per-observable item takes the minimum over the case's applicable observables, and an "
    "episode item the minimum over applicable cases (seed Fig. S1: 'Pass indicates satisfaction across all "
    "three systems'); cases or observables with invalid_upstream/not_reached are not applicable; an item "
    "with no applicable case is rated 0 (evidence unavailable)."
)


@dataclass
class Evidence:
    """A reference into an artifact: a path relative to the run (or audit) directory plus a locator."""

    path: str
    key: str | None = None
    line: int | None = None
    byte_range: tuple[int, int] | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if v is not None}
        if self.byte_range is not None:
            d["byte_range"] = list(self.byte_range)
        return d


@dataclass
class Finding:
    """Something the audit noticed in the run: malformed record, checksum mismatch, NaN, symlink, ..."""

    code: str
    message: str
    path: str | None = None
    line: int | None = None
    item: str | None = None
    case: str | None = None
    #: How many times the same code was found at the same location (findings are de-duplicated).
    count: int = 1

    def location(self) -> str:
        if self.path is None:
            return "-"
        return f"{self.path}:{self.line}" if self.line is not None else self.path

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def deduplicate(findings: list["Finding"]) -> list["Finding"]:
    """One finding per (code, location, case), in first-seen order, with ``count`` the number of repeats (the
    first message is kept; a run with thousands of non-finite blocks gives one line per file and code)."""
    out: dict[tuple[str, str | None, int | None, str | None], Finding] = {}
    for f in findings:
        key = (f.code, f.path, f.line, f.case)
        if key in out:
            out[key].count += f.count
        else:
            out[key] = Finding(f.code, f.message, f.path, f.line, f.item, f.case, f.count)
    return list(out.values())


@dataclass
class Judgment:
    """One rating of one item, for the episode, a case, or a (case, observable) pair.

    ``rating`` is 1, 0.5 or 0; ``None`` means not applicable (invalid upstream / not reached) and is
    excluded from aggregation rather than counted as zero.
    """

    item: str
    rating: float | None
    reason: str
    case: str | None = None
    observable: str | None = None
    evidence: list[Evidence] = field(default_factory=list)
    source: str = "rule"
    reviewer: str | None = None

    def key(self) -> tuple[str, str | None, str | None]:
        return (self.item, self.case, self.observable)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "item": self.item, "case": self.case, "observable": self.observable, "rating": self.rating,
            "reason": self.reason, "source": self.source,
            "evidence": [e.to_dict() for e in self.evidence],
        }
        if self.reviewer is not None:
            d["reviewer"] = self.reviewer
        return d


#: Severity of a :class:`Check`, in the order the state rules apply them: a missing target → M; a definition
#: or an implementation failure → F; an incomplete delivery → M; a value withheld with a stated reason →
#: not_estimable; a sampling shortfall → SI; a note → none.
CHECK_SEVERITIES: tuple[str, ...] = ("missing", "definition", "implementation", "incomplete", "withheld", "sampling",
                                     "note")


def cap(j: Judgment, rating: float, reason: str) -> Judgment:
    """``j`` with its rating lowered to ``rating`` (never raised) and ``reason`` put first."""
    if j.rating is None or j.rating <= rating:
        return j
    return Judgment(j.item, rating, f"{reason}; {j.reason}"[:900] if j.rating < 1 else reason[:900], j.case,
                    j.observable, list(j.evidence), j.source, j.reviewer)


@dataclass(frozen=True)
class Check:
    """One structured result of the analysis checks of an observable group: item rules read ``code`` and
    ``severity``, never ``message`` (which is for people).

    Attributes
    ----------
    code : str
        What was found, e.g. ``nonfinite_blocks``, ``tplus_mixed_convention`` (``analysis_items.CODES``).
    severity : str
        One of :data:`CHECK_SEVERITIES`.
    message : str
        One line for the report.
    evidence : tuple of Evidence
        Where it was found.
    """

    code: str
    severity: str
    message: str
    evidence: tuple[Evidence, ...] = ()

    def __post_init__(self) -> None:
        if self.severity not in CHECK_SEVERITIES:
            raise ValueError(f"check severity {self.severity!r} is not one of {CHECK_SEVERITIES}")

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "message": self.message,
                "evidence": [e.to_dict() for e in self.evidence]}


@dataclass
class ObservableAssessment:
    """The audit's state for one required observable of one case, beside what the run claimed."""

    case: str
    observable: str
    state: str
    reason: str
    run_state: str | None = None
    reported_value: float | None = None
    canonical_value: float | None = None
    units: str | None = None
    evidence: list[Evidence] = field(default_factory=list)
    #: Finite reported values of the delivered targets (key path → value), for repeat comparisons.
    values: dict[str, float] = field(default_factory=dict)
    #: The structured checks behind ``state`` and the item ratings.
    checks: list[Check] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"] = [e.to_dict() for e in self.evidence]
        d["checks"] = [c.to_dict() for c in self.checks]
        return d


@dataclass
class ItemScore:
    """Episode-level rating of one item: preliminary (rule or judge) and final (after adjudication)."""

    item: str
    preliminary: float
    final: float
    reason: str
    source: str


@dataclass
class AuditResult:
    """Everything one audit produced; ``saeo.json`` is :meth:`to_dict`.

    Attributes
    ----------
    composite_preliminary, composite_final : float
        Composite score in [0, 100] (equation in the module docstring).
    dimension_means_final : dict
        Dimension letter → mean item rating after adjudication.
    """

    run_dir: str
    out_dir: str
    cases: list[str]
    judgments: list[Judgment]
    episode_items: dict[str, ItemScore]
    observables: list[ObservableAssessment]
    findings: list[Finding]
    composite_preliminary: float
    composite_final: float
    dimension_means_preliminary: dict[str, float]
    dimension_means_final: dict[str, float]
    claimed_outcome: str | None
    expected_outcome: str
    reanalysis: dict[str, Any]
    judge: dict[str, Any]
    adjudications: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": "1.0",
            "run_dir": self.run_dir,
            "cases": self.cases,
            "aggregation_rule": AGGREGATION_RULE,
            "composite": {"preliminary": self.composite_preliminary, "final": self.composite_final},
            "dimension_means": {"preliminary": self.dimension_means_preliminary,
                                "final": self.dimension_means_final},
            "items": {i: asdict(s) for i, s in self.episode_items.items()},
            "judgments": [j.to_dict() for j in self.judgments],
            "observables": [o.to_dict() for o in self.observables],
            "findings": [f.to_dict() for f in self.findings],
            "claimed_outcome": self.claimed_outcome,
            "expected_outcome": self.expected_outcome,
            "reanalysis": self.reanalysis,
            "judge": self.judge,
            "adjudications": self.adjudications,
            "meta": self.meta,
        }


def composite_score(item_ratings: dict[str, float]) -> tuple[float, dict[str, float]]:
    """Composite SAEO score from episode item ratings.

    Parameters
    ----------
    item_ratings : dict
        Item id → rating in {1, 0.5, 0}; all 21 items must be present.

    Returns
    -------
    score : float
        :math:`100/4 \\cdot \\sum_d \\bar s_d`, in [0, 100].
    means : dict
        Dimension letter → mean rating :math:`\\bar s_d`.
    """
    means: dict[str, float] = {}
    for dim, items in DIMENSIONS.items():
        missing = [i for i in items if i not in item_ratings]
        if missing:
            raise ValueError(f"composite score needs every item; missing {missing}")
        means[dim] = sum(item_ratings[i] for i in items) / len(items)
    return 100.0 / 4.0 * sum(means.values()), means
