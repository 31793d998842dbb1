"""The study's scientific state as one graph: ``run_record/state_graph.json``.

Nodes are the stages of each case, its production segments, the estimators' shared intermediates (the
Onsager matrix, the MSDs), the observables (whole value and blocks), the derived observables (σ_NE,
ionicity, t+, Yeh–Hummer D), the cross-system comparisons and the terminal claim. An edge ``a → b`` reads
"a depends on b". The graph is *built* by the analysis room (:mod:`mdbench.analysis.study_state`, from
the estimators' declared inputs); this module holds what every room shares: the structure, the
propagation rules (:data:`PROPAGATION_RULES`), the claim that follows from a propagated graph, reading,
writing, and the comparison of a run's recorded graph with a recomputed one.

Each node carries ``own_state`` (what its producer recorded), ``state`` (after propagation), ``reason``,
``evidence`` (references into the run directory), ``decision`` (what the study did about it, with the
event id) and, for an SI result, ``projection`` (what it would take to earn it).

>>> g = new_graph()
>>> _ = add_node(g, "stage:A/production", "stage", "valid", "gate passed", case="A")
>>> _ = add_node(g, "observable:A/D", "observable", "C", "all checks passed", case="A")
>>> add_edge(g, "observable:A/D", "stage:A/production", UPSTREAM)
>>> g["nodes"]["stage:A/production"]["own_state"] = "invalid"
>>> propagate(g)["nodes"]["observable:A/D"]["state"]
'invalid_upstream'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from mdbench.untrusted import try_read_json
from mdbench.observable_states import C, F, INVALID_UPSTREAM, M, NEXT_ACTION, NOT_REACHED, SEVERITY

#: File name in ``run_record/``.
STATE_GRAPH = "state_graph.json"
GRAPH_SCHEMA_VERSION = "1.0"

#: Node kinds, upstream first.
NODE_KINDS = ("stage", "segment", "estimator", "observable", "block", "comparison", "claim")
#: Edge kinds: what an edge carries from the dependency to the dependent.
UPSTREAM = "upstream"  # only "no usable data": invalid → invalid_upstream, not_reached/running → not_reached
INPUT = "input"        # every state: the dependent takes the weakest of its own and the input's (rule 8)
EDGE_KINDS = (UPSTREAM, INPUT)

PROPAGATION_RULES = (
    "an edge a -> b reads 'a depends on b'; nodes are settled dependencies first. "
    "A stage that is invalid or invalid_upstream makes every stage downstream invalid_upstream and every "
    "other node downstream invalid_upstream (analysis rule 2); a stage not_reached or running makes the "
    "results downstream not_reached (rule 1). Along an 'upstream' edge only these two carry. Along an "
    "'input' edge a result takes the weakest of its own state and its input's (rule 8: C < SI < "
    "not_estimable < M < F < not_reached < invalid_upstream), so an F input (an F Onsager matrix, a "
    "non-finite block) makes the derived result F; the reason names the input. A comparison across systems "
    "is admissible only between results with one definition and valid support: otherwise it is F "
    "(definitions differ) or takes its weakest input's state. The terminal claim follows from the "
    "propagated graph by the claim rule registered with it."
)

_STAGE_BAD = {"invalid", "invalid_upstream"}
_STAGE_WAITING = {"not_reached", "running"}


def new_graph() -> dict[str, Any]:
    """An empty graph (nodes keyed by id, edges as a list)."""
    return {"schema_version": GRAPH_SCHEMA_VERSION, "rules": PROPAGATION_RULES, "nodes": {}, "edges": []}


def add_node(graph: dict[str, Any], node_id: str, kind: str, own_state: str, reason: str, *,
             case: str | None = None, label: str | None = None, evidence: Iterable[str] = (),
             **extra: Any) -> dict[str, Any]:
    """Add (or replace) one node; ``extra`` fields (``group``, ``value``, ``half_width_95``, …) are kept."""
    if kind not in NODE_KINDS:
        raise ValueError(f"node kind {kind!r} is not one of {NODE_KINDS}")
    node = {"id": node_id, "kind": kind, "case": case, "label": label or node_id, "own_state": own_state,
            "state": own_state, "reason": reason, "own_reason": reason, "evidence": list(evidence),
            "decision": None, "projection": None, **extra}
    graph["nodes"][node_id] = node
    return node


def add_edge(graph: dict[str, Any], dependent: str, dependency: str, kind: str = INPUT) -> None:
    """Record ``dependent`` depends on ``dependency`` (once)."""
    if kind not in EDGE_KINDS:
        raise ValueError(f"edge kind {kind!r} is not one of {EDGE_KINDS}")
    edge = {"from": dependent, "to": dependency, "kind": kind}
    if edge not in graph["edges"]:
        graph["edges"].append(edge)


def dependencies(graph: dict[str, Any], node_id: str) -> list[dict[str, Any]]:
    """The edges leaving ``node_id`` (what it depends on)."""
    return [e for e in graph["edges"] if e["from"] == node_id]


def dependents(graph: dict[str, Any], node_id: str) -> list[str]:
    """Ids of the nodes that depend on ``node_id``."""
    return [e["from"] for e in graph["edges"] if e["to"] == node_id]


def topological_order(graph: dict[str, Any]) -> list[str]:
    """Node ids, every dependency before its dependents (ValueError on a cycle)."""
    deps: dict[str, set[str]] = {n: set() for n in graph["nodes"]}
    for e in graph["edges"]:
        if e["from"] in deps and e["to"] in deps:
            deps[e["from"]].add(e["to"])
    order: list[str] = []
    done: set[str] = set()
    pending = sorted(deps)
    while pending:
        ready = [n for n in pending if deps[n] <= done]
        if not ready:
            raise ValueError(f"the state graph has a cycle among {', '.join(pending[:6])}")
        order += ready
        done |= set(ready)
        pending = [n for n in pending if n not in done]
    return order


def _carried(dep: dict[str, Any], kind: str) -> str | None:
    """The state a dependency passes along an edge of ``kind`` (None: nothing)."""
    state = dep["state"]
    if dep["kind"] in ("stage", "segment"):
        if state in _STAGE_BAD:
            return INVALID_UPSTREAM
        if state in _STAGE_WAITING:
            return NOT_REACHED
        return None
    if state in (INVALID_UPSTREAM, NOT_REACHED):
        return state
    return state if kind == INPUT and state in SEVERITY else None


def propagate(graph: dict[str, Any]) -> dict[str, Any]:
    """Settle every node's ``state`` and ``reason`` from its ``own_state`` by :data:`PROPAGATION_RULES`
    (in place; returns the graph). Claim nodes are left to :func:`claim_from_graph`."""
    nodes = graph["nodes"]
    for node_id in topological_order(graph):
        node = nodes[node_id]
        node["state"], node["reason"] = node["own_state"], node["own_reason"]
        if node["kind"] == "claim":
            continue
        for edge in sorted(dependencies(graph, node_id), key=lambda e: e["to"]):
            dep = nodes.get(edge["to"])
            carried = None if dep is None else _carried(dep, edge["kind"])
            if carried is None:
                continue
            if node["kind"] in ("stage", "segment"):
                if carried == INVALID_UPSTREAM and node["state"] not in _STAGE_BAD:
                    node["state"], node["reason"] = "invalid_upstream", f"{dep['id']} is {dep['state']}"
                continue
            if _severity(carried) > _severity(node["state"]):
                node["state"] = carried
                node["reason"] = f"input {dep['id']} is {dep['state']} ({dep['reason']})"
    return graph


def _severity(state: str) -> int:
    return SEVERITY.get(state, -1)


#: The rule by which the terminal claim follows from the propagated graph (the same words as the claim rule
#: the analysis registers: every case's production node, every observable node).
def claim_from_graph(graph: dict[str, Any], cases: Iterable[str], *, recovered: bool = False
                     ) -> tuple[str, list[dict[str, Any]]]:
    """(claimed outcome, unresolved items) of a propagated graph.

    ``candidate_failure`` when no case's production node is valid; ``partial`` when any production is not
    valid or any observable node is not C (each listed, with its state, reason and next action);
    otherwise ``recovered_valid`` (``recovered``: some attempt failed and was recovered) or ``clean_valid``.
    """
    nodes = graph["nodes"]
    unresolved: list[dict[str, Any]] = []
    valid_cases = 0
    for case in cases:
        prod = nodes.get(f"stage:{case}/production")
        if prod is None or prod["state"] != "valid":
            state = prod["state"] if prod else NOT_REACHED
            unresolved.append({"case": case, "item": "stage/production", "state": state,
                               "reason": prod["reason"] if prod else "no production stage recorded",
                               "next_action": NEXT_ACTION.get(state, "stop")})
        else:
            valid_cases += 1
        obs = sorted((n for n in nodes.values() if n["kind"] == "observable" and n["case"] == case),
                     key=lambda n: n["name"])
        if not obs:
            unresolved.append({"case": case, "item": "observables", "state": M, "reason": "no observable states"})
        for o in obs:
            if o["state"] != C:
                unresolved.append({"case": case, "item": f"observable/{o['name']}",
                                   "observable": o.get("group") or o["name"], "state": o["state"],
                                   "reason": o["reason"], "next_action": NEXT_ACTION.get(o["state"], "stop")})
    if valid_cases == 0:
        return "candidate_failure", unresolved
    if unresolved:
        return "partial", unresolved
    return ("recovered_valid" if recovered else "clean_valid"), unresolved


def settle_claim(graph: dict[str, Any], cases: Iterable[str], *, recovered: bool = False) -> dict[str, Any]:
    """Propagate, then add the claim node (depending on every production stage and observable) and the
    graph's ``claim``; returns the graph."""
    cases = list(cases)
    propagate(graph)
    outcome, unresolved = claim_from_graph(graph, cases, recovered=recovered)
    add_node(graph, "claim", "claim", outcome, f"{len(unresolved)} unresolved item(s)", label="terminal claim",
             evidence=["run_record/episode_terminal.json"])
    for n in list(graph["nodes"].values()):
        if n["kind"] == "observable" or n["id"].endswith("/production") and n["kind"] == "stage":
            add_edge(graph, "claim", n["id"], INPUT)
    graph["claim"] = {"candidate_claimed_outcome": outcome, "unresolved": unresolved, "cases": cases,
                      "recovered": bool(recovered)}
    return graph


