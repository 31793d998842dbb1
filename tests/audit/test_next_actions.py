"""States → actions (seed §3.3, §4.2; ``analysis.states.STATE_ACTIONS``): O2/O3 compare each unresolved
observable's next action with its state. An SI result whose action is to correct the method, or an F result whose
action is to extend sampling, confuses a sampling limitation with a deterministic failure: a finding, O2 = 0,
O3 ≤ ½. Planted in two cases and two observables (SI viscosity in one case, F thermodynamics in the other), the
wording drawn from the suite's seed; the honest actions leave O2 and O3 where they are."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from _testseed import seed_for
from mdbench.analysis.states import SI, STATE_ACTIONS, F, contradicting_action
from mdbench.audit import outcome
from mdbench.audit.analysis_items import assess_case
from mdbench.audit.bundle import load_bundle
from mdbench.audit.model import UNRESOLVED_STATES
from mdbench.audit.runread import load_run
from mdbench.audit.safeio import RunFS
from mdbench.episode.spec_defects import F_AS_SI, SI_AS_F
from mdbench.record import RunRecord

RNG = random.Random(seed_for("audit/next-actions"))
CASES = ("W", "X")
#: Admissible wording per state (what an honest study writes).
HONEST = {SI: "extend the production within the remaining budget, or stop with the limitation stated",
          F: "correct the estimator and recompute from the same trajectory",
          "M": "rerun the analysis stage to deliver it", "not_estimable": "stop and report the reason"}


def _results(case: str) -> dict:
    unc = {"half_width_95": 0.1, "definition": "4 blocks"}
    thermo = {t: {"value": 1.0, "blocks": [1.0] * 4, "uncertainty": unc}
              for t in ("temperature", "pressure", "potential_energy", "total_energy", "volume")}
    density = [1000.0, 1000.5, 999.5, 1000.0] if case == "W" else [1000.0, None, 1000.0, 1000.0]  # X: F
    return {"thermodynamics": {"density": {"value": 1000.0, "blocks": density, "uncertainty": unc}, **thermo},
            "viscosity": {"value": 0.9, "blocks": [0.9, 0.91, 0.89, 0.9], "uncertainty": unc, "ensemble": "NVT",
                          "plateau": {"reached": case != "W"}}}  # W: SI


def _audit(tmp_path: Path, planted: bool, members: list[dict] | None = None):
    run = tmp_path / "run"
    rec = RunRecord(run)
    for case in CASES:
        rec.set_stage_state(case, "production", "valid", "fixture")
        (run / "analysis" / case).mkdir(parents=True)
        (run / "analysis" / case / "results.json").write_text(json.dumps({"observables": _results(case)}))
    data = load_run(RunFS(run))
    assessments = [g.assessment for c in CASES for g in assess_case(data, load_bundle(None), c, None, None)[1]]
    wrong = {("W", "viscosity"): RNG.choice(SI_AS_F), ("X", "thermodynamics"): RNG.choice(F_AS_SI)}
    unresolved = []
    for a in assessments:
        if a.state not in UNRESOLVED_STATES:
            continue
        action = wrong.get((a.case, a.observable)) if planted else None
        unresolved.append({"case": a.case, "observable": a.observable, "state": a.state, "reason": a.reason[:100],
                           "next_action": action or HONEST.get(a.state, "stop")})
        rec.set_observable_state(a.case, a.observable, a.state, a.reason[:100])
    rec.write_terminal("partial", final_stages={}, observables={}, unresolved=[*(members or []), *unresolved])
    data = load_run(RunFS(run))
    js, _expected = outcome.judge_outcome(data, assessments, list(CASES))
    return {j.item: j for j in js}, outcome.next_action_findings(data, assessments), assessments


def test_the_fixture_has_an_SI_and_an_F_observable_in_different_cases(tmp_path):
    _js, _f, assessments = _audit(tmp_path, planted=False)
    st = {(a.case, a.observable): a.state for a in assessments}
    assert st[("W", "viscosity")] == SI and st[("X", "thermodynamics")] == F


def test_next_actions_unlike_their_states_lower_O2_and_O3(tmp_path):
    base, base_f, _ = _audit(tmp_path / "honest", planted=False)
    got, found, _ = _audit(tmp_path / "planted", planted=True)
    assert not base_f and base["O2"].rating == 1.0 and base["O3"].rating == 1.0, (base["O2"], base["O3"])
    where = {(f.case, f.message.split(" is ")[0]) for f in found}
    assert {("W", "W/viscosity"), ("X", "X/thermodynamics")} <= where, found
    assert all(f.code == "next_action_contradicts_state" and f.item == "O2" for f in found)
    assert got["O2"].rating == 0.0 and got["O3"].rating <= 0.5, (got["O2"], got["O3"])


@pytest.mark.parametrize("text", SI_AS_F)
def test_every_si_as_f_wording_is_recognised(text):
    assert contradicting_action(SI, text) == "correct"
    assert contradicting_action(F, text) is None


@pytest.mark.parametrize("text", F_AS_SI)
def test_every_f_as_si_wording_is_recognised(text):
    assert contradicting_action(F, text) == "extend"
    assert contradicting_action(SI, text) is None


def test_the_analysis_own_next_actions_are_admissible():
    """The next actions our pipeline writes (observable_states.NEXT_ACTION) never contradict their state."""
    from mdbench.analysis.states import NEXT_ACTION

    for state, text in NEXT_ACTION.items():
        assert contradicting_action(state, text) is None, (state, text)
    assert set(STATE_ACTIONS) >= UNRESOLVED_STATES


def test_a_member_failed_through_its_input_keeps_its_repair_action(tmp_path):
    """The run's state graph marks a member F because an input of it failed (its action: repair that input), in
    a group the audit finds SI: the action follows the member's own state, no contradiction; a member entry that
    declares SI and says to correct the method is found even when it is not the group's first entry."""
    propagated = {"case": "W", "observable": "viscosity", "item": "observable/viscosity/yeh_hummer", "state": F,
                  "reason": "input observable:W/self_diffusion/NA is F (a non-finite block)",
                  "next_action": "stop: deterministic failure reported; repair the estimator or its input before reuse"}
    got, found, _ = _audit(tmp_path / "a", planted=False, members=[propagated])
    assert not found and got["O2"].rating == 1.0, found
    wrong = dict(propagated, state=SI, item="observable/viscosity/second", next_action=RNG.choice(SI_AS_F))
    got, found, _ = _audit(tmp_path / "b", planted=False, members=[propagated, wrong])
    assert [(f.case, f.code) for f in found] == [("W", "next_action_contradicts_state")], found
    assert got["O2"].rating == 0.0


def test_a_member_that_calls_itself_f_on_its_own_account_is_judged_by_the_audits_state(tmp_path):
    """The SI-as-F defect written consistently into one terminal member entry (state F, its own reason, the
    action to correct the method) is still a contradiction: only a state that came through a failed input
    keeps its own action."""
    believed = {"case": "W", "observable": "viscosity", "item": "observable/viscosity/member", "state": F,
                "reason": "the estimator is wrong", "next_action": RNG.choice(SI_AS_F)}
    got, found, _ = _audit(tmp_path, planted=False, members=[believed])
    assert [(f.case, f.code) for f in found] == [("W", "next_action_contradicts_state")], found
    assert got["O2"].rating == 0.0
