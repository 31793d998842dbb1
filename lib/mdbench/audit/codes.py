"""The one table of analysis check codes and their severities (what the item rules and the state read).

Split from :mod:`mdbench.audit.analysis_items` (which re-exports every name).
"""

from __future__ import annotations

from mdbench.audit.model import Check, Evidence
from mdbench.audit.runread import (
    Entry,
)


#: Check codes (:class:`mdbench.audit.model.Check`) and their severities; the item rules read these.
CODES: dict[str, str] = {
    "missing_target": "missing",
    "tplus_mixed_convention": "definition",
    "conductivity_without_cross_terms": "definition",
    "nonfinite_value": "implementation",
    "nonfinite_blocks": "implementation",
    "outside_canonical_r5": "implementation",
    "estimator_recorded_failure": "implementation",
    "value_contradicts_reanalysis": "implementation",
    "trajectory_treatment_differs": "implementation",
    "surrogate_definition": "definition",
    "charge_weighting_differs": "definition",
    "no_value": "incomplete",
    "four_block_analysis_missing": "incomplete",
    "value_withheld": "withheld",
    "window_too_short": "sampling",
    "run_sampling_check_failed": "sampling",
    "block_half_width": "sampling",
    "block_trend": "sampling",
    "msd_exponent_outside": "sampling",
    "plateau_not_reached": "sampling",
    "run_regime_check_failed": "sampling",
    "diagnostic_contradicts_evidence": "sampling",
    "agrees_with_canonical": "note",
    "definition_differs_from_canonical": "note",
    "registered_after_results": "note",
    "canonical_not_eligible": "note",
    "frame_differs_from_registration": "note",
    "agrees_with_recorded_curve": "note",
    "recorded_curve_not_compared": "note",
    # issue 45, judged from the task's specification (audit/required_results, production_protocol,
    # trajectory_integrity): a required result missing (A1 <= 1/2); the production tpr unlike the frozen
    # protocol (Sim1/Sim4 = 0; an output interval coarser than required: Sim4 <= 1/2); a trajectory whose
    # frames repeat or splice, or whose times are not the tpr's (Sim4 = 0; E5 <= 1/2 where recorded valid)
    "required_result_missing": "missing",
    "protocol_model_differs": "implementation",
    "protocol_state_point_differs": "implementation",
    "protocol_output_coarser": "sampling",
    "trajectory_frames_repeated": "implementation",
    "trajectory_splice": "implementation",
    "trajectory_times_irregular": "implementation",
}


#: Codes that leave a required target undelivered (A1): missing, or a surrogate delivered in its place.
MISSING_CODES = frozenset({"missing_target", "surrogate_definition", "charge_weighting_differs"})


#: Codes of a regime / plateau diagnostic that failed (A5 0.5).
REGIME_CODES = frozenset({"msd_exponent_outside", "plateau_not_reached", "run_regime_check_failed",
                          "diagnostic_contradicts_evidence"})


#: Sampling checks of our estimators that are regime diagnostics (names in ``diagnostics.sampling_checks``).
REGIME_CHECK_NAMES = frozenset({"diffusive_window", "plateau", "collective_regime"})


#: Words of a sampling-check name that make it a regime / plateau diagnostic (other tools' spellings).
REGIME_CHECK_WORDS = ("diffusive", "plateau", "regime", "beta", "asymptotic")


def is_regime_check(name: str) -> bool:
    """True when a sampling check named ``name`` is a regime / plateau diagnostic (A5)."""
    low = name.lower()
    return low in REGIME_CHECK_NAMES or any(w in low for w in REGIME_CHECK_WORDS)


def _check(code: str, message: str, *entries: Entry, path: str = "") -> Check:
    return Check(code, CODES[code], message, tuple(Evidence(path, key=e.key) for e in entries))
