"""One scored criterion of a reward key, and the weighted mean of several (Harbor ``reward-details.json``).

Shared by the deterministic checks (:mod:`mdbench.arena.grading`) and the process judge
(:mod:`mdbench.arena.judge`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

@dataclass
class Criterion:
    """One scored criterion of a reward key (Harbor ``reward-details.json`` entry).

    Attributes
    ----------
    name : str
        Identifier, unique within the reward key.
    value : float
        Normalised score in [0, 1].
    raw : Any
        What was measured or rated (a number, a bool, a short string).
    weight : float
        Weight in the weighted mean.
    description : str
        What the criterion demands.
    reasoning : str | None
        Why it got this value.
    error : str | None
        Set when evaluating the criterion raised (the criterion then scores 0).
    """

    name: str
    value: float
    raw: Any = None
    weight: float = 1.0
    description: str = ""
    reasoning: str | None = None
    error: str | None = None


def weighted_score(criteria: list[Criterion]) -> float:
    """Weighted mean of criterion values, :math:`\\sum w_i v_i / \\sum w_i` (0 for no criteria)."""
    total = sum(c.weight for c in criteria)
    if total <= 0:
        return 0.0
    return sum(c.weight * c.value for c in criteria) / total
