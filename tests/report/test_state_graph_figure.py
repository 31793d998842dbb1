"""The state graph figure and the "what it would take" table: drawn from any graph, a hostile one included."""

from __future__ import annotations

import json

import pytest

from mdbench.record import RunRecord
from mdbench.record import state_graph as sg
from mdbench.report.state_graph import state_graph_figure, what_it_would_take


def _graph() -> dict:
    g = sg.new_graph()
    sg.add_node(g, "stage:A/production", "stage", "valid", "", case="A", label="A production")
    sg.add_node(g, "estimator:A/msd", "estimator", "C", "", case="A")
    sg.add_edge(g, "estimator:A/msd", "stage:A/production", sg.UPSTREAM)
    for name, state in (("self_diffusion/LI", "SI"), ("thermo/density", "C")):
        n = sg.add_node(g, f"observable:A/{name}", "observable", state, "", case="A", name=name)
        sg.add_edge(g, n["id"], "estimator:A/msd")
    g["nodes"]["observable:A/self_diffusion/LI"]["projection"] = {
        "ns_to_C": 12.0, "ns_to_C_low": 5.0, "ns_to_C_high": 30.0, "credible": True, "reachable_in_budget": True,
        "limiting_check": "block_precision", "basis": "hw 0.4 -> 0.2", "rule": ""}
    g["nodes"]["observable:A/self_diffusion/LI"]["decision"] = {"action": "extend", "reason": "r", "event_id": 3}
    return sg.settle_claim(g, ["A"])


def test_figure_and_table_of_a_small_graph(tmp_path):
    fig = state_graph_figure(_graph())
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "[SI] → extend" in texts and "claim partial" in fig.axes[0].get_title()
    table = what_it_would_take(_graph())
    assert list(table["result"]) == ["self_diffusion/LI"]
    row = table.iloc[0]
    assert row["projected_ns_to_C"] == 12.0 and row["fits_budget"] and row["range_ns"] == "5-30"
    assert row["decision"] == "extend"


def test_a_run_without_a_graph_says_so(tmp_path):
    RunRecord(tmp_path)
    with pytest.raises(FileNotFoundError, match="no state graph"):
        state_graph_figure(tmp_path)


def test_hostile_graph_file_is_drawn_as_text_never_a_crash(tmp_path):
    rec = RunRecord(tmp_path)
    sg.write_graph(rec, _graph())
    path = tmp_path / "run_record" / sg.STATE_GRAPH
    doc = json.loads(path.read_text())
    doc["nodes"][0]["label"] = "$\\frac{1}{0}$ <script>alert(1)</script>\x07"
    doc["nodes"][1]["projection"] = {"ns_to_C_low": "x", "ns_to_C_high": None}
    doc["nodes"].append({"id": 5, "kind": None})
    doc["edges"].append({"from": ["x"], "to": 1})
    doc["claim"] = "not a dict"
    path.write_text(json.dumps(doc))
    fig = state_graph_figure(tmp_path)
    fig.canvas.draw()  # mathtext would raise on the label: drawn as typed
    assert any("<script>" in t.get_text() for t in fig.axes[0].texts)
    assert len(what_it_would_take(tmp_path)) == 1


def test_the_report_section_shows_a_graph_and_says_so_without_one(tmp_path, capsys):
    from mdbench.report.state_graph import show_state

    with_graph, without, linked = tmp_path / "with", tmp_path / "without", tmp_path / "linked"
    for d in (with_graph, without, linked):
        (d / "run_record").mkdir(parents=True)
    (with_graph / "run_record" / "state_graph.json").write_text(json.dumps(sg.to_json(_graph())))
    (linked / "run_record" / "state_graph.json").symlink_to(with_graph / "run_record" / "state_graph.json")
    # a link is not followed: only the run's own regular file is a graph
    assert show_state([("a", str(with_graph)), ("b", str(without)), ("c", str(linked)), ("d", "")]) == 1
