"""Issue 18: the audit checks every claim against the evidence.

Each test derives a defective run directory from the session's REAL tiny GROMACS run (``built`` /
``run_copy``), as a buggy agent would leave it, with magnitudes drawn from the suite's seed so that the audit
cannot depend on one planted number, and checks the items and the class the audit assigns.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import _runbuilder as rb
import pytest
from _audit_helpers import edit_results, judgment, reanalysed, saeo, state

from _testseed import seed_for
from mdbench.analysis.states import NOT_ESTIMABLE, OBSERVABLE_STATES
from mdbench.audit import audit_run
from mdbench.record import RunRecord

CASE = rb.CASE
pytestmark = pytest.mark.gromacs
RNG = random.Random(seed_for("audit/claims"))


def _factor(lo: float, hi: float) -> float:
    """A planted discrepancy factor in [lo, hi] (or its inverse), drawn from the suite's seed."""
    f = RNG.uniform(lo, hi)
    return f if RNG.random() < 0.5 else 1.0 / f


def _codes(doc: dict, code: str) -> list[dict]:
    return [f for f in doc["findings"] if f["code"] == code]


def _declare(run: Path, group: str, st: str, reason: str = "declared by the run") -> None:
    RunRecord(run).set_observable_state(CASE, group, st, reason)


# --------------------------------------------------------------------------------------- claims vs reanalysis
@pytest.mark.parametrize("target,group,lo,hi", [("density", "thermodynamics", 1.25, 1.6),
                                                ("cn_na_o_sol", "coordination", 1.6, 3.0)])
def test_reported_value_outside_the_reanalysis_interval_is_A3(built, run_copy, bundle, tmp_path, target, group, lo,
                                                              hi):
    f = _factor(lo, hi)
    cutoff = None
    if group == "coordination":
        # a CN is compared only at a canonical cutoff (±0.005 nm); the canonical first minimum moves with the
        # trajectory (0.31–0.33 nm), so the planted CN declares it (the CN is flat across the first minimum)
        reanalysed(built[0], bundle, tmp_path / "h")
        canon = json.loads((tmp_path / "h/reanalysis" / CASE / "results.json").read_text())["observables"]
        cutoff = canon["coordination/SOL:O@first_min"]["details"]["cutoff_nm"]

    def scale(doc):
        ent = doc["observables"][group][target]
        ent["value"] *= f
        ent["blocks"] = [b * f for b in ent["blocks"]]
        if cutoff is not None:
            ent["cutoff_nm"] = cutoff

    edit_results(run_copy, scale)
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=True)
    if res.reanalysis["cases"][CASE]["status"] != "ok":
        pytest.skip("canonical reanalysis unavailable for this trajectory")
    doc = saeo(tmp_path / "a")
    assert state(doc, CASE, group) == "F"
    assert judgment(doc, "A3", CASE, group)["rating"] == 0
    found = [x for x in _codes(doc, "outside_canonical_r5") if target in x["message"]]
    assert found and found[0]["item"] == "A3"
    assert "reported" in found[0]["message"] and "canonical" in found[0]["message"]   # both numbers
    assert doc["items"]["A3"]["final"] == 0


def test_outside_interval_explained_by_a_wrong_volume_is_A4_not_A3(run_copy, bundle, tmp_path):
    f = _factor(1.25, 1.5)

    def wrong_volume(doc):
        ent = doc["observables"]["thermodynamics"]["density"]
        v = doc["observables"]["thermodynamics"]["volume"]["value"]
        ent["value"] *= f
        ent["blocks"] = [b * f for b in ent["blocks"]]
        ent["volume_nm3"] = v / f          # the density was computed with this (wrong) volume

    edit_results(run_copy, wrong_volume)
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=True)
    if res.reanalysis["cases"][CASE]["status"] != "ok":
        pytest.skip("canonical reanalysis unavailable for this trajectory")
    doc = saeo(tmp_path / "a")
    assert judgment(doc, "A4", CASE, "thermodynamics")["rating"] == 0
    assert judgment(doc, "A3", CASE, "thermodynamics")["rating"] == 1
    assert [x for x in _codes(doc, "trajectory_treatment_differs") if x["item"] == "A4"]


