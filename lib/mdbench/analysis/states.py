"""Per-observable state classifier: C / SI / not_estimable / F / M / invalid_upstream / not_reached.

Explicit rules, applied in this order (the first that matches wins); the text of :data:`STATE_RULES` is
what gets registered:

1. upstream stage ``not_reached`` or ``running`` → **not_reached** (no data yet; never SI, never zero).
2. upstream stage ``invalid`` or ``invalid_upstream`` → **invalid_upstream** (never reclassified as SI).
3. the observable was not delivered (no result, no value) → **M**.
4. a definition / implementation / numerical failure was recorded (``failures`` not empty), or any
   reported value (whole or block) is non-finite → **F** (longer sampling cannot repair it) — except
   when the estimator states that the analysed window is shorter than its registered minimum length
   (``too_short``) and records no failure: then the missing value is a sampling shortfall (rule 6),
   and except rule 5.
5. the estimator is valid but the estimate's defining denominator is consistent with zero within its
   95 % interval, or undefined (σ for t+ of an all-paired electrolyte, σ_NE for the ionicity, …), and no
   failure was recorded → **not_estimable**: the value is withheld and the reason stated. More sampling
   cannot fix it, and nothing is wrong with the estimator: this is neither SI nor F.
6. the estimator is valid but at least one sampling diagnostic failed, or the window is too short for
   it to yield a value → **SI**, with the failing diagnostics (and the numbers that failed) named.
7. otherwise → **C**.

SI is only reachable when no failure was recorded; F is never produced by a sampling diagnostic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from mdbench.observable_states import (C, F, INVALID_UPSTREAM, M, NEXT_ACTION, NOT_ESTIMABLE,  # noqa: F401
                                       NOT_REACHED, OBSERVABLE_STATES, SEVERITY, SI, STATES, ObservableState)

#: Upstream (stage) states understood by :func:`classify_observable`.
UPSTREAM_VALID = "valid"
_UPSTREAM_NOT_REACHED = {"not_reached", "running"}
_UPSTREAM_INVALID = {"invalid", "invalid_upstream"}

STATE_RULES = (
    "1 upstream stage not_reached/running -> not_reached; "
    "2 upstream stage invalid/invalid_upstream -> invalid_upstream; "
    "3 observable not delivered -> M; "
    "4 definition/implementation/numerical failure or any non-finite whole/block value -> F "
    "(unless the estimator reports a window shorter than its registered minimum and no failure, or rule 5); "
    "5 valid estimator whose defining denominator (sigma for t+, sigma_NE for the ionicity, the plateau for "
    "eta) is consistent with zero within its 95 % interval or undefined -> not_estimable (value withheld, "
    "reason stated); "
    "6 valid estimator with a failing sampling diagnostic (precision: whole-interval 95 % half-width within "
    "the registered bound; no significant trend over the blocks; ...), or a window too short to yield a "
    "value -> SI, with the numbers that failed; "
    "7 otherwise -> C"
)


@dataclass(frozen=True)
class StateDecision:
    """The state of one observable with the reason and the rule that produced it.

    Attributes
    ----------
    state : str
        One of :data:`OBSERVABLE_STATES`.
    reason : str
        Human-readable reason (names failing diagnostics / failures).
    rule : int
        Number of the rule in :data:`STATE_RULES` that decided.
    failed_checks : tuple of str
        Names of failing sampling diagnostics (SI) or failures (F).
    """

    state: str
    reason: str
    rule: int
    failed_checks: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {"state": self.state, "reason": self.reason, "rule": self.rule,
                "failed_checks": list(self.failed_checks)}


def _non_finite(values: Any) -> list[str]:
    """Names/positions of non-finite entries in a scalar, a sequence or a mapping of them."""
    bad: list[str] = []
    if values is None:
        return bad
    if isinstance(values, Mapping):
        for k, v in values.items():
            bad += [f"{k}{'' if s == '' else '.' + s}" for s in _non_finite_scalar_or_seq(v)]
        return bad
    return [f"value{s if s == '' else '[' + s + ']'}" for s in _non_finite_scalar_or_seq(values)]


def _non_finite_scalar_or_seq(v: Any) -> list[str]:
    if v is None:
        return [""]
    if isinstance(v, (int, float)):
        return [] if math.isfinite(float(v)) else [""]
    try:
        seq = list(v)
    except TypeError:
        try:
            return [] if math.isfinite(float(v)) else [""]
        except (TypeError, ValueError):
            return [""]
    out = []
    for i, x in enumerate(seq):
        try:
            ok = x is not None and math.isfinite(float(x))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            out.append(str(i))
    return out


def classify_observable(*, upstream_state: str = UPSTREAM_VALID, delivered: bool = True,
                        values: float | Sequence[float] | Mapping[str, Any] | None = None,
                        failures: Iterable[str] = (),
                        sampling_checks: Mapping[str, bool] | None = None,
                        too_short: str | None = None, not_estimable: str | None = None,
                        check_details: Mapping[str, str] | None = None) -> StateDecision:
    """Classify one observable of one case by the explicit rules of :data:`STATE_RULES`.

    Parameters
    ----------
    upstream_state : str
        State of the stage the observable depends on (``valid``, ``invalid``, ``invalid_upstream``,
        ``running`` or ``not_reached``).
    delivered : bool
        False when the required result is missing or incomplete.
    values : float, sequence of float or mapping, optional
        Reported numbers (e.g. whole value and the four block values). Any non-finite entry → F.
    failures : iterable of str
        Definition / implementation / numerical failures recorded by the estimator.
    sampling_checks : mapping of str to bool, optional
        Sampling diagnostics (True = passed). Any False → SI (when no failure applies).
    too_short : str, optional
        Set by an estimator when the analysed window is shorter than its registered minimum, so that it
        cannot yield a (finite) value; with no recorded failure this is SI, not F.
    not_estimable : str, optional
        Set by an estimator when the defining denominator of the estimate is consistent with zero or
        undefined (the reason, with its numbers); with no recorded failure → not_estimable.
    check_details : mapping of str to str, optional
        For sampling checks: the numbers behind each check (``"0.37 > 0.10"``), written into an SI reason.

    Returns
    -------
    StateDecision

    Raises
    ------
    ValueError
        For an unknown ``upstream_state`` (a programming error, not a data problem).
    """
    up = str(upstream_state)
    if up in _UPSTREAM_NOT_REACHED:
        return StateDecision(NOT_REACHED, f"upstream stage is {up}: no data to analyse", 1)
    if up in _UPSTREAM_INVALID:
        return StateDecision(INVALID_UPSTREAM, f"upstream stage is {up}: result cannot be valid", 2)
    if up != UPSTREAM_VALID:
        raise ValueError(f"unknown upstream_state {up!r}; expected valid, invalid, invalid_upstream, "
                         "running or not_reached")
    if not delivered:
        return StateDecision(M, "required observable was not delivered", 3)
    fails = [str(f) for f in failures]
    if too_short and not fails:
        return StateDecision(SI, f"valid estimator, window too short: {too_short}", 6, (str(too_short),))
    if not_estimable and not fails:
        return StateDecision(NOT_ESTIMABLE, f"not estimable: {not_estimable}", 5, (str(not_estimable),))
    bad = _non_finite(values)
    if bad:
        fails.append("non-finite value(s): " + ", ".join(bad))
    if fails:
        return StateDecision(F, "; ".join(fails), 4, tuple(fails))
    failed = tuple(k for k, ok in (sampling_checks or {}).items() if not bool(ok))
    if failed:
        details = check_details or {}
        named = [f"{k} ({details[k]})" if details.get(k) else k for k in failed]
        return StateDecision(SI, "valid estimator, sampling diagnostic(s) failed: " + "; ".join(named), 6,
                             failed)
    return StateDecision(C, "valid estimator; all sampling diagnostics passed", 7)


def classify_result(result: Any, *, upstream_state: str = UPSTREAM_VALID) -> StateDecision:
    """Classify an estimator result object (DiffusionResult, OnsagerResult, ViscosityResult, ...).

    The result must provide ``state_inputs() -> dict`` with keys ``values``, ``failures`` and
    ``sampling_checks`` (all estimator results of this package do). ``None`` → M.

    Parameters
    ----------
    result : object or None
        Estimator result.
    upstream_state : str
        See :func:`classify_observable`.
    """
    if result is None:
        return classify_observable(upstream_state=upstream_state, delivered=False)
    inputs = result.state_inputs()
    return classify_observable(upstream_state=upstream_state, delivered=True, **inputs)
