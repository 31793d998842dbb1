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

Two rules apply across observables and are defined here once:

* **resolved zero** (:func:`resolved_zero`): a value zero within its 95 % interval, where
  ``|value| + half-width`` is at most a registered fraction of a registered scale (σ_NE for σ; 1 for
  σ/σ_NE), is *measured* to be zero: more sampling would only narrow the interval about zero. Such a
  value is accepted as zero (**C**, marked ``resolved_zero``; its relative precision bound and regime
  diagnostic cannot apply to a zero, its other diagnostics still do), and every ratio over it (t+ = Σσ₊ⱼ/σ)
  is **not_estimable** by rule 5. A zero whose interval is *not* that small is SI like any imprecise value.
* **derived observables** (rule 8, ``inputs`` of :func:`classify_observable`): a value built from other
  observables (σ_NE from the ions' D, σ/σ_NE from σ and σ_NE) takes the weakest state of its own and its
  inputs'; the reason names the input. A derived value is never C when an input is SI, withheld or worse.

SI is only reachable when no failure was recorded; F is never produced by a sampling diagnostic.
"""

from __future__ import annotations

import math
import re
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
    "7 otherwise -> C; "
    "resolved zero: a value zero within its 95 % interval with |value| + half-width <= the registered fraction "
    "of its registered scale (sigma_NE for sigma) is accepted as zero (C, resolved_zero; the relative precision "
    "and regime checks do not apply to a zero) and a ratio over it is not_estimable (rule 5); "
    "8 a derived observable takes the weakest state of its own and its inputs' (severity C < SI < "
    "not_estimable < M < F), the reason naming the input"
)


#: Kinds of next action an unresolved observable may get, each recognised by the words a study writes for it.
ACTION_KINDS: dict[str, re.Pattern[str]] = {
    "extend": re.compile(r"\b(extend\w*|longer|more (?:sampling|frames|data|statistics)|additional (?:sampling|"
                         r"production|frames)|continue (?:the )?production|run (?:it )?longer|(?:increase|improve) "
                         r"(?:the )?sampling|further sampling|more ns|more production)\b", re.I),
    "correct": re.compile(r"\b(correct(?:ed|ion|ing|s)?|fix(?:ed|es|ing)?|repair\w*|recomput\w*|re-?deriv\w*|"
                          r"re-?implement\w*|bug\w*|(?:method|formula|estimator|implementation|definition) "
                          r"(?:must|should|needs? to) be (?:changed|corrected|fixed|replaced))\b", re.I),
    "stop": re.compile(r"\b(stop\w*|terminat\w*|limitation|budget (?:exhausted|spent|reached)|report (?:it )?as|"
                       r"accept\w*)\b", re.I),
    "deliver": re.compile(r"\b(deliver\w*|rerun the analysis|compute the missing|add the missing|produce the "
                          r"missing)\b", re.I),
    "no_interpretation": re.compile(r"\b(no interpretation|not interpreted|uninterpretable|upstream)\b", re.I),
}
#: A clause that denies an action ("no repair needed", "cannot be fixed by more sampling") names no action.
_DENIAL = re.compile(r"\b(no|not|never|without|cannot|can't|n't|neither|nor|instead of|rather than)\b", re.I)


@dataclass(frozen=True)
class StateActions:
    """The seed's rule for what a study does next with an observable in one state (§3.3, §4.2).

    Attributes
    ----------
    state : str
        One of :data:`OBSERVABLE_STATES`.
    admissible : tuple of str
        Kinds of :data:`ACTION_KINDS` that address the state.
    contradicting : tuple of str
        Kinds that treat the state as another one (an SI result "corrected", an F result "extended").
    rule : str
        The rule in words.
    """

    state: str
    admissible: tuple[str, ...]
    contradicting: tuple[str, ...]
    rule: str


#: State → admissible next actions: the one table the analysis' terminal record and the audit's O2/O3 share.
STATE_ACTIONS: dict[str, StateActions] = {a.state: a for a in (
    StateActions(SI, ("extend", "stop"), ("correct",),
                 "SI: extend sampling within the budget, or stop with the limitation stated; the estimator is valid, "
                 "so correcting the method is not the action"),
    StateActions(F, ("correct",), ("extend",),
                 "F: correct the definition/implementation and recompute; longer trajectories cannot repair it"),
    StateActions(M, ("deliver", "stop"), (),
                 "M: deliver the missing result (rerun the analysis), or stop with it listed as missing"),
    StateActions(NOT_ESTIMABLE, ("stop",), ("correct",),
                 "not_estimable: stop and state the reason; nothing is wrong with the estimator"),
    StateActions(INVALID_UPSTREAM, ("no_interpretation", "stop"), (),
                 "invalid_upstream: no interpretation of the results; repair the upstream stage"),
    StateActions(NOT_REACHED, ("no_interpretation", "stop"), (),
                 "not_reached: no interpretation; no data yet"),
)}


def action_kinds(text: str) -> set[str]:
    """Kinds of :data:`ACTION_KINDS` a next-action text asks for; clauses that deny an action count for none."""
    out: set[str] = set()
    for clause in re.split(r"[;.,:()\n]|\bbut\b|\bthen\b", str(text)[:4000]):
        if _DENIAL.search(clause):
            continue
        out |= {k for k, pat in ACTION_KINDS.items() if pat.search(clause)}
    return out


def contradicting_action(state: str, text: str) -> str | None:
    """The kind of action in ``text`` that :data:`STATE_ACTIONS` says contradicts ``state`` (an SI result whose
    action is to correct the method, an F result whose action is to extend sampling); None when there is none.

    Examples
    --------
    >>> contradicting_action("SI", "the method must be corrected and recomputed")
    'correct'
    >>> contradicting_action("F", "extend the production by 2 ns")
    'extend'
    >>> contradicting_action("SI", "extend production within the budget; no correction of the method needed") is None
    True
    """
    rule = STATE_ACTIONS.get(state)
    if rule is None:
        return None
    asked = action_kinds(text)
    return next((k for k in rule.contradicting if k in asked), None)


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


def resolved_zero(value: float, half_width_95: float, scale: float, fraction: float) -> str | None:
    """The one resolved-zero rule: the reason when ``value`` is zero within its 95 % interval and that
    interval is resolved, ``|value| + half_width_95 <= fraction * scale``; None otherwise.

    Parameters
    ----------
    value, half_width_95 : float
        Whole-interval estimate and its 95 % half-width (same unit as ``scale``).
    scale : float
        Registered scale of the quantity (σ_NE for σ, 1 for σ/σ_NE); must be finite and positive.
    fraction : float
        Registered fraction (the ionicity's absolute half-width bound, so that σ resolved to 0.1 σ_NE and
        σ/σ_NE resolved to 0.1 are the same statement).

    Returns
    -------
    str or None
        ``"value = v +- hw (95 %) is zero within its interval, resolved to <= f x scale = s"`` or None.
    """
    v, hw, sc, f = (float(x) for x in (value, half_width_95, scale, fraction))
    if not all(math.isfinite(x) for x in (v, hw, sc, f)) or sc <= 0.0 or f <= 0.0:
        return None
    if abs(v) > hw or abs(v) + hw > f * sc:
        return None
    return (f"value {v:.3g} +- {hw:.3g} (95 %) is zero within its interval, resolved to <= {f:g} x scale "
            f"{sc:.3g} = {f * sc:.3g}")


def _as_decision(d: Any) -> StateDecision:
    """A StateDecision from a StateDecision or its dict form (``state``, ``reason``, ``rule``)."""
    if isinstance(d, StateDecision):
        return d
    if isinstance(d, Mapping) and d.get("state") in SEVERITY:
        return StateDecision(str(d["state"]), str(d.get("reason", "")), int(d.get("rule", 8) or 8))
    return StateDecision(M, f"input state unreadable: {d!r:.80}", 3)


def weakest_input(inputs: Mapping[str, Any] | None) -> tuple[str, StateDecision] | None:
    """(name, decision) of the weakest input (highest severity; first by name among equals), or None."""
    if not inputs:
        return None
    items = sorted(((str(k), _as_decision(v)) for k, v in inputs.items()),
                   key=lambda kv: (-SEVERITY[kv[1].state], kv[0]))
    return items[0]


def classify_observable(*, upstream_state: str = UPSTREAM_VALID, delivered: bool = True,
                        values: float | Sequence[float] | Mapping[str, Any] | None = None,
                        failures: Iterable[str] = (),
                        sampling_checks: Mapping[str, bool] | None = None,
                        too_short: str | None = None, not_estimable: str | None = None,
                        check_details: Mapping[str, str] | None = None,
                        inputs: Mapping[str, Any] | None = None,
                        resolved_zero: str | None = None) -> StateDecision:
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
    inputs : mapping of str to StateDecision (or its dict form), optional
        States of the observables this one is derived from, by name (``self_diffusion/Li``). Rule 8: the
        result is the weakest of the own decision and these, with the reason naming the input.
    resolved_zero : str, optional
        Reason from :func:`resolved_zero` when the value is a resolved zero; the estimator then leaves out
        the checks that cannot apply to a zero (relative precision, regime). Stated in a C reason.

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
        return _inherit(StateDecision(SI, f"valid estimator, window too short: {too_short}", 6, (str(too_short),)),
                        inputs)
    if not_estimable and not fails:
        return _inherit(StateDecision(NOT_ESTIMABLE, f"not estimable: {not_estimable}", 5, (str(not_estimable),)),
                        inputs)
    bad = _non_finite(values)
    if bad:
        fails.append("non-finite value(s): " + ", ".join(bad))
    if fails:
        return StateDecision(F, "; ".join(fails), 4, tuple(fails))
    own = _own_sampling_decision(sampling_checks, check_details, resolved_zero)
    return _inherit(own, inputs)


def _own_sampling_decision(sampling_checks: Mapping[str, bool] | None, check_details: Mapping[str, str] | None,
                           zero: str | None) -> StateDecision:
    """Rules 6 and 7 for a delivered, finite, estimable value."""
    failed = tuple(k for k, ok in (sampling_checks or {}).items() if not bool(ok))
    if failed:
        details = check_details or {}
        named = [f"{k} ({details[k]})" if details.get(k) else k for k in failed]
        return StateDecision(SI, "valid estimator, sampling diagnostic(s) failed: " + "; ".join(named), 6,
                             failed)
    if zero:
        return StateDecision(C, f"resolved zero: {zero}; every other sampling diagnostic passed", 7)
    return StateDecision(C, "valid estimator; all sampling diagnostics passed", 7)


def _inherit(own: StateDecision, inputs: Mapping[str, Any] | None) -> StateDecision:
    """Rule 8: the weakest of ``own`` and the inputs' states, the reason naming the input."""
    weakest = weakest_input(inputs)
    if weakest is None:
        return own
    name, d = weakest
    if SEVERITY[d.state] <= SEVERITY[own.state]:
        return own
    return StateDecision(d.state, f"input {name} is {d.state} ({d.reason})", 8, (f"input:{name}",))


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
