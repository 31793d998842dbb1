"""The study's state graph in the report: one figure (stages → estimators → observables → comparisons →
claim, coloured by state, the decision at each node) and the table "what it would take" (per SI result, the
production projected to earn it and whether that fits the budget).

Both read ``run_record/state_graph.json`` (:mod:`mdbench.record.state_graph`); the explore notebook calls
:func:`state_graph_figure` for any run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mdbench.record.state_graph import read_graph

#: Colour of each state (observable states, stage states, claimed outcomes).
STATE_COLOURS = {
    "C": "#2ca02c", "valid": "#2ca02c", "clean_valid": "#2ca02c", "recovered_valid": "#98df8a",
    "SI": "#ff7f0e", "partial": "#ff7f0e", "running": "#ffdd57", "not_estimable": "#8c8c8c",
    "M": "#9467bd", "F": "#d62728", "invalid": "#d62728", "candidate_failure": "#d62728",
    "not_reached": "#d9d9d9", "invalid_upstream": "#3b3b3b", "infrastructure_blocked": "#3b3b3b",
}
#: Columns of the figure, left to right (blocks are folded into their observable).
COLUMNS = ("stage", "segment", "estimator", "observable", "comparison", "claim")
_DECISION_MARK = {"extend": "→ extend", "stop": "■ stop", "accept": "", "none": ""}


def _graph(source: str | Path | dict[str, Any]) -> dict[str, Any]:
    """The graph of ``source``, keeping only well-formed nodes and edges (a run's file is untrusted)."""
    graph = source if isinstance(source, dict) else read_graph(source)
    if graph is None:
        raise FileNotFoundError(f"{Path(source) / 'run_record' / 'state_graph.json'}: no state graph in this run; "
                                "it is written with the terminal claim (study/60_compare)")
    nodes = {k: n for k, n in (graph.get("nodes") or {}).items()
             if isinstance(n, dict) and all(isinstance(n.get(f), str) for f in ("id", "kind", "state"))}
    edges = [e for e in graph.get("edges") or [] if isinstance(e, dict) and isinstance(e.get("from"), str)
             and isinstance(e.get("to"), str)]
    claim = graph.get("claim") if isinstance(graph.get("claim"), dict) else {}
    return {**graph, "nodes": nodes, "edges": edges, "claim": claim}


def _plain(text: Any) -> str:
    """Text drawn as typed: no mathtext (``$``), no control characters, at most 70 characters."""
    return "".join(c for c in str(text)[:70] if c.isprintable()).replace("$", r"\$")


def _order_key(n: dict[str, Any]) -> tuple[str, int, str]:
    """Case, then the engine's stage order (other nodes by id)."""
    from mdbench.analysis.study_state import STAGE_ORDER  # noqa: PLC0415 - loads the registry

    stage = n["id"].rsplit("/", 1)[-1] if n["kind"] == "stage" else ""
    return str(n.get("case")), STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER), n["id"]


