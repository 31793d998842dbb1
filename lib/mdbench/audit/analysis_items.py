"""Analysis items A1–A7 per case and observable, observable states, and definition-level diagnosis.

The audit's state of an observable is derived from the evidence only — values, blocks, the estimator's
sampling checks and recorded failures, the canonical reanalysis — never from the state the run declared
(observables.json, the terminal record or a results entry's ``state`` label); :mod:`mdbench.audit.outcome`
compares the two afterwards (O1/O2). States (seed §A.2.2, the order of :mod:`mdbench.analysis.states`):

1. production invalid (Sim4 not satisfied or the run's production stage invalid) → ``invalid_upstream``;
   production never reached → ``not_reached``;
2. a required target is missing → ``M``;
3. a definition failure (transference convention mix-up, conductivity without cross-correlations, a
   self-diffusion surrogate recognised by its content, charges unlike the topology's) or an
   implementation/numerical failure (non-finite whole or block value; a failure the estimator recorded; a
   reported value or block mean outside the canonical four-block interval of a matched definition, on the
   reported fit window where the canonical estimate is outside its regime; a D that does not follow from the
   MSD the run recorded behind it, or a recorded MSD unlike the trajectory's, :func:`recorded_curve_checks`)
   → ``F``;
4. whole value present but the four-block analysis missing → ``M`` (incomplete required delivery);
5. a value withheld with a stated reason (a ratio whose denominator is consistent with zero) →
   ``not_estimable``;
6. a sampling diagnostic fails (the entry's own ``diagnostics.sampling_checks`` where reported — what each
   says, applied to the result it names; otherwise the audit's backstop: block 95 % half-width beyond the
   registered precision threshold of the group (``AuditGroup.precision_thresholds``); the diffusive exponent
   outside the registered range; no viscosity plateau; a reported diagnostic contradicted by the evidence,
   the reported fit window's own included) → ``SI``; the relative half-width is not used for
   quantities fluctuating about zero (pressure);
7. otherwise ``C``.

Each rule is a structured :class:`~mdbench.audit.model.Check` (:data:`CODES`: its code and severity) made
before any decision; the state follows from the severities and every item rating from the codes, so a
reworded message can never change a verdict. The groups, their targets per case and the group-specific
rules (definition checks, regime, treatment, R5) come from the registry (:mod:`mdbench.analysis.observables`).
The item rules and the seed sentence each implements are listed in ``docs/saeo-rules.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mdbench.analysis.observables import (
    AUDIT_GROUPS,
    audit_group,
)
from mdbench.analysis.observables import targets as registry_targets
from mdbench.audit.bundle import Bundle
from mdbench.audit.canonical import (  # noqa: F401 - re-exported: analysis_items is the public face
    _analysed_span_ps,
    _canonical_checks,
    _canonical_dt,
    _canonical_match,
    _cutoff,
    _definitions_match,
    _refit_on,
    _treatment_problem,
    _window_checks,
    beta_contradiction,
    frame_drift_checks,
    recorded_curve_checks,
    state_consistency,
)
from mdbench.audit.codes import (  # noqa: F401 - re-exported: analysis_items is the public face
    CODES,
    MISSING_CODES,
    REGIME_CHECK_NAMES,
    REGIME_CHECK_WORDS,
    REGIME_CODES,
    _check,
    check,
    is_regime_check,
)
from mdbench.audit.definitions import (  # noqa: F401 - re-exported: analysis_items is the public face
    SURROGATE_WORDS,
    UNIT_CHARGE_WORDS,
    UNSIGNED_WORDS,
    _canonical_ne,
    _canonical_tplus_check,
    _close,
    _definition_checks,
    _definition_text,
    _results_first_seen,
    _self_diffusion_values,
    _species_key,
    charge_weighting_checks,
    frame_registration_checks,
    onsager_from,
    recorded_charges,
    registration_order_checks,
    sigma_weightings,
    surrogate_checks,
)
from mdbench.audit.model import PER_OBSERVABLE_ITEMS, Check, Evidence, Judgment, ObservableAssessment
from mdbench.audit.ratings import _diag_keys, _ratings  # noqa: F401 - re-exported: analysis_items is the public face
from mdbench.audit.rulebook import R5_REL_TOL, audit_state, backstop, r5_agrees, r5_interval, tplus_conventions  # noqa: F401
from mdbench.audit.runread import (
    OBSERVABLE_GROUPS,
    Entry,
    RunData,
    group_entries,
    is_labelled_extra,
    match_target,
    target_entries_first,
    tokens,
)
from mdbench.audit.sampling import (  # noqa: F401 - re-exported: analysis_items is the public face
    _check_applies,
    _declared,
    _numeric_checks,
    _own_checks,
    _sampling_checks,
    _too_short,
    _withheld,
    analysis_settings,
    beta_window,
    precision_limits,
)
from mdbench.audit.transport import (
    WindowRefit,
)

#: Groups compared with the canonical reanalysis by the R5 rule (stable structural quantities).
R5_GROUPS = tuple(g.name for g in AUDIT_GROUPS if g.canonical_r5)
#: Groups whose estimator needs a regime/plateau diagnostic (A5).
REGIME_GROUPS = tuple(g.name for g in AUDIT_GROUPS if g.regime)


@dataclass
class GroupResult:
    """Assessment of one observable group of one case (state plus per-item judgments)."""

    assessment: ObservableAssessment
    judgments: list[Judgment] = field(default_factory=list)
    failure_kind: str | None = None  # "definition" | "implementation" | None


def required_targets(case: str, bundle: Bundle) -> dict[str, list[str]]:
    """Observable group → required targets for a case (bundle first, the registry's otherwise)."""
    req = registry_targets(case)
    cdef = bundle.cases.get(case)
    if cdef is not None and cdef.required_targets:
        req.update({k: list(v) for k, v in cdef.required_targets.items() if k in req})
    return req


def _state(checks: list[Check], missing: list[str]) -> tuple[str, str]:
    """The group's state from its checks by the analysis' own classifier
    (:func:`~mdbench.audit.rulebook.audit_state`)."""
    return audit_state(checks, missing)


def _failed_own_checks(e: Entry) -> bool:
    """True when an entry's own ``diagnostics.sampling_checks`` report a failed check."""
    diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
    own = diag.get("sampling_checks") if isinstance(diag.get("sampling_checks"), dict) else {}
    return any(v is False for v in list(own.values())[:64])


def assess_group(run: RunData, case: str, group: str, targets: list[str], entries: dict[str, Entry],
                 canonical: dict[str, Entry] | None, upstream: str | None,
                 canonical_results: Any | None = None, prod_state: dict[str, Any] | None = None,
                 others: dict[str, dict[str, Entry]] | None = None, refit: WindowRefit | None = None
                 ) -> GroupResult:
    """State and A2–A7 judgments of one observable group of one case (rules in the module docstring).

    The checks (:class:`~mdbench.audit.model.Check`) are made first, each with a code and a severity; the
    state and every rating follow from those codes, never from the wording of a message.
    """
    g = audit_group(group)
    res_rel = f"analysis/{case}/results.json"
    states = run.run_observable_states(case)
    run_state = states.get(group, {}).get("state") if states else None
    for k, v in states.items():
        if run_state is None and group in tokens(k) | {k.lower()}:
            run_state = v.get("state")

    def done(state: str, reason: str, ratings: dict[str, tuple[float | None, str]], ev: list[Evidence],
             checks: list[Check], chosen: list[Entry], kind: str | None = None, reported: float | None = None,
             canon: float | None = None, units: str | None = None) -> GroupResult:
        a = ObservableAssessment(case, group, state, reason, run_state=run_state, reported_value=reported,
                                 canonical_value=canon, units=units, evidence=ev,
                                 values={e.key: float(e.value) for e in chosen if e.finite_value}, checks=checks)
        js = [Judgment(item, r, why, case, group, evidence=list(ev)) for item, (r, why) in ratings.items()]
        return GroupResult(a, js, kind)

    if upstream in ("invalid_upstream", "not_reached"):
        na = {i: (None, "not applicable: " + upstream) for i in PER_OBSERVABLE_ITEMS}
        return done(upstream, f"production data {upstream.replace('_', ' ')}", na, [], [], [])
    chosen: list[Entry] = []
    missing: list[str] = []
    required = {k: e for k, e in entries.items() if not is_labelled_extra(e.raw)}  # a labelled extra delivers none
    if targets:
        for t in targets:
            e = match_target(group, t, required)
            (chosen.append(e) if e is not None else missing.append(t))
    else:
        chosen = list(target_entries_first(group, required).values())[:1] if required else []
        if not chosen:
            missing.append(group)
    ev = [Evidence(res_rel, key=e.key) for e in chosen]
    gaps = [check("missing_target", f"{group}: {t} not delivered", (Evidence(res_rel),))
            for t in missing]
    if not chosen:
        r = {i: (None, "observable not delivered (scored under A1)") for i in PER_OBSERVABLE_ITEMS}
        return done("M", f"missing: {', '.join(missing)}", r, ev, gaps, chosen)
    main = chosen[0]
    units = main.raw.get("unit", main.raw.get("units")) if isinstance(main.raw, dict) else None
    extra = [e for e in entries.values() if e not in chosen]
    regs = run.in_force(*g.definition_words, case=case) if g.definition_words else []
    reg_text = " ".join(f"{k} {v}" for r in regs for k, v in (r.get("definition") or {}).items()
                        if isinstance(r.get("definition"), dict) and any(w in str(k).lower() for w in (
                            g.name, *g.definition_words[:1]) if g.definition_check)).lower()
    checks = gaps + _definition_checks(g, chosen, canonical, canonical_results, res_rel, others, reg_text)
    checks += _numeric_checks(chosen, extra, res_rel)
    curves, causes = recorded_curve_checks(g, chosen, run, case, canonical, refit, res_rel, prod_state)
    checks += curves
    r5, canon_value = _canonical_checks(g, chosen, canonical, res_rel, prod_state, canonical_results, refit, causes)
    checks += r5 + frame_registration_checks(g, chosen, regs, res_rel)
    checks += charge_weighting_checks(g, chosen, (prod_state or {}).get("charges_e"), canonical_results, reg_text,
                                      res_rel)
    # Table A3: block sensitivity of every delivered member of the group (RDF minima beside the CNs)
    # (a member without a finite value whose own sampling checks failed is SI for the analysis too: weakest member)
    checks += _sampling_checks(g, chosen + [e for e in extra if e.finite_value or _failed_own_checks(e)], res_rel,
                               precision_limits(run, case, group), lambda e: precision_limits(run, case, group, e.key))
    state, reason = _state(checks, missing)
    severities = {c.severity for c in checks}
    kind = "definition" if "definition" in severities else ("implementation" if "implementation" in severities
                                                            else None)
    checks += registration_order_checks(run, case, regs, res_rel)
    usable = [e for e in chosen if e.finite_value] or chosen
    ratings = _ratings(g, checks, regs, usable, prod_state)
    return done(state, reason, ratings, ev, checks, chosen, kind, main.value if main.finite_value else None,
                canon_value, units if isinstance(units, str) else None)


def assess_case(run: RunData, bundle: Bundle, case: str, upstream: str | None,
                canonical_results: Any | None, prod_state: dict[str, Any] | None = None,
                refit: WindowRefit | None = None) -> tuple[list[Judgment], list[GroupResult]]:
    """All analysis judgments (A1 per case; A2–A7 per observable) and observable states of one case."""
    groups = group_entries(run.results.get(case))
    canon_groups = group_entries(canonical_results) if canonical_results is not None else None
    req = required_targets(case, bundle)
    out: list[GroupResult] = []
    for g in OBSERVABLE_GROUPS:
        out.append(assess_group(run, case, g, req[g], groups[g], canon_groups[g] if canon_groups else None,
                                upstream, canonical_results, prod_state, groups, refit))
    judgments = [j for gr in out for j in gr.judgments]
    res_rel = f"analysis/{case}/results.json"
    if upstream in ("invalid_upstream", "not_reached"):
        judgments.append(Judgment("A1", None, f"production {upstream}: coverage not applicable", case))
        return judgments, out
    # seed A.1: "Missing required estimators or results ... are rated as not satisfied" -- whether or not the
    # run declared them; a surrogate delivered in place of the required quantity leaves it missing
    missing = [gr.assessment for gr in out if any(c.code in MISSING_CODES for c in gr.assessment.checks)]
    if not missing:
        judgments.append(Judgment("A1", 1.0, "every required observable and species-specific target delivered",
                                  case, evidence=[Evidence(res_rel)]))
    else:
        judgments.append(Judgment("A1", 0.0, "missing: " + "; ".join(f"{m.observable} ({m.reason})" for m in missing),
                                  case, evidence=[Evidence(res_rel)]))
    return judgments, out
