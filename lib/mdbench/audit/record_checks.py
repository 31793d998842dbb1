"""Episode-level checks of a run against its own record, applied to the judgments: each finding's code names
the items it lowers (:data:`mdbench.audit.codes.RULES`). The checks live in modules named for what they check:
:mod:`~mdbench.audit.gate_checks` (Sim3, E5), :mod:`~mdbench.audit.production_checks` (Sim1, Sim4, E5, read with
:mod:`~mdbench.audit.gmx_dump`), :mod:`~mdbench.audit.frozen_ff` (Sim1 against the bundle),
:mod:`~mdbench.audit.fabrication` (lineage artifacts, E1), :mod:`~mdbench.audit.unclaimed_files` (E1, E5, O3),
:mod:`~mdbench.audit.report_numbers` (E5), :mod:`~mdbench.audit.references` (E3); E5 is not 1 when O5 finds
the terminal claim contradicted by the evidence (``claim_contradicted``). Two or more E5 findings rate E5 = 0.
"""

from __future__ import annotations

from typing import Any

from mdbench.audit import frozen_ff
from mdbench.audit.codes import rule
from mdbench.audit.evidence import CASE_BUDGET_NS, REC, STUDY_BUDGET_NS, ledger_consumption
from mdbench.audit.fabrication import lineage_artifacts
from mdbench.audit.gate_checks import gate_findings
from mdbench.audit.model import Finding, Judgment, PER_CASE_ITEMS, cap
from mdbench.audit.production_checks import force_field_differs, production_findings
from mdbench.audit.references import unresolved_references
from mdbench.audit.report_numbers import report_case_mismatches
from mdbench.audit.unclaimed_files import unclaimed_md_files
from mdbench.audit.runread import RunData


def precompute_case_findings(run: RunData, bundle: Any, case: str, pf: Any) -> None:
    """:func:`_case_findings` of one case now, kept for :func:`amend` (the audit calls it while the reanalysis
    runs in its child process; they read only the record, the run inputs and the production's files)."""
    calls: list[tuple] = []
    _case_findings(run, bundle, case, pf, lambda *a: calls.append(a))
    run.fs.__dict__.setdefault("_case_findings", {})[case] = (pf, calls)


def _case_findings_kept(run: RunData, bundle: Any, case: str, pf: Any, add: Any) -> None:
    """:func:`_case_findings` through ``add``: replayed from :func:`precompute_case_findings` where it ran on the
    same production files object, else computed now."""
    kept = run.fs.__dict__.get("_case_findings", {}).get(case)
    if kept is not None and kept[0] is pf:
        for a in kept[1]:
            add(*a)
    else:
        _case_findings(run, bundle, case, pf, add)


def _case_findings(run: RunData, bundle: Any, case: str, pf: Any, add: Any) -> None:
    """The gate, force-field and production checks of one case, reported through ``add`` (see :func:`amend`)."""
    sim3, e5 = gate_findings(run, case)
    for m in sim3:  # a gate record contradicting itself is in both lists: its row lowers Sim3 and E5
        add("production_after_failed_gate" if "entered" in m else "registered_gate_fails" if "re-evaluated" in m
            else "gate_record_inconsistent", case, f"{case}: {m}", f"{REC}/events.jsonl")
    for m in e5:
        if "stage_states" in m:
            add("stage_state_contradicts_gate", case, m, f"{REC}/stage_states.json")
    ff = force_field_differs(run, case, pf)
    if ff:
        add("production_force_field_differs", case, ff, getattr(pf, "tpr", None))
    if (fb := frozen_ff.production_vs_bundle(run, bundle, case, pf)):
        add("production_force_field_not_bundle", case, fb, getattr(pf, "tpr", None))
    p4, _ = production_findings(run, bundle, case, pf)  # a length disagreement is in both lists (Sim4 and E5)
    for m in p4:
        add("production_state_point_differs" if "couples" in m else "production_length_disagrees", case, m,
            getattr(pf, "tpr", None))


