"""Checks of an observable group that see through a run's own numbers, applied after the analysis items.

The analysis items (:mod:`mdbench.audit.analysis_items`) give each observable group its state and A2–A7
ratings. The checks of this room — internal consistency (:mod:`mdbench.audit.consistency`: σ, t+, ionicity,
CN against ∫g(r), σ classified by its charges), fabricated evidence (:mod:`mdbench.audit.fabrication`), the
block layout (:mod:`mdbench.audit.blocklayout`), D against the trajectory's MSD
(:mod:`mdbench.audit.diffusion_vs_msd`), values without any artifact (:mod:`mdbench.audit.unsupported_values`) — add
:class:`~mdbench.audit.model.Check` records to a group with a cap on the items they land on. Applying them
is monotone: a check can lower a rating or worsen a state (C → SI for a sampling check, → F for a
definition or implementation check), never raise one, so an honest run keeps its score when none fires.
"""

from __future__ import annotations

from typing import Any

from mdbench.analysis.states import SI, C, F, M
from mdbench.audit import blocklayout, consistency, diffusion_vs_msd, fabrication, unsupported_values
from mdbench.audit.codes import GroupCheck
from mdbench.audit.model import Finding, Judgment, cap
from mdbench.audit.runread import RunData

#: States a check of this room leaves alone (nothing delivered or nothing applicable).
_FIXED_STATES = frozenset({M, "invalid_upstream", "not_reached"})
#: Codes stated whatever the group's state (their item is episode-level, e.g. E1), without changing it.
_ANY_STATE = frozenset({"value_without_artifact"})


def apply(case: str, groups: list[Any], judgments: list[Judgment], extras: list[GroupCheck]) -> list[Finding]:
    """Add ``extras`` to their groups (checks, state) and cap the per-observable ``judgments`` in place.

    Returns one finding per check, with its item.
    """
    by_group: dict[str, list[GroupCheck]] = {}
    for x in extras:
        by_group.setdefault(x.group, []).append(x)
    findings: list[Finding] = []
    for gr in groups:
        a = gr.assessment
        mine = by_group.get(a.observable)
        fixed = a.state in _FIXED_STATES
        if mine and fixed:  # nothing delivered by the rules; a value without evidence is still stated, state kept
            mine = [x for x in mine if x.check.code in _ANY_STATE]
        if not mine:
            continue
        for x in mine:
            a.checks.append(x.check)
            where = x.check.evidence[0].path if x.check.evidence else None
            findings.append(Finding(x.check.code, f"{a.observable}: {x.check.message}"[:600], where, item=x.item,
                                    case=case))
        hard = [x.check.message for x in mine if x.check.severity in ("definition", "implementation")]
        soft = [x.check.message for x in mine if x.check.severity == "sampling"]
        if fixed:
            pass
        elif hard and a.state != F:
            a.state, a.reason = F, "; ".join(hard)[:900]
            gr.failure_kind = "definition" if any(x.check.severity == "definition" for x in mine) else \
                "implementation"
        elif hard:
            a.reason = ("; ".join(hard) + "; " + a.reason)[:900]
        elif soft and a.state == C:
            a.state, a.reason = SI, "; ".join(soft)[:900]
        caps: dict[str, tuple[float, str]] = {}
        for x in mine:
            for item, r in x.caps.items():
                if item not in caps or r < caps[item][0]:
                    caps[item] = (r, x.check.message)
        for i, j in enumerate(judgments):
            if j.case == case and j.observable == a.observable and j.item in caps:
                judgments[i] = cap(j, *caps[j.item])
        for i, j in enumerate(gr.judgments):
            if j.item in caps:
                gr.judgments[i] = cap(j, *caps[j.item])
    return findings


def case_checks(run: RunData, case: str, upstream: str | None, canonical_results: Any, prod: Any, groups: list[Any],
                judgments: list[Judgment], refit: Any = None) -> list[Finding]:
    """Every check of this room on one case's delivered observables; ``groups`` and ``judgments`` (from
    :func:`mdbench.audit.analysis_items.assess_case`) are amended in place; ``refit`` is the case's
    :class:`~mdbench.audit.transport.WindowRefit` (its cached trajectory MSDs). Returns the findings."""
    if upstream is not None:
        return []
    extras = (consistency.checks(run, case, prod) + fabrication.block_spread_checks(run, case, canonical_results)
              + blocklayout.checks(run, case, prod)
              + diffusion_vs_msd.checks(run, case, canonical_results, refit, groups)
              + consistency.cn_checks(run, case, prod)
              + consistency.sigma_charge_checks(run, case, canonical_results, prod, refit))
    extras += unsupported_values.checks(run, case, canonical_results, groups, extras)
    return apply(case, groups, judgments, extras)