# ------------------------------------------------------------------------------------------ read / write
def to_json(graph: dict[str, Any]) -> dict[str, Any]:
    """The file form: nodes as a list sorted by id, edges sorted."""
    out = {k: v for k, v in graph.items() if k not in ("nodes", "edges")}
    out["nodes"] = [graph["nodes"][k] for k in sorted(graph["nodes"])]
    out["edges"] = sorted(graph["edges"], key=lambda e: (e["from"], e["to"], e["kind"]))
    return out


def from_json(doc: dict[str, Any]) -> dict[str, Any]:
    """The working form of a file's graph (nodes keyed by id)."""
    graph = dict(doc)
    nodes = doc.get("nodes") if isinstance(doc.get("nodes"), list) else []
    edges = doc.get("edges") if isinstance(doc.get("edges"), list) else []
    graph["nodes"] = {n["id"]: n for n in nodes if isinstance(n, dict) and isinstance(n.get("id"), str)}
    graph["edges"] = [e for e in edges if isinstance(e, dict)]
    graph["claim"] = doc.get("claim") if isinstance(doc.get("claim"), dict) else {}
    return graph


def write_graph(rec: Any, graph: dict[str, Any]) -> dict[str, Any]:
    """Write ``run_record/state_graph.json`` through the record ``rec`` (an event ``state_graph`` first: its
    id is the graph's ``event_id``); returns the file form."""
    from mdbench.record.atomic import atomic_write_text

    with rec.locked():
        event = rec.append_event("state_graph", {"n_nodes": len(graph["nodes"]), "n_edges": len(graph["edges"]),
                                                 "claim": (graph.get("claim") or {}).get("candidate_claimed_outcome")})
        graph["event_id"], graph["time_utc"] = event["id"], event["time_utc"]
        doc = to_json(graph)
        text = json.dumps(doc, indent=1, sort_keys=True, allow_nan=False, default=str) + "\n"
        atomic_write_text(Path(rec.dir) / STATE_GRAPH, text)
    return doc


