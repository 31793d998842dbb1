"""The state graph of a real micro run: the peers' micro DE production (real GROMACS, cached) and our
results.json, recorded as the analysis records them for two cases — DE (production valid) and X (the same
files, its production then found invalid). Asserts what every trajectory of the protocol must satisfy:
states follow the propagation rules whatever the own states are."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from mdbench.analysis import observables as registry
from mdbench.analysis.pipeline import _record_results, estimator_plan
from mdbench.analysis.results import terminal_claim, write_terminal_claim
from mdbench.analysis.study_state import build_state_graph, graph_findings
from mdbench.record import RunRecord
from mdbench.record import state_graph as sg
from mdbench.record.validate import validate_run

_spec = importlib.util.spec_from_file_location("peers_conftest", Path(__file__).parents[1] / "peers" / "conftest.py")
_peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_peers)
micro_de = _peers.micro_de  # the shared micro production (a fixture)

CASES = ["DE", "X"]


def _run(tmp_path: Path, micro: dict) -> Path:
    run = tmp_path / "run"
    rec = RunRecord(run)
    for case in CASES:
        out = run / "analysis" / case
        out.mkdir(parents=True)
        shutil.copy(micro["results_path"], out / "results.json")
        for stage in ("setup", "minimization", "equilibration", "production"):
            rec.set_stage_state(case, stage, "valid", "gate passed")
        doc = json.loads((out / "results.json").read_text())
        _record_results(rec, out, case, doc["observables"], {"figures": {}})
    rec.set_stage_state("X", "production", "invalid", "trajectory truncated after the analysis")
    write_terminal_claim(run, CASES)
    return run


def _nodes(g: dict, case: str, prefix: str) -> dict:
    return {n["name"]: n for n in g["nodes"].values()
            if n["kind"] == "observable" and n["case"] == case and n["name"].startswith(prefix)}


def test_micro_run_graph_propagation_and_claim(tmp_path, micro_de):
    run = _run(tmp_path, micro_de)
    g = sg.read_graph(run)
    assert g is not None and not [f for f in validate_run(run) if f.severity == "error"]
    # the terminal claim is the graph's
    terminal = RunRecord(run).terminal()
    assert terminal["candidate_claimed_outcome"] == g["claim"]["candidate_claimed_outcome"] == "partial"
    assert terminal["unresolved"] == g["claim"]["unresolved"]
    assert terminal_claim(run, CASES) == (g["claim"]["candidate_claimed_outcome"], g["claim"]["unresolved"])
    # an invalid production: everything of X downstream is invalid_upstream, DE untouched
    x = [n for n in g["nodes"].values() if n["case"] == "X" and n["kind"] in ("estimator", "observable", "block")]
    assert x and all(n["state"] == "invalid_upstream" for n in x)
    de = _nodes(g, "DE", "")
    assert all(n["state"] == n["own_state"] for n in de.values())  # the analysis already applied the rules
    assert all(n["state"] == "invalid_upstream" for n in g["nodes"].values() if n["kind"] == "comparison")
    # edges from the declared inputs: the Onsager estimator depends on the estimators whose products it reads
    deps = {e["to"] for e in sg.dependencies(g, "estimator:DE/CollectiveTransportEstimator")}
    plan = {cls.__name__: entries for cls, entries in estimator_plan()}
    assert {"estimator:DE/SelfDiffusionEstimator", "estimator:DE/ThermoEstimator"} <= deps
    assert set(plan) == {n["estimator"] for n in g["nodes"].values() if n["kind"] == "estimator" and n["case"] == "DE"}
    # the records agree with their graph
    assert graph_findings(run) == []
    assert not [f for f in validate_run(run) if "state_graph" in f.file]


def test_record_validate_reports_a_graph_node_whose_state_is_not_the_recorded_one(tmp_path, micro_de):
    """``record validate``: an observable node's own state against observables.json (the graph's source)."""
    run = _run(tmp_path, micro_de)
    path = run / "run_record" / "state_graph.json"
    doc = json.loads(path.read_text())
    node = next(n for n in doc["nodes"] if n["kind"] == "observable" and n["case"] == "DE" and n["own_state"] == "SI")
    node["own_state"] = node["state"] = "C"  # a graph that calls an SI result C
    path.write_text(json.dumps(doc))
    found = [f for f in validate_run(run) if f.file.endswith("state_graph.json")]
    assert len(found) == 1 and found[0].severity == "error" and node["id"] in found[0].message


def test_f_onsager_matrix_makes_sigma_ionicity_and_t_plus_f_and_is_a_finding(tmp_path, micro_de):
    run = _run(tmp_path, micro_de)
    path = run / "analysis" / "DE" / "results.json"
    doc = json.loads(path.read_text())
    doc["onsager"]["diagnostics"]["failures"] = ["Onsager matrix: negative diagonal L_LiLi"]
    path.write_text(json.dumps(doc))
    g = build_state_graph(run, CASES)
    assert g["nodes"]["estimator:DE/CollectiveTransportEstimator"]["state"] == "F"
    for name in (registry.SIGMA, registry.IONICITY):
        assert g["nodes"][f"observable:DE/{name}"]["state"] == "F"
    t_plus = _nodes(g, "DE", registry.TRANSFERENCE.name + "/")
    assert t_plus and all(n["state"] == "F" for n in t_plus.values())
    assert all(n["state"] != "F" or n["own_state"] == "F" for n in _nodes(g, "DE", "self_diffusion/").values())
    # the run's recorded graph (and its terminal) now disagree with its records: findings, not a crash
    findings = graph_findings(run)
    assert any(f["node"] == f"observable:DE/{registry.SIGMA}" and f["field"] == "state" and f["recomputed"] == "F"
               for f in findings)


def test_decision_is_recorded_on_the_graph_and_judged(tmp_path, micro_de):
    from mdbench.analysis.projection import judge_production_decisions
    from mdbench.engine.adaptive import decide_and_record
    from mdbench.report.state_graph import state_graph_figure, what_it_would_take

    run = _run(tmp_path, micro_de)

    def judge(run: Path) -> dict:
        return judge_production_decisions(RunRecord(run).events(), sg.read_graph(run))

    assert judge(run)["findings"] == [] and not judge_production_decisions([], None)["has_graph"]
    d = decide_and_record(run, "DE", CASES, budget_ns=1.0)
    assert d["action"] in ("extend", "stop") and d["reason"]
    assert all(t["state"] == "SI" for t in d["targets"])  # never an F or M result
    g = sg.read_graph(run)
    assert not [f for f in validate_run(run) if f.severity == "error"]
    decided = [n for n in g["nodes"].values() if (n.get("decision") or {}).get("event_id") == d["event_id"]]
    assert decided and all(n["case"] == "DE" for n in decided)
    si = [n for n in g["nodes"].values() if n["kind"] == "observable" and n["state"] == "SI" and n["case"] == "DE"]
    assert si and all(n["projection"] is not None for n in si)
    table = what_it_would_take(run)
    assert set(table["result"]) == {n["name"] for n in g["nodes"].values() if n["kind"] == "observable"
                                    and n["state"] == "SI"}
    state_graph_figure(run).savefig(tmp_path / "graph.png")
    # another case's decision leaves this one's on the graph
    decide_and_record(run, "X", CASES, budget_ns=1.0)
    assert sg.read_graph(run)["nodes"][decided[0]["id"]]["decision"]["event_id"] == d["event_id"]
    # the decision survives the terminal claim's rewrite of the graph; the records still agree with it
    write_terminal_claim(run, CASES)
    assert sg.read_graph(run)["nodes"][decided[0]["id"]]["decision"]["event_id"] == d["event_id"]
    assert graph_findings(run) == []
    verdict = judge(run)
    assert verdict["has_graph"] and verdict["n_decisions"] == 2 and verdict["findings"] == []
    # an extension without a decision, and one for an F result: findings
    rec = RunRecord(run)
    rec.append_event("production_extension", {"case": "X", "extension": 1})
    rec.append_event("production_decision", {"case": "X", "action": "extend", "production_ns": 0.04,
                                             "remaining_ns": 1.0, "targets": [{"node": "observable:X/viscosity",
                                                                               "ns_to_C": 0.1, "state": "F"}],
                                             "half_widths": {"viscosity": {"half_width_95": 0.1, "analysed_ps": 40.0,
                                                                           "n_blocks": 4}}})
    codes = {f["code"] for f in judge(run)["findings"]}
    assert codes == {"extension_without_decision", "extension_on_unearnable"}
