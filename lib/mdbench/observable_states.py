"""The observable states' vocabulary, below every room: names, severities and next actions.

The rules that assign them live in :mod:`mdbench.analysis.states` (which re-exports everything here); the
run record (:mod:`mdbench.record`) validates against :data:`OBSERVABLE_STATES` without importing the analysis.
"""

from __future__ import annotations

from dataclasses import dataclass

C = "C"
SI = "SI"
F = "F"
M = "M"
NOT_ESTIMABLE = "not_estimable"
INVALID_UPSTREAM = "invalid_upstream"
NOT_REACHED = "not_reached"


@dataclass(frozen=True)
class ObservableState:
    """One observable state: its name, how bad it is, and what a study does next.

    Attributes
    ----------
    name : str
        The state as written in results.json and the run record.
    severity : int
        Order used to summarise a group by its weakest member (0 = accepted).
    next_action : str or None
        What the terminal record lists as the next action for an unresolved observable (None for C).
    meaning : str
        One line for readers of reports.
    """

    name: str
    severity: int
    next_action: str | None
    meaning: str


#: The one definition of the observable states (add a state here; the schemas' enums are checked against it).
STATES: tuple[ObservableState, ...] = (
    ObservableState(C, 0, None, "accepted: valid estimator, every sampling diagnostic passed"),
    ObservableState(SI, 1, "stop: valid estimator, sampling insufficient within this preset's budget; resolve by "
                           "extending production", "insufficient sampling under a valid estimator"),
    ObservableState(NOT_ESTIMABLE, 2, "stop: not estimable for this system (its defining denominator is zero "
                                      "within its uncertainty); report the reason, more sampling cannot fix it",
                    "not estimable: value withheld, the defining denominator is consistent with zero"),
    ObservableState(M, 3, "stop: required result missing; rerun the analysis stage", "missing or incomplete"),
    ObservableState(F, 4, "stop: deterministic failure reported; repair the estimator or its input before reuse",
                    "definition, implementation or numerical failure"),
    ObservableState(NOT_REACHED, 5, "stop: upstream stage not reached", "no data yet"),
    ObservableState(INVALID_UPSTREAM, 6, "stop: upstream stage invalid; results not usable",
                    "the data it needs are invalid"),
)
#: Every state the classifier can return.
OBSERVABLE_STATES: tuple[str, ...] = (C, SI, NOT_ESTIMABLE, F, M, INVALID_UPSTREAM, NOT_REACHED)
#: State → severity (summaries by the weakest member) and → next action of an unresolved observable.
SEVERITY: dict[str, int] = {s.name: s.severity for s in STATES}
NEXT_ACTION: dict[str, str] = {s.name: s.next_action for s in STATES if s.next_action}