def state_graph_figure(source: str | Path | dict[str, Any], *, label_observables: bool = True) -> Any:
    """The state graph as one matplotlib Figure.

    Parameters
    ----------
    source : path or dict
        A run directory (its ``run_record/state_graph.json``) or a graph (working form).
    label_observables : bool
        Write each observable's name, state and decision beside it.
    """
    import matplotlib  # noqa: PLC0415 - heavy; only the figure needs it

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.patches import Patch  # noqa: PLC0415

    graph = _graph(source)
    nodes = graph["nodes"]
    column_nodes = {k: sorted((n for n in nodes.values() if n["kind"] == k), key=_order_key) for k in COLUMNS}
    tallest = max(1, *(len(v) for v in column_nodes.values()))
    pos: dict[str, tuple[float, float]] = {}
    for x, kind in enumerate(COLUMNS):
        items = column_nodes[kind]
        for i, n in enumerate(items):
            pos[n["id"]] = (float(x), tallest - (i + 0.5) * tallest / max(1, len(items)))
    fig, ax = plt.subplots(figsize=(14, max(4.0, 0.13 * tallest)))
    for e in graph["edges"]:
        if e["from"] in pos and e["to"] in pos:
            (x0, y0), (x1, y1) = pos[e["to"]], pos[e["from"]]
            ax.plot([x0, x1], [y0, y1], lw=0.3, color="#bbbbbb", zorder=1)
    for nid, (x, y) in pos.items():
        n = nodes[nid]
        ax.scatter([x], [y], s=28, color=STATE_COLOURS.get(n["state"], "#000000"), edgecolor="k", lw=0.3, zorder=2)
        action = (n.get("decision") if isinstance(n.get("decision"), dict) else {}).get("action", "")
        if n["kind"] == "observable" and not label_observables:
            continue
        text = _plain(n.get("label") or nid)
        if n["kind"] in ("observable", "comparison", "claim"):
            text += f"  [{_plain(n['state'])}] {_DECISION_MARK.get(str(action), '')}"
        ax.text(x + 0.04, y, text, fontsize=4.5, va="center", zorder=3)
    ax.set_xticks(range(len(COLUMNS)), [f"{k}s" if k != "claim" else "claim" for k in COLUMNS])
    ax.set_yticks([])
    ax.set_xlim(-0.2, len(COLUMNS) - 0.2)
    shown = sorted({n["state"] for n in nodes.values()}, key=list(STATE_COLOURS).index)
    ax.legend(handles=[Patch(color=STATE_COLOURS[s], label=s) for s in shown if s in STATE_COLOURS],
              loc="upper right", fontsize=6, ncol=2)
    claim = graph.get("claim") or {}
    ax.set_title(f"State graph: claim {_plain(claim.get('candidate_claimed_outcome', '?'))}, "
                 f"{len(claim.get('unresolved') or [])} unresolved (edges: depends on; blocks folded into "
                 "their observable)", fontsize=9)
    fig.tight_layout()
    return fig


def what_it_would_take(source: str | Path | dict[str, Any]) -> Any:
    """Per SI result: projected production [ns] to make it C (with its range), whether it fits the budget,
    what limits it and the decision taken. A pandas DataFrame, one row per SI observable."""
    import pandas as pd  # noqa: PLC0415

    graph = _graph(source)
    rows = []
    for n in sorted(graph["nodes"].values(), key=lambda n: n["id"]):
        if n["kind"] != "observable" or n["state"] != "SI":
            continue
        p = n.get("projection") if isinstance(n.get("projection"), dict) else {}
        rows.append({"case": n.get("case"), "result": n.get("name"), "projected_ns_to_C": p.get("ns_to_C"),
                     "range_ns": (f"{p['ns_to_C_low']:.3g}-{p['ns_to_C_high']:.3g}"
                                  if all(isinstance(p.get(k), (int, float)) for k in ("ns_to_C_low", "ns_to_C_high"))
                                  else ""),
                     "fits_budget": p.get("reachable_in_budget"), "credible": p.get("credible"),
                     "limited_by": p.get("limiting_check") or "", "basis": p.get("basis") or "no projection",
                     "decision": (n.get("decision") if isinstance(n.get("decision"), dict) else {}).get("action",
                                                                                                         "none")})
    return pd.DataFrame(rows, columns=["case", "result", "projected_ns_to_C", "range_ns", "fits_budget", "credible",
                                       "limited_by", "basis", "decision"])


def show_state(run_dirs: list[tuple[str, str | Path]]) -> int:
    """Display (in a notebook) the scientific-state graph of each ``(label, run_dir)`` and its table "what it
    would take"; a run without a graph (or with one that does not parse) gets one line saying so. Returns the
    number of graphs shown."""
    from IPython.display import display  # noqa: PLC0415 - notebooks only

    from mdbench.report import figures, tables  # noqa: PLC0415 - the report's renderers load seaborn

    shown = 0
    for label, run_dir in run_dirs:
        graph = read_graph(run_dir) if run_dir else None
        if graph is None:
            display(tables.heading(f"{label}: no scientific-state graph (run_record/state_graph.json) in the run", 3))
            continue
        display(tables.heading(f"{label}: scientific state (stages → observables → comparisons → claim)", 3))
        display(figures.as_image(state_graph_figure(graph)))
        display(tables.html_table(what_it_would_take(graph), caption="what it would take: per SI result, the "
                                  "projected production [ns] to make it C and whether it fits the budget"))
        shown += 1
    return shown
