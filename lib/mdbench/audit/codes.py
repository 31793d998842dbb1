"""The one check table: every audit code with its severity, the items it can lower and how far, the finding's
item, the evidence it cites, the rule, the seed sentence and the test that plants its defect.

Call sites name only the code (:func:`check`, :class:`GroupCheck`, the record checks' ``add``);
what a code does to the items is read here. ``docs/saeo-rules.md`` (its code table) and ``docs/saeo-coverage.md``
are generated from :data:`RULES` by :mod:`mdbench.audit.ruledoc` (``python -m mdbench.audit.ruledoc``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mdbench.audit.model import Check, Evidence
from mdbench.audit.runread import (
    Entry,
)


@dataclass(frozen=True)
class Rule:
    """One audit code.

    Attributes
    ----------
    code : str
        The code of the :class:`~mdbench.audit.model.Check` or :class:`~mdbench.audit.model.Finding`.
    severity : str or None
        For a check of an observable group: one of :data:`mdbench.audit.model.CHECK_SEVERITIES` (the state
        rules read it); None for a finding that is not an observable's check.
    lowers : dict
        Item → the highest rating the item keeps when the code fires (``{"A3": 0.0}``); empty for a note.
    item : str or None
        The item the finding is reported under.
    rule : str
        What is checked (for people).
    seed : str
        The seed sentence it implements.
    test : str
        ``path::test`` of the test that plants the defect and shows the item drop ('' none yet).
    evidence : str
        What the finding cites.
    """

    code: str
    severity: str | None
    lowers: dict[str, float] = field(default_factory=dict)
    item: str | None = None
    rule: str = ""
    seed: str = ""
    test: str = ""
    evidence: str = "the results entry (analysis/<case>/results.json, its key)"


#: Every code the audit emits, one row each.
RULES: dict[str, Rule] = {r.code: r for r in (
    Rule("agrees_with_canonical", "note", {}, "A3",
         rule="inside the canonical interval",
         seed="R5 (as above)",
         test=("tests/audit/test_registered_definitions.py::"
               "test_contact_channel_named_by_the_registration_goes_to_the_reanalysis")),
    Rule("agrees_with_recorded_curve", "note", {}, "A3",
         rule="D follows from its recorded MSD; the recorded MSD agrees with the trajectory's",
         seed="A3 (as above)",
         test=("tests/audit/test_registered_definitions.py::"
               "test_d_without_its_own_window_is_compared_on_the_registered_window")),
    Rule("block_half_width", "sampling", {"A6": 0.5}, "A6",
         rule=("backstop (no checks of its own): `adequacy.precision_check` on `blocks.block_estimate` of its "
               "blocks (t of n−1 dof, √n) beyond the group's registered bound"),
         seed="A6: \"…with drift and disagreement explicitly examined.\"",
         test=("tests/audit/test_check_table.py::"
               "test_planted_sampling_and_numeric_defect_lowers_the_item_its_row_names")),
    Rule("block_layout_invalid", "sampling", {"A6": 0.5, "A7": 0.5}, "A6",
         rule=("`block_ranges_ps` (entry, `window`, or `windows`) not the registered number of consecutive, "
               "equal (1 frame or 2 %), non-overlapping blocks starting after the guard and ending within the "
               "trajectory; or \"overlapping/sliding\" blocks in the uncertainty definition or guard/block "
               "registration"),
         seed="\"four consecutive, equal, non-overlapping blocks after the guard\"",
         test="tests/audit/test_own_numbers.py::test_overlapping_blocks_cap_A6_and_A7"),
    Rule("block_spread_implausible", "implementation", {"A3": 0.0, "A6": 0.0}, "A6",
         rule=("variance ratio s_run²/s_canon² of the run's blocks against the canonical blocks of the same "
               "production (same definition) below F_0.001(n−1, n_c−1) — e.g. four blocks copied from the whole"
               " value"),
         seed="Block stability; fabricated evidence",
         test=("tests/audit/test_own_numbers.py::"
               "test_blocks_copied_from_the_whole_value_are_caught_against_the_canonical_blocks")),
    Rule("block_trend", "sampling", {"A6": 0.5}, "A6",
         rule=("backstop: `adequacy.trend_check` — the blocks' OLS slope significant at `block_trend_alpha` "
               "(tight but drifting blocks)"),
         seed="A6: \"…with drift and disagreement explicitly examined.\"",
         test=("tests/audit/test_check_table.py::"
               "test_planted_sampling_and_numeric_defect_lowers_the_item_its_row_names")),
    Rule("canonical_not_eligible", "note", {}, "A3",
         rule="the canonical estimate is outside its regime and no like-for-like window exists",
         seed="R4: \"v2 specifies canonical fitting settings and eligibility checks.\"",
         test=("tests/audit/test_registered_definitions.py::"
               "test_d_without_its_own_window_is_compared_on_the_registered_window")),
    Rule("charge_weighting_differs", "definition", {"A1": 0.0, "A2": 0.0}, "A2",
         rule=("(own matrix): σ equals the unit-charge weighting of its own matrix in a scaled-charge model — "
               "(no recorded matrix): σ ÷ the canonical σ on the same window matches the formal or unsigned "
               "weighting of the canonical Onsager matrix (within 25 % of its log distance) — σ / t+ computed "
               "with charges unlike the topology's"),
         seed=("same A2: \"Physical definition: … collective conductivity\" A3: \"Formulae, signs, cross-terms, "
               "constants … implement the stated estimator correctly.\""),
         test="tests/audit/test_claims.py::test_transport_with_charges_unlike_the_topology_is_A2_F_and_A1_missing"),
    Rule("cn_inconsistent_with_own_rdf", "implementation", {"A3": 0.0}, "A3",
         rule="a CN that is not 4πρ∫₀^rc g(r) r² dr of the run's own recorded RDF, beyond 5 % plus half a bin",
         seed="A3: \"Implementation: estimator implements the stated definition correctly\"",
         test="tests/audit/test_own_numbers_checks.py::test_cn_against_the_integral_of_its_own_recorded_rdf"),
    Rule("conductivity_without_cross_terms", "definition", {"A2": 0.0}, "A2",
         rule=("(own matrix): σ equals the diagonal-only weighting of its own matrix — σ without ionic "
               "cross-correlations (Nernst–Einstein delivered as σ)"),
         seed=("\"Physical definition: … collective conductivity includes cross-correlations\" Fig. S2a: \"NE "
               "denotes the Nernst–Einstein surrogate\""),
         test="tests/audit/test_own_numbers.py::test_consistency_rules_on_hand_written_entries"),
    Rule("definition_differs_from_canonical", "note", {}, "A3",
         rule="a definition unlike the canonical one: not compared",
         seed="R5: \"For matched definitions, …\"",
         test=("tests/audit/test_registered_definitions.py::"
               "test_contact_channel_named_by_the_registration_goes_to_the_reanalysis")),
    Rule("diagnostic_contradicts_evidence", "sampling", {"A5": 0.0}, "A5",
         rule="a reported diagnostic the evidence contradicts (β, fit window, plateau)",
         seed=("A.2: \"Candidate declarations are checked against the retained evidence rather than accepted as "
               "evaluation results.\""),
         test="tests/audit/test_claims.py::test_reported_diagnostic_contradicting_the_evidence_is_A5_zero"),
    Rule("diffusion_off_recorded_msd", "implementation", {"A3": 0.0}, "A3",
         rule="the same band on the run's own recorded MSD, where the result states no fit window",
         seed="A3 (as above)",
         test="tests/audit/test_own_numbers_checks.py::test_d_sigma_and_unsupported_values_against_the_trajectory"),
    Rule("diffusion_off_trajectory_msd", "implementation", {"A3": 0.0}, "A3",
         rule=("a reported D outside [min D / 1.5, max D × 1.5] of the trajectory's own MSD fitted on the "
               "re-derived diffusive window and on the run's own window — the reported one, else the registered"
               " one — (independent of the canonical interval's width)"),
         seed="A3 (as above)",
         test="tests/audit/test_own_numbers_checks.py::test_d_sigma_and_unsupported_values_against_the_trajectory"),
    Rule("estimator_recorded_failure", "implementation", {"A3": 0.0}, "A3",
         rule="a failure the run's estimator recorded in its diagnostics",
         seed="A.2: \"Candidate declarations are checked against the retained evidence\"",
         test=("tests/audit/test_check_table.py::"
               "test_planted_sampling_and_numeric_defect_lowers_the_item_its_row_names")),
    Rule("four_block_analysis_missing", "incomplete", {"A6": 0.0}, "A6",
         rule="fewer than four blocks",
         seed="A6: \"Whole-window and four-block results support the claimed adequacy\"",
         test=("tests/audit/test_check_table.py::"
               "test_planted_sampling_and_numeric_defect_lowers_the_item_its_row_names")),
    Rule("frame_differs_from_registration", "note", {"A4": 0.5}, "A4",
         rule="a declared reference frame unlike the registered one",
         seed="Table A3: \"Reference frame and transport convention are explicit\"",
         test="tests/audit/test_claims.py::test_result_in_another_frame_than_registered_is_A4"),
    Rule("ionicity_inconsistent", "implementation", {"A3": 0.0}, "A3",
         rule="ionicity (Haven ratio) against σ/σ_NE recorded beside it, 2 %",
         seed="Implementation",
         test=("tests/audit/test_own_numbers.py::"
               "test_honest_run_and_pipeline_format_pass_every_own_number_check_and_planted_faults_land")),
    Rule("labelled_extra_off_its_formula", "implementation", {"A3": 0.0}, "A3",
         rule=("a result labelled as an additional one (`runread.is_labelled_extra`) is judged as what it claims: a "
               "labelled Nernst–Einstein t+ against D+/(D+ + D−) of the run's own D, 2 %; it never delivers, nor is"
               " compared as, the required quantity"),
         seed=("§task: \"may be reported as an additional result but must be explicitly labeled\"; A3: "
               "\"Formulae … implement the stated estimator correctly.\""),
         test="tests/audit/test_honest_controls.py::test_a_labelled_ne_tplus_off_its_own_formula_is_A3"),
    Rule("missing_target", "missing", {"A1": 0.0}, "A1",
         rule=("a required target of the group (registry targets per case, the bundle's when given) is not "
               "delivered"),
         seed=("\"Every required observable and species-specific target is delivered … Missing targets remain "
               "explicit.\""),
         test="tests/analysis_registry/test_audit_checks.py::test_states_and_ratings_follow_the_codes"),
    Rule("msd_exponent_outside", "sampling", {"A5": 0.5}, "A5",
         rule="a reported MSD exponent outside the registered β range",
         seed="A5: \"Diagnostics support the required diffusive or asymptotic fitting regime\"",
         test="tests/analysis_registry/test_audit_checks.py::test_states_and_ratings_follow_the_codes"),
    Rule("no_value", "incomplete", {}, "A1",
         rule="an entry without a value or blocks",
         seed="\"M, a missing or incomplete required target.\"",
         test=""),
    Rule("nonfinite_blocks", "implementation", {"A3": 0.0, "A6": 0.0}, "A3",
         rule="non-finite block values",
         seed="A6: \"Whole-window and four-block results support the claimed adequacy\"",
         test="tests/analysis_registry/test_audit_checks.py::test_states_and_ratings_follow_the_codes"),
    Rule("nonfinite_value", "implementation", {"A3": 0.0}, "A3",
         rule="a non-finite whole-interval value",
         seed="A.1: \"deterministic methodological or numerical errors … are rated as not satisfied.\"",
         test=("tests/audit/test_check_table.py::"
               "test_planted_sampling_and_numeric_defect_lowers_the_item_its_row_names")),
    Rule("outside_canonical_r5", "implementation", {"A3": 0.0}, "A3",
         rule=("a stable structural value outside the canonical four-block 95 % interval "
               "(`rulebook.r5_interval`)"),
         seed=("R5: \"…canonical four-block 95% intervals, adding a 5% relative tolerance when intervals are too"
               " narrow.\""),
         test="tests/audit/test_claims.py::test_reported_value_outside_the_reanalysis_interval_is_A3"),
    Rule("plateau_not_reached", "sampling", {"A5": 0.5}, "A5",
         rule="a Green–Kubo plateau reported as not reached",
         seed="A5: \"…or viscosity plateau; a fitted number alone is insufficient.\"",
         test="tests/analysis_registry/test_audit_checks.py::test_states_and_ratings_follow_the_codes"),
    Rule("recorded_curve_not_compared", "note", {}, "A3",
         rule="a recorded MSD that cannot be compared (no window, too few lags)",
         seed="E3: \"Malformed records remain documented as submitted.\"",
         test=""),
    Rule("registered_after_results", "note", {"A2": 0.5}, "A2",
         rule="a definition registered after the results it governs, without `revises` and evidence",
         seed="§task: \"Do not … selectively revise definitions after inspecting results\"",
         test="tests/audit/test_claims.py::test_definition_registered_after_its_results_is_A2_and_E5"),
    Rule("required_not_compared", "note", {"A2": 0.5}, "A2",
         rule=("a required observable whose registered definition the reanalysis cannot express (all its "
               "results `definition_differs_from_canonical`)"),
         seed=("A2: \"Physical definitions … answer the stated physical question\"; R5: \"For matched definitions,"
               " …\""),
         test=("tests/audit/test_registered_definitions.py::"
               "test_required_observable_at_a_definition_the_audit_cannot_express_is_an_A2_finding")),
    Rule("required_result_missing", "missing", {"A1": 0.5}, "A1",
         rule=("a required result of the case — the list derived from the registry's required families and "
               "their per-case targets, or the bundle's `required_targets` (`required_results.required_results`),"
               " never from the run — is not delivered in its own family with its whole value and four blocks; "
               "its group becomes M and the finding lists every missing entry"),
         seed=("A1: \"Required outputs are present\"; task: the three Li–O channels of LHCE separately, D per "
               "species, σ with cross-correlations, the correlated t+, whole interval + four blocks"),
         test="tests/audit/test_spec_coverage.py::test_dropped_required_entry_lowers_A1",
         evidence="analysis/<case>/results.json, with the spec source (registry or bundle:cases/<case>.yaml)"),
    Rule("run_regime_check_failed", "sampling", {"A5": 0.5}, "A5",
         rule="a regime check the run reports as failed",
         seed="A5: \"Diagnostics support the required diffusive or asymptotic fitting regime\"",
         test=("tests/audit/test_check_table.py::"
               "test_planted_sampling_and_numeric_defect_lowers_the_item_its_row_names")),
    Rule("run_sampling_check_failed", "sampling", {"A6": 0.5}, "A6",
         rule="a sampling check the run's estimator reports as failed",
         seed="\"…or when a valid estimator is limited by insufficient sampling.\"",
         test=("tests/audit/test_check_table.py::"
               "test_planted_sampling_and_numeric_defect_lowers_the_item_its_row_names")),
    Rule("sigma_inconsistent_with_own_matrix", "implementation", {"A3": 0.0}, "A3",
         rule=("σ against e² Σ z_i z_j L^ij of the run's own Onsager block whose stated unit is already divided"
               " by k_B T V (`1/(J m s)`, `mol/(J m s)`), or Σ σ_ij of its own `sigma_ij_S_m`, up to a unit "
               "factor (10^n × 1, e², F², N_A, e, eN_A), 2 %"),
         seed="\"Implementation: estimator implements the stated definition correctly\"",
         test="tests/audit/test_own_numbers.py::test_sigma_off_its_own_matrix_is_A3_and_mixed_tplus_is_A2"),
    Rule("surrogate_definition", "definition", {"A1": 0.0, "A2": 0.0}, "A2",
         rule="a collective transport quantity recognised by its content as a self-diffusion surrogate",
         seed=("Fig. S2a: \"self-D denotes self-diffusion\"; A2: \"…transport conventions answer the stated "
               "physical question.\""),
         test="tests/audit/test_claims.py::test_surrogate_delivered_as_the_required_quantity_is_A2_F_and_A1_missing"),
    Rule("tplus_inconsistent_with_own_matrix", "implementation", {"A3": 0.0}, "A3",
         rule=("t+ ≠ its own numerator/denominator, or reproduced by no formula from its own matrix (same "
               "frame)"),
         seed="Implementation",
         test=("tests/audit/test_own_numbers.py::"
               "test_honest_run_and_pipeline_format_pass_every_own_number_check_and_planted_faults_land")),
    Rule("tplus_mixed_convention", "definition", {"A2": 0.0}, "A2",
         rule=("(own matrix): t+ reproduced from the run's own Onsager block / `details.L.whole` only by a "
               "mixed-up formula — in every case where present, whatever the sampling — t+ reproduced only by a"
               " mixed-up formula (`onsager.identify_transference_convention` on the canonical Onsager matrix, "
               "`rulebook.tplus_conventions` on the run's own)"),
         seed=("§4.3 case 1: \"longer trajectories cannot correct an estimator with inconsistent formula "
               "conventions\" R3: \"alternative conventions require definition-level comparison, not a sign-only "
               "test.\""),
         test="tests/audit/test_own_numbers.py::test_sigma_off_its_own_matrix_is_A3_and_mixed_tplus_is_A2"),
    Rule("trajectory_treatment_differs", "implementation", {"A4": 0.0}, "A4",
         rule=("a disagreement explained by the trajectory treatment (volume, temperature, wrapped coordinates,"
               " frame drift)"),
         seed=("A4: \"Periodic boundaries, unwrapping, molecular centres of mass … are handled consistently with"
               " the estimator.\""),
         test="tests/audit/test_claims.py::test_outside_interval_explained_by_a_wrong_volume_is_A4_not_A3"),
    Rule("value_contradicts_reanalysis", "implementation", {"A3": 0.0}, "A3",
         rule=("a transport value outside the canonical (or re-fitted) interval, or a D that does not follow "
               "from its own recorded MSD"),
         seed="A3: \"…numerical precision, and algorithms implement the stated estimator correctly.\"",
         test="tests/audit/test_claims.py::test_planted_transport_value_is_caught_on_the_reported_window"),
    Rule("value_withheld", "withheld", {"A6": 0.5}, "A6",
         rule="a value withheld with a stated reason (not_estimable; the analysis' rule 5)",
         seed="*adjudicator's rule*: \"Missing data are not zero-valued physical measurements.\"",
         test=("tests/audit/test_check_table.py::"
               "test_planted_sampling_and_numeric_defect_lowers_the_item_its_row_names")),
    Rule("value_without_artifact", "implementation", {"E1": 0.5, "A3": 0.0}, "E1",
         rule=("a value with no blocks, curve, RDF or matrix behind it that the reanalysis does not reproduce "
               "(beyond 2× its half-width and 10 %)"),
         seed="E1: \"Canonical lineage\"; fabricated evidence",
         test="tests/audit/test_own_numbers_checks.py::test_d_sigma_and_unsupported_values_against_the_trajectory"),
    Rule("whole_outside_blocks", "implementation", {"A3": 0.0}, "A3",
         rule=("whole value outside [min block − h, max block + h] (h the 95 % half-width of the blocks) by "
               "more than 2 % of the value for frame averages (thermodynamics, association), 10 % for fitted or"
               " positional estimates (finite-window bias)"),
         seed="\"Block stability: whole-interval and block values consistent\"",
         test=("tests/audit/test_own_numbers.py::"
               "test_honest_run_and_pipeline_format_pass_every_own_number_check_and_planted_faults_land")),
    Rule("window_too_short", "sampling", {"A6": 0.5}, "A6",
         rule=("the estimator states its window was too short for a value (SI, before not_estimable: the "
               "analysis' rule 6 precedes rule 5)"),
         seed="\"SI, insufficient sampling under a valid estimator\"",
         test=("tests/audit/test_check_table.py::"
               "test_planted_sampling_and_numeric_defect_lowers_the_item_its_row_names")),
    Rule("budget_exceeded", None, {"E5": 0.0, "O3": 0.0}, "E5",
         rule="(with unclaimed files): ledger ns + the unclaimed files' ns over the case or study budget",
         seed="\"100 ns per case, 300 ns in all\"",
         test="tests/audit/test_claims.py::test_consumption_in_unreported_branches_counts_against_the_budget"),
    Rule("budget_statement_disagrees", None, {"E5": 0.5}, "E5",
         rule="a budget the report or the terminal record states disagrees with the ledger",
         seed="\"100 ns per case, 300 ns in all\"; Consistency",
         test="tests/audit/test_claims.py::test_consumption_in_unreported_branches_counts_against_the_budget"),
    Rule("bundle_checksum", None, {}, "Sim1",
         rule="a file listed in `bundle_checksums.sha256` is missing or its sha256 differs",
         seed="same",
         test="tests/audit/test_audit_real.py::test_setup_mismatch_and_bundle_checksums"),
    Rule("bundle_missing", None, {}, "Sim1",
         rule="the agent input bundle is not found",
         seed="\"Setup: composition, force field … as frozen\"",
         test=""),
    Rule("claim_contradicted", None, {"E5": 0.5}, "E5",
         rule="O5 < 1: the terminal claim is contradicted by the evidence",
         seed="Consistency",
         test=("tests/audit/test_own_numbers.py::"
               "test_fabricated_records_without_trajectory_fail_E1_and_contract_vocabulary_for_O1")),
    Rule("dangling_symlink", None, {}, "E3",
         rule="a symbolic link whose target does not exist (never followed)",
         seed="E3: \"Required records parse, and … artifact references resolve.\"",
         test="tests/audit/test_claims.py::test_symlink_loop_dangling_link_and_unreadable_file_are_one_finding_each"),
    Rule("file_too_large", None, {}, "E3",
         rule="a file over the parse limit (not parsed)",
         seed="E3 (as above)",
         test="tests/audit/test_recorded_curves.py::test_hostile_recorded_curve_is_one_finding_and_nothing_else_breaks"),
    Rule("hash_budget_exhausted", None, {}, "E3",
         rule=("an artifact not checksummed because the audit has already checksummed `safeio.MAX_HASH_TOTAL_BYTES` "
               "(32 GiB, logical sizes) of the run's files: the audit's time stays bounded whatever the agent left"),
         seed="E3: \"event, attempt, and artifact references resolve\"",
         test="tests/audit/test_safeio.py::test_checksums_stop_at_the_audit_total_and_say_so",
         evidence="the artifact's path; the bytes already checksummed"),
    Rule("gate_record_inconsistent", None, {"Sim3": 0.0, "E5": 0.5}, "Sim3",
         rule="a recorded gate whose own value/threshold/relation contradict its `passed` flags or verdict",
         seed="\"Consistency\"",
         test=("tests/audit/test_own_numbers.py::"
               "test_honest_run_and_pipeline_format_pass_every_own_number_check_and_planted_faults_land")),
    Rule("judge_failed", None, {}, None,
         rule=(", `judge_output`: the external / LLM judge could not run, or its output is not a list of "
               "verdicts (rule verdicts stand)"),
         seed="§A.2: \"expert adjudication applied last\"",
         test="tests/audit/test_audit_real.py::test_failing_judge_keeps_rule_verdicts"),
    Rule("judge_output", None, {}, None,
         rule="the external / LLM judge output is not a list of verdicts (rule verdicts stand)",
         seed="§A.2: \"expert adjudication applied last\"",
         test="tests/audit/test_audit_real.py::test_external_judge_and_adjudication"),
    Rule("lineage_artifact_missing", None, {"E1": 0.0}, "E1",
         rule=("an artifact a completed attempt names does not exist; a completed production attempt without a "
               "trajectory and energy file on disk, or whose trajectory does not parse"),
         seed="\"Canonical lineage: reconstructable from the ledger\"",
         test=("tests/audit/test_own_numbers.py::"
               "test_fabricated_records_without_trajectory_fail_E1_and_contract_vocabulary_for_O1")),
    Rule("malformed_json", None, {}, "E3",
         rule="a record or result that does not parse (or is nested too deeply)",
         seed="E3: \"Malformed records remain documented as submitted.\"",
         test="tests/audit/test_safeio.py::test_malformed_json_line_and_nonfinite"),
    Rule("malformed_jsonl", None, {}, "E3",
         rule=("a JSONL record line that does not parse (one finding per line; malformed lines kept as "
               "submitted)"),
         seed="E3: \"Malformed records remain documented as submitted.\"",
         test="tests/audit/test_audit_real.py::test_malformed_records_and_symlink"),
    Rule("md_files_unclaimed", None, {"E1": 0.5, "E5": 0.5}, "E1",
         rule=("more MD runs (directory + stem of .xtc/.trr/.edr) in a case's equilibration/production "
               "directories than ledger attempts account for (hidden MD use); their simulated time (xtc frame "
               "headers) is stated"),
         seed="\"Canonical lineage\"; budget",
         test="tests/audit/test_own_numbers.py::test_production_at_another_temperature_and_hidden_md_attempt"),
    Rule("non_finite", None, {}, "A3",
         rule="NaN/Infinity in a parsed file",
         seed="A.1: \"deterministic methodological or numerical errors … are rated as not satisfied.\"",
         test="tests/audit/test_audit_real.py::test_failure_case_2_nan_tokens_are_findings"),
    Rule("next_action_contradicts_state", None, {"O2": 0.0, "O3": 0.5}, "O2",
         rule=("an unresolved observable's next action (observables.json or the terminal `unresolved` entry) is one "
               "the state → action table (`analysis.states.STATE_ACTIONS`) rules out for the audit's state: SI "
               "'correct the method', F 'extend sampling', not_estimable 'correct'"),
         seed=("§3.3/§4.2: SI → extend within budget or stop with the limitation stated; F → correct and recompute "
               "(\"longer trajectories cannot correct an estimator with inconsistent formula conventions\"); O2, O3"),
         test="tests/audit/test_next_actions.py::test_next_actions_unlike_their_states_lower_O2_and_O3",
         evidence="run_record/observables.json#/<case>/<observable>"),
    Rule("protocol_model_differs", "implementation", {"Sim1": 0.0}, "Sim1",
         rule=("a physics parameter of the production run input (`gmx dump -s`: integrator, dt, constraints, "
               "cut-off scheme, coulombtype/rcoulomb, vdw type/modifier/rvdw, DispCorr, PME order/spacing…) "
               "unlike the case's frozen protocol beyond `params/audit/protocol_tolerances.yaml`; both values "
               "named"),
         seed="Sim1: \"The model and protocol are the frozen ones\"; Table A1 Production",
         test="tests/audit/test_protocol_from_tpr.py::test_changed_cutoffs_lower_sim1_with_both_values",
         evidence="the production .tpr (gmx dump -s), the parameter, the frozen protocol's source"),
    Rule("protocol_output_coarser", "sampling", {"Sim4": 0.5}, "Sim4",
         rule=("an output interval of the production run input (nstxout-compressed, nstenergy, nstcalcenergy) "
               "coarser than the frozen protocol's (finer is allowed)"),
         seed="Production: the outputs the analyses need",
         test="tests/audit/test_protocol_from_tpr.py::test_coarser_trajectory_output_caps_sim4_at_half",
         evidence="the production .tpr (gmx dump -s), the parameter, the frozen protocol's source"),
    Rule("protocol_state_point_differs", "implementation", {"Sim4": 0.0}, "Sim4",
         rule=("the ensemble of the production run input (thermostat/barostat types, targets, τ, "
               "compressibility) unlike the case's frozen protocol; both values named"),
         seed="\"Production: at the case's state point\"",
         test="tests/audit/test_protocol_from_tpr.py::test_changed_thermostat_tau_lowers_sim4_with_both_values",
         evidence="the production .tpr (gmx dump -s), the parameter, the frozen protocol's source"),
    Rule("production_after_failed_gate", None, {"Sim3": 0.0}, "Sim3",
         rule="the last `gate_evaluated` event for the case's equilibration FAILED and production was entered",
         seed="\"Equilibration: production entered after the registered gate passed\"",
         test="tests/audit/test_own_numbers.py::test_production_after_a_failed_registered_gate_is_Sim3_zero_and_E5"),
    Rule("production_force_field_differs", None, {"Sim1": 0.0}, "Sim1",
         rule=("LJ matrix, atom types or charges of the production `.tpr` (`gmx dump`) differ from the "
               "equilibration's"),
         seed="\"Setup: force field … as frozen\"",
         test="tests/audit/test_own_numbers.py::test_production_with_a_changed_lj_sigma_is_Sim1_zero"),
    Rule("production_force_field_not_bundle", None, {"Sim1": 0.0}, "Sim1",
         rule=("the production tpr's LJ C6/C12 (relative 2·10⁻³), atom types or charges (10⁻⁴ e) differ from "
               "the frozen bundle's itps"),
         seed="Sim1: \"Setup: force field … as frozen\"",
         test=("tests/audit/test_own_numbers_frozen.py::"
               "test_lj_sigma_changed_in_equilibration_and_production_is_Sim1_zero_against_the_bundle")),
    Rule("production_length_disagrees", None, {"Sim4": 0.0, "E5": 0.5}, "Sim4",
         rule=("the production log's last step, the checkpoint's time (`gmx dump -cp`), the trajectory's end "
               "and the ledger's completed steps (fresh branches) disagree by more than a frame"),
         seed="Production; Consistency",
         test=("tests/audit/test_own_numbers.py::"
               "test_trajectory_and_energy_file_cut_short_while_log_and_ledger_say_full_length")),
    Rule("production_state_point_differs", None, {"Sim4": 0.0}, "Sim4",
         rule="thermostat target (`ref-t` of the production `.tpr`) ≠ the case's target temperature (0.5 K)",
         seed="\"Production: at the case's state point\"",
         test="tests/audit/test_own_numbers.py::test_production_at_another_temperature_and_hidden_md_attempt"),
    Rule("reanalysis_failed", None, {}, "A3",
         rule=("the canonical reanalysis of a valid production raised (A2/A3 then judged from the run's own "
               "results)"),
         seed="R5: \"…compared with canonical four-block 95% intervals\"",
         test="tests/audit/test_reanalysis_background.py::test_a_failed_reanalysis_makes_sim4_decode_and_report_once"),
    Rule("reanalysis_unavailable", None, {}, "A3",
         rule="the analysis package cannot be imported",
         seed="R5 (as above)",
         test=""),
    Rule("record_validation", None, {}, "E3",
         rule=(", `record_<code>`: the record validator (`mdbench.record.validate.validate_run`) could not run,"
               " or reported the error `<code>`"),
         seed="E3: \"Machine records parse and their references resolve\"",
         test=""),
    Rule("recorded_curve_unusable", None, {}, "E3",
         rule="an MSD a result cites that is missing, unreadable or malformed",
         seed="E3: \"Malformed records remain documented as submitted.\"",
         test="tests/audit/test_recorded_curves.py::test_hostile_recorded_curve_is_one_finding_and_nothing_else_breaks"),
    Rule("registered_gate_fails", None, {"Sim3": 0.0}, "Sim3",
         rule=("the run's registered equilibration gate (definition in force) re-evaluated on its NPT energy "
               "file with `mdbench.engine.gates.equilibration_gate` fails; our own 5 K / 2 % tolerances remain "
               "the backstop for runs that register none"),
         seed="same",
         test="tests/audit/test_own_numbers.py::test_registered_gate_reevaluated_on_the_energy_file"),
    Rule("report_number_differs", None, {"E5": 0.5}, "E5",
         rule=("a table row in a report.md section whose header names exactly one case: first cell a result "
               "name of that case (units in parentheses ignored), the first number of the next cells matches "
               "none of that case's values for it (powers of ten allowed: unit prefixes)"),
         seed="Consistency",
         test="tests/audit/test_own_numbers.py::test_report_per_case_number_unlike_results_is_E5"),
    Rule("stage_state_contradicts_gate", None, {"E5": 0.5}, "E5",
         rule="`stage_states.json` says em/equil valid, its last gate event FAILED",
         seed="Consistency",
         test="tests/audit/test_own_numbers.py::test_production_after_a_failed_registered_gate_is_Sim3_zero_and_E5"),
    Rule("state_disagrees", None, {"O2": 0.0}, "O2",
         rule=("the state the run declares for an observable differs from the audit's; confusing F with SI "
               "(either way) → O2 0, other disagreements ½"),
         seed=("O2: \"Missing delivery, deterministic method or numerical failure, and sampling insufficiency "
               "are correctly distinguished.\""),
         test="tests/audit/test_claims.py::test_run_calling_a_sampling_limited_estimator_F_is_an_O2_finding"),
    Rule("symlink_loop", None, {}, "E3",
         rule="a symbolic link loop (never followed)",
         seed="E3 (as above)",
         test="tests/audit/test_claims.py::test_symlink_loop_dangling_link_and_unreadable_file_are_one_finding_each"),
    Rule("symlink_not_followed", None, {}, "E3",
         rule="a symbolic link in the run directory (never followed)",
         seed="A.2: \"Candidate declarations are checked against the retained evidence\"",
         test="tests/audit/test_recorded_curves.py::test_hostile_recorded_curve_is_one_finding_and_nothing_else_breaks"),
    Rule("terminal_reference_unresolved", None, {"E3": 0.5}, "E3",
         rule=("a results path/pointer, event id or attempt id anywhere in the terminal record or "
               "observables.json does not resolve"),
         seed="\"Machine records: references resolve\"",
         test="tests/audit/test_own_numbers.py::test_terminal_references_inside_dict_entries_resolve_or_E3"),
    Rule("tree_truncated", None, {}, "E3",
         rule="the run directory walked only partly (depth or entry caps)",
         seed="same",
         test=""),
    Rule("unknown_observable", None, {}, None,
         rule="a results group the registry does not know (no audit group)",
         seed="A1: \"Every required observable … is delivered\" (the unknown group counts for none)",
         test=""),
    Rule("trajectory_frames_repeated", None, {"Sim4": 0.0, "E5": 0.5}, "Sim4",
         rule=("frames of the production trajectory that repeat earlier ones (minimum-image rms distance on up to"
               " 256 molecular centres below a fraction of the typical frame-to-frame step); the frames named; E5"
               " where the record calls the production valid"),
         seed="Production; Consistency: one continuous simulation of the run input",
         test="tests/audit/test_trajectory_integrity.py::test_second_half_repeating_the_first_lowers_sim4_naming_frames",
         evidence="the production .xtc, frame indices and times"),
    Rule("trajectory_splice", None, {"Sim4": 0.0, "E5": 0.5}, "Sim4",
         rule=("a frame-to-frame displacement above 3 × the median step and 12 robust deviations above it (two "
               "trajectories joined); the frames named"),
         seed="Production; Consistency: one continuous simulation of the run input",
         test="tests/audit/test_trajectory_integrity.py::test_splice_of_two_trajectories_lowers_sim4_naming_the_jump",
         evidence="the production .xtc, frame indices and times"),
    Rule("trajectory_times_irregular", None, {"Sim4": 0.0, "E5": 0.5}, "Sim4",
         rule=("xtc frame times not evenly spaced at the run input's dt × nstxout-compressed, or not "
               "tinit + step × dt; the frames named"),
         seed="Production; Consistency: one continuous simulation of the run input",
         test="tests/audit/test_trajectory_integrity.py::test_dropped_frames_are_irregular_times",
         evidence="the production .xtc frame headers"),
    Rule("extension_without_decision", None, {"O3": 0.5}, "O3",
         rule=("a production extension (`production_extension` event) of a run that keeps a scientific-state graph, "
               "with no `production_decision` to extend before it (`projection.judge_production_decisions`)"),
         seed="§5.2: \"identify the source of the problem before deciding whether to … continue sampling, or stop\"",
         test="tests/audit/test_production_decisions.py::test_extension_without_a_decision_caps_O3_at_half",
         evidence="run_record/events.jsonl (the extension), run_record/state_graph.json"),
    Rule("extension_on_unearnable", None, {"O3": 0.0}, "O3",
         rule=("an `extend` decision whose targets include a result more sampling cannot earn: not SI (F, M, "
               "not_estimable…), not credibly projected (also: blocks shorter than 3 correlation times of the "
               "result's series, or a half-width that rose since the case's previous decision beyond two 4-block "
               "estimates' spread, by the decisions' own inputs), or projected beyond the remaining budget"),
         seed=("§5.2: \"Invalid methods or implementation errors require correction rather than additional "
               "sampling\"; \"additional computation may consume resources without improving the scientific "
               "evidence\""),
         test="tests/audit/test_production_decisions.py::test_extension_spent_on_an_F_result_is_O3_zero",
         evidence="run_record/events.jsonl (the decision), run_record/state_graph.json"),
    Rule("extension_after_unreachable", None, {"O3": 0.0}, "O3",
         rule=("an `extend` decision all of whose targets an earlier decision of the case had projected out of "
               "reach, with no new production in between"),
         seed="§5.2: \"additional computation may consume resources without improving the scientific evidence\"",
         test="tests/audit/test_production_decisions.py::test_extension_after_a_projection_said_unreachable_is_O3_zero",
         evidence="run_record/events.jsonl (both decisions), run_record/state_graph.json"),
    Rule("unjustified_stop", None, {"O3": 0.5}, "O3",
         rule="a `stop` decision although one of its SI results was projected earned within the remaining budget",
         seed="§5.2: \"a valid method may still remain sampling-limited … may require longer simulations\"",
         test="tests/audit/test_production_decisions.py::test_stop_while_a_result_was_projected_within_budget_caps_O3_at_half",
         evidence="run_record/events.jsonl (the decision), run_record/state_graph.json"),
    Rule("decision_without_inputs", None, {"O3": 0.5}, "O3",
         rule=("an `extend` decision that does not record its inputs: no `half_widths` snapshot of its case's "
               "results, or a target with neither its own half-width nor an entry there, so its projection "
               "cannot be checked against what it knew"),
         seed="§5.2 (issue 46): \"Every decision is an event with its inputs\"",
         test="tests/audit/test_production_decisions.py::test_a_decision_without_its_inputs_caps_O3_at_half",
         evidence="run_record/events.jsonl (the decision)"),
    Rule("unreadable", None, {}, "E3",
         rule=("a file the run directory holds where a record belongs that cannot be read (a directory or FIFO,"
               " permissions)"),
         seed="E3: \"Required records parse, and event, attempt, and artifact references resolve.\"",
         test="tests/audit/test_claims.py::test_symlink_loop_dangling_link_and_unreadable_file_are_one_finding_each"),
)}


@dataclass(frozen=True)
class GroupCheck:
    """One check of an observable group found after the analysis items; the items it caps and its finding's
    item are its code's row in :data:`RULES` (``lowers``, ``item``).

    Attributes
    ----------
    group : str
        Observable group (``conductivity``, ``self_diffusion``…).
    check : Check
        The structured check (its severity decides the state).
    caps : dict
        Item → the highest rating it may keep (e.g. ``{"A3": 0.0}``); the table's ``lowers`` unless given (a
        code without a row yet).
    item : str
        The item of the finding that reports the check; the table's unless given.
    """

    group: str
    check: Check
    caps: dict[str, float] = field(default_factory=dict)
    item: str = ""

    def __post_init__(self) -> None:
        row = RULES.get(self.check.code)
        if row is not None and not self.caps:
            object.__setattr__(self, "caps", dict(row.lowers))
        if not self.item:
            object.__setattr__(self, "item", (row.item if row is not None else None) or "A3")


def rule(code: str) -> Rule:
    """The row of ``code``; a code missing from the table is a programming error (add its row)."""
    try:
        return RULES[code]
    except KeyError:
        raise KeyError(f"audit code {code!r} has no row in mdbench.audit.codes.RULES") from None


#: Check codes (:class:`mdbench.audit.model.Check`) and their severities; the item rules read these.
CODES: dict[str, str] = {c: r.severity for c, r in RULES.items() if r.severity is not None}


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


def check(code: str, message: str, evidence: tuple[Evidence, ...] = ()) -> Check:
    """A :class:`Check` of ``code`` with the table's severity."""
    sev = rule(code).severity
    if sev is None:
        raise ValueError(f"audit code {code!r} is a finding, not an observable's check (no severity in RULES)")
    return Check(code, sev, message, tuple(evidence))


def _check(code: str, message: str, *entries: Entry, path: str = "") -> Check:
    return check(code, message, tuple(Evidence(path, key=e.key) for e in entries))
