"""Adequacy rules: when a block-estimated result is precise and stationary enough to be accepted (C).

The one definition every estimator applies (thresholds from ``params/analysis/default.yaml``, section
``adequacy``, registered as ``analysis_adequacy_and_stopping`` before any result):

* **precision** — the whole-interval estimate's 95 % half-width (the block spread,
  :data:`mdbench.analysis.blocks.BLOCK_DEFINITION`) is at most a registered fraction of the value
  (``precision_max_rel_half_width``, 20 %), or — for quantities that may sit near zero (t+, ionicity,
  class fractions, coordination numbers near 0) — at most a registered absolute bound;
* **no block trend** — an ordinary least-squares line through the four block values (against the block
  index) has a slope whose two-sided p-value is at least ``block_trend_alpha`` (Student t, n − 2 degrees
  of freedom): a drifting property is not converged however narrow its spread;
* **estimability** — a ratio whose defining denominator is consistent with zero within its 95 % interval
  is *not estimable* (:data:`mdbench.analysis.states.NOT_ESTIMABLE`), not imprecise: more sampling cannot
  give it a value.

A failing check is SI, and its detail string (the numbers that failed) is written into the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mdbench.analysis.blocks import BlockEstimate

#: Names of the two checks every block-estimated result gets (after a prefix such as ``sigma_``).
PRECISION = "block_precision"
TREND = "block_trend"


@dataclass(frozen=True)
class PrecisionBound:
    """Accepted 95 % half-width of one quantity: ``hw <= rel·|value|`` or ``hw <= abs`` (either passes).

    ``rel`` None: only the absolute bound applies (quantities near zero: t+, ionicity, fractions);
    ``abs`` None: only the relative one.
    """

    rel: float | None = None
    abs: float | None = None

    def describe(self) -> str:
        """``<= 20 % of |value|``, ``<= 0.1`` or both joined by ``or``."""
        parts = ([f"<= {self.rel:.0%} of |value|"] if self.rel is not None else []) + \
                ([f"<= {self.abs:g}"] if self.abs is not None else [])
        return " or ".join(parts) or "unbounded"


def precision_check(est: BlockEstimate, bound: PrecisionBound) -> tuple[bool, str]:
    """(passed, detail) of the precision rule for one block estimate."""
    hw, v = float(est.half_width_95), float(est.whole)
    if not (math.isfinite(hw) and math.isfinite(v)):
        return False, f"95 % half-width {hw:.3g} of value {v:.3g} is not finite"
    ok = ((bound.rel is not None and hw <= bound.rel * abs(v)) or (bound.abs is not None and hw <= bound.abs))
    rel = f" = {hw / abs(v):.0%} of |value|" if v != 0 else ""
    return bool(ok), f"95 % half-width {hw:.3g}{rel} for value {v:.3g} {est.unit}; accepted {bound.describe()}"


def block_trend(blocks: Any) -> tuple[float, float]:
    """(slope per block, two-sided p-value) of an OLS line through the block values against their index.

    p = 1 for a constant series or fewer than 3 blocks; p = 0 for a perfect non-constant line.
    """
    y = np.asarray([float(b) for b in blocks], dtype=np.float64)
    n = y.size
    if n < 3:
        return float("nan"), 1.0
    if not np.all(np.isfinite(y)):
        return float("nan"), float("nan")
    x = np.arange(n, dtype=np.float64) - (n - 1) / 2.0
    slope = float(np.dot(x, y - y.mean()) / np.dot(x, x))
    resid = y - y.mean() - slope * x
    s2 = float(np.dot(resid, resid)) / (n - 2)
    scale = max(abs(y.mean()), float(np.max(np.abs(y))), 1e-300)
    if slope == 0.0 or abs(slope) <= 1e-12 * scale:
        return slope, 1.0
    if s2 <= (1e-12 * scale) ** 2:
        return slope, 0.0
    from scipy.stats import t as student_t

    tstat = slope / math.sqrt(s2 / float(np.dot(x, x)))
    return slope, float(2.0 * student_t.sf(abs(tstat), n - 2))


def trend_check(est: BlockEstimate, alpha: float) -> tuple[bool, str]:
    """(passed, detail) of the no-trend rule: the blocks' OLS slope is not significant at ``alpha``."""
    slope, p = block_trend(est.blocks)
    if not math.isfinite(p):
        return False, "block values not finite"
    return bool(p >= alpha), (f"block slope {slope:.3g} {est.unit} per block, p = {p:.3f} "
                              f"({'<' if p < alpha else '>='} {alpha:g})")


def adequacy_checks(prefix: str, est: BlockEstimate, bound: PrecisionBound, trend_alpha: float
                    ) -> tuple[dict[str, bool], dict[str, str]]:
    """``{<prefix>block_precision, <prefix>block_trend}`` → passed, and → the numbers behind each."""
    ok_p, why_p = precision_check(est, bound)
    ok_t, why_t = trend_check(est, trend_alpha)
    return ({prefix + PRECISION: ok_p, prefix + TREND: ok_t}, {prefix + PRECISION: why_p, prefix + TREND: why_t})


def consistent_with_zero(est: BlockEstimate) -> bool:
    """True when the 95 % interval of ``est`` contains zero, or the estimate is undefined (non-finite)."""
    v, hw = float(est.whole), float(est.half_width_95)
    if not math.isfinite(v) or v == 0.0:
        return True
    return bool(math.isfinite(hw) and abs(v) <= hw)


def withheld(payload: dict[str, Any]) -> dict[str, Any]:
    """A results.json payload with its value withheld (state not_estimable): value, half-width and blocks
    become null; the computed numbers move to ``diagnostics.withheld`` for an expert to see why."""
    out = dict(payload)
    unc = dict(out.get("uncertainty") or {})
    kept = {"value": out.get("value"), "half_width_95": unc.get("half_width_95"), "blocks": out.get("blocks")}
    out["value"] = None
    unc["half_width_95"] = None
    out["uncertainty"] = unc
    out["blocks"] = [None] * len(out.get("blocks") or [])
    out["diagnostics"] = dict(out.get("diagnostics") or {}, withheld=kept)
    return out
