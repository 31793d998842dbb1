"""The state graph's structure and propagation on a small synthetic graph (no GROMACS).

The graph: two cases A and B; each has stages setup → equilibration → production, an Onsager-matrix
estimator node, D of Li (SI), σ, t+, the ionicity (derived from σ and σ_NE) and σ_NE (derived from D); a
comparison of σ across A and B; the claim.
"""

from __future__ import annotations

import json

import pytest

from mdbench.record import RunRecord
from mdbench.record import state_graph as sg
from mdbench.record.validate import validate_run


def _case(g: dict, case: str, *, production: str = "valid", onsager: str = "C") -> None:
    prev = None
    for stage in ("setup", "equilibration", "production"):
        sg.add_node(g, f"stage:{case}/{stage}", "stage", production if stage == "production" else "valid",
                    "by the gate", case=case)
        if prev:
            sg.add_edge(g, f"stage:{case}/{stage}", prev, sg.UPSTREAM)
        prev = f"stage:{case}/{stage}"
    sg.add_node(g, f"estimator:{case}/msd", "estimator", "C", "computed", case=case)
    sg.add_node(g, f"estimator:{case}/onsager", "estimator", onsager, "L matrix", case=case)
    for est in ("msd", "onsager"):
        sg.add_edge(g, f"estimator:{case}/{est}", prev, sg.UPSTREAM)
    own = {"self_diffusion/LI": "SI", "conductivity/sigma": "C", "conductivity/sigma_NE": "C",
           "conductivity/ionicity": "C", "transference/barycentric/unweighted_L": "C"}
    for name, state in own.items():
        nid = f"observable:{case}/{name}"
        sg.add_node(g, nid, "observable", state, "own checks", case=case, name=name, group=name.split("/")[0])
        sg.add_edge(g, nid, f"estimator:{case}/{'msd' if name.startswith('self') else 'onsager'}", sg.INPUT)
    sg.add_edge(g, f"observable:{case}/conductivity/sigma_NE", f"observable:{case}/self_diffusion/LI", sg.INPUT)
    for src in ("sigma", "sigma_NE"):
        sg.add_edge(g, f"observable:{case}/conductivity/ionicity", f"observable:{case}/conductivity/{src}", sg.INPUT)


def _graph(**b_kwargs) -> dict:
    g = sg.new_graph()
    _case(g, "A")
    _case(g, "B", **b_kwargs)
    sg.add_node(g, "comparison:conductivity/sigma", "comparison", "C", "one definition")
    for c in "AB":
        sg.add_edge(g, "comparison:conductivity/sigma", f"observable:{c}/conductivity/sigma", sg.INPUT)
    return sg.settle_claim(g, ["A", "B"])


def _state(g: dict, nid: str) -> str:
    return g["nodes"][nid]["state"]


def test_f_onsager_matrix_makes_sigma_ionicity_and_t_plus_f_and_the_comparison_inadmissible():
    g = _graph(onsager="F")
    for name in ("conductivity/sigma", "conductivity/ionicity", "transference/barycentric/unweighted_L",
                 "conductivity/sigma_NE"):
        assert _state(g, f"observable:B/{name}") == "F", name
        assert "estimator:B/onsager" in g["nodes"][f"observable:B/{name}"]["reason"] or name.endswith("ionicity")
        assert _state(g, f"observable:A/{name}") != "F"
    assert _state(g, "observable:B/self_diffusion/LI") == "SI"  # upstream of the matrix: untouched
    assert _state(g, "comparison:conductivity/sigma") == "F"
    # SI propagates along derived-from edges (rule 8): sigma_NE of A takes D's SI, the ionicity too
    assert _state(g, "observable:A/conductivity/sigma_NE") == "SI"
    assert _state(g, "observable:A/conductivity/ionicity") == "SI"
    assert _state(g, "observable:A/conductivity/sigma") == "C"


def test_invalid_production_makes_everything_of_that_case_invalid_upstream_and_nothing_else():
    g = _graph(production="invalid")
    b_nodes = [n for n in g["nodes"].values() if n["case"] == "B" and n["kind"] in ("estimator", "observable")]
    assert b_nodes and all(n["state"] == "invalid_upstream" for n in b_nodes)
    assert all(n["state"] != "invalid_upstream" for n in g["nodes"].values() if n["case"] == "A")
    assert _state(g, "comparison:conductivity/sigma") == "invalid_upstream"
    outcome, unresolved = g["claim"]["candidate_claimed_outcome"], g["claim"]["unresolved"]
    assert outcome == "partial"
    assert {"case": "B", "item": "stage/production"} .items() <= unresolved[
        [u["case"] for u in unresolved].index("B")].items()


