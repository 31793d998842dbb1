"""O3 on a run that keeps a scientific-state graph (seed §5.2): production extensions and stops are judged
against the run's own recorded decisions and projections (``outcome.production_decision_findings``). Each
planted decision lowers O3 by its row in the check table; the honest graph, and a run without one, leave O3
where it was."""

from __future__ import annotations

import random
from pathlib import Path

import _runbuilder as rb
from _audit_helpers import saeo
from _testseed import seed_for
from mdbench.analysis.study_state import record_state_graph
from mdbench.audit import audit_run
from mdbench.audit.codes import rule
from mdbench.record import RunRecord

RNG = random.Random(seed_for("audit/production-decisions"))
CODES = {"extension_without_decision", "extension_on_unearnable", "extension_after_unreachable", "unjustified_stop",
         "decision_without_inputs"}


def _audit(run: Path, bundle: Path, out: Path) -> tuple[float, set[str]]:
    res = audit_run(run, bundle, out, reanalysis=False)
    return saeo(out)["items"]["O3"]["final"], {f.code for f in res.findings if f.code in CODES}


def _decision(rec: RunRecord, action: str, targets: list[dict], *, production_ns: float, remaining_ns: float,
              out_of_reach: list[dict] = (), inputs: bool = True) -> None:
    """A planted decision; with ``inputs`` it records a half-width snapshot of its targets, as the study does."""
    snapshot = {str(t["node"]).split("/", 1)[1]: {"half_width_95": 0.1, "analysed_ps": 1000.0 * production_ns,
                                                  "n_blocks": 4} for t in targets}
    rec.append_event("production_decision", {"case": rb.CASE, "action": action, "production_ns": production_ns,
                                             "remaining_ns": remaining_ns, "targets": targets,
                                             "out_of_reach": list(out_of_reach), "reason": "planted",
                                             **({"half_widths": snapshot} if inputs else {})})


def _si(ns_to_c: float) -> dict:
    return {"node": f"observable:{rb.CASE}/viscosity", "state": "SI", "ns_to_C": ns_to_c, "credible": True}


def _base(run: Path, bundle: Path, tmp_path: Path) -> float:
    o3_plain, found = _audit(run, bundle, tmp_path / "plain")
    assert not found  # a run without a graph: judged as before
    record_state_graph(run, [rb.CASE])
    o3_graph, found = _audit(run, bundle, tmp_path / "graph")
    assert not found and o3_graph == o3_plain  # the honest graph, with no decision, moves nothing
    return o3_graph


def test_extension_spent_on_an_F_result_is_O3_zero(run_copy, bundle, tmp_path):
    _base(run_copy, bundle, tmp_path)
    rec = RunRecord(run_copy)
    ns = RNG.uniform(0.05, 0.5)
    _decision(rec, "extend", [{"node": f"observable:{rb.CASE}/conductivity", "state": "F", "ns_to_C": ns}],
              production_ns=0.04, remaining_ns=1.0)
    rec.append_event("production_extension", {"case": rb.CASE, "extension": 1})
    o3, found = _audit(run_copy, bundle, tmp_path / "planted")
    assert found == {"extension_on_unearnable"}
    assert o3 == rule("extension_on_unearnable").lowers["O3"] == 0.0


def test_extension_for_blocks_shorter_than_the_correlation_time_is_O3_zero(run_copy, bundle, tmp_path):
    """The decision's own inputs say the blocks were shorter than 3 correlation times of the result's series:
    its projection was not credible (``projection.blocks_outlast_correlation``), whatever flag it carries."""
    _base(run_copy, bundle, tmp_path)
    rec = RunRecord(run_copy)
    block = RNG.uniform(20.0, 100.0)
    target = {**_si(RNG.uniform(0.1, 0.9)), "node": f"observable:{rb.CASE}/coordination/SOL:O@first_min",
              "block_length_ps": block, "correlation_time_ps": block / RNG.uniform(0.5, 2.9)}
    _decision(rec, "extend", [target], production_ns=0.04, remaining_ns=1.0)
    rec.append_event("production_extension", {"case": rb.CASE, "extension": 1})
    o3, found = _audit(run_copy, bundle, tmp_path / "planted")
    assert found == {"extension_on_unearnable"} and o3 == 0.0


def test_extension_for_a_half_width_that_rose_since_the_last_decision_is_O3_zero(run_copy, bundle, tmp_path):
    """The decisions' own snapshots say the target's half-width rose against the (T/T')^1/2 expectation beyond
    two four-block estimates' spread (``projection.half_width_rose``): its projection was not credible."""
    _base(run_copy, bundle, tmp_path)
    rec = RunRecord(run_copy)
    name, t0 = "coordination/SOL:O@first_min", RNG.uniform(50.0, 200.0)
    hw0 = RNG.uniform(0.02, 0.2)
    target = {**_si(RNG.uniform(0.1, 0.9)), "node": f"observable:{rb.CASE}/{name}"}
    for action, targets, hw, t in (("stop", [], hw0, t0), ("extend", [target], hw0 * RNG.uniform(1.7, 3.0), 4 * t0)):
        rec.append_event("production_decision", {
            "case": rb.CASE, "action": action, "production_ns": 0.04, "remaining_ns": 1.0, "targets": targets,
            "out_of_reach": [], "reason": "planted",
            "half_widths": {name: {"half_width_95": hw, "analysed_ps": t, "n_blocks": 4}}})
    rec.append_event("production_extension", {"case": rb.CASE, "extension": 1})
    o3, found = _audit(run_copy, bundle, tmp_path / "planted")
    assert found == {"extension_on_unearnable"} and o3 == 0.0