def read_graph(run_dir: str | Path) -> dict[str, Any] | None:
    """The recorded graph of a run (working form), or None when it has none or it does not parse."""
    doc, _refused = try_read_json(Path(run_dir) / "run_record" / STATE_GRAPH)  # a run's file is untrusted: capped,
    return from_json(doc) if isinstance(doc, dict) else None                # no link followed, never a crash


# ----------------------------------------------------------------------------------------------- compare
def compare_graphs(recorded: dict[str, Any], recomputed: dict[str, Any]) -> list[dict[str, Any]]:
    """Where a run's recorded graph disagrees with the one recomputed from its records.

    Returns one finding per disagreement: ``{"node", "field", "recorded", "recomputed", "message"}``
    (``field`` is ``node`` for a node only one side has, ``edges`` for a dependency only one side has,
    ``state`` / ``own_state`` for a state, ``claim`` / ``unresolved`` for the terminal claim).
    """
    out: list[dict[str, Any]] = []
    rn, cn = recorded.get("nodes") or {}, recomputed.get("nodes") or {}

    def add(node: str, field: str, rec_v: Any, new_v: Any, message: str) -> None:
        out.append({"node": node, "field": field, "recorded": rec_v, "recomputed": new_v, "message": message})

    for nid in sorted(set(rn) | set(cn)):
        if nid not in rn:
            add(nid, "node", None, cn[nid].get("state"), f"{nid}: in the records but missing from the graph")
            continue
        if nid not in cn:
            add(nid, "node", rn[nid].get("state"), None, f"{nid}: in the graph but not in the records")
            continue
        for field in ("own_state", "state"):
            a, b = rn[nid].get(field), cn[nid].get(field)
            if a != b:
                add(nid, field, a, b, f"{nid}: graph says {field} {a}, the records give {b}")
    re_ = {(str(e.get("from")), str(e.get("to"))) for e in recorded.get("edges") or []}
    ce_ = {(str(e.get("from")), str(e.get("to"))) for e in recomputed.get("edges") or []}
    for a, b in sorted(ce_ - re_, key=str):
        add(str(a), "edges", None, b, f"{a}: depends on {b} by its estimator's declared inputs; the graph omits it")
    for a, b in sorted(re_ - ce_, key=str):
        add(str(a), "edges", b, None, f"{a}: the graph says it depends on {b}; no declared input does")
    rc, cc = (g.get("claim") if isinstance(g.get("claim"), dict) else {} for g in (recorded, recomputed))
    if rc.get("candidate_claimed_outcome") != cc.get("candidate_claimed_outcome"):
        add("claim", "claim", rc.get("candidate_claimed_outcome"), cc.get("candidate_claimed_outcome"),
            f"claim: graph says {rc.get('candidate_claimed_outcome')}, the records give "
            f"{cc.get('candidate_claimed_outcome')}")
    ru = {tuple(str(u.get(k)) for k in ("case", "item", "state")) for u in _items(rc.get("unresolved"))}
    cu = {tuple(str(u.get(k)) for k in ("case", "item", "state")) for u in _items(cc.get("unresolved"))}
    for item in sorted(ru ^ cu, key=str):
        side = "graph only" if item in ru else "records only"
        add("claim", "unresolved", item if item in ru else None, item if item in cu else None,
            f"claim: unresolved item {item[0]}/{item[1]} ({item[2]}) listed by the {side}")
    return out


