"""Tables (pandas) assembled from one or more audit directories (``saeo.json``) for the report notebooks.

Everything here is data; escaping for HTML happens in :mod:`mdbench.report.tables`.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from mdbench.analysis.observables import AUDIT_GROUPS
from mdbench.audit.model import DIMENSIONS, ITEM_DIMENSION, ITEM_TITLES, ITEMS
from mdbench.errors import InputError

log = logging.getLogger(__name__)


@dataclass
class Audit:
    """One loaded audit: a short label and the ``saeo.json`` document."""

    label: str
    path: Path
    doc: dict[str, Any]


def load_audits(audit_dirs: list[str | Path]) -> list[Audit]:
    """Load ``saeo.json`` of every audit directory; labels are the directory names made unique."""
    if not audit_dirs:
        raise InputError("no audit directory given; pass at least one directory holding saeo.json")
    out: list[Audit] = []
    seen: dict[str, int] = {}
    for d in audit_dirs:
        p = Path(d) / "saeo.json"
        if not p.is_file():
            raise InputError("not an audit directory (no saeo.json); run `mdbench audit` first", str(d))
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InputError(f"saeo.json is not valid JSON ({exc})", str(p)) from exc
        label = Path(d).resolve().name
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        out.append(Audit(label, Path(d), doc))
    return out


def run_dir_of(audit: Audit, base_dir: str | Path | None = None) -> Path | None:
    """The audited run directory of ``audit``, found even when the audit was given a relative path.

    ``saeo.json`` keeps ``run_dir`` as the audit was called (``outputs/runs/demo`` from the checkout): a
    relative one is tried against ``base_dir`` (the working directory of ``mdbench report``), then the
    audit directory and its parents. None when no candidate holds the run (the report says so).
    """
    raw = audit.doc.get("run_dir")
    if not isinstance(raw, str) or not raw:
        return None
    path = Path(raw)
    if path.is_absolute():
        return path
    audit_dir = Path(audit.path).resolve()
    candidates = ([Path(base_dir)] if base_dir else []) + [audit_dir, *audit_dir.parents]
    for root in candidates:
        cand = root / path
        if (cand / "run_record").is_dir() or (cand / "analysis").is_dir():
            return cand
    return None


def science_runs(audits: list[Audit], base_dir: str | Path | None = None) -> list[tuple[str, str]]:
    """``(label, run_dir)`` of every audit for :func:`mdbench.report.science.show_science` (relative run
    directories resolved with :func:`run_dir_of`; an unresolvable one is passed as written)."""
    out = []
    for a in audits:
        found = run_dir_of(a, base_dir)
        out.append((a.label, str(found) if found is not None else str(a.doc.get("run_dir") or "")))
    return out


def item_label(item: Any) -> Any:
    """``A5`` → ``A5 Regime / plateau``: the item code with its criterion name (unknown codes unchanged)."""
    return f"{item} {ITEM_TITLES[item]}" if isinstance(item, str) and item in ITEM_TITLES else item


def item_key() -> pd.DataFrame:
    """The 21 items: code, dimension and criterion name (the key of every item heatmap and table)."""
    return pd.DataFrame([{"item": i, "dimension": ITEM_DIMENSION[i], "criterion": ITEM_TITLES.get(i, "")}
                         for i in ITEMS], columns=["item", "dimension", "criterion"])


def scores(audits: list[Audit]) -> pd.DataFrame:
    """One row per audit: composite (preliminary, final) and dimension means (final)."""
    rows = []
    for a in audits:
        row = {"audit": a.label, "composite_preliminary": a.doc["composite"]["preliminary"],
               "composite_final": a.doc["composite"]["final"],
               "claimed_outcome": a.doc.get("claimed_outcome"), "expected_outcome": a.doc.get("expected_outcome")}
        for dim in DIMENSIONS:
            row[dim] = a.doc["dimension_means"]["final"].get(dim)
        rows.append(row)
    return pd.DataFrame(rows)


def items(audits: list[Audit], which: str = "final") -> pd.DataFrame:
    """Audit × item matrix of episode ratings (``which`` = preliminary or final)."""
    return pd.DataFrame([{i: a.doc["items"][i][which] for i in ITEMS} for a in audits],
                        index=[a.label for a in audits])


def item_table(audit: Audit) -> pd.DataFrame:
    """Preliminary and final rating side by side for the 21 items of one audit."""
    rows = []
    for i in ITEMS:
        s = audit.doc["items"][i]
        rows.append({"item": i, "criterion": ITEM_TITLES.get(i, ""), "dimension": ITEM_DIMENSION[i],
                     "preliminary": s["preliminary"],
                     "final": s["final"], "changed": s["preliminary"] != s["final"], "source": s["source"],
                     "reason": s["reason"]})
    return pd.DataFrame(rows)


def case_items(audits: list[Audit], prefix: str = "Sim") -> pd.DataFrame:
    """Long table (audit, case, item, rating) of per-case judgments whose item starts with ``prefix``."""
    rows = []
    for a in audits:
        for j in a.doc["judgments"]:
            if j["case"] is not None and j["observable"] is None and j["item"].startswith(prefix):
                rows.append({"audit": a.label, "case": j["case"], "item": j["item"], "rating": j["rating"],
                             "reason": j["reason"]})
    return pd.DataFrame(rows, columns=["audit", "case", "item", "rating", "reason"])


def observable_states(audits: list[Audit]) -> pd.DataFrame:
    """Long table of observable states: audit's and run's, never turned into numbers."""
    cols = ["audit", "case", "observable group", "group state (audit)", "group state (run record)", "reason"]
    rows = [dict(zip(cols, (a.label, o["case"], o["observable"], o["state"], o.get("run_state"), o["reason"])))
            for a in audits for o in a.doc["observables"]]
    return pd.DataFrame(rows, columns=cols)


#: Fig. 5 panels: label → (observable group, key pattern), from the registry's audit groups.
REPEAT_PANELS: dict[str, tuple[str, str]] = {g.repeat_panel[0]: (g.name, g.repeat_panel[1])
                                             for g in AUDIT_GROUPS if g.repeat_panel}


def repeat_values(audits: list[Audit]) -> pd.DataFrame:
    """Long table (panel, audit, case, target, value) for repeat-consistency plots (seed Fig. 5).

    Only observables the audit did not mark F, M, invalid_upstream or not_reached are included: missing
    data are never plotted as zeros.
    """
    rows = []
    for a in audits:
        for o in a.doc["observables"]:
            if o["state"] not in ("C", "SI"):
                continue
            for panel, (group, pat) in REPEAT_PANELS.items():
                if o["observable"] != group:
                    continue
                for key, val in (o.get("values") or {}).items():
                    target = re.split(r"[./]", key)[-1]
                    if re.search(pat, target, flags=re.I):
                        rows.append({"panel": panel, "audit": a.label, "case": o["case"], "target": target,
                                     "value": val, "group state": o["state"]})
    # the audit rates observable GROUPS; a member's own state is the one in the science tables, so the
    # column says which it is (one state per value: this table never labels a value with its group's state)
    return pd.DataFrame(rows, columns=["panel", "audit", "case", "target", "value", "group state"])


def findings(audits: list[Audit]) -> pd.DataFrame:
    """All findings with their locations."""
    rows = []
    for a in audits:
        for f in a.doc["findings"]:
            loc = f.get("path") or "-"
            if f.get("line") is not None:
                loc = f"{loc}:{f['line']}"
            rows.append({"audit": a.label, "item": item_label(f.get("item")), "code": f["code"], "location": loc,
                         "message": f["message"]})
    return pd.DataFrame(rows, columns=["audit", "item", "code", "location", "message"])


def evidence(audit: Audit) -> pd.DataFrame:
    """Per-case/observable judgments of one audit with their evidence references."""
    rows = []
    for j in audit.doc["judgments"]:
        refs = "; ".join(":".join(str(x) for x in (e["path"], e.get("key") or e.get("line") or "") if x != "")
                         for e in j["evidence"])
        rows.append({"item": item_label(j["item"]), "case": j["case"], "observable": j["observable"],
                     "rating": j["rating"],
                     "source": j["source"], "reason": j["reason"], "evidence": refs})
    return pd.DataFrame(rows)


def changed_items(audits: list[Audit]) -> pd.DataFrame:
    """Items whose final rating differs from the preliminary one (adjudication or judge)."""
    rows = [{"audit": a.label, "item": item_label(i), "preliminary": a.doc["items"][i]["preliminary"],
             "final": a.doc["items"][i]["final"], "source": a.doc["items"][i]["source"],
             "reason": a.doc["items"][i]["reason"]}
            for a in audits for i in ITEMS if a.doc["items"][i]["preliminary"] != a.doc["items"][i]["final"]]
    return pd.DataFrame(rows, columns=["audit", "item", "preliminary", "final", "source", "reason"])


def adjudications(audits: list[Audit]) -> pd.DataFrame:
    """Expert adjudication entries applied by each audit (append-only, in file order)."""
    rows = [{"audit": a.label, "item": e.get("item"), "case": e.get("case"), "observable": e.get("observable"),
             "rating": e.get("rating"), "reviewer": e.get("reviewer"), "reason": e.get("reason"),
             "evidence": e.get("evidence")} for a in audits for e in a.doc.get("adjudications", [])]
    return pd.DataFrame(rows, columns=["audit", "item", "case", "observable", "rating", "reviewer", "reason",
                                       "evidence"])
