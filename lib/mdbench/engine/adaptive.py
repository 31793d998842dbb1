"""Production until earned: after each production segment the analysis updates the state graph, the
registered decision rule (:data:`mdbench.analysis.projection.DECISION_RULE`) decides, and the case is
extended by one segment or stops.

Every decision is a ``production_decision`` event carrying its inputs (production so far, budget left, the
projections it used) and is written onto the graph's nodes (``decision`` with the event id). A kill anywhere
leaves a resumable state: an extension in progress is finished first (:func:`mdbench.engine.stages.produce`
continues it from its checkpoint), then the rule decides again from the records — no step is charged twice.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

from mdbench.analysis import observables as registry
from mdbench.analysis.pipeline import load_or_analyze_case
from mdbench.analysis.projection import cheapest_first, decide, half_width_snapshot
from mdbench.analysis.study_state import build_state_graph, carry_over, load_results, project_run
from mdbench.engine.stages import produce
from mdbench.execute import Job, run_jobs
from mdbench.record import RunRecord
from mdbench.record.state_graph import read_graph, write_graph

log = logging.getLogger(__name__)

#: Production extension rounds per case at most (a guard; the budget ends a study first in practice).
MAX_ROUNDS = 50


def _projected_graph(run_dir: Path, cases: list[str], budget_ns: float | None) -> tuple[dict, dict, dict, set, Any]:
    """(graph, production so far, budget left, required families, record): the run's state graph as its records
    stand, every SI result projected against what each case may still run [ns]."""
    rec = RunRecord(run_dir)
    graph = build_state_graph(run_dir, cases)
    done, left = project_run(graph, run_dir, rec, cases, budget_ns)
    return graph, done, left, {e.name for e in registry.REGISTRY if e.required}, rec


def decide_and_record(run_dir: str | Path, case: str, cases: list[str], *, budget_ns: float | None = None
                      ) -> dict[str, Any]:
    """Build the graph, project every SI result, decide for ``case``, record the decision (event + graph)."""

    run_dir = Path(run_dir)
    graph, done, left, required, rec = _projected_graph(run_dir, cases, budget_ns)
    decision = decide(graph, case, production_ns=done[case], remaining_ns=left[case], required=required)
    decision["half_widths"] = half_width_snapshot(load_results(run_dir, case))  # for the next decision's check
    event = rec.append_event("production_decision", decision)
    _annotate(graph, decision, event["id"])
    carry_over(graph, read_graph(run_dir))  # the other cases' decisions stay
    graph["budget"] = {"production_ns": done, "remaining_ns": left, "study_cap_ns": budget_ns}
    write_graph(rec, graph)
    decision["event_id"] = event["id"]
    return decision


def round_order(run_dir: str | Path, active: list[str], cases: list[str], *, budget_ns: float | None) -> list[str]:
    """The ``active`` cases in the order this round decides them (:func:`mdbench.analysis.projection.
    cheapest_first`: the cheapest credible extension first), from the graph as the records stand."""

    graph, done, left, required, _rec = _projected_graph(Path(run_dir), cases, budget_ns)
    return cheapest_first(graph, list(active), production_ns=done, remaining_ns=left, required=required)


def _annotate(graph: dict[str, Any], decision: dict[str, Any], event_id: int) -> None:
    """Write the decision onto the nodes it concerns (targets extend; the rest stop, with why)."""
    nodes = graph["nodes"]
    for t in decision["targets"]:
        action = "extend" if decision["action"] == "extend" else "stop"
        nodes[t["node"]]["decision"] = {"action": action, "reason": decision["reason"], "event_id": event_id}
    for t in decision["out_of_reach"]:
        nodes[t["node"]]["decision"] = {"action": "stop", "event_id": event_id,
                                        "reason": f"out of reach: projected {t['ns_to_C']:.3g} ns > budget"}
    for t in decision["not_projectable"]:
        nodes[t["node"]]["decision"] = {"action": "stop", "event_id": event_id,
                                        "reason": f"not projectable: {t['why']}"}
    for t in decision["never_extended"]:
        nodes[t["node"]]["decision"] = {"action": "stop", "event_id": event_id,
                                        "reason": f"{t['state']}: needs a method fix or a delivery, not sampling"}


def _unfinished_extension(run_dir: Path, case: str) -> float | None:
    """Target length [ps] of an extension recorded but not completed (None: nothing to finish)."""

    path = run_dir / "cases" / case / "prod" / "prod.extension.json"
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    prod = (RunRecord(run_dir).stage_states().get(case) or {}).get("production") or {}
    if prod.get("state") == "valid":
        return None
    seg = json.loads((path.parent / "prod.segment.json").read_text())
    dt_ps = next((float(a.get("dt_ps")) for a in RunRecord(run_dir).attempts()
                  if a.get("case") == case and a.get("stage") == "production"), 0.002)
    return float(state["target_step"] or seg.get("target_step") or 0) * dt_ps


def run_until_earned(run_dir: str | Path, cases: list[str], *, preset: str, engine: str = "auto", threads: int = 1,
                     seed: int = 2026, budget_ns: float | None = None,
                     echo: Callable[[str], None] = log.info) -> list[dict[str, Any]]:
    """Extend each case's production segment by segment until the rule stops it; returns the decisions.

    Runs after the fixed-length study (production and analysis done). Per round and case: finish an
    interrupted extension, decide (:func:`decide_and_record`), and on ``extend`` run the extension
    (:func:`mdbench.engine.stages.produce` with the new length) and analyse the case again.
    """

    run_dir = Path(run_dir)
    decisions: list[dict[str, Any]] = []
    active = list(cases)
    for _ in range(MAX_ROUNDS):
        if not active:
            break
        for case in active:
            pending = _unfinished_extension(run_dir, case)
            if pending:
                echo(f"{case}: finishing the interrupted extension to {pending / 1000:.4g} ns")
                produce(run_dir, case, preset=preset, engine=engine, threads=threads, seed=seed,
                        production_ps=pending)
                load_or_analyze_case(run_dir, case, preset=preset, force=True)
        for case in round_order(run_dir, active, cases, budget_ns=budget_ns):
            d = decide_and_record(run_dir, case, cases, budget_ns=budget_ns)
            decisions.append(d)
            echo(f"{case}: {d['action']} — {d['reason']}")
            if d["action"] != "extend":
                active.remove(case)
                continue
            report = produce(run_dir, case, preset=preset, engine=engine, threads=threads, seed=seed,
                             production_ps=d["target_ns"] * 1000.0)
            if report.state != "valid":
                echo(f"{case}: extension ended {report.state}: {report.reason}")
                active.remove(case)
                continue
            load_or_analyze_case(run_dir, case, preset=preset, force=True)
    return decisions


def extend_until_earned(out: Path, cases: list[str], *, preset: str, engine: str, threads: int, seed: int,
                        budget_ns: float | None, echo: Callable[[str], None], analysis_jobs: Callable[[list[str]], list],
                        compare_stage: str) -> list:
    """``mdbench study run --until earned``: :func:`run_until_earned`, then the analysis templates of the
    extended cases (``analysis_jobs(cases)``: the study command's jobs) and the comparison (``compare_stage``)
    again, so their notebooks and the terminal claim follow the new production; returns the executor's results
    of those reruns."""

    decisions = run_until_earned(out, cases, preset=preset, engine=engine, threads=threads, seed=seed,
                                 budget_ns=budget_ns, echo=echo)
    extended = sorted({d["case"] for d in decisions if d["action"] == "extend"})
    results = []
    if extended:
        results += run_jobs(analysis_jobs(extended), executor="local", workers=1, force=True, verbose=False)
    results += run_jobs([Job(str(out), "ALL", compare_stage, {"cases": cases})], executor="local", workers=1,
                        force=True, verbose=False)
    return results