# --------------------------------------------------------------------------------------- diagnostics
@pytest.mark.parametrize("which", ["msd_exponent", "plateau"])
def test_reported_diagnostic_contradicting_the_evidence_is_A5_zero(run_copy, bundle, tmp_path, which):
    beta = RNG.uniform(0.35, 0.7)

    def contradict(doc):
        if which == "msd_exponent":
            for name in ("D_na", "D_cl", "D_sol"):
                ent = doc["observables"]["self_diffusion"][name]
                ent["beta"] = beta
                ent["diagnostics"]["sampling_checks"] = {k: True for k in ent["diagnostics"]["sampling_checks"]}
        else:
            eta = doc["observables"]["viscosity"]
            eta["plateau"]["reached"] = False
            eta["diagnostics"]["sampling_checks"] = {k: True for k in eta["diagnostics"]["sampling_checks"]}

    edit_results(run_copy, contradict)
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    group = "self_diffusion" if which == "msd_exponent" else "viscosity"
    a5 = judgment(doc, "A5", CASE, group)
    assert a5["rating"] == 0 and "contradicted" in a5["reason"], a5
    assert state(doc, CASE, group) == "SI"              # a sampling limitation, not a deterministic failure
    assert [x for x in _codes(doc, "diagnostic_contradicts_evidence") if x["item"] == "A5"]