def test_upstream_stage_invalid_makes_the_stages_after_it_invalid_upstream():
    g = sg.new_graph()
    _case(g, "A")
    g["nodes"]["stage:A/setup"]["own_state"] = "invalid"
    sg.settle_claim(g, ["A"])
    assert _state(g, "stage:A/equilibration") == "invalid_upstream"
    assert _state(g, "stage:A/production") == "invalid_upstream"
    assert g["claim"]["candidate_claimed_outcome"] == "candidate_failure"


def test_claim_follows_the_graph_clean_when_every_result_is_c():
    g = sg.new_graph()
    _case(g, "A")
    g["nodes"]["observable:A/self_diffusion/LI"]["own_state"] = "C"
    sg.settle_claim(g, ["A"])
    assert g["claim"] == {"candidate_claimed_outcome": "clean_valid", "unresolved": [], "cases": ["A"],
                          "recovered": False}
    assert sg.settle_claim(g, ["A"], recovered=True)["claim"]["candidate_claimed_outcome"] == "recovered_valid"


def test_compare_graphs_names_each_disagreement():
    good, bad = _graph(), _graph(onsager="F")
    assert sg.compare_graphs(good, _graph()) == []
    findings = sg.compare_graphs(good, bad)
    fields = {(f["node"], f["field"]) for f in findings}
    assert ("estimator:B/onsager", "own_state") in fields
    assert ("observable:B/conductivity/sigma", "state") in fields
    assert all(f["message"] for f in findings)
    del bad["nodes"]["observable:B/self_diffusion/LI"]
    bad["edges"] = [e for e in bad["edges"] if "self_diffusion/LI" not in e["to"] + e["from"]]
    fields = {(f["node"], f["field"]) for f in sg.compare_graphs(good, bad)}
    assert ("observable:B/self_diffusion/LI", "node") in fields and ("observable:B/conductivity/sigma_NE",
                                                                     "edges") in fields


def test_a_cycle_is_refused():
    g = sg.new_graph()
    sg.add_node(g, "observable:A/x", "observable", "C", "")
    sg.add_node(g, "observable:A/y", "observable", "C", "")
    sg.add_edge(g, "observable:A/x", "observable:A/y")
    sg.add_edge(g, "observable:A/y", "observable:A/x")
    with pytest.raises(ValueError, match="cycle"):
        sg.propagate(g)


def test_written_graph_validates_and_a_terminal_that_disagrees_is_reported(tmp_path):
    rec = RunRecord(tmp_path)
    g = _graph(production="invalid")
    doc = sg.write_graph(rec, g)
    assert doc["event_id"] == rec.events()[-1]["id"]
    assert not [f for f in validate_run(tmp_path) if f.severity == "error"]
    again = sg.read_graph(tmp_path)
    assert sg.compare_graphs(again, g) == []
    rec.write_terminal("clean_valid", final_stages={}, observables={}, unresolved=[])
    warnings = [str(f) for f in validate_run(tmp_path) if f.severity == "warning"]
    assert any("state graph's claim is 'partial'" in w for w in warnings), warnings
    assert sg.compare_terminal(g, rec.terminal())
    # a graph with a node of an unknown state fails the schema
    path = tmp_path / "run_record" / sg.STATE_GRAPH
    bad = json.loads(path.read_text())
    bad["nodes"][0]["state"] = "fine"
    path.write_text(json.dumps(bad))
    assert any("state_graph.json" in str(f) and "schema" in str(f) for f in validate_run(tmp_path))


def test_hostile_graph_file_gives_findings_never_a_crash(tmp_path):
    rec = RunRecord(tmp_path)
    sg.write_graph(rec, _graph())
    path = tmp_path / "run_record" / sg.STATE_GRAPH
    doc = json.loads(path.read_text())
    doc["nodes"] += [{"id": 5}, "x", {"id": "observable:Z/x", "kind": "observable"}]
    doc["edges"] += [{"from": ["a"], "to": None}, 7]
    doc["claim"] = {"candidate_claimed_outcome": "clean_valid", "unresolved": "all of them"}
    path.write_text(json.dumps(doc))
    findings = sg.compare_graphs(sg.read_graph(tmp_path), _graph())
    assert any(f["node"] == "observable:Z/x" for f in findings) and any(f["field"] == "claim" for f in findings)
    assert [f for f in validate_run(tmp_path) if "state_graph.json" in str(f)]
    path.write_text("[1, 2")
    assert sg.read_graph(tmp_path) is None