def test_a_decision_without_its_inputs_caps_O3_at_half(run_copy, bundle, tmp_path):
    """An extend decision for a reachable target that records no half-width snapshot of its case cannot be
    checked against what it knew (issue 46: every decision is an event with its inputs)."""
    base = _base(run_copy, bundle, tmp_path)
    rec = RunRecord(run_copy)
    _decision(rec, "extend", [_si(RNG.uniform(0.1, 0.9))], production_ns=0.04, remaining_ns=1.0, inputs=False)
    rec.append_event("production_extension", {"case": rb.CASE, "extension": 1})
    o3, found = _audit(run_copy, bundle, tmp_path / "planted")
    assert found == {"decision_without_inputs"}
    assert o3 == min(base, rule("decision_without_inputs").lowers["O3"]) and o3 <= 0.5


def test_the_correlation_time_a_target_omits_is_read_from_the_decisions_snapshot(run_copy, bundle, tmp_path):
    """A target that leaves out its block length and correlation time is judged by its case's snapshot in the
    same decision: blocks of analysed/n shorter than 3 tau there make the extension unearnable."""
    _base(run_copy, bundle, tmp_path)
    rec = RunRecord(run_copy)
    name, analysed = "coordination/SOL:O@first_min", RNG.uniform(100.0, 400.0)
    target = {**_si(RNG.uniform(0.1, 0.9)), "node": f"observable:{rb.CASE}/{name}"}
    rec.append_event("production_decision", {
        "case": rb.CASE, "action": "extend", "production_ns": 0.04, "remaining_ns": 1.0, "targets": [target],
        "out_of_reach": [], "reason": "planted",
        "half_widths": {name: {"half_width_95": 0.05, "analysed_ps": analysed, "n_blocks": 4,
                               "correlation_time_ps": analysed / 4 / RNG.uniform(0.5, 2.9)}}})
    rec.append_event("production_extension", {"case": rb.CASE, "extension": 1})
    o3, found = _audit(run_copy, bundle, tmp_path / "planted")
    assert found == {"extension_on_unearnable"} and o3 == 0.0


def test_extension_without_a_decision_caps_O3_at_half(run_copy, bundle, tmp_path):
    base = _base(run_copy, bundle, tmp_path)
    RunRecord(run_copy).append_event("production_extension", {"case": rb.CASE, "extension": 1})
    o3, found = _audit(run_copy, bundle, tmp_path / "planted")
    assert found == {"extension_without_decision"}
    assert o3 == min(base, rule("extension_without_decision").lowers["O3"]) and o3 <= 0.5


def test_extension_after_a_projection_said_unreachable_is_O3_zero(run_copy, bundle, tmp_path):
    _base(run_copy, bundle, tmp_path)
    rec = RunRecord(run_copy)
    far = _si(RNG.uniform(200.0, 5000.0))  # projected far beyond the case's 100 ns
    _decision(rec, "stop", [], production_ns=0.04, remaining_ns=1.0, out_of_reach=[far])
    _decision(rec, "extend", [{**far, "ns_to_C": 0.5}], production_ns=0.04, remaining_ns=1.0)
    rec.append_event("production_extension", {"case": rb.CASE, "extension": 1})
    o3, found = _audit(run_copy, bundle, tmp_path / "planted")
    assert "extension_after_unreachable" in found and o3 == 0.0


def test_stop_while_a_result_was_projected_within_budget_caps_O3_at_half(run_copy, bundle, tmp_path):
    base = _base(run_copy, bundle, tmp_path)
    _decision(RunRecord(run_copy), "stop", [_si(RNG.uniform(0.1, 0.9))], production_ns=0.04, remaining_ns=1.0)
    o3, found = _audit(run_copy, bundle, tmp_path / "planted")
    assert found == {"unjustified_stop"}
    assert o3 == min(base, 0.5)


def test_a_hostile_graph_and_decision_payload_end_as_no_crash(run_copy, bundle, tmp_path):
    (run_copy / "run_record" / "state_graph.json").write_text('{"nodes": [{"id": ["x"]}, 7], "edges": "no"}')
    rec = RunRecord(run_copy)
    rec.append_event("production_decision", {"case": ["unhashable"], "action": "extend", "targets": "x"})
    rec.append_event("production_extension", {"case": {"a": 1}})
    o3, _found = _audit(run_copy, bundle, tmp_path / "hostile")
    assert 0.0 <= o3 <= 1.0