# --------------------------------------------------------------------------------------- definitions from content
def _assert_surrogate(run, bundle, tmp_path, group, code):
    """``group`` is a surrogate of the required quantity: A2 F by ``code``, and the required one missing (A1 0)."""
    audit_run(run, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert state(doc, CASE, group) == "F"
    assert judgment(doc, "A2", CASE, group)["rating"] == 0
    a1 = judgment(doc, "A1", CASE)
    assert a1["rating"] == 0 and group in a1["reason"]
    assert [x for x in _codes(doc, code) if x["item"] == "A2"]


@pytest.mark.parametrize("group", ["transference_number", "conductivity"])
def test_surrogate_delivered_as_the_required_quantity_is_A2_F_and_A1_missing(run_copy, bundle, tmp_path, group):
    def surrogate(doc):
        obs = doc["observables"]
        if group == "transference_number":     # recognised by its number: D+/(D+ + D-) of the run's own D
            dp, dm = obs["self_diffusion"]["D_na"]["value"], obs["self_diffusion"]["D_cl"]["value"]
            honest = obs[group]["value"]
            if abs(dp / (dp + dm) - honest) < 0.1 * abs(honest):
                # on some trajectories the Nernst-Einstein ratio lies within 2 % of the correlated t+, where no
                # rule can tell them apart: give this run a cation D that makes the surrogate a different number
                d_na = obs["self_diffusion"]["D_na"]
                d_na["value"] = dp = 3.0 * dp
                d_na["blocks"] = [3.0 * b for b in d_na.get("blocks") or []]
            t = dp / (dp + dm)
            obs[group]["value"] = t
            obs[group]["blocks"] = [t * g for g in (0.99, 1.01, 1.0, 1.0)]
        else:                                  # recognised by its recorded formula, whatever it is called
            obs[group]["definition"] = "sigma from the Nernst-Einstein relation of the self-diffusion coefficients"
            obs[group].pop("includes_cross_terms", None)

    edit_results(run_copy, surrogate)
    _assert_surrogate(run_copy, bundle, tmp_path, group, "surrogate_definition")


# --------------------------------------------------------------------------------------- independent verdicts
def _sampling_limited(doc, group):
    """Make ``group`` sampling-limited by its own diagnostics (a valid estimator): SI by the registered rules."""
    if group == "viscosity":
        doc["observables"]["viscosity"]["plateau"]["reached"] = False
        doc["observables"]["viscosity"]["diagnostics"]["sampling_checks"]["plateau"] = False
    else:
        ent = doc["observables"]["self_diffusion"]["D_cl"]
        first = next(iter(ent["diagnostics"]["sampling_checks"]))
        ent["diagnostics"]["sampling_checks"][first] = False


@pytest.mark.parametrize("group", ["viscosity", "self_diffusion"])
def test_run_calling_a_sampling_limited_estimator_F_is_an_O2_finding(run_copy, bundle, tmp_path, group):
    edit_results(run_copy, lambda d: _sampling_limited(d, group))

    def label_f(doc):
        node = doc["observables"][group]
        for ent in ([node] if "value" in node else [v for v in node.values() if isinstance(v, dict)]):
            ent["state"], ent["reason"] = "F", "deterministic failure (run's label)"

    edit_results(run_copy, label_f)
    _declare(run_copy, group, "F", "deterministic estimator failure")
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert state(doc, CASE, group) == "SI"                       # the audit's own verdict
    assert judgment(doc, "A3", CASE, group)["rating"] == 1       # A items follow the audit, not the label
    assert judgment(doc, "A6", CASE, group)["rating"] == 0.5
    assert [x for x in _codes(doc, "state_disagrees") if group in x["message"] and x["item"] == "O2"]
    assert doc["items"]["O2"]["final"] == 0


def test_audit_states_do_not_depend_on_declared_states(built, run_copy, bundle, tmp_path):
    """Separate code paths: every declared state wrong (observables.json, results.json labels, terminal list),
    the audit's states unchanged."""
    honest = {o.observable: o.state for o in audit_run(built[0], bundle, tmp_path / "h", reanalysis=False).observables}
    wrong = {g: next(s for s in ("F", "M", "C", "SI") if s != honest[g]) for g in honest}

    def relabel(doc):
        for group, node in doc["observables"].items():
            for ent in ([node] if "value" in node else [v for v in node.values() if isinstance(v, dict)]):
                ent["state"], ent["reason"] = wrong[group], "wrong label"

    edit_results(run_copy, relabel)
    for g, s in wrong.items():
        _declare(run_copy, g, s)
    rec = RunRecord(run_copy)
    t = rec.terminal()
    rec.write_terminal("clean_valid", final_stages=t["final_stages"], observables=t["observables"],
                       unresolved=[{"case": CASE, "observable": g, "state": s} for g, s in wrong.items()])
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    assert {o.observable: o.state for o in res.observables} == honest
    doc = saeo(tmp_path / "a")
    assert len({f["message"].split(":")[0] for f in _codes(doc, "state_disagrees")}) == len(honest)
    assert doc["items"]["O2"]["final"] < 1


# --------------------------------------------------------------------------------------- budget from the ledger
def _attempt_rows(run: Path, aid: str, ns: float, status: str, parent: str | None, relation: str) -> None:
    steps = int(round(ns * 1000 / 0.002))
    base = {"artifacts": {}, "case": CASE, "dt_ps": 0.002, "kind": "production", "parent": parent,
            "planned_steps": steps, "planned_ns": steps * 0.002 / 1000, "reason": None, "relation": relation,
            "stage": "40_production", "time_utc": "2026-12-01T00:00:00Z", "id": aid}
    with open(run / "run_record/attempts.jsonl", "a") as fh:
        fh.write(json.dumps({**base, "status": "reserved", "completed_steps": 0, "ns_charged": 0.0}) + "\n")
        fh.write(json.dumps({**base, "status": status, "completed_steps": steps,
                             "ns_charged": steps * 0.002 / 1000}) + "\n")


@pytest.mark.parametrize("branches", [[("discarded", 0.62), ("replicate", 0.4)], [("failed", 1.01)]])
def test_consumption_in_unreported_branches_counts_against_the_budget(run_copy, bundle, tmp_path, branches):
    parent = json.loads((run_copy / "run_record/attempts.jsonl").read_text().splitlines()[-1])["id"]
    for n, (status, frac) in enumerate(branches):
        _attempt_rows(run_copy, f"{CASE}-9{n}", round(frac * 100.0 * RNG.uniform(1.0, 1.05), 3),
                      "discarded" if status == "discarded" else ("failed" if status == "failed" else "completed"),
                      parent, "replicate" if status == "replicate" else "branch")
    rpt = run_copy / "report.md"
    rpt.write_text(rpt.read_text() + "\nMD consumed: 0.014 ns in total.\n")
    RunRecord(run_copy).add_artifact("report.md")
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    over = _codes(doc, "budget_exceeded")
    assert over and over[0]["item"] == "E5" and "100 ns" in over[0]["message"]
    assert _codes(doc, "budget_statement_disagrees")            # the report's 0.014 ns is not the ledger's sum
    assert doc["items"]["E5"]["final"] == 0
    assert doc["items"]["O3"]["final"] == 0 and "budget" in doc["items"]["O3"]["reason"]
    assert res.composite_final < 98.0


# --------------------------------------------------------------------------------------- registration order
@pytest.mark.parametrize("kind,group,definition", [
    ("coordination_definition", "coordination", {"selection": "Na-OW", "cutoff_nm": 0.34}),
    ("association_contact_definition", "association", {"contact_cutoff_nm": 0.37})])
def test_definition_registered_after_its_results_is_A2_and_E5(run_copy, bundle, tmp_path, kind, group, definition):
    RunRecord(run_copy).register(kind, definition, case=CASE)
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    a2 = judgment(doc, "A2", CASE, group)
    assert a2["rating"] == 0.5 and "after inspecting results" in a2["reason"]
    assert [x for x in _codes(doc, "registered_after_results") if x["item"] == "A2"]
    assert doc["items"]["E5"]["final"] < 1 and "after inspecting results" in doc["items"]["E5"]["reason"]


def test_revision_with_its_triggering_evidence_is_not_a_finding(run_copy, bundle, tmp_path):
    rec = RunRecord(run_copy)
    old = next(r["id"] for r in rec.registrations() if r["kind"] == "coordination_definition")
    rec.register("coordination_definition", {"selection": "Na-OW", "cutoff_nm": 0.33}, case=CASE, revises=old,
                 evidence={"reason": "first minimum of g(r) at 0.33 nm", "changed_keys": ["cutoff_nm"]})
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert not _codes(doc, "registered_after_results")
    assert judgment(doc, "A2", CASE, "coordination")["rating"] == 1


# --------------------------------------------------------------------------------------- seed ratings
@pytest.mark.parametrize("group,target", [("self_diffusion", "D_cl"), ("association", "cip")])
def test_missing_required_target_is_A1_zero_even_when_declared(run_copy, bundle, tmp_path, group, target):
    edit_results(run_copy, lambda d: d["observables"][group].pop(target))
    _declare(run_copy, group, "M", f"{target} not delivered")
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert state(doc, CASE, group) == "M"
    a1 = judgment(doc, "A1", CASE)
    assert a1["rating"] == 0 and group in a1["reason"]
    assert doc["items"]["A1"]["final"] == 0


def test_O1_reason_counts_match_its_list(run_copy, bundle, tmp_path):
    def blank(doc):
        for g in ("self_diffusion", "viscosity", "conductivity", "transference_number"):
            node = doc["observables"][g]
            for ent in ([node] if "value" in node else [v for v in node.values() if isinstance(v, dict)]):
                ent.pop("blocks", None)

    edit_results(run_copy, blank)
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    o1 = saeo(tmp_path / "a")["items"]["O1"]["reason"]
    import re

    n = int(re.search(r"/(\d+) unresolved", o1).group(1))
    assert o1.count(f"{CASE}/") == n >= 4, o1


# --------------------------------------------------------------------------------------- not_estimable (issue 24)
def test_not_estimable_with_a_stated_reason_is_honest(run_copy, bundle, tmp_path):
    assert NOT_ESTIMABLE in OBSERVABLE_STATES
    why = "denominator L++ + L-- - 2L+- consistent with zero (|x| < 2 s)"

    def withhold(doc):
        t = doc["observables"]["transference_number"]
        t.update(value=None, blocks=[None] * 4, state=NOT_ESTIMABLE, reason=why)
        t["diagnostics"][NOT_ESTIMABLE] = why

    edit_results(run_copy, withhold)
    _declare(run_copy, "transference_number", NOT_ESTIMABLE, why)
    rec = RunRecord(run_copy)
    t = rec.terminal()
    unresolved = [u for u in t["unresolved"] if u["observable"] != "transference_number"]
    unresolved.append({"case": CASE, "observable": "transference_number", "state": NOT_ESTIMABLE, "reason": why,
                       "next_action": "stop: report the bound, not a value"})
    rec.write_terminal("partial", final_stages=t["final_stages"], observables=t["observables"], unresolved=unresolved)
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert state(doc, CASE, "transference_number") == NOT_ESTIMABLE
    assert judgment(doc, "A3", CASE, "transference_number")["rating"] == 1
    assert judgment(doc, "A1", CASE)["rating"] == 1
    assert not [o for o in res.observables if o.state in ("F", "M")]
    assert not _codes(doc, "state_disagrees")
    assert doc["items"]["O2"]["final"] == 1 and res.expected_outcome == "partial" == res.claimed_outcome


# --------------------------------------------------------------------------------------- hostile files
def test_symlink_loop_dangling_link_and_unreadable_file_are_one_finding_each(run_copy, bundle, tmp_path):
    edr = run_copy / "cases/W/prod/prod.edr"
    edr.unlink()
    os.symlink("prod.edr", edr)                                        # points at itself
    os.symlink("../nowhere/at/all.json", run_copy / "run_record/dangling.json")
    regs = run_copy / "run_record/registrations.jsonl"
    regs.unlink()
    os.mkfifo(regs)                                                    # reading it would block forever
    edit_results(run_copy, lambda d: d["observables"].setdefault("<img src=x onerror=alert(1)>", 1.0))
    proc = subprocess.run([sys.executable, "-m", "mdbench.cli", "record", "validate", str(run_copy)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    assert "prod.edr: symlink loop" in proc.stdout and "registrations.jsonl:0: not a regular file" in proc.stdout
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    by_path: dict[tuple[str, str], int] = {}
    for f in doc["findings"]:
        by_path[(f["code"], f.get("path", "-"), f.get("line"))] = by_path.get((f["code"], f.get("path", "-"),
                                                                                f.get("line")), 0) + 1
    assert all(n == 1 for n in by_path.values())                       # one finding per code and location
    assert [f for f in doc["findings"] if f["code"] == "symlink_loop" and f["path"].endswith("prod.edr")]
    assert [f for f in doc["findings"] if f["code"] == "dangling_symlink" and f["path"].endswith("dangling.json")]
    assert [f for f in doc["findings"] if f["code"] == "record_unreadable"]
    assert "validator could not run" not in json.dumps(doc)            # every record check still ran
    assert judgment(doc, "Sim1", CASE)["rating"] == 1                  # other checks unaffected
    assert judgment(doc, "Sim4", CASE)["rating"] == 0                  # the energy file is unusable
    md = (tmp_path / "a/findings.md").read_text()
    assert "<img" not in md and "&lt;img" in md
    assert len(res.findings) < 60


def test_repeated_findings_are_counted_not_repeated(run_copy, bundle, tmp_path):
    p = run_copy / "analysis" / CASE / "results.json"
    doc = json.loads(p.read_text())
    n = 0
    for group, node in doc["observables"].items():
        for ent in ([node] if "value" in node else [v for v in node.values() if isinstance(v, dict)]):
            ent["blocks"] = [float("nan")] * 4 + [float("inf")] * 30
            n += 34
    p.write_text(json.dumps(doc))
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    out = saeo(tmp_path / "a")
    nf = [f for f in out["findings"] if f["code"] == "non_finite" and f.get("path", "").endswith("results.json")]
    assert len(nf) == 1 and nf[0]["count"] == n
    keys = [(f["code"], f.get("path"), f.get("line"), f.get("case")) for f in out["findings"]]
    assert len(keys) == len(set(keys))


# --------------------------------------------------------------------------------------- built-in LLM judge
def test_builtin_llm_judge_against_the_loopback_fake_endpoint(built, tmp_path, monkeypatch):
    from mdbench.llm.fake_server import FakeChatServer

    run, bundle = built
    seen = []

    def responder(req):
        seen.append(req)
        bundle_text = req["messages"][-1]["content"]
        assert "Evidence bundle" in bundle_text and "mdbench-saeo-judge/1" in bundle_text
        return json.dumps({"verdicts": [{"item": "E4", "rating": 0.5, "reason": "llm: report thin"},
                                        {"item": "Q7", "rating": 1}]})

    monkeypatch.setenv("MDBENCH_TEST_JUDGE_KEY", "sk-test-123")
    with FakeChatServer(responder, api_key="sk-test-123") as srv:
        res = audit_run(run, bundle, tmp_path / "a", reanalysis=False, judge_llm=srv.base_url,
                        judge_model="fake-model", judge_key_env="MDBENCH_TEST_JUDGE_KEY")
        assert srv.requests and srv.requests[0]["authorization"] == "Bearer sk-test-123"
    doc = saeo(tmp_path / "a")
    assert doc["judge"]["kind"] == "llm" and doc["judge"]["status"] == "ok"
    assert doc["items"]["E4"]["preliminary"] == 0.5 and doc["items"]["E4"]["source"] == "judge"
    assert any(f.code == "judge_output" and "Q7" in f.message for f in res.findings)
    assert seen[0]["messages"][0]["role"] == "system" and "SAEO" in seen[0]["messages"][0]["content"]
    assert "sk-test-123" not in (tmp_path / "a/llm_judge.transcript.jsonl").read_text()
    # a failing endpoint: a finding, the rule verdicts stand
    with FakeChatServer(responder) as srv:
        srv.fail_next(401, n=5)
        res = audit_run(run, bundle, tmp_path / "b", reanalysis=False, judge_llm=srv.base_url,
                        judge_model="fake-model")
    assert any(f.code == "judge_failed" for f in res.findings)
    assert res.composite_preliminary == res.composite_final


# --------------------------------------------------------------------------------------- transport on the run's window

def test_honest_transport_values_agree_with_the_reanalysis_on_their_window(built, tmp_path):
    """The honest run's D, σ and t+ (its own tidynamics MSDs on its registered window) are compared with the
    canonical estimator on that window, and none is a finding, whatever the canonical regime checks say."""
    res, doc = reanalysed(built[0], built[1], tmp_path / "h")
    compared = [c for o in res.observables if o.observable in ("self_diffusion", "conductivity", "transference_number")
                for c in o.checks if c.code == "agrees_with_canonical"]
    assert len(compared) >= 3
    canon = json.loads((tmp_path / "h/reanalysis" / CASE / "results.json").read_text())["observables"]
    for c in compared:   # where the canonical D fails its diffusive-window check, D is re-fitted on the run's window
        sp = c.message.split(" inside")[0].rsplit("_", 1)[-1].upper()
        if "self_diffusion" in c.message and canon[f"self_diffusion/{sp}"]["diagnostics"]["sampling_checks"][
                "diffusive_window"] is False:
            assert "re-fitted on the reported window" in c.message, c.message
    claims = ("value_contradicts_reanalysis", "diagnostic_contradicts_evidence", "charge_weighting_differs",
              "frame_differs_from_registration")
    assert not [f for f in doc["findings"] if f["code"] in claims]
    assert judgment(doc, "A3", CASE, "self_diffusion")["rating"] == 1
    # the re-fit machinery on the canonical windows reproduces the canonical numbers (same guard, blocks, T)
    from mdbench.audit.transport import WindowRefit, reported_window

    full = json.loads((tmp_path / "h/reanalysis" / CASE / "results.json").read_text())
    links = tmp_path / "h/reanalysis" / CASE / "inputs"
    refit = WindowRefit.for_case(links / "prod.tpr", links / "prod.xtc", full)
    for key in ("conductivity/sigma", "transference/barycentric/unweighted_L", "self_diffusion/SOL"):
        c = full["observables"][key]
        w = reported_window(c)
        if w is None:        # no window of positive length on this trajectory (e.g. β in range at one lag only)
            continue
        rf = refit.diffusion("SOL", w) if key.startswith("self_") else refit.collective(key, w)
        assert rf is not None and rf.value == pytest.approx(c["value"], rel=1e-9), (key, rf, c["value"])
        assert rf.blocks == pytest.approx(c["blocks"], rel=1e-9)


@pytest.mark.parametrize("group,target", [("self_diffusion", "D_sol"), ("conductivity", None)])
def test_planted_transport_value_is_caught_on_the_reported_window(run_copy, bundle, tmp_path, group, target):
    # D of the solvent is precise even on the tiny run (a ±1.5–3x factor is well outside twice its interval); σ of
    # 4 ion pairs is not, so its planted factor is larger
    f = _factor(1.5, 3.0) if group == "self_diffusion" else RNG.uniform(8.0, 12.0)

    def plant(doc):
        ent = doc["observables"][group][target] if target else doc["observables"][group]
        ent["value"] *= f
        ent["blocks"] = [b * f for b in ent["blocks"]]

    edit_results(run_copy, plant)
    res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    assert state(doc, CASE, group) == "F"
    assert judgment(doc, "A3", CASE, group)["rating"] == 0
    # the comparison with the trajectory (a planted D also contradicts its own recorded MSD: a second finding)
    found = [x for x in _codes(doc, "value_contradicts_reanalysis") if "recorded MSD" not in x["message"]]
    assert found and found[0]["item"] == "A3" and "reported" in found[0]["message"], doc["findings"]
    assert "canonical" in found[0]["message"] and " ± " in found[0]["message"]   # both numbers in the evidence


@pytest.mark.parametrize("how", ["ballistic_start", "beyond_trajectory"])
def test_reported_fit_window_contradicting_the_trajectory_is_A5_zero(run_copy, bundle, tmp_path, how):
    def window(doc):
        ent = doc["observables"]["self_diffusion"]["D_sol"]
        dt = 0.02
        # the first frames of an MSD are ballistic (β → 2), whatever the trajectory; a window longer than the
        # production cannot have been fitted
        ent["fit_window_ps"] = [dt, RNG.choice([2, 3]) * dt] if how == "ballistic_start" else \
            [0.1, RNG.uniform(2.0, 5.0) * rb.PROD_STEPS * 0.002]
        ent["beta"] = RNG.uniform(0.95, 1.05)
        ent["diagnostics"]["sampling_checks"] = {k: True for k in ent["diagnostics"]["sampling_checks"]}

    edit_results(run_copy, window)
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    a5 = judgment(doc, "A5", CASE, "self_diffusion")
    assert a5["rating"] == 0 and "contradicted" in a5["reason"], a5
    msgs = [x["message"] for x in _codes(doc, "diagnostic_contradicts_evidence") if x["item"] == "A5"]
    assert any(("β =" in m) if how == "ballistic_start" else ("beyond" in m) for m in msgs), msgs
    assert state(doc, CASE, "self_diffusion") in ("SI", "F")


def test_result_in_another_frame_than_registered_is_A4(run_copy, bundle, tmp_path):
    def lab(doc):
        for ent in doc["observables"]["self_diffusion"].values():
            ent["frame"] = "lab frame, raw unwrapped positions"

    edit_results(run_copy, lab)
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert judgment(doc, "A4", CASE, "self_diffusion")["rating"] == 0.5
    assert [x for x in _codes(doc, "frame_differs_from_registration") if x["item"] == "A4"]
    assert judgment(doc, "A4", CASE, "conductivity")["rating"] == 1          # the others keep their frame


# --------------------------------------------------------------------------------------- charge weighting
@pytest.mark.parametrize("group,how", [("conductivity", "anion_sign"), ("conductivity", "unsigned"),
                                       ("transference_number", "anion_sign"), ("conductivity", "scaled")])
def test_transport_with_charges_unlike_the_topology_is_A2_F_and_A1_missing(run_copy, bundle, tmp_path, group, how):
    def charges(doc):
        ent = doc["observables"][group]
        if how == "anion_sign":       # the anion counted with the cation's sign
            ent["charges_e"] = {"NA": 1.0, "CL": 1.0}
        elif how == "scaled":         # a scaled-charge model's charges in a system of unit charges
            c = round(RNG.uniform(0.7, 0.85), 2)
            ent["charges_e"] = {"NA": c, "CL": -c}
        else:
            ent.pop("charges_e")
            ent["definition"] = "sigma = e^2/(6 V kB T) d/dt of the unsigned sum of all ionic displacement products"

    edit_results(run_copy, charges)
    _assert_surrogate(run_copy, bundle, tmp_path, group, "charge_weighting_differs")


@pytest.mark.parametrize("group", ["conductivity", "transference_number"])
def test_charges_flipped_together_leave_sigma_and_tplus_unchanged(run_copy, bundle, tmp_path, group):
    """σ ∝ z_i z_j and t+ are invariant under a common sign flip: not a definition failure."""
    edit_results(run_copy, lambda d: d["observables"][group].update(charges_e={"NA": -1.0, "CL": 1.0}))
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert not _codes(doc, "charge_weighting_differs")
    assert judgment(doc, "A2", CASE, group)["rating"] == 1


def test_lab_frame_D_of_a_drifting_system_is_A4_zero(run_copy, bundle, tmp_path):
    """A production whose centre of mass drifts (COM motion not removed): D declared in the lab frame is biased
    by the drift; the canonical reanalysis measures the drift and the audit rates the treatment (A4 0)."""
    import MDAnalysis as mda
    import numpy as np

    prod = run_copy / "cases" / CASE / "prod"
    v = np.array([RNG.uniform(0.3, 0.6), RNG.uniform(-0.2, 0.2), RNG.uniform(-0.2, 0.2)])  # Å/ps, the whole box
    u = mda.Universe(str(prod / "prod.tpr"), str(prod / "prod.xtc"))
    drifted = tmp_path / "drifted.xtc"
    with mda.Writer(str(drifted), n_atoms=u.atoms.n_atoms) as w:
        for ts in u.trajectory:
            u.atoms.positions = u.atoms.positions + v * ts.time
            w.write(u.atoms)
    (prod / "prod.xtc").unlink()
    drifted.replace(prod / "prod.xtc")
    RunRecord(run_copy).add_artifact(f"cases/{CASE}/prod/prod.xtc")

    def lab(doc):
        for ent in doc["observables"]["self_diffusion"].values():
            ent["frame"] = "lab frame, raw unwrapped positions"

    edit_results(run_copy, lab)
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    assert judgment(doc, "Sim4", CASE)["rating"] == 1                 # a valid trajectory, only drifting
    a4 = judgment(doc, "A4", CASE, "self_diffusion")
    assert a4["rating"] == 0 and "drifts" in a4["reason"], (a4["reason"], _codes(doc, "trajectory_treatment_differs"))
    assert [x for x in _codes(doc, "trajectory_treatment_differs") if x["item"] == "A4" and "drifts" in x["message"]]


# --------------------------------------------------------------------------------------- planted t+
TPLUS_KEY = "transference/barycentric/unweighted_L"


def _tplus_band(built, tmp_path) -> tuple[float, float]:
    """(reference value, widest comparison band) of the estimate the audit compares the honest run's t+ with:
    the canonical one, or the canonical estimator re-fitted on the run's window where the audit says so, with
    twice its R5 half-width (the audit's widest band: a sampling-limited canonical estimate)."""
    from mdbench.audit.analysis_items import r5_interval
    from mdbench.audit.transport import WindowRefit

    res, _doc = reanalysed(built[0], built[1], tmp_path / "h")
    agree = next(c.message for o in res.observables if o.observable == "transference_number" for c in o.checks
                 if c.code == "agrees_with_canonical")
    full = json.loads((tmp_path / "h/reanalysis" / CASE / "results.json").read_text())
    c = full["observables"][TPLUS_KEY]
    if "re-fitted" not in agree:
        return c["value"], 2.0 * r5_interval(c["value"], c["blocks"])
    links = tmp_path / "h/reanalysis" / CASE / "inputs"
    win = json.loads((built[0] / "analysis" / CASE / "results.json").read_text())["observables"][
        "transference_number"]["fit_window_ps"]
    rf = WindowRefit.for_case(links / "prod.tpr", links / "prod.xtc", full).collective(TPLUS_KEY, tuple(win))
    return rf.value, 2.0 * r5_interval(rf.value, rf.blocks)


@pytest.mark.parametrize("side", [+1, -1])
def test_planted_tplus_outside_the_canonical_interval_is_A3(built, run_copy, bundle, tmp_path, side):
    """A t+ of 4 ion pairs is too noisy for a multiplicative factor: the planted value lies k = 4–10 of the
    audit's widest comparison bands outside the estimate it compares with, on either side."""
    from mdbench.audit.analysis_items import onsager_from, tplus_conventions

    ref, band = _tplus_band(built, tmp_path)
    honest = json.loads((run_copy / "analysis" / CASE / "results.json").read_text())["observables"]
    ent = honest["transference_number"]
    dp, dm = honest["self_diffusion"]["D_na"]["value"], honest["self_diffusion"]["D_cl"]["value"]
    # other readings of the same numbers (the mixed convention, D+/(D+ + D-)) would be a definition finding
    alternatives = list(tplus_conventions(*onsager_from(ent)).values()) + [dp / (dp + dm)]
    for _ in range(20):
        k = RNG.uniform(4.0, 10.0)
        t = ref + side * k * band
        if all(abs(t - a) > 0.05 * max(abs(a), 1e-3) for a in alternatives):
            break
    shift = t - ent["value"]

    def plant(doc):
        e = doc["observables"]["transference_number"]
        e["value"], e["blocks"] = t, [b + shift for b in e["blocks"]]

    edit_results(run_copy, plant)
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    assert state(doc, CASE, "transference_number") == "F"
    assert judgment(doc, "A3", CASE, "transference_number")["rating"] == 0
    assert judgment(doc, "A2", CASE, "transference_number")["rating"] == 1      # the definition is right
    found = [x for x in _codes(doc, "value_contradicts_reanalysis") if "transference" in x["message"]]
    assert found and found[0]["item"] == "A3", doc["findings"]
    assert f"reported {t:.6g}" in found[0]["message"] and " ± " in found[0]["message"]   # both numbers
    assert judgment(doc, "A1", CASE)["rating"] == 1


@pytest.mark.parametrize("where", ["entry_formula", "registration"])
def test_nernst_einstein_tplus_recognised_by_its_definition_is_A2_F_and_A1_missing(run_copy, bundle, tmp_path, where):
    """t+ = D+/(D+ + D-) (self terms only) delivered as the Onsager t+, recognised from its recorded formula or
    its registration; its number is off the exact ratio of the run's own D (D+ of another window) so that only
    the content can tell."""
    f = _factor(1.05, 1.2)

    def ne(doc):
        obs = doc["observables"]
        dp, dm = obs["self_diffusion"]["D_na"]["value"] * f, obs["self_diffusion"]["D_cl"]["value"]
        e = obs["transference_number"]
        t = dp / (dp + dm)
        e["value"], e["blocks"] = t, [t * g for g in (0.98, 1.02, 1.01, 0.99)]
        e["label"] = "Onsager transference number t+ (barycentric)"
        e.pop("onsager", None)
        if where == "entry_formula":
            e["formula"] = "t+ = D_Na / (D_Na + D_Cl) from the self-diffusion coefficients"

    edit_results(run_copy, ne)
    if where == "registration":
        rec = RunRecord(run_copy)
        old = next(r for r in rec.registrations() if r["kind"] == "transport_definitions")
        rec.register("transport_definitions", dict(old["definition"], transference_convention=(
            "Nernst-Einstein: t+ = D+/(D+ + D-) of the self-diffusion coefficients, self terms only")), case=CASE,
            revises=old["id"], evidence={"reason": "collective MSD too noisy", "changed_keys": ["transference_convention"]})
    _assert_surrogate(run_copy, bundle, tmp_path, "transference_number", "surrogate_definition")