def _items(rows: Any) -> list[dict[str, Any]]:
    return [u for u in rows if isinstance(u, dict)] if isinstance(rows, list) else []


def compare_terminal(graph: dict[str, Any], terminal: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Where ``episode_terminal.json`` disagrees with the graph's claim (findings as :func:`compare_graphs`)."""
    if not terminal:
        return []
    claim = graph.get("claim") or {}
    a, b = terminal.get("candidate_claimed_outcome"), claim.get("candidate_claimed_outcome")
    out = []
    if a != b:
        out.append({"node": "claim", "field": "terminal", "recorded": a, "recomputed": b,
                    "message": f"episode_terminal.json claims {a}; the state graph's claim is {b}"})
    tu = {tuple(str(u.get(k)) for k in ("case", "item", "state")) for u in _items(terminal.get("unresolved"))}
    gu = {tuple(str(u.get(k)) for k in ("case", "item", "state")) for u in _items(claim.get("unresolved"))}
    for item in sorted(tu ^ gu, key=str):
        out.append({"node": "claim", "field": "terminal_unresolved", "recorded": item if item in tu else None,
                    "recomputed": item if item in gu else None,
                    "message": f"unresolved {item[0]}/{item[1]} ({item[2]}) is listed by "
                               f"{'episode_terminal.json' if item in tu else 'the state graph'} only"})
    return out


def summary(graph: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Node kind → state → count (for a one-line report)."""
    out: dict[str, dict[str, int]] = {}
    for n in graph["nodes"].values():
        out.setdefault(n["kind"], {}).setdefault(n["state"], 0)
        out[n["kind"]][n["state"]] += 1
    return out


__all__ = ["C", "F", "INPUT", "NODE_KINDS", "PROPAGATION_RULES", "STATE_GRAPH", "UPSTREAM", "add_edge", "add_node",
           "claim_from_graph", "compare_graphs", "compare_terminal", "dependencies", "dependents", "from_json",
           "new_graph", "propagate", "read_graph", "settle_claim", "summary", "to_json", "topological_order", "write_graph"]
