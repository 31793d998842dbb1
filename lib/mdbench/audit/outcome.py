"""Outcome items O1–O5: what the audit found unresolved versus what the run detected, classified,
did about, propagated to its terminal record, and claimed.

Expected outcome (used by O5): ``partial`` when any required observable of a case is not C (SI, F, M,
invalid_upstream, not_reached); otherwise ``recovered_valid`` when the ledger holds failed, interrupted or
discarded attempts and ``clean_valid`` when it does not; ``candidate_failure`` when no case has a valid
production. Claiming clean/recovered validity while obligations are unresolved rates O5 = 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

from mdbench.analysis.projection import judge_production_decisions
from mdbench.analysis.states import SI, STATE_ACTIONS, C, F, contradicting_action
from mdbench.audit.codes import rule
from mdbench.audit.model import UNRESOLVED_STATES, Evidence, Finding, Judgment, ObservableAssessment
from mdbench.audit.runread import RunData, tokens
from mdbench.record.state_graph import from_json

TERM = "run_record/episode_terminal.json"
OBS = "run_record/observables.json"
GRAPH = "run_record/state_graph.json"
EVENTS = "run_record/events.jsonl"
_STOP_WORDS = ("stop", "terminat", "budget_exhausted", "episode_terminal")
_ACTION_WORDS = ("stop", "decision", "extension", "extend", "reanaly", "recover", "repair", "action", "retry")


def _run_state(run: RunData, case: str, group: str) -> str | None:
    states = run.run_observable_states(case)
    if group in states:
        return states[group].get("state")
    for k, v in states.items():
        if group in tokens(k) or set(group.split("_")) <= tokens(k):
            return v.get("state")
    return None


#: At most this many terminal entries of one observable are read for its next actions (a hostile terminal).
MAX_ACTION_ENTRIES = 256


def _listed_entries(run: RunData, case: str, group: str) -> Iterator[dict]:
    """Every terminal ``unresolved`` entry of ``case``/``group`` (its members' entries included), in order."""
    t = run.terminal if isinstance(run.terminal, dict) else {}
    for u in t.get("unresolved") or []:
        if not isinstance(u, dict):
            continue
        if u.get("case") not in (None, case):
            continue
        name = str(u.get("observable", u.get("item", u.get("name", ""))))
        if name == group or group in tokens(name) or set(group.split("_")) <= tokens(name):
            yield u


def _listed_unresolved(run: RunData, case: str, group: str) -> dict | None:
    return next(_listed_entries(run, case, group), None)


def expected_outcome(run: RunData, assessments: list[ObservableAssessment], valid_cases: list[str]) -> str:
    """Outcome the evidence supports (rule in the module docstring)."""
    if not valid_cases:
        return "candidate_failure"
    if any(a.state in UNRESOLVED_STATES for a in assessments):
        return "partial"
    if any(a.get("status") in ("failed", "interrupted", "discarded") for a in run.attempts.values()):
        return "recovered_valid"
    return "clean_valid"


#: Declared states that count as detecting an unresolved obligation (the contract vocabulary, C excluded).
_UNRESOLVED_WORDS = UNRESOLVED_STATES


#: Confusions of a deterministic failure with a sampling limitation (either way): O2 not satisfied.
_F_SI_CONFUSIONS = frozenset({(F, SI), (F, C), (SI, F), (C, F)})


def declared_state(run: RunData, a: ObservableAssessment) -> str | None:
    """The state the run declared for an observable (observables.json, else its terminal ``unresolved``)."""
    rs = _run_state(run, a.case, a.observable)
    if rs is None:
        lu = _listed_unresolved(run, a.case, a.observable)
        rs = lu.get("state") if isinstance(lu, dict) else None
    return rs if isinstance(rs, str) else None


def state_disagreements(run: RunData, assessments: list[ObservableAssessment]) -> list[Finding]:
    """One O2 finding per observable whose declared state differs from the audit's own (derived from the
    evidence by a separate code path: :mod:`mdbench.audit.analysis_items` never reads the declared states)."""
    out = []
    for a in assessments:
        rs = declared_state(run, a)
        if rs is not None and rs != a.state:
            out.append(Finding("state_disagrees", f"{a.case}/{a.observable}: run declares {rs}, the audit finds "
                               f"{a.state} ({a.reason[:200]})", f"{OBS}#/{a.case}/{a.observable}", item="O2", case=a.case))
    return out


#: Fields of an observables.json entry or a terminal ``unresolved`` entry that state the run's next action.
_ACTION_FIELDS = ("next_action", "action", "planned_action", "next_step")


def next_action_conflicts(run: RunData, assessments: list[ObservableAssessment]
                          ) -> list[tuple[ObservableAssessment, str, str]]:
    """(observable, the run's next action, the contradicting kind) for every unresolved observable whose next
    action the seed's state → action table (:data:`mdbench.analysis.states.STATE_ACTIONS`) says treats it as
    another state: an SI result to be corrected, an F result to be extended. The audit's own state is used,
    on the observable's recorded state and on every terminal entry of it (its members').

    An entry that declares another unresolved state than the audit's *through a failed input* (its reason
    ``input …``: a member the run's state graph marks F because an input of it failed) and whose action is the
    one that state admits is not a contradiction of actions (its action is to repair that input); an entry
    that declares another state on its own account is judged by the audit's state like every other."""
    out = []
    for a in assessments:
        if a.state not in UNRESOLVED_STATES:
            continue
        for text in _action_texts(run, a):
            kind = contradicting_action(a.state, text)
            if kind is not None:
                out.append((a, text, kind))
                break
    return out


def _action_texts(run: RunData, a: ObservableAssessment) -> list[str]:
    """The next actions the run states for ``a`` (recorded state, then each terminal entry), less those that
    follow another unresolved state their own entry declares."""
    texts = []
    listed = islice(_listed_entries(run, a.case, a.observable), MAX_ACTION_ENTRIES)
    for src in (run.run_observable_states(a.case).get(a.observable), *listed):
        if not isinstance(src, dict):
            continue
        declared = src.get("state") if isinstance(src.get("state"), str) else None
        for k in _ACTION_FIELDS:
            if not isinstance(src.get(k), str):
                continue
            text = str(src[k])[:2000]
            if (declared in UNRESOLVED_STATES and declared != a.state and _through_an_input(src)
                    and contradicting_action(declared, text) is None):
                continue
            texts.append(text)
    return texts


def _through_an_input(entry: dict) -> bool:
    """The entry's state came to it through a failed input (the state graph's propagation: its reason starts
    ``input …``), not from its own checks."""
    return str(entry.get("reason") or "").startswith("input ")


def next_action_findings(run: RunData, assessments: list[ObservableAssessment]) -> list[Finding]:
    """One ``next_action_contradicts_state`` finding (O2) per conflict of :func:`next_action_conflicts`."""
    return [Finding("next_action_contradicts_state", f"{a.case}/{a.observable} is {a.state}, its next action "
                    f"{text[:160]!r} is to {kind}: {STATE_ACTIONS[a.state].rule}", f"{OBS}#/{a.case}/{a.observable}",
                    item="O2", case=a.case) for a, text, kind in next_action_conflicts(run, assessments)]


def production_decision_findings(run: RunData) -> list[Finding]:
    """O3 of a run that keeps a scientific-state graph (``run_record/state_graph.json``): its production
    extensions and stops against its own recorded decisions and projections
    (:func:`mdbench.analysis.projection.judge_production_decisions`) — an extension without a decision, one spent
    on a result more sampling cannot earn (F, M, not credibly projected, beyond the budget) or after the case's
    projection had said out of reach, a stop while a result was projected earned in the budget. A run without a
    graph: no finding (judged as before)."""
    doc = run.fs.read_json(GRAPH)
    if not isinstance(doc, dict):
        return []
    try:
        verdict = judge_production_decisions([e for _, e in run.events], from_json(doc))
    except (TypeError, ValueError, AttributeError, KeyError):  # a hostile graph or event payload: judged as before
        return []
    return [Finding(str(f["code"]), str(f.get("message", ""))[:900], f"{EVENTS}#{f.get('event_id') or ''}",
                    item="O3", case=f.get("case") if isinstance(f.get("case"), str) else None)
            for f in verdict.get("findings", []) if str(f.get("code")) in _DECISION_CODES]


#: The codes :func:`judge_production_decisions` reports (rows of the one check table).
_DECISION_CODES = ("extension_without_decision", "extension_on_unearnable", "extension_after_unreachable",
                   "unjustified_stop", "decision_without_inputs")


def _detection(run: RunData, assessments: list[ObservableAssessment], unresolved: list[ObservableAssessment]
               ) -> tuple[list[ObservableAssessment], list[str], list[ObservableAssessment], list[str]]:
    """(unresolved observables the run recognised in the contract vocabulary, mislabelled lines, failures it
    labelled SI/C, F↔SI confusions among every labelled observable)."""
    detected, mislabelled, f_as_si = [], [], []
    for a in unresolved:
        rs = _run_state(run, a.case, a.observable)
        lu = _listed_unresolved(run, a.case, a.observable)
        listed_state = lu.get("state") if isinstance(lu, dict) else None
        claimed = rs if rs not in (None, "C") else listed_state
        # only states of the contract vocabulary detect anything ("estimated", "ok?" do not)
        if (rs in _UNRESOLVED_WORDS) or (lu is not None and (listed_state is None or listed_state in _UNRESOLVED_WORDS)):
            detected.append(a)
            if claimed is not None and claimed != a.state:
                mislabelled.append(f"{a.case}/{a.observable}: run says {claimed}, audit finds {a.state}")
                if a.state == "F" and claimed in ("SI", "C"):
                    f_as_si.append(a)
    # classification: every observable the run labelled, against the audit's own state
    confusions: list[str] = []
    for a in assessments:
        rs = declared_state(run, a)
        if rs is None or rs == a.state:
            continue
        line = f"{a.case}/{a.observable}: run says {rs}, audit finds {a.state}"
        if line not in mislabelled:
            mislabelled.append(line)
        if (a.state, rs) in _F_SI_CONFUSIONS:
            confusions.append(line)
    return detected, mislabelled, f_as_si, confusions


def _o1(n: int, detected: list[ObservableAssessment], names: str, ev_o: Evidence, ev_t: Evidence) -> Judgment:
    """O1 detection: the share of the audit's unresolved observables the run recognised."""
    if n == 0:
        return Judgment("O1", 1.0, "no unresolved obligation found by the audit", evidence=[ev_o])
    frac = len(detected) / n
    r = 1.0 if frac == 1 else (0.5 if frac > 0 else 0.0)
    return Judgment("O1", r, f"run recognised {len(detected)}/{n} unresolved observables ({names})",
                    evidence=[ev_o, ev_t])


def _o2(n: int, detected: list[ObservableAssessment], mislabelled: list[str], f_as_si: list[ObservableAssessment],
        confusions: list[str], ev_o: Evidence, conflicts: list[str] = ()) -> Judgment:
    """O2 classification: F, SI and M told apart as the audit finds them — in the states the run declares and in
    the next actions it plans (an SI result to be corrected or an F result to be extended confuses them)."""
    if conflicts:
        return Judgment("O2", 0.0, "deterministic failure and sampling limitation confused in the next actions: "
                        + "; ".join(conflicts[:8]), evidence=[ev_o])
    if n == 0 and mislabelled:
        return Judgment("O2", 0.0 if confusions else 0.5, "; ".join((confusions or mislabelled)[:8]), evidence=[ev_o])
    if n == 0:
        return Judgment("O2", 1.0, "nothing to classify", evidence=[ev_o])
    if not detected:
        return Judgment("O2", 0.0, "no unresolved observable was recognised, so none was classified", evidence=[ev_o])
    if f_as_si or confusions:
        return Judgment("O2", 0.0, "deterministic failure and sampling limitation confused: " + "; ".join(
            (confusions or mislabelled)[:8]), evidence=[ev_o])
    if mislabelled:
        return Judgment("O2", 0.5, "; ".join(mislabelled[:8]), evidence=[ev_o])
    return Judgment("O2", 1.0, "missing, failed and sampling-limited results distinguished as the audit finds them",
                    evidence=[ev_o])


def _o3(run: RunData, unresolved: list[ObservableAssessment], t: dict[str, Any], ev_t: Evidence,
        conflicts: list[str] = ()) -> Judgment:
    """O3 action / stopping: every unresolved item needs an auditable reason (a per-item reason or next action in
    the terminal record, a repair/reanalysis event, or — for SI/M/not-reached items — a recorded stopping
    decision); a next action the state → action table rules out (:func:`next_action_conflicts`) does not address
    its item (O3 ≤ ½)."""
    j = _o3_addressed(run, unresolved, t, ev_t)
    decisions = production_decision_findings(run)
    worst = min((rule(f.code).lowers["O3"] for f in decisions), default=None)
    if worst is not None and j.rating is not None and j.rating > worst:
        j = Judgment("O3", worst, "production decisions unlike the run's own state graph: "
                     + "; ".join(f.message for f in decisions[:6]), evidence=[ev_t, Evidence(GRAPH), Evidence(EVENTS)])
    if conflicts and j.rating is not None and j.rating > 0.5:
        return Judgment("O3", 0.5, "next action unlike the state: " + "; ".join(conflicts[:8]), evidence=j.evidence)
    return j


def _o3_addressed(run: RunData, unresolved: list[ObservableAssessment], t: dict[str, Any], ev_t: Evidence
                  ) -> Judgment:
    actions = [e for _, e in run.events if any(w in str(e.get("type", "")).lower() for w in _ACTION_WORDS)]
    stops = [e for e in actions if any(w in str(e.get("type", "")).lower() for w in _STOP_WORDS)]
    global_stop = bool(stops) or any(k in t for k in ("stop_reason", "stopping_reason", "stopping", "next_action"))
    repaired = any(w in str(e.get("type", "")).lower() for e in actions for w in ("repair", "reanaly", "recover"))
    addressed, unaddressed = [], []
    for a in unresolved:
        lu = _listed_unresolved(run, a.case, a.observable)
        per_item = isinstance(lu, dict) and bool(lu.get("reason") or lu.get("next_action"))
        ok = per_item or (a.state == "F" and repaired) or (a.state != "F" and global_stop)
        (addressed if ok else unaddressed).append(a)
    if not unresolved:
        return Judgment("O3", 1.0 if t else 0.5, "no unresolved obligation; stop " + (
            "recorded" if t else "without terminal record"), evidence=[ev_t])
    if not unaddressed:
        return Judgment("O3", 1.0, "every unresolved obligation has a recorded action or stopping reason",
                        evidence=[ev_t])
    return Judgment("O3", 0.5 if addressed else 0.0, "no action or stopping reason recorded for: " + ", ".join(
        f"{a.case}/{a.observable}={a.state}" for a in unaddressed[:8]),
        evidence=[ev_t, Evidence("run_record/events.jsonl")])


def _o4(run: RunData, unresolved: list[ObservableAssessment], t: dict[str, Any], ev_t: Evidence) -> Judgment:
    """O4 propagation: the terminal record lists the unresolved observables."""
    n = len(unresolved)
    if not t:
        return Judgment("O4", 0.0, "no terminal record", evidence=[ev_t])
    if n == 0:
        return Judgment("O4", 1.0, "nothing unresolved to propagate", evidence=[ev_t])
    listed = [a for a in unresolved if _listed_unresolved(run, a.case, a.observable) is not None]
    frac = len(listed) / n
    r = 1.0 if frac == 1 else (0.5 if frac > 0 else 0.0)
    return Judgment("O4", r, f"terminal record lists {len(listed)}/{n} unresolved observables", evidence=[ev_t])


def _o5(claimed: str | None, expected: str, n: int, t: dict[str, Any], ev_t: Evidence) -> Judgment:
    """O5 final claim against the outcome the evidence supports."""
    if claimed is None:
        return Judgment("O5", 0.0, "no final completion claim", evidence=[ev_t])
    if claimed == expected:
        return Judgment("O5", 1.0, f"claim {claimed} matches the evidence", evidence=[ev_t])
    if claimed in ("clean_valid", "recovered_valid") and expected in ("partial", "candidate_failure"):
        listed = len(t.get("unresolved") or [])
        return Judgment("O5", 0.0, f"claims {claimed} while the evidence supports {expected} "
                        f"({n} unresolved; the terminal record itself lists {listed})", evidence=[ev_t])
    return Judgment("O5", 0.5, f"claims {claimed}; evidence supports {expected}", evidence=[ev_t])


def judge_outcome(run: RunData, assessments: list[ObservableAssessment], valid_cases: list[str]) -> tuple[
        list[Judgment], str]:
    """O1–O5 judgments and the expected outcome."""
    unresolved = [a for a in assessments if a.state in UNRESOLVED_STATES]
    ev_t, ev_o = Evidence(TERM, key="unresolved"), Evidence(OBS)
    detected, mislabelled, f_as_si, confusions = _detection(run, assessments, unresolved)
    n = len(unresolved)
    names = ", ".join(f"{a.case}/{a.observable}={a.state}" for a in unresolved)
    t = run.terminal if isinstance(run.terminal, dict) else {}
    expected = expected_outcome(run, assessments, valid_cases)
    conflicts = [f"{a.case}/{a.observable}={a.state}: {text[:120]!r} ({kind})"
                 for a, text, kind in next_action_conflicts(run, assessments)]
    return [_o1(n, detected, names, ev_o, ev_t), _o2(n, detected, mislabelled, f_as_si, confusions, ev_o, conflicts),
            _o3(run, unresolved, t, ev_t, conflicts), _o4(run, unresolved, t, ev_t),
            _o5(run.claimed_outcome(), expected, n, t, ev_t)], expected


def unresolved_summary(assessments: list[ObservableAssessment]) -> list[dict[str, Any]]:
    """The audit's own list of unresolved observables (for the evidence bundle and reports)."""
    return [{"case": a.case, "observable": a.observable, "state": a.state, "reason": a.reason}
            for a in assessments if a.state in UNRESOLVED_STATES]
