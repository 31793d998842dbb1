"""One rulebook: the audit's state of a foreign result equals what the analysis' own rules make of it.

Each test writes a foreign-format results.json (no categories, no sampling checks of its own, so the audit
applies its backstop), audits it, and classifies the same numbers with the analysis' functions
(``block_estimate`` → ``adequacy_checks`` → ``classify_observable``). Each fixture is chosen where the
audit's former private copies of the rules gave another answer (asserted too, so the test cannot pass
vacuously): 8 blocks (t with 3 dof and /2 made the half-width 1.9x too wide), tight but drifting blocks
(no trend test), too short and withheld (the audit said not_estimable, the analysis SI).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from mdbench.analysis.adequacy import PrecisionBound, adequacy_checks
from mdbench.analysis.blocks import block_estimate
from mdbench.analysis.settings import AnalysisSettings
from mdbench.analysis.states import classify_observable
from mdbench.audit.analysis_items import assess_case
from mdbench.audit.bundle import load_bundle
from mdbench.audit.runread import load_run
from mdbench.audit.safeio import RunFS
from mdbench.audit.rulebook import r5_interval, tplus_conventions
from mdbench.analysis.onsager import transference_conventions
from mdbench.record import RunRecord

SETTINGS = AnalysisSettings()
BOUND = PrecisionBound(rel=SETTINGS.diffusion_max_rel_half_width)


def _audit_state(tmp_path: Path, entry: dict) -> tuple[str, str]:
    run = tmp_path / "run"
    RunRecord(run).set_stage_state("W", "production", "valid", "fixture")
    (run / "analysis" / "W").mkdir(parents=True)
    doc = {"observables": {"self_diffusion": {"D_na": {**entry, "unit": "m^2/s", "frame": "barycentric"}}}}
    (run / "analysis" / "W" / "results.json").write_text(json.dumps(doc))
    _, groups = assess_case(load_run(RunFS(run)), load_bundle(None), "W", None, None)
    a = next(g.assessment for g in groups if g.assessment.observable == "self_diffusion")
    return a.state, a.reason


def _analysis_state(value: float, blocks: list[float]) -> str:
    checks, details = adequacy_checks("", block_estimate(value, blocks, "m^2/s"), BOUND, SETTINGS.block_trend_alpha)
    return classify_observable(values=[value, *blocks], sampling_checks=checks, check_details=details).state


def _old_backstop_half_width(blocks: list[float]) -> float:
    """The audit's former copy: t(0.975, 3) and /2 whatever the number of blocks."""
    return 3.182 * float(np.std(blocks, ddof=1)) / 2.0


def test_eight_blocks_are_judged_with_the_t_value_of_eight_blocks(tmp_path):
    d = 0.15
    blocks = [1e-9 * (1 + (d if i % 2 == 0 else -d)) for i in range(8)]
    value = float(np.mean(blocks))
    expected = _analysis_state(value, blocks)
    assert expected == "C"
    assert _old_backstop_half_width(blocks) > BOUND.rel * value  # the former copy called this SI
    state, reason = _audit_state(tmp_path, {"value": value, "blocks": blocks, "uncertainty": {"half_width_95": 1e-10}})
    assert state == expected, reason


def test_tight_but_drifting_blocks_are_insufficiently_sampled(tmp_path):
    blocks = [0.970e-9, 0.991e-9, 1.009e-9, 1.030e-9]
    value = float(np.mean(blocks))
    expected = _analysis_state(value, blocks)
    assert expected == "SI"
    assert _old_backstop_half_width(blocks) < BOUND.rel * value  # precision alone passes: only the trend fails
    state, reason = _audit_state(tmp_path, {"value": value, "blocks": blocks, "uncertainty": {"half_width_95": 1e-11}})
    assert state == expected, reason
    assert "drift" in reason and "p = " in reason


def test_too_short_and_withheld_is_insufficient_sampling_as_in_the_analysis(tmp_path):
    diagnostics = {"too_short": "analysed window 12 ps < registered minimum 50 ps",
                   "not_estimable": "denominator consistent with zero"}
    expected = classify_observable(too_short=diagnostics["too_short"],
                                   not_estimable=diagnostics["not_estimable"]).state
    assert expected == "SI"
    state, reason = _audit_state(tmp_path, {"value": None, "blocks": [None] * 4, "diagnostics": diagnostics})
    assert state == expected, reason


def test_r5_interval_and_tplus_are_the_analysis_definitions():
    blocks = [0.9, 1.1, 0.95, 1.05, 1.0, 1.02, 0.98, 1.0]
    assert math.isclose(r5_interval(1.0, blocks),
                        max(block_estimate(1.0, blocks, "").half_width_95, 0.05), rel_tol=1e-12)
    L = np.array([[2.0, 0.3], [0.3, 1.5]])
    chk = transference_conventions(L, ("A", "B"), {"A": 1.0, "B": -1.0})
    t = tplus_conventions(2.0, 1.5, 0.3)
    assert t == {"correct": chk.t_plus_unweighted_L, "mixed": chk.t_plus_mixed_L_in_weighted}


def test_a_family_with_its_own_precision_bound_is_held_to_it(tmp_path):
    """A residence time is held to the lifetimes' registered bound, not the coordination numbers' (the audit
    group it belongs to); a coordination number in the same group still to the CN bound."""
    from mdbench.audit.sampling import precision_limits

    run = tmp_path / "run"
    RunRecord(run).set_stage_state("W", "production", "valid", "fixture")
    data = load_run(RunFS(run))
    assert precision_limits(data, "W", "coordination", "observables.residence_time/FSI:O/continuous") == (
        SETTINGS.lifetime_max_rel_half_width, None)
    assert precision_limits(data, "W", "coordination", "observables.coordination/FSI:O@first_min") == (
        SETTINGS.cn_max_rel_half_width, SETTINGS.cn_abs_half_width_ok)
    assert precision_limits(data, "W", "coordination", "observables.speciation/FSI1_DMC4") == (
        None, SETTINGS.association_fraction_max_half_width)
