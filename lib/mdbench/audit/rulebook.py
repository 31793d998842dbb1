"""The analysis' own rules, applied by the audit to foreign evidence: one rulebook, no copies.

The audit judges a run's results with the functions the analysis uses for its own results:

* the **state** of an observable group follows from its checks by
  :func:`mdbench.analysis.states.classify_observable` (:func:`audit_state`): the precedence of missing,
  failed, too short, withheld and insufficiently sampled is the analysis' (rules 1–7 of
  :data:`mdbench.analysis.states.STATE_RULES`), so a foreign result the analysis would call SI is SI here;
* the **sampling backstop** of a result that reports no sampling checks of its own is the analysis'
  adequacy rule (:func:`backstop`): :func:`mdbench.analysis.blocks.block_estimate` on its blocks (the
  Student t of ``n - 1`` degrees of freedom and √n for any number of blocks),
  :func:`mdbench.analysis.adequacy.precision_check` against the group's registered bound and
  :func:`mdbench.analysis.adequacy.trend_check` at the registered ``block_trend_alpha``;
* the **R5 interval** around a canonical value is that value's block 95 % half-width by the same
  :func:`~mdbench.analysis.blocks.block_estimate` (:func:`r5_interval`), widened to the 5 % tolerance;
* the **t+ conventions** are :func:`mdbench.analysis.onsager.transference_conventions`
  (:func:`tplus_conventions`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from mdbench.analysis.adequacy import PRECISION, TREND, PrecisionBound, precision_check, trend_check
from mdbench.analysis.blocks import block_estimate
from mdbench.analysis.onsager import transference_conventions
from mdbench.analysis.states import classify_observable

#: R5 relative tolerance added when block intervals are too narrow.
R5_REL_TOL = 0.05
#: Check severities (:data:`mdbench.audit.model.CHECK_SEVERITIES`) that are recorded failures (rule 4).
FAILURE_SEVERITIES = ("definition", "implementation")


def audit_state(checks: Sequence[Any], missing: Sequence[str], upstream: str | None = None) -> tuple[str, str]:
    """(state, reason) of one observable group from its structured checks, by the analysis' classifier.

    The checks map onto :func:`~mdbench.analysis.states.classify_observable`'s inputs: a missing target is
    an undelivered observable; ``definition``/``implementation`` checks are recorded failures; an
    ``incomplete`` delivery (no value, fewer than four blocks) is undelivered unless something failed (a
    failure is the stronger finding); ``window_too_short`` is the estimator's too-short statement;
    ``withheld`` is its not-estimable statement; every other ``sampling`` check is a failed sampling
    diagnostic. The reason lists the checks that decided.

    Parameters
    ----------
    checks : sequence of Check
        The group's checks (:class:`mdbench.audit.model.Check`).
    missing : sequence of str
        Required targets not delivered.
    upstream : str, optional
        State of the production stage (``invalid_upstream``, ``not_reached``; None: valid).
    """
    def said(*severities: str, codes: tuple[str, ...] = (), but: tuple[str, ...] = ()) -> list[str]:
        return [c.message for c in checks if (c.severity in severities or c.code in codes) and c.code not in but]

    failures = said(*FAILURE_SEVERITIES)
    incomplete, withheld = said("incomplete"), said("withheld")
    too_short = said(codes=("window_too_short",))
    sampling = said("sampling", but=("window_too_short",))
    decision = classify_observable(upstream_state=upstream or "valid",
                                   delivered=not missing and not (incomplete and not failures),
                                   failures=failures, too_short="; ".join(too_short) or None,
                                   not_estimable="; ".join(withheld) or None,
                                   sampling_checks={m: False for m in sampling})
    state = decision.state
    if state in ("invalid_upstream", "not_reached"):
        return state, f"production data {state.replace('_', ' ')}"
    if state == "M":
        return state, (f"missing targets: {', '.join(missing)}" if missing else "; ".join(incomplete))
    if state == "F":
        return state, "; ".join(said("definition") + said("implementation"))
    if state == "SI":
        return state, "; ".join(said("sampling"))
    if state == "not_estimable":
        return state, "; ".join(withheld)
    compared = sum(c.code == "agrees_with_canonical" for c in checks)
    not_compared = [c.message for c in checks if c.code == "definition_differs_from_canonical"]
    return state, "estimator delivered, finite, blocks consistent" + (
        f", {compared} value(s) inside the canonical R5 interval" if compared else "") + (
        "; " + "; ".join(not_compared) if not_compared else "")


def backstop(value: float, blocks: Sequence[float], unit: str, bound: PrecisionBound, trend_alpha: float
             ) -> dict[str, tuple[bool, str]]:
    """The analysis' adequacy rule on a foreign result's whole value and blocks (any number of blocks).

    Returns ``{"block_precision": (passed, detail), "block_trend": (passed, detail)}`` — exactly what
    :func:`mdbench.analysis.adequacy.adequacy_checks` gives the analysis' own results.

    Examples
    --------
    >>> from mdbench.analysis.adequacy import PrecisionBound
    >>> r = backstop(1.0, [1.0, 1.01, 0.99, 1.0], "1", PrecisionBound(rel=0.2), 0.05)
    >>> r["block_precision"][0], r["block_trend"][0]
    (True, True)
    >>> backstop(1.0, [0.97, 0.99, 1.01, 1.03], "1", PrecisionBound(rel=0.2), 0.05)["block_trend"][0]
    False
    """
    est = block_estimate(value, [float(b) for b in blocks], unit)
    return {PRECISION: precision_check(est, bound), TREND: trend_check(est, trend_alpha)}


def r5_interval(canonical_value: float, canonical_blocks: Sequence[float | None] | None) -> float:
    """Half-width of the R5 acceptance interval around a canonical value.

    :math:`h = \\max(h_{95},\\ 0.05\\,|x_c|)` with :math:`h_{95} = t_{0.975,n-1}\\, s_b/\\sqrt{n}` of the
    canonical block values (:func:`mdbench.analysis.blocks.block_estimate`, the analysis' definition); the
    5 % relative tolerance is used when the block interval is narrower or there are no usable blocks.

    Examples
    --------
    >>> round(r5_interval(1.0, [0.9, 1.1, 0.9, 1.1]), 4)  # 3.182 * 0.11547 / 2
    0.1837
    >>> r5_interval(2.0, None)
    0.1
    """
    hw = 0.0
    if canonical_blocks and len(canonical_blocks) >= 2 and all(
            b is not None and math.isfinite(b) for b in canonical_blocks):
        hw = float(block_estimate(canonical_value, [float(b) for b in canonical_blocks], "").half_width_95)
    return max(hw, R5_REL_TOL * abs(canonical_value))


def r5_agrees(reported: float, canonical_value: float, canonical_blocks: Sequence[float | None] | None) -> bool:
    """True when ``reported`` lies inside the R5 interval of the canonical estimate."""
    return abs(reported - canonical_value) <= r5_interval(canonical_value, canonical_blocks) + 1e-300


def tplus_conventions(L_pp: float, L_mm: float, L_pm: float) -> dict[str, float]:
    """Transference number of a 1:1 salt under the correct and the mixed-up convention.

    The analysis' :func:`mdbench.analysis.onsager.transference_conventions` on the 2 × 2 unweighted
    Onsager matrix of a cation (+1) and an anion (−1) (the charge magnitude cancels for a 1:1 salt):
    ``correct`` is its unweighted-L value :math:`(L^{++} - L^{+-})/(L^{++} + L^{--} - 2L^{+-})`,
    ``mixed`` the unweighted L fed to the charge-weighted formula,
    :math:`(L^{++} + L^{+-})/(L^{++} + L^{--} + 2L^{+-})`.

    Examples
    --------
    >>> t = tplus_conventions(1.0, 2.0, 0.5)
    >>> round(t["correct"], 4), round(t["mixed"], 4)
    (0.25, 0.375)
    """
    try:
        chk = transference_conventions([[L_pp, L_pm], [L_pm, L_mm]], ("CAT", "AN"), {"CAT": 1.0, "AN": -1.0},
                                       cation="CAT")
    except Exception:  # noqa: BLE001 - a non-finite matrix gives no convention, not a crash
        return {"correct": math.nan, "mixed": math.nan}
    return {"correct": chk.t_plus_unweighted_L, "mixed": chk.t_plus_mixed_L_in_weighted}
