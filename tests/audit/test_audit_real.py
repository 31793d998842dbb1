"""SAEO audit of a tiny REAL GROMACS run (water + NaCl) and of failure fixtures derived from it."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import _runbuilder as rb
import jsonschema
import pytest
from _audit_helpers import edit_results, judgment, saeo, state
from click.testing import CliRunner

from mdbench.analysis import pipeline
from mdbench.audit import audit_run
from mdbench.audit.analysis_items import tplus_conventions
from mdbench.audit.model import ITEMS
from mdbench.errors import InputError
from mdbench.record import RunRecord

CASE = "W"
pytestmark = pytest.mark.gromacs


def _claim(run: Path, outcome: str, unresolved: list[dict]) -> None:
    rec = RunRecord(run)
    t = rec.terminal()
    rec.write_terminal(outcome, final_stages=t["final_stages"], observables=t["observables"], unresolved=unresolved)


def test_honest_run_no_F_or_M_and_matches_its_record(built, tmp_path):
    """The record's states are the registered rules applied to this trajectory (C or SI, whichever it
    supports): the audit must find the same states, no F/M, and give full marks where nothing is wrong."""
    run, bundle = built
    t0 = time.perf_counter()
    res = audit_run(run, bundle, tmp_path / "audit", reanalysis=False)
    assert time.perf_counter() - t0 < 30.0
    doc = saeo(tmp_path / "audit")
    schema = json.loads((Path(__file__).parents[2] / "lib/mdbench/audit/schemas/saeo.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert set(doc["items"]) == set(ITEMS)
    states = {o["observable"]: o["state"] for o in doc["observables"]}
    assert not {"F", "M"} & set(states.values()), states
    declared = json.loads((run / "run_record/observables.json").read_text())[CASE]
    assert states == {k: v["state"] for k, v in declared.items()}   # audit agrees with the run's own states
    for item in ("Sim1", "Sim2", "Sim3", "Sim4", "A1", "A2", "A3", "E1", "E2", "E3", "E4", "E5", "O1", "O2",
                 "O4", "O5"):
        assert doc["items"][item]["final"] == 1.0, (item, doc["items"][item]["reason"])
    assert doc["items"]["A6"]["final"] == (0.5 if "SI" in states.values() else 1.0)   # SI → partial, never 0
    unresolved = {g for g, s in states.items() if s != "C"}
    assert res.expected_outcome == res.claimed_outcome == ("partial" if unresolved else "clean_valid")
    assert res.composite_final == pytest.approx(res.composite_preliminary)
    finals = [v["final"] for v in doc["items"].values() if v["final"] is not None]
    assert 90.0 <= res.composite_final <= 100.0
    assert (res.composite_final == pytest.approx(100.0)) == all(f == 1.0 for f in finals)
    assert (tmp_path / "audit/findings.md").read_text().startswith("# SAEO audit")
    # evidence references point into the run directory
    sim4 = judgment(doc, "Sim4", CASE)
    assert any(e["path"].endswith("prod.xtc") for e in sim4["evidence"])


def test_run_that_records_SI_gets_A6_half_and_full_outcome_marks(run_copy, bundle, tmp_path):
    """Whatever else this trajectory supports, a Green–Kubo integral without a plateau is SI: the run records
    it so (registered rules), the audit agrees, rates A6 ½ (never 0) and accepts the partial claim."""
    def no_plateau(doc):
        eta = doc["observables"]["viscosity"]
        eta["plateau"]["reached"] = False
        eta["diagnostics"]["sampling_checks"]["plateau"] = False

    edit_results(run_copy, no_plateau)
    assert rb.declare_states(run_copy) == "partial"
    declared = json.loads((run_copy / "run_record/observables.json").read_text())[CASE]
    assert declared["viscosity"]["state"] == "SI" and "plateau" in declared["viscosity"]["reason"]
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert state(doc, CASE, "viscosity") == "SI"
    assert {o.observable: o.state for o in res.observables} == {k: v["state"] for k, v in declared.items()}
    assert judgment(doc, "A6", CASE, "viscosity")["rating"] == 0.5
    assert judgment(doc, "A5", CASE, "viscosity")["rating"] == 0.5      # regime diagnostic reported, not met
    assert doc["items"]["A6"]["final"] == 0.5
    for item in ("O1", "O2", "O4", "O5"):
        assert doc["items"][item]["final"] == 1.0, (item, doc["items"][item]["reason"])
    assert res.expected_outcome == "partial" == res.claimed_outcome


def test_honest_run_with_canonical_reanalysis(built, tmp_path):
    run, bundle = built
    before = sorted(p.name for p in (run / "cases/W/prod").iterdir())
    res = audit_run(run, bundle, tmp_path / "audit", reanalysis=True)
    assert sorted(p.name for p in (run / "cases/W/prod").iterdir()) == before   # nothing written into the run
    info = res.reanalysis["cases"][CASE]
    assert info["status"] in ("ok", "failed")
    if info["status"] == "ok":
        doc = saeo(tmp_path / "audit")
        a3 = judgment(doc, "A3", CASE, "thermodynamics")     # the run's energy means agree with the canonical ones
        assert a3["rating"] == 1 and "R5" in a3["reason"], a3
        assert not [o for o in res.observables if o.state in ("F", "M")]


def test_failure_case_1_tplus_convention_mixup_is_F_not_SI(run_copy, bundle, tmp_path):
    def mix(doc):
        t = doc["observables"]["transference_number"]
        L = t["onsager"]
        mixed = tplus_conventions(L["L_pp"], L["L_mm"], L["L_pm"])["mixed"]
        t["value"] = mixed
        t["blocks"] = [mixed * f for f in (0.98, 1.01, 1.0, 1.02)]
        t["onsager"] = {"L_pp": L["L_pp"], "L_mm": L["L_mm"], "L_pm": -L["L_pm"], "weighting": "signed_charge"}

    edit_results(run_copy, mix)
    _claim(run_copy, "recovered_valid", [{"case": CASE, "observable": "transference_number", "state": "SI",
                                          "reason": "blocks scatter"}])
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert state(doc, CASE, "transference_number") == "F"
    a2 = judgment(doc, "A2", CASE, "transference_number")
    assert a2["rating"] == 0 and "mixed" in a2["reason"]
    assert doc["items"]["A2"]["final"] == 0
    assert doc["items"]["O2"]["final"] == 0       # the run called a definition failure SI
    assert doc["items"]["O5"]["final"] == 0       # recovered_valid claimed with an F


def test_failure_case_2_float32_volume_nonfinite_blocks(run_copy, bundle, tmp_path):
    def f32(doc):
        for g in ("conductivity", "transference_number"):
            doc["observables"][g]["blocks"] = [None, None, None, None]   # inf/nan written as JSON null

    edit_results(run_copy, f32)
    _claim(run_copy, "recovered_valid", [])
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    for g in ("conductivity", "transference_number"):
        assert state(doc, CASE, g) == "F"
        assert judgment(doc, "A3", CASE, g)["rating"] == 0
        a6 = judgment(doc, "A6", CASE, g)
        assert a6["rating"] == 0 and "non-finite" in a6["reason"]
    assert doc["items"]["A3"]["final"] == 0 and doc["items"]["A6"]["final"] == 0
    assert doc["items"]["O4"]["final"] == 0 and doc["items"]["O5"]["final"] == 0


def test_failure_case_2_nan_tokens_are_findings(run_copy, bundle, tmp_path):
    p = run_copy / "analysis" / CASE / "results.json"
    doc = json.loads(p.read_text())
    doc["observables"]["conductivity"]["blocks"] = [float("nan"), float("inf"), 1.0, 2.0]
    p.write_text(json.dumps(doc))                      # Python writes NaN / Infinity tokens
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    d = saeo(tmp_path / "a")
    assert state(d, CASE, "conductivity") == "F"
    assert any(f["code"] == "non_finite" and "conductivity" in f["message"] for f in d["findings"])


def test_failure_case_3_clean_valid_claim_with_listed_unresolved(run_copy, bundle, tmp_path):
    groups = ("self_diffusion", "viscosity", "conductivity", "transference_number")

    def drop_blocks(doc):
        for g in groups:
            node = doc["observables"][g]
            for ent in ([node] if "value" in node else [v for v in node.values() if isinstance(v, dict)]):
                ent.pop("blocks", None)

    edit_results(run_copy, drop_blocks)
    rec = RunRecord(run_copy)
    for g in groups:
        rec.set_observable_state(CASE, g, "M", "four-block analysis not delivered")
    others = [u for u in rec.terminal()["unresolved"] if u["observable"] not in groups]   # e.g. SI structure
    _claim(run_copy, "clean_valid", others + [{"case": CASE, "observable": g, "state": "M"} for g in groups])
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert {state(doc, CASE, g) for g in groups} == {"M"}
    assert doc["items"]["O5"]["final"] == 0
    assert "clean_valid" in doc["items"]["O5"]["reason"]
    assert doc["items"]["O1"]["final"] == 1 and doc["items"]["O4"]["final"] == 1   # detected and listed
    assert doc["items"]["A6"]["final"] == 0


def test_unreadable_trajectory_is_sim4_finding(run_copy, bundle, tmp_path):
    xtc = run_copy / "cases/W/prod/prod.xtc"
    xtc.write_bytes(xtc.read_bytes()[: 5000] + b"\x00garbage" * 10)
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert judgment(doc, "Sim4", CASE)["rating"] == 0
    # issue 25: 5,000 real bytes hold one complete frame, so the cut is reported as such
    assert any(f.code in ("unreadable_trajectory", "trajectory_truncated") and f.item == "Sim4" for f in res.findings)
    assert {o.state for o in res.observables} == {"invalid_upstream"}      # never reclassified as SI
    assert judgment(doc, "A1", CASE)["rating"] is None
    assert doc["items"]["E2"]["final"] == 0                                # checksum of the xtc changed


def test_setup_mismatch_and_bundle_checksums(run_copy, bundle, tmp_path):
    import shutil

    b2 = tmp_path / "bundle"
    shutil.copytree(bundle, b2)
    (b2 / "cases/W.yaml").write_text((b2 / "cases/W.yaml").read_text().replace("NA: 4", "NA: 5"))
    audit_run(run_copy, b2, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    s1 = judgment(doc, "Sim1", CASE)
    assert s1["rating"] == 0 and "counts" in s1["reason"]
    assert doc["items"]["E2"]["final"] == 0 and "bundle" in doc["items"]["E2"]["reason"]


def test_malformed_records_and_symlink(run_copy, bundle, tmp_path):
    ev = run_copy / "run_record/events.jsonl"
    lines = ev.read_text().splitlines()
    lines.insert(3, '{"id": 999, "type": "oops", ')
    ev.write_text("\n".join(lines) + "\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("not part of the run")
    os.symlink(outside, run_copy / "cases/W/prod/extra.log")
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    e3 = doc["items"]["E3"]
    assert e3["final"] == 0 and "events.jsonl:4" in e3["reason"]
    assert any(f.code == "malformed_jsonl" and f.line == 4 for f in res.findings)
    assert any(f.code == "symlink_escape" for f in res.findings)
    assert doc["items"]["E2"]["final"] == 0


def test_missing_case_is_not_reached_never_zero_valued(run_copy, bundle, tmp_path):
    import shutil

    b2 = tmp_path / "bundle"
    shutil.copytree(bundle, b2)
    (b2 / "cases/X.yaml").write_text("case: X\nmolecules:\n  SOL: 10\n")
    res = audit_run(run_copy, b2, tmp_path / "a", reanalysis=False)
    xs = [o for o in res.observables if o.case == "X"]
    assert xs and {o.state for o in xs} == {"not_reached"}
    assert all(o.reported_value is None for o in xs)
    assert res.expected_outcome == "partial"


def test_external_judge_and_adjudication(built, tmp_path):
    run, bundle = built
    judge = tmp_path / "judge.py"
    judge.write_text(
        "import json, sys\n"
        "b = json.load(sys.stdin)\n"
        "assert b['protocol'] == 'mdbench-saeo-judge/1' and b['items']\n"
        "print(json.dumps({'verdicts': [{'item': 'E4', 'rating': 0.5, 'reason': 'judge: report thin'},"
        " {'item': 'Z9', 'rating': 1}, {'item': 'A2', 'case': 'W', 'observable': 'coordination', 'rating': 0.5,"
        " 'reason': 'judge: selection unclear'}]}))\n")
    cmd = f"{sys.executable} {judge}"
    out = tmp_path / "a"
    res = audit_run(run, bundle, out, reanalysis=False, judge_cmd=cmd)
    doc = saeo(out)
    assert doc["items"]["E4"]["preliminary"] == 0.5 and doc["items"]["E4"]["source"] == "judge"
    assert doc["items"]["A2"]["preliminary"] == 0.5
    assert any(f.code == "judge_output" and "Z9" in f.message for f in res.findings)
    adj = tmp_path / "adjudication.yaml"
    adj.write_text("- item: E4\n  rating: 1\n  reviewer: expert-1\n  reason: report is complete\n"
                   "  evidence: report.md\n"
                   "- item: A2\n  case: W\n  observable: coordination\n  rating: 1\n  reviewer: expert-1\n"
                   "  reason: selection registered as R0003\n")
    res = audit_run(run, bundle, out, reanalysis=False, judge_cmd=cmd, adjudication=adj)
    doc = saeo(out)
    assert doc["items"]["E4"] == {**doc["items"]["E4"], "preliminary": 0.5, "final": 1.0, "source": "expert"}
    assert doc["items"]["A2"]["preliminary"] == 0.5 and doc["items"]["A2"]["final"] == 1.0
    assert res.composite_final > res.composite_preliminary
    md = (out / "findings.md").read_text()
    assert "| E4 | Delivery | 0.5 | 1 | expert |" in md
    # append-only: editing an applied entry is refused with file and line
    adj.write_text(adj.read_text().replace("rating: 1\n  reviewer: expert-1\n  reason: report", "rating: 0\n  "
                                           "reviewer: expert-1\n  reason: report"))
    with pytest.raises(InputError, match=r"adjudication.yaml:1: entry 1 .*append-only"):
        audit_run(run, bundle, out, reanalysis=False, adjudication=adj)
    bad = tmp_path / "bad.yaml"
    bad.write_text("- item: E4\n  rating: 0.7\n  reviewer: x\n  reason: y\n")
    with pytest.raises(InputError, match=r"bad.yaml:1: .*rating"):
        audit_run(run, bundle, tmp_path / "b", reanalysis=False, adjudication=bad)


def test_failing_judge_keeps_rule_verdicts(built, tmp_path):
    run, bundle = built
    res = audit_run(run, bundle, tmp_path / "a", reanalysis=False, judge_cmd=f"{sys.executable} -c 'import sys; sys.exit(3)'")
    assert any(f.code == "judge_failed" for f in res.findings)
    assert res.composite_preliminary == res.composite_final


def test_cli_and_bad_paths(built, tmp_path):
    from mdbench.cli import cli

    run, bundle = built
    r = CliRunner().invoke(cli, ["audit", str(run), "--bundle", str(bundle), "--out", str(tmp_path / "a"),
                                 "--no-reanalysis"])
    assert r.exit_code == 0, r.output
    assert "composite" in r.output and (tmp_path / "a/saeo.json").is_file()
    with pytest.raises(InputError, match="outside the audited run"):
        audit_run(run, bundle, run / "audit", reanalysis=False)
    with pytest.raises(InputError, match="run directory not found"):
        audit_run(tmp_path / "nope", bundle, tmp_path / "b")


_RANK = {"C": 0, "SI": 1, "M": 2, "F": 3}


def test_our_pipeline_run_is_the_oracle(run_copy, bundle, tmp_path):
    """A run whose results come from our analysis pipeline, with states and terminal record written from them
    honestly, gets the same observable states back and full marks on detection, classification, propagation,
    claim, provenance and consistency."""
    from mdbench.audit.runread import group_entries

    prod = run_copy / "cases/W/prod"
    work = tmp_path / "analysis_work"
    pipeline.analyze_files(str(prod / "prod.tpr"), str(prod / "prod.xtc"), str(prod / "prod.edr"), str(work),
                           guard_ps=0.4)
    doc = json.loads((work / "results.json").read_text())
    (run_copy / "analysis/W/results.json").write_text(json.dumps(doc))
    for p in run_copy.glob("cases/W/prod/.*offsets*"):
        p.unlink()
    rec = RunRecord(run_copy)
    rec.add_artifact("analysis/W/results.json")
    unresolved = []
    for group, entries in group_entries(doc).items():
        worst = max((e.raw.get("state", "C") for e in entries.values()), key=lambda s: _RANK.get(s, 0), default="M")
        key = next(iter(entries), "observables").split(".", 1)[-1].replace("~", "~0").replace("/", "~1")
        rec.set_observable_state(CASE, group, worst, "pipeline state", results_ref=f"analysis/W/results.json#/observables/{key}")
        if worst != "C":
            unresolved.append({"case": CASE, "observable": group, "state": worst, "reason": "tiny demo run",
                               "next_action": "stop: demo budget"})
    _claim(run_copy, "partial", unresolved)
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    d = saeo(tmp_path / "a")
    declared = json.loads((run_copy / "run_record/observables.json").read_text())[CASE]
    for o in res.observables:
        assert o.state == declared[o.observable]["state"], (o.observable, o.reason)
    for item in ("Sim1", "Sim2", "Sim3", "Sim4", "A1", "E1", "E2", "E3", "E4", "E5", "O1", "O2", "O3", "O4", "O5"):
        assert d["items"][item]["final"] == 1.0, (item, d["items"][item]["reason"])


def test_transport_volume_inconsistent_with_production_is_A4_zero(run_copy, bundle, tmp_path):
    def wrong_volume(doc):
        doc["observables"]["conductivity"]["volume_nm3"] *= 1.10      # 10 % off the production box

    edit_results(run_copy, wrong_volume)
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    a4 = judgment(doc, "A4", CASE, "conductivity")
    assert a4["rating"] == 0 and "volume" in a4["reason"]
    assert judgment(doc, "A4", CASE, "transference_number")["rating"] == 1


def test_report_number_disagreeing_with_results_is_E5(run_copy, bundle, tmp_path):
    from mdbench.audit.evidence import report_number_mismatches

    assert report_number_mismatches("Density 1.0079 g/cm3\n", {"density": 1007.9}) == []   # unit prefix
    assert report_number_mismatches("density: 1100 kg/m3\n", {"density": 1007.9})[0][0] == 1
    rpt = run_copy / "report.md"
    rpt.write_text(rpt.read_text().replace("Density ", "Density 1234.5 (previous draft) / "))
    RunRecord(run_copy).add_artifact("report.md")
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    e5 = saeo(tmp_path / "a")["items"]["E5"]
    assert e5["final"] == 0.5 and "report.md:3 gives density = 1234.5" in e5["reason"]


def test_fixture_is_seeded_from_MDBENCH_TEST_SEED(built):
    """Velocities and thermostat noise of the fixture follow the suite's seed (``make test-seeds`` varies it)."""
    from _testseed import seed_for

    run, _ = built
    npt = (run / "cases/W/equil/npt.mdp").read_text()
    prod = (run / "cases/W/prod/prod.mdp").read_text()
    assert f"gen-seed = {seed_for('audit/gen-seed')}" in npt
    assert f"ld-seed = {seed_for('audit/ld-seed')}" in npt and f"ld-seed = {seed_for('audit/ld-seed')}" in prod
