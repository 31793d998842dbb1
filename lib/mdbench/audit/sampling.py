"""Sampling evidence of a group: values, blocks and the estimator's own sampling checks; the backstop
by the analysis' adequacy rule.

Split from :mod:`mdbench.audit.analysis_items` (which re-exports every name).
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Callable

from mdbench.analysis.adequacy import PRECISION, TREND, PrecisionBound
from mdbench.analysis.observables import IONICITY, audit_group, family
from mdbench.analysis.states import NOT_ESTIMABLE
from mdbench.audit.codes import _check, is_regime_check
from mdbench.audit.model import Check
from mdbench.audit.rulebook import backstop
from mdbench.audit.runread import (
    Entry,
    RunData,
)


@functools.lru_cache(maxsize=1)
def analysis_settings() -> Any:
    """The registered analysis settings (``params/analysis/default.yaml``): the one place every threshold the
    audit applies as a backstop comes from."""
    from mdbench.analysis.settings import AnalysisSettings  # noqa: PLC0415

    return AnalysisSettings()


def beta_window(name: str) -> tuple[float, float]:
    """Accepted log–log slope of an MSD diagnostic called ``name``: the analysis settings' registered range
    (``onsager_beta_range`` for the charge MSD, ``diffusion_beta_range`` otherwise)."""
    st = analysis_settings()
    lo, hi = st.onsager_beta_range if "charge" in name else st.diffusion_beta_range
    return float(lo), float(hi)


def _withheld(e: Entry) -> str | None:
    """The estimator's stated reason for withholding a value (``not_estimable``: a ratio whose denominator
    is consistent with zero), when no value is given; None otherwise."""
    if e.finite_value:
        return None
    diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
    why = diag.get(NOT_ESTIMABLE) or e.raw.get(NOT_ESTIMABLE)
    if not why and e.raw.get("state") == NOT_ESTIMABLE:
        why = e.raw.get("reason")
    return str(why) if isinstance(why, str) and why.strip() else None


def _too_short(e: Entry) -> str | None:
    """The estimator's own statement that its window was too short to yield a value (SI, not F)."""
    diag = e.raw.get("diagnostics") if isinstance(e.raw, dict) else None
    short = diag.get("too_short") if isinstance(diag, dict) else None
    return str(short) if short else None


def _declared(ent: Entry, *names: str) -> float | None:
    for src in (ent.raw, ent.raw.get("diagnostics") if isinstance(ent.raw.get("diagnostics"), dict) else {}):
        for n in names:
            v = src.get(n)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                return float(v)
    return None


def _check_applies(name: str, key: str, group: str) -> bool:
    """A shared check named after one result (``sigma_block_precision``, ``t_plus_block_precision``) applies
    to that result only; every other check applies to every entry that reports it."""
    low = name.lower()
    g = audit_group(group)
    if low.startswith(("t_plus_", "tplus_")):
        return g.definition_check == "transference_convention"
    if low.startswith("sigma_"):
        return g.definition_check == "cross_correlations" and IONICITY.rsplit("/", 1)[-1].lower() not in key.lower()
    return True


def _own_checks(e: Entry, group: str) -> dict[str, Any]:
    """The estimator's sampling checks that apply to entry ``e`` (name → passed)."""
    diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
    own = diag.get("sampling_checks") if isinstance(diag.get("sampling_checks"), dict) else {}
    return {str(k): v for k, v in own.items() if _check_applies(str(k), e.key, group)}


def _numeric_checks(chosen: list[Entry], extra: list[Entry], path: str) -> list[Check]:
    """Non-finite values, incomplete deliveries, failures the run recorded; a too-short window is SI."""
    out: list[Check] = []
    for e in chosen:
        withheld, short = _withheld(e), _too_short(e)
        if withheld is not None:
            out.append(_check("value_withheld", f"{e.key}: value withheld ({withheld[:160]})", e, path=path))
        if short and not (e.finite_value and not e.nonfinite_blocks()):
            # the estimator says the window is shorter than it needs: a sampling shortfall, not a fault (the
            # analysis' rule 6 comes before its rule 5: too short and withheld is SI)
            out.append(_check("window_too_short", f"{e.key}: no finite value, window too short ({short[:120]})", e,
                              path=path))
        if withheld is not None or (short and not (e.finite_value and not e.nonfinite_blocks())):
            continue
        if e.value is not None and not math.isfinite(e.value):
            out.append(_check("nonfinite_value", f"{e.key}: non-finite whole-interval value", e, path=path))
        bad = e.nonfinite_blocks()
        if bad:
            out.append(_check("nonfinite_blocks", f"{e.key}: non-finite block value(s) in block(s) "
                              f"{[b + 1 for b in bad]}", e, path=path))
        if e.value is None and not e.blocks:
            out.append(_check("no_value", f"{e.key}: no value", e, path=path))
        if not e.blocks or len(e.blocks) < 4:
            out.append(_check("four_block_analysis_missing", f"{e.key}: four-block analysis missing", e, path=path))
    for e in extra:  # other delivered entries of the group: non-finite values
        nonfinite = e.value is not None and not math.isfinite(e.value) or e.nonfinite_blocks()
        if not _too_short(e) and not _withheld(e) and nonfinite:
            out.append(_check("nonfinite_value", f"{e.key}: non-finite value(s)", e, path=path))
    for e in chosen + extra:
        diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
        fails = [str(f) for f in diag.get("failures") or [] if f] if isinstance(diag.get("failures"), list) else []
        if fails:  # what the estimator computed and recorded as failing, not the state label the run chose
            out.append(_check("estimator_recorded_failure", f"{e.key}: the estimator recorded a failure "
                              f"({'; '.join(fails)[:160]})", e, path=path))
    return out


