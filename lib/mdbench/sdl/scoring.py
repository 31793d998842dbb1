"""Forecast scoring: joint log loss, learning curves and the closed-loop campaign metrics.

Everything here is a pure function of forecasts and recorded outcomes (evaluator side).

Joint log loss of one forecast row against the recorded outcome (natural log, nats)::

    L = -ln p(valid) - ln p(category | valid)     if the experiment is valid
    L = -ln (1 - p(valid))                        if it failed physically

(with no validity axis, ``L = -ln p(category)``). Each probability is floored at the declared
``floor`` before the log, so ``L <= -2 ln(floor)`` (``-ln(floor)`` without a validity axis). A uniform forecast
over the K joint outcomes (``p(valid) = (K-1)/K``, ``p(c|valid) = 1/(K-1)``) scores exactly ``ln K``; a forecast
putting probability 1 on the recorded outcome scores 0.

Closed-loop measures follow Dynamical-SDL-1 (Barnes 2026): the held-out *score* is the negative mean joint
log loss over the query panel (higher is better); the learning curve starts at the pre-campaign forecast and
adds one point per closed experiment, carried forward to the experiment budget after an early stop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from mdbench.errors import InputError
from mdbench.sdl.ledger import Ledger, Outcome

#: Default declared probability floor.
DEFAULT_FLOOR = 1e-6
#: Tolerance of probability sums in validated forecast rows.
SUM_TOL = 1e-6
#: Registered rules for an invalid (malformed, incomplete or missing) held-out forecast; the rule is part of the
#: frozen assignment, so it is fixed before any run:
#:
#: * ``max_loss`` — the forecast scores the largest loss the floor allows (:func:`loss_bound`), as if it put all
#:   mass on wrong outcomes;
#: * ``carry_forward`` — the last valid score of the branch is carried forward; an invalid *pre-campaign*
#:   forecast (nothing to carry) scores ``max_loss``.
INVALID_FORECAST_RULES = ("max_loss", "carry_forward")


def _is_prob(p: Any) -> bool:
    """A probability: a finite number (not bool) in [0, 1]; huge integers never reach ``float()``."""
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        return False
    if isinstance(p, int):
        return 0 <= p <= 1
    return math.isfinite(p) and 0.0 <= p <= 1.0


def _show(x: Any) -> str:
    """A bounded, never-raising rendering of an untrusted value for a message."""
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 10 ** 30:
        return "an integer of more than 30 digits"
    try:
        return repr(x)[:80]
    except (ValueError, RecursionError):
        return f"a {type(x).__name__}"


class ForecastError(InputError):
    """A forecast row is malformed (missing id, probabilities outside [0, 1], not summing to 1, …)."""


@dataclass(frozen=True)
class ForecastRow:
    """A validated forecast for one experiment.

    Attributes
    ----------
    experiment_id : str
    p_valid : float
        Probability the experiment is physically valid and characterizable (1.0 without a validity axis).
    p_category : tuple of float
        Probability of each category given validity, in ledger category order; sums to 1.
    """

    experiment_id: str
    p_valid: float
    p_category: tuple[float, ...]

    def to_dict(self, categories: Sequence[str]) -> dict[str, Any]:
        """JSON form ``{"experiment_id", "p_valid", "p_category": {cat: p}}``."""
        return {"experiment_id": self.experiment_id, "p_valid": self.p_valid,
                "p_category": dict(zip(categories, self.p_category))}


def validate_row(row: Any, categories: Sequence[str], validity_axis: bool, where: str = "forecast") -> ForecastRow:
    """Validate one forecast row (a dict) and return a :class:`ForecastRow`.

    A row is ``{"experiment_id": str, "p_valid": float, "p_category": {category: float, ...}}``; ``p_valid`` may
    be omitted (or must be 1) when the ledger has no validity axis. Every category must be present, each
    probability finite in [0, 1], and the category probabilities must sum to 1 within 1e-6.

    Raises
    ------
    ForecastError
        Saying which row and field is wrong and how to fix it.
    """
    if not isinstance(row, dict):
        raise ForecastError(f"{where}: a forecast row must be an object, got {type(row).__name__}")
    eid = row.get("experiment_id")
    if not isinstance(eid, str):
        raise ForecastError(f"{where}: 'experiment_id' (string) is required")
    extra = set(row) - {"experiment_id", "p_valid", "p_category"}
    if extra:
        raise ForecastError(f"{where} ({eid}): unknown keys {sorted(extra)}; allowed: experiment_id, p_valid, "
                            "p_category")
    pv = row.get("p_valid", 1.0 if not validity_axis else None)
    if pv is None:
        raise ForecastError(f"{where} ({eid}): 'p_valid' is required (probability the experiment is valid)")
    if not _is_prob(pv):
        raise ForecastError(f"{where} ({eid[:40]}): p_valid must be a number in [0, 1], got {_show(pv)}")
    if not validity_axis and pv != 1.0:
        raise ForecastError(f"{where} ({eid}): this record has no validity axis; omit p_valid or set it to 1")
    pc = row.get("p_category")
    if not isinstance(pc, dict):
        raise ForecastError(f"{where} ({eid}): 'p_category' must map each category to a probability")
    if set(pc) != set(categories):
        raise ForecastError(f"{where} ({eid}): p_category keys must be exactly {list(categories)}, "
                            f"got {sorted(pc)}")
    probs = []
    for c in categories:
        p = pc[c]
        if not _is_prob(p):
            raise ForecastError(f"{where} ({eid[:40]}): p_category[{c}] must be a number in [0, 1], got {_show(p)}")
        probs.append(float(p))
    if abs(sum(probs) - 1.0) > SUM_TOL:
        raise ForecastError(f"{where} ({eid}): p_category sums to {sum(probs):.9g}, must sum to 1")
    return ForecastRow(eid, float(pv), tuple(probs))


def validate_panel(rows: Any, panel_ids: Sequence[str], categories: Sequence[str], validity_axis: bool,
                   where: str = "forecast") -> dict[str, ForecastRow]:
    """Validate a list of rows that must cover ``panel_ids`` exactly once each."""
    if not isinstance(rows, list):
        raise ForecastError(f"{where}: expected a list of forecast rows, got {type(rows).__name__}")
    out: dict[str, ForecastRow] = {}
    for i, r in enumerate(rows):
        fr = validate_row(r, categories, validity_axis, f"{where}[{i}]")
        if fr.experiment_id in out:
            raise ForecastError(f"{where}[{i}]: duplicate row for {fr.experiment_id}")
        out[fr.experiment_id] = fr
    want = set(panel_ids)
    if set(out) != want:
        missing = sorted(want - set(out))[:5]
        unknown = sorted(set(out) - want)[:5]
        raise ForecastError(f"{where}: rows must cover the query panel exactly; missing {missing}, "
                            f"not in panel {unknown}")
    return out


def check_floor(floor: float, n_outcomes: int) -> None:
    """A floor must satisfy ``0 < floor < 1/K`` (otherwise it would overrule honest forecasts)."""
    if not (0.0 < floor < 1.0 / n_outcomes):
        raise InputError(f"probability floor must be in (0, 1/K = {1.0 / n_outcomes:.3g}), got {floor}")


def joint_log_loss(row: ForecastRow, outcome: Outcome, categories: Sequence[str], validity_axis: bool,
                   floor: float = DEFAULT_FLOOR) -> float:
    """Joint log loss [nats] of one validated row against the recorded outcome (see module docstring)."""
    if validity_axis:
        if not outcome.valid:
            return -math.log(max(1.0 - row.p_valid, floor))
        lv = -math.log(max(row.p_valid, floor))
    else:
        lv = 0.0
    pc = row.p_category[list(categories).index(outcome.category)]
    return lv - math.log(max(pc, floor))


def loss_bound(validity_axis: bool, floor: float) -> float:
    """Largest possible joint log loss [nats] under the floor: ``-2 ln floor`` (``-ln floor`` w/o validity)."""
    return (-2.0 if validity_axis else -1.0) * math.log(floor)


def mean_loss(rows: Mapping[str, ForecastRow], ledger: Ledger, floor: float = DEFAULT_FLOOR,
              ids: Iterable[str] | None = None) -> float:
    """Mean joint log loss [nats] of ``rows`` over ``ids`` (default: all rows)."""
    by_id = ledger.by_id()
    ids = list(rows) if ids is None else list(ids)
    vals = [joint_log_loss(rows[i], by_id[i].outcome, ledger.categories, ledger.validity_axis, floor) for i in ids]
    return float(np.mean(vals))


def invalid_forecast_score(rule: str, previous: float | None, validity_axis: bool, floor: float) -> float:
    """Held-out score [nats] of an invalid forecast under a registered rule (:data:`INVALID_FORECAST_RULES`)."""
    if rule not in INVALID_FORECAST_RULES:
        raise ValueError(f"unknown invalid-forecast rule {rule!r}")
    if rule == "carry_forward" and previous is not None:
        return previous
    return -loss_bound(validity_axis, floor)


def uniform_row(experiment_id: str, categories: Sequence[str], validity_axis: bool) -> dict[str, Any]:
    """The uniform forecast over the K joint outcomes (scores exactly ln K)."""
    k = len(categories)
    pv = k / (k + 1) if validity_axis else 1.0
    return {"experiment_id": experiment_id, "p_valid": pv, "p_category": {c: 1.0 / k for c in categories}}


# ---------------------------------------------------------------------------------------------------------
# Learning curves and closed-loop metrics


def learning_curve(scores: Sequence[float], budget: int) -> np.ndarray:
    """Held-out score curve on experiment counts ``0..budget`` (last value carried forward after a stop).

    Parameters
    ----------
    scores : sequence of float
        ``scores[0]`` is the pre-campaign score, ``scores[k]`` the score after the k-th closed experiment
        (score = negative mean joint log loss, nats).
    budget : int
        Experiment budget; the curve has ``budget + 1`` points.
    """
    if not scores:
        raise ValueError("a learning curve needs at least the pre-campaign score")
    s = list(scores)[: budget + 1]
    s += [s[-1]] * (budget + 1 - len(s))
    return np.asarray(s, dtype=float)


def adaptive_auc(curve: Sequence[float]) -> float:
    """Area under the learning curve (trapezoid rule) divided by its experiment-count span [nats].

    ``AUC = (1/n) ∫_0^n s(k) dk`` with ``n = len(curve) - 1``; a single-point curve returns that point.
    """
    c = np.asarray(curve, dtype=float)
    if len(c) == 1:
        return float(c[0])
    return float(np.sum((c[1:] + c[:-1]) / 2.0) / (len(c) - 1))


def first_passage(curve: Sequence[float], target: float) -> int | None:
    """Smallest experiment count ``k >= 1`` with ``curve[k] >= target`` (None if never)."""
    for k in range(1, len(curve)):
        if curve[k] >= target:
            return k
    return None


def sustained_passage(curve: Sequence[float], target: float) -> int | None:
    """Smallest ``k >= 1`` such that ``curve[j] >= target`` for every ``j >= k`` up to the budget (None if never)."""
    k_out = None
    for k in range(len(curve) - 1, 0, -1):
        if curve[k] >= target:
            k_out = k
        else:
            break
    return k_out


@dataclass(frozen=True)
class Acceleration:
    """Acceleration factor at one forecast target.

    ``factor = k_random / k_adaptive`` (experiments the reference needs over those the adaptive branch needs);
    ``None`` (censored) unless both branches reach the target on this campaign.
    """

    target_ratio: float
    rule: str
    k_adaptive: int | None
    k_random: int | None
    factor: float | None


def acceleration_factor(adaptive: Sequence[float], random: Sequence[float], target_ratio: float,
                        rule: str = "first_passage") -> Acceleration:
    """Acceleration factor at a forecast target.

    The target is a ``target_ratio`` × increase of the geometric-mean likelihood the pre-campaign forecast
    assigns to the recorded outcomes: ``target = s_0 + ln(target_ratio)`` with ``s_0`` the shared pre-campaign
    score (both curves must start from it). ``rule`` is ``first_passage`` or ``sustained`` (must stay at or
    above the target through the budget).
    """
    if rule not in ("first_passage", "sustained"):
        raise ValueError(f"rule must be first_passage or sustained, got {rule}")
    target = float(adaptive[0]) + math.log(target_ratio)
    fn = first_passage if rule == "first_passage" else sustained_passage
    ka, kr = fn(adaptive, target), fn(random, target)
    factor = kr / ka if ka is not None and kr is not None else None
    return Acceleration(target_ratio, rule, ka, kr, factor)


def geometric_mean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values (None for an empty input)."""
    v = [x for x in values if x is not None]
    if not v:
        return None
    return float(math.exp(np.mean(np.log(v))))


