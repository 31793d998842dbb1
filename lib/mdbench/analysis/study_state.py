"""The study's state graph, built from a run's records and the estimators' declared inputs.

Where each edge comes from (nothing here is a hand-written list of dependencies):

* stage → stage: the engine's stage order (setup → minimization → equilibration → production);
* production → its segments: the ledger's completed production attempts;
* estimator → production: the estimator reads the case's trajectory / energy (its ``inputs``);
* estimator → estimator: it reads ``products.<name>`` that the other's registry entries declare
  (:func:`mdbench.analysis.estimator.estimator_plan`, the same declarations the analysis enforces);
* observable → its estimator (the registry entry's ``estimator``), → its blocks, → the results it was
  derived from (``derived_from``, written by the estimator from its classifier inputs: σ_NE from the
  ions' D, the ionicity from σ and σ_NE) and → the same member of a family whose product its estimator
  reads (Yeh–Hummer D of Li from D of Li and from η);
* comparison → the same result of every case (the report's cross-system rows);
* claim → every production stage and every observable.

States propagate by :data:`mdbench.record.state_graph.PROPAGATION_RULES`; the terminal claim is the
graph's (:func:`terminal_claim_from_graph`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable

from mdbench.analysis import observables as registry
from mdbench.analysis.projection import project_graph
from mdbench.record import CASE_BUDGET_NS, STUDY_BUDGET_NS
from mdbench.record import state_graph as sg

#: The engine's stage order (a stage depends on the one before it).
STAGE_ORDER = ("setup", "minimization", "equilibration", "production")
_SEGMENT_STATE = {"completed": "valid", "reserved": "running", "failed": "invalid", "interrupted": "invalid",
                  "discarded": "invalid"}


def load_results(run_dir: str | Path, case: str) -> dict[str, Any]:
    """``analysis/<CASE>/results.json`` of a run ({} when absent or unreadable)."""
    try:
        doc = json.loads((Path(run_dir) / "analysis" / case / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))


def _all_finite(obj: Any) -> bool:
    if isinstance(obj, list):
        return all(_all_finite(x) for x in obj)
    return _finite(obj)


def _is_summary(name: str, state: dict) -> bool:
    """A category summary (its reference has no JSON pointer): it repeats its members."""
    return any(g.name == name for g in registry.AUDIT_GROUPS) and "#" not in str(state.get("results_ref") or "")


def _decision_of(state: str, event_id: Any) -> dict[str, Any]:
    if state in ("C", "valid"):
        return {"action": "accept", "reason": "accepted by the registered rules", "event_id": event_id}
    return {"action": "none", "reason": "not accepted; no action decided yet", "event_id": event_id}


def _stage_nodes(graph: dict, case: str, stages: dict[str, Any]) -> str | None:
    """Stage nodes of one case chained in engine order; returns the production node id (None: no production)."""
    names = [s for s in STAGE_ORDER if s in stages] + sorted(s for s in stages if s not in STAGE_ORDER
                                                              and s != "prod")
    if "prod" in stages and "production" not in stages:
        names.append("prod")
    prev = None
    prod_id = None
    for name in names:
        st = stages[name]
        canonical = "production" if name == "prod" else name
        node_id = f"stage:{case}/{canonical}"
        node = sg.add_node(graph, node_id, "stage", str(st.get("state")), str(st.get("reason", "")), case=case,
                           label=f"{case} {canonical}", evidence=["run_record/stage_states.json"])
        node["decision"] = _decision_of(node["own_state"], st.get("event_id"))
        if prev is not None:
            sg.add_edge(graph, node_id, prev, sg.UPSTREAM)
        prev = node_id
        if canonical == "production":
            prod_id = node_id
    return prod_id


def _segment_nodes(graph: dict, case: str, prod_id: str | None, attempts: Iterable[dict]) -> None:
    for a in attempts:
        if a.get("case") != case or a.get("stage") != "production":
            continue
        node_id = f"segment:{case}/{a.get('id')}"
        status = str(a.get("status"))
        sg.add_node(graph, node_id, "segment", _SEGMENT_STATE.get(status, "invalid"),
                    f"ledger attempt {a.get('id')} {status} ({a.get('relation') or 'first'}; steps "
                    f"{a.get('start_step')}-{a.get('target_step')})", case=case,
                    label=f"{case} segment {a.get('id')}",
                    evidence=["run_record/attempts.jsonl", str(a.get("segment"))],
                    ns_charged=float(a.get("ns_charged") or 0.0), relation=a.get("relation"))
        if prod_id is not None and status == "completed":
            sg.add_edge(graph, prod_id, node_id, sg.UPSTREAM)


def _estimator_nodes(graph: dict, case: str, prod_id: str | None, results: dict) -> dict[str, str]:
    """One node per estimator (what it computes for the case); returns family name → estimator node id."""
    from mdbench.analysis.estimator import declared_products, estimator_plan

    family_node: dict[str, str] = {}
    maker: dict[str, str] = {}
    plan = estimator_plan()
    for cls, entries in plan:
        node_id = f"estimator:{case}/{cls.__name__}"
        for e in entries:
            family_node[e.name] = node_id
            for p in e.products:
                maker[p] = node_id
    observed = results.get("observables") if isinstance(results.get("observables"), dict) else {}
    for cls, entries in plan:
        node_id = family_node[entries[0].name]
        state, reason = _estimator_state(entries, observed, results)
        sg.add_node(graph, node_id, "estimator", state, reason, case=case,
                    label=f"{case} " + " + ".join(e.title.split(":")[0].split(" (")[0] for e in entries[:2]),
                    evidence=[f"analysis/{case}/results.json"], estimator=cls.__name__,
                    families=[e.name for e in entries])
        if prod_id is not None:
            sg.add_edge(graph, node_id, prod_id, sg.UPSTREAM)
        for product in declared_products(cls):
            if product in maker and maker[product] != node_id:
                sg.add_edge(graph, node_id, maker[product], sg.UPSTREAM)
    return family_node


def _estimator_state(entries: tuple, observed: dict, results: dict) -> tuple[str, str]:
    """F when the estimator's shared intermediate failed (failures recorded in its details section, or a
    non-finite matrix), M when it delivered none of its results, else C (computed)."""
    for e in entries:
        section = results.get(e.details_section) if e.details_section else None
        if isinstance(section, dict):
            diag = section.get("diagnostics") if isinstance(section.get("diagnostics"), dict) else {}
            failures = diag.get("failures") or []
            if failures:
                return "F", f"{e.details_section}: " + "; ".join(map(str, failures))[:300]
            matrix = (section.get("L") or {}).get("whole") if isinstance(section.get("L"), dict) else None
            if matrix is not None and not _all_finite(matrix):
                return "F", f"{e.details_section}: the Onsager matrix L has non-finite entries"
    if results and not any(e.owns(name) for e in entries for name in observed):
        return "M", "the estimator delivered none of its results"
    return "C", "computed from the case's production"


def _observable_nodes(graph: dict, case: str, prod_id: str | None, recorded: dict, results: dict,
                      family_node: dict[str, str]) -> None:
    observed = results.get("observables") if isinstance(results.get("observables"), dict) else {}
    reads = _product_families()
    for name, st in sorted(recorded.items()):
        if not isinstance(st, dict) or _is_summary(name, st):
            continue
        entry = registry.family(name)
        res = observed.get(name) if isinstance(observed.get(name), dict) else {}
        unc = res.get("uncertainty") if isinstance(res.get("uncertainty"), dict) else {}
        node_id = f"observable:{case}/{name}"
        node = sg.add_node(graph, node_id, "observable", str(st.get("state")), str(st.get("reason", "")), case=case,
                           label=f"{case} {name}", name=name, group=registry.group_of(name),
                           registration_id=st.get("registration_id"),
                           evidence=[e for e in (st.get("results_ref"), st.get("registration_id")) if e],
                           value=res.get("value") if _finite(res.get("value")) else None, unit=res.get("unit"),
                           half_width_95=unc.get("half_width_95") if _finite(unc.get("half_width_95")) else None)
        node["decision"] = _decision_of(node["own_state"], st.get("event_id"))
        est = family_node.get(entry.name) if entry is not None else None
        if est is not None:
            sg.add_edge(graph, node_id, est, sg.INPUT)
        elif prod_id is not None:
            sg.add_edge(graph, node_id, prod_id, sg.UPSTREAM)
        _block_nodes(graph, case, node_id, name, res, node["own_state"], prod_id)
        diag = res.get("diagnostics") if isinstance(res.get("diagnostics"), dict) else {}
        for src in diag.get("derived_from") or []:
            if isinstance(src, str) and src in recorded:
                sg.add_edge(graph, node_id, f"observable:{case}/{src}", sg.INPUT)
        if entry is not None:
            qualifier = name[len(entry.name) + 1:]
            for producer in reads.get(entry.name, ()):
                for other in (producer.key(qualifier) if qualifier else None, producer.name):
                    if other and other != name and other in recorded and not _is_summary(other, recorded[other]):
                        sg.add_edge(graph, node_id, f"observable:{case}/{other}", sg.INPUT)
                        break


def _product_families() -> dict[str, tuple]:
    """Family → the families whose products its estimator reads (from the declared inputs)."""
    import importlib

    from mdbench.analysis.estimator import declared_products

    maker = {p: e for e in registry.REGISTRY for p in e.products}
    out: dict[str, tuple] = {}
    for e in registry.REGISTRY:
        module, _, cls_name = e.estimator.partition(":")
        cls = getattr(importlib.import_module(module), cls_name)
        out[e.name] = tuple(maker[p] for p in declared_products(cls) if p in maker and maker[p] is not e)
    return out


def _block_nodes(graph: dict, case: str, node_id: str, name: str, res: dict, own_state: str,
                 prod_id: str | None) -> None:
    blocks = res.get("blocks") if isinstance(res.get("blocks"), list) else []
    diag = res.get("diagnostics") if isinstance(res.get("diagnostics"), dict) else {}
    entry = registry.family(name)
    explained = bool(diag.get("too_short") or diag.get("not_estimable"))
    explained = explained or (entry is not None and entry.null_means_none)
    for i, value in enumerate(blocks):
        if _finite(value):
            state, reason = "C", f"block {i + 1} value {float(value):.4g}"
        elif explained or own_state != "F" and value is None and own_state in ("SI", "not_estimable"):
            state, reason = own_state, f"block {i + 1}: no value ({own_state} by its estimator)"
        else:
            state, reason = "F", f"block {i + 1}: value not finite"
        bid = f"block:{case}/{name}#{i + 1}"
        sg.add_node(graph, bid, "block", state, reason, case=case, label=f"{case} {name} block {i + 1}",
                    evidence=[f"analysis/{case}/results.json"], value=float(value) if _finite(value) else None)
        sg.add_edge(graph, node_id, bid, sg.INPUT)
        if prod_id is not None:
            sg.add_edge(graph, bid, prod_id, sg.UPSTREAM)


def _comparison_nodes(graph: dict, registrations: dict[str, dict]) -> None:
    """One node per result reported for two or more cases in the report's cross-system rows; admissible only
    with one registered definition across the cases (else F), and only as good as its weakest support."""
    by_name: dict[str, list[str]] = {}
    for nid, n in graph["nodes"].items():
        if n["kind"] == "observable":
            entry = registry.family(n["name"])
            if entry is not None and entry.members:
                by_name.setdefault(n["name"], []).append(nid)
    for name, ids in sorted(by_name.items()):
        if len(ids) < 2:
            continue
        defs = {}
        for nid in ids:
            node = graph["nodes"][nid]
            reg = registrations.get(str(node.get("registration_id")))
            defs[node["case"]] = json.dumps(reg.get("definition"), sort_keys=True, default=str) if reg else ""
        distinct = {d for d in defs.values() if d}
        if len(distinct) > 1:
            state, reason = "F", ("inadmissible: the registered definitions differ between "
                                  + ", ".join(sorted(c for c, d in defs.items() if d)))
        else:
            state, reason = "C", f"one registered definition across {len(ids)} cases"
        cid = f"comparison:{name}"
        sg.add_node(graph, cid, "comparison", state, reason, label=f"{name} across " +
                    ", ".join(sorted(defs)), name=name, evidence=["analysis/state_table.csv"])
        for nid in ids:
            sg.add_edge(graph, cid, nid, sg.INPUT)


def build_state_graph(run_dir: str | Path, cases: Iterable[str]) -> dict[str, Any]:
    """The propagated state graph of ``cases`` from the run's records (with its claim; nothing written).

    Parameters
    ----------
    run_dir : path
        Run directory (``run_record/``, ``analysis/<CASE>/results.json``).
    cases : iterable of str
        The study's cases.
    """
    from mdbench.record import RunRecord

    run_dir = Path(run_dir)
    cases = list(cases)
    rec = RunRecord(run_dir)
    stages, observables, attempts = rec.stage_states(), rec.observable_states(), rec.attempts()
    graph = sg.new_graph()
    results: dict[str, dict] = {}
    for case in cases:
        results[case] = load_results(run_dir, case)
        prod_id = _stage_nodes(graph, case, stages.get(case) or {})
        _segment_nodes(graph, case, prod_id, attempts)
        family_node = _estimator_nodes(graph, case, prod_id, results[case]) if observables.get(case) else {}
        _observable_nodes(graph, case, prod_id, observables.get(case) or {}, results[case], family_node)
    _comparison_nodes(graph, {str(r.get("id")): r for r in rec.registrations() if isinstance(r, dict)})
    recovered = any(a.get("status") in ("failed", "interrupted", "discarded") for a in attempts
                    if a.get("case") in cases)
    return sg.settle_claim(graph, cases, recovered=recovered)


def production_ns(rec: Any, case: str) -> float:
    """Production length run so far [ns]: the furthest step a completed production attempt reached (the
    segment is continuous from step 0), times its time step."""
    ends = [float(a.get("target_step") or 0) * float(a.get("dt_ps") or 0.0) / 1000.0 for a in rec.attempts()
            if a.get("case") == case and a.get("stage") == "production" and a.get("status") == "completed"]
    return max(ends, default=0.0)


def remaining_ns(rec: Any, case: str, budget_ns: float | None) -> float:
    """What the budget still allows ``case`` [ns]: the smaller of the case's and the study's remainders
    (``budget_ns`` caps the study's total below its registered 300 ns)."""
    study = min(STUDY_BUDGET_NS, budget_ns) if budget_ns is not None else STUDY_BUDGET_NS
    return max(0.0, min(CASE_BUDGET_NS - rec.committed_ns(case), study - rec.committed_ns()))


def decision_history(rec: Any, cases: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Case → the result half-widths its last ``production_decision`` recorded (``half_widths``), for the
    projection's history rule (:func:`mdbench.analysis.projection.half_width_rose`); cases never decided are
    absent."""
    cases = set(cases)
    history: dict[str, dict[str, Any]] = {}
    for e in rec.events():
        p = e.get("payload") if e.get("type") == "production_decision" else None
        if isinstance(p, dict) and p.get("case") in cases and isinstance(p.get("half_widths"), dict):
            history[p["case"]] = p["half_widths"]
    return history


def project_run(graph: dict[str, Any], run_dir: str | Path, rec: Any, cases: list[str], budget_ns: float | None
                ) -> tuple[dict[str, float], dict[str, float]]:
    """Project every SI result of ``graph`` (in place) against what each case may still run, with the half-width
    history of the run's decisions; returns (production so far, budget left) per case [ns] (``budget_ns`` caps
    the study's total, :func:`remaining_ns`)."""
    done = {c: production_ns(rec, c) for c in cases}
    left = {c: remaining_ns(rec, c, budget_ns) for c in cases}
    project_graph(graph, {c: load_results(run_dir, c) for c in cases}, done,
                  budget_ns={c: done[c] + left[c] for c in cases}, history=decision_history(rec, cases))
    return done, left


def record_state_graph(run_dir: str | Path, cases: Iterable[str]) -> dict[str, Any]:
    """Build the graph and write ``run_record/state_graph.json`` (returns the working form); the decisions
    of the graph recorded before stay on the nodes they were made for; every SI result gets its projection."""
    from mdbench.record import RunRecord

    cases = list(cases)
    rec = RunRecord(run_dir)
    graph = carry_over(build_state_graph(run_dir, cases), sg.read_graph(run_dir))
    # what more sampling would buy, also where the study ran a fixed length: every SI result projected against
    # the registered budget (the run's production so far plus what the case and the study still allow)
    project_run(graph, run_dir, rec, cases, None)
    sg.write_graph(rec, graph)
    return graph


def carry_over(graph: dict[str, Any], prior: dict[str, Any] | None) -> dict[str, Any]:
    """Keep the study's decisions (``extend``/``stop``) and projections of the ``prior`` recorded graph on the
    same nodes of ``graph`` where their state is unchanged and nothing newer was decided (in place; returns
    ``graph``)."""
    if prior is None:
        return graph
    for nid, node in graph["nodes"].items():
        old = prior["nodes"].get(nid) or {}
        if old.get("projection") and node["state"] == old.get("state") and not node.get("projection"):
            node["projection"] = old["projection"]
        if isinstance(old.get("decision"), dict) and old["decision"].get("action") in ("extend", "stop") \
                and node["state"] == old.get("state") and (node.get("decision") or {}).get("action") not in (
                    "extend", "stop"):
            node["decision"] = old["decision"]
    if prior.get("budget") and not graph.get("budget"):
        graph["budget"] = prior["budget"]
    return graph


def terminal_claim_from_graph(run_dir: str | Path, cases: Iterable[str]) -> tuple[str, list[dict[str, Any]]]:
    """(claimed outcome, unresolved items): the claim of the run's recomputed state graph."""
    claim = build_state_graph(run_dir, cases)["claim"]
    return claim["candidate_claimed_outcome"], claim["unresolved"]


def graph_findings(run_dir: str | Path, cases: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Where a run's recorded state graph and terminal record disagree with the graph recomputed from its
    records (findings of :func:`mdbench.record.state_graph.compare_graphs`); [] for a run without a graph.

    Decisions and projections are not compared (they are the study's actions, judged by the audit's O3)."""
    from mdbench.record import RunRecord

    recorded = sg.read_graph(run_dir)
    if recorded is None:
        return []
    if cases is None:
        cases = list((recorded.get("claim") or {}).get("cases") or [])
    recomputed = build_state_graph(run_dir, cases)
    return sg.compare_graphs(recorded, recomputed) + sg.compare_terminal(recomputed, RunRecord(run_dir).terminal())