def precision_limits(run: RunData, case: str, group: str, key: str | None = None) -> tuple[float | None, float | None]:
    """(relative, absolute) block half-width limits of ``group`` — or of the result ``key`` where its registry
    family names its own (:attr:`~mdbench.analysis.observables.Observable.precision`: residence times are
    not held to the coordination numbers' bound) —: the thresholds the registry names
    (:attr:`~mdbench.analysis.observables.AuditGroup.precision_thresholds`), as the registration in force
    gives them, else the analysis settings' values; (None, None) for a group without one."""
    fam = family(key.split(".", 1)[-1] if key and key.startswith("observables.") else key) if key else None
    rel_key, abs_key = fam.precision if fam is not None and fam.precision else audit_group(group).precision_thresholds
    thresholds: dict[str, Any] = {}
    for reg in run.in_force("adequacy", "thresholds", case=case):
        d = reg.get("definition") if isinstance(reg.get("definition"), dict) else {}
        if isinstance(d.get("thresholds"), dict):
            thresholds = d["thresholds"]
            break

    def value(key: str | None) -> float | None:
        if key is None:
            return None
        v = thresholds.get(key, getattr(analysis_settings(), key))
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    return value(rel_key), value(abs_key)


def _sampling_checks(g: Any, chosen: list[Entry], path: str,
                     limits: tuple[float | None, float | None] = (None, None),
                     limits_of: Callable[[Entry], tuple[float | None, float | None]] | None = None) -> list[Check]:
    """The audit's own reading of the sampling evidence: the estimator's sampling diagnostics where it
    reports them (what each says, not the state label the run chose), else the audit's backstop (relative
    block half-width); the diffusive exponent and the Green–Kubo plateau, and a reported diagnostic that
    contradicts its own numbers. The run's declared states are never read here."""
    out: list[Check] = []
    for e in chosen:
        if _withheld(e) is not None:
            continue
        fluctuates_about_zero = re.split(r"[./]", e.key)[-1].lower().startswith(g.fluctuates_about_zero or ("\0",))
        diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
        own = diag.get("sampling_checks") if isinstance(diag.get("sampling_checks"), dict) else None
        own = {str(k): v for k, v in (own or {}).items() if _check_applies(str(k), e.key, g.name)} \
            if own is not None else None
        failed = [k for k, v in (own or {}).items() if v is False]
        if diag.get("resolved_zero") is True:
            # a zero resolved against its registered scale (analysis.states.resolved_zero): no regime or
            # precision check applies to it; the block trend still does
            failed = [k for k in failed if not is_regime_check(k) and "precision" not in k]
        regime = [k for k in failed if is_regime_check(k)]
        other = [k for k in failed if k not in regime]
        if regime:
            out.append(_check("run_regime_check_failed", f"{e.key}: regime diagnostic(s) failed: {', '.join(regime)}",
                              e, path=path))
        if other:
            out.append(_check("run_sampling_check_failed", f"{e.key}: sampling check(s) failed: {', '.join(other)}",
                              e, path=path))
        if limits_of is not None:
            limits = limits_of(e)
        if own is None and limits != (None, None) and e.blocks and len(e.blocks) >= 4 and not e.nonfinite_blocks() \
                and e.finite_value and e.value != 0 and not fluctuates_about_zero:
            # the analysis' adequacy rule (precision and block trend) on the reported blocks
            unit = e.raw.get("unit", e.raw.get("units", "")) if isinstance(e.raw, dict) else ""
            verdict = backstop(e.value, e.blocks, str(unit or ""), PrecisionBound(*limits),
                               float(analysis_settings().block_trend_alpha))
            ok, why = verdict[PRECISION]
            if not ok:
                out.append(_check("block_half_width", f"{e.key}: {why} (beyond the registered limit)", e, path=path))
            ok, why = verdict[TREND]
            if not ok:
                out.append(_check("block_trend", f"{e.key}: the blocks drift: {why}", e, path=path))
        beta_name = next((n for n in ("beta", "msd_exponent", "charge_msd_beta") if _declared(e, n) is not None),
                         None)
        beta = _declared(e, beta_name) if beta_name else None
        window = beta_window(beta_name or "")
        if beta is not None and not (window[0] <= beta <= window[1]):
            out.append(_check("msd_exponent_outside", f"{e.key}: MSD exponent β = {beta:.2f} outside {window}",
                              e, path=path))
            passed = [k for k, v in (own or {}).items() if v is True and is_regime_check(k)
                      and any(w in k.lower() for w in ("diffusive", "beta", "regime"))]
            if passed:
                out.append(_check("diagnostic_contradicts_evidence", f"{e.key}: reports {', '.join(passed)} as "
                                  f"passed while its own exponent β = {beta:.2f} lies outside {window}", e,
                                  path=path))
        plateau = e.raw.get("plateau")
        if isinstance(plateau, dict) and plateau.get("reached") is False:
            out.append(_check("plateau_not_reached", f"{e.key}: Green–Kubo plateau not reached", e, path=path))
            if any(v is True and "plateau" in k.lower() for k, v in (own or {}).items()):
                out.append(_check("diagnostic_contradicts_evidence", f"{e.key}: reports the plateau check as passed "
                                  "while its plateau block says it was not reached", e, path=path))
    return out