def amend(run: RunData, bundle: Any, prods: dict[str, Any], judgments: list[Judgment], assessments: list[Any]
          ) -> list[Finding]:
    """Apply the checks of the module docstring to ``judgments`` (in place, ratings only lowered); returns
    their findings."""
    findings: list[Finding] = []
    caps: dict[tuple[str, str | None], list[tuple[float, str]]] = {}

    def add(code: str, case: str | None, msg: str, path: str | None, line: int | None = None) -> None:
        """One finding of ``code``; the items it lowers are its row's (:data:`mdbench.audit.codes.RULES`)."""
        row = rule(code)
        for item, rating in row.lowers.items():
            caps.setdefault((item, case if item in PER_CASE_ITEMS else None), []).append((rating, msg))
        findings.append(Finding(code, msg[:600], path, line, item=row.item, case=case))

    for case in run.cases:
        _case_findings_kept(run, bundle, case, prods.get(case), add)
    for m in lineage_artifacts(run, prods):
        add("lineage_artifact_missing", None, m, f"{REC}/attempts.jsonl")
    for a in assessments:  # a delivered value no artifact supports (its finding is the group's)
        for c in getattr(a, "checks", [])[:200]:
            if c.code == "value_without_artifact":
                caps.setdefault(("E1", None), []).append((rule(c.code).lowers["E1"], c.message))
    hidden: dict[str, float] = {}
    for m in unclaimed_md_files(run, hidden):
        add("md_files_unclaimed", None, m, f"{REC}/attempts.jsonl")
    if hidden:  # their MD time counts toward the budget (seed: 100 ns per case, 300 ns in all)
        cons = ledger_consumption(run)
        for case, ns in hidden.items():
            total = cons.per_case_ns.get(case, 0.0) + ns
            if total > CASE_BUDGET_NS + 1e-9:
                m = (f"{case}: {total:.4g} ns of MD with the unclaimed files exceeds the {CASE_BUDGET_NS:g} ns case "
                     "budget")
                add("budget_exceeded", None, m, f"{REC}/attempts.jsonl")
        if cons.total_ns + sum(hidden.values()) > STUDY_BUDGET_NS + 1e-9:
            total_ns = cons.total_ns + sum(hidden.values())
            m = f"{total_ns:.4g} ns of MD with the unclaimed files exceeds {STUDY_BUDGET_NS:g} ns"
            add("budget_exceeded", None, m, f"{REC}/attempts.jsonl")
    for line, m in report_case_mismatches(run, assessments)[:5]:
        add("report_number_differs", None, m, "report.md", line)
    for m in unresolved_references(run):  # one finding per reference: its JSON pointer is the location
        where = m.split(" ", 1)[0]
        doc, _, ptr = where.partition(".")
        rel = f"{REC}/episode_terminal.json" if doc == "episode_terminal" else f"{REC}/observables.json"
        add("terminal_reference_unresolved", None, m, f"{rel}#/{ptr.replace('.', '/')}")
    o5 = next((j for j in judgments if j.item == "O5" and j.case is None), None)
    if o5 is not None and o5.rating is not None and o5.rating < 1 and run.claimed_outcome() is not None:
        # a claim that the evidence contradicts (no claim at all is O5's own matter, not an inconsistency)
        add("claim_contradicted", None, f"the terminal claim is contradicted by the evidence (O5: {o5.reason[:200]})",
            f"{REC}/episode_terminal.json")
    for i, j in enumerate(judgments):
        got = caps.get((j.item, j.case))
        if got and j.observable is None:
            n = len(got)
            rating = min(r for r, _ in got)
            if j.item == "E5" and n > 1:
                rating = 0.0  # two or more contradictions in the record
            judgments[i] = cap(j, rating, "; ".join(m for _, m in got[:5]))
    return findings  # de-duplicated with every other finding by model.deduplicate (one rule)