def sign(x: float | None, tol: float = 1e-12) -> str:
    """``+``, ``−`` or ``0`` (``?`` for missing)."""
    if x is None:
        return "?"
    return "+" if x > tol else ("−" if x < -tol else "0")


def sign_agreement(local: Sequence[float | None], heldout: Sequence[float | None], tol: float = 1e-12) -> dict:
    """Agreement of local and held-out gains over closures where both are present and non-zero.

    Returns ``{"n_both_changed", "n_same_sign", "n_opposite", "fraction_same"}``.
    """
    same = opp = 0
    for a, b in zip(local, heldout):
        if a is None or b is None or abs(a) <= tol or abs(b) <= tol:
            continue
        if (a > 0) == (b > 0):
            same += 1
        else:
            opp += 1
    n = same + opp
    return {"n_both_changed": n, "n_same_sign": same, "n_opposite": opp,
            "fraction_same": (same / n) if n else None}


def axis_values(row: ForecastRow, axis: str) -> tuple[float, ...]:
    """Probabilities the row puts on the values of a claim axis.

    ``validity``: ``(p_valid, 1 - p_valid)``; ``category``: ``p(c | valid)`` for every category.
    """
    if axis == "validity":
        return (row.p_valid, 1.0 - row.p_valid)
    return row.p_category


def unsupported_crossings(prior: ForecastRow, update: ForecastRow, supported_axes: Iterable[str],
                          axes: Sequence[str]) -> list[str]:
    """Claim axes on which ``update`` crosses the 0.5 sufficiency threshold without support.

    An axis is crossed when, for some value of the axis, the probability rises from ``<= 0.5`` in the prior
    forecast of the experiment to ``> 0.5`` in the update, while the acquired evidence (evidence contract:
    each item's ``supports``) does not support that axis.
    """
    sup = set(supported_axes)
    out = []
    for a in axes:
        if a in sup:
            continue
        if any(p0 <= 0.5 < p1 for p0, p1 in zip(axis_values(prior, a), axis_values(update, a))):
            out.append(a)
    return out
