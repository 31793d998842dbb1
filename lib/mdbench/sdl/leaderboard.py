"""Leaderboard over systems and assignments: equal weight per assignment, signs, rank stability.

A system enters the leaderboard only when it has metrics for every assignment found in the results folder
(and the schedule-matched random control on each). Per system: mean adaptive AUC [nats] (primary, higher is
better), mean selection lift, mean enhancement at budget, mean evidence lift, the per-assignment signs of
selection lift (e.g. ``+−+0+−``), acceleration factor at a target ratio (geometric mean over jointly reached
campaigns, with counts), claim calibration, local/held-out sign agreement. Rank stability: the ranking is
recomputed leaving out each assignment in turn; reported are the fraction of recomputations that reproduce
the full ranking and each system's rank range.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mdbench.errors import InputError
from mdbench.sdl.scoring import geometric_mean, sign


@dataclass
class SystemRow:
    """One leaderboard row (means over assignments with equal weight)."""

    system: str
    rank: int
    n_assignments: int
    adaptive_auc_nats: float
    loss_pre_nats: float
    loss_at_budget_nats: float
    selection_lift_nats: float | None
    enhancement_at_budget_nats: float | None
    evidence_lift_nats: float | None
    selection_lift_signs: str
    acceleration_first_passage: float | None
    acceleration_first_passage_n: int
    acceleration_sustained: float | None
    acceleration_sustained_n: int
    claim_unsupported_fraction: float | None
    local_heldout_same_sign_fraction: float | None
    rank_range_loao: tuple[int, int] = (0, 0)


@dataclass
class Leaderboard:
    """The leaderboard, excluded systems (with reasons) and leave-one-assignment-out stability."""

    rows: list[SystemRow]
    assignments: list[str]
    excluded: dict[str, str]
    target_ratio: float
    loao_rank_stable_fraction: float | None
    per_assignment_auc: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"rows": [asdict(r) for r in self.rows], "assignments": self.assignments, "excluded": self.excluded,
                "target_ratio": self.target_ratio, "loao_rank_stable_fraction": self.loao_rank_stable_fraction,
                "per_assignment_auc": self.per_assignment_auc}


def load_results(results_dir: str | Path) -> dict[str, dict[str, dict[str, Any]]]:
    """``{system: {assignment_id: metrics}}`` from ``<results_dir>/<system>/<assignment>/metrics.json``."""
    root = Path(results_dir)
    if not root.is_dir():
        raise InputError("results folder not found — run `mdbench sdl run --out DIR` first", str(root))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for p in sorted(root.glob("*/*/metrics.json")):
        try:
            m = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputError(f"malformed JSON: {exc.msg}", str(p), exc.lineno) from exc
        out.setdefault(m.get("system", p.parent.parent.name), {})[m["assignment_id"]] = m
    if not out:
        raise InputError("no */*/metrics.json found — run `mdbench sdl run --out DIR` first", str(root))
    return out


def _ranks(values: dict[str, float]) -> dict[str, int]:
    order = sorted(values, key=lambda s: (-values[s], s))
    return {s: k + 1 for k, s in enumerate(order)}


def _mean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None


def build_leaderboard(results: dict[str, dict[str, dict[str, Any]]], target_ratio: float = 1.05) -> Leaderboard:
    """Build the leaderboard from :func:`load_results` output (see module docstring)."""
    assignments = sorted({a for per in results.values() for a in per})
    excluded = {}
    complete = {}
    for system, per in results.items():
        missing = [a for a in assignments if a not in per]
        no_ctrl = [a for a in assignments if a in per and "random_control" not in per[a]["branches"]]
        if missing:
            excluded[system] = f"missing assignments {missing}"
        elif no_ctrl:
            excluded[system] = f"no schedule-matched random control on {no_ctrl} (run without --no-controls)"
        else:
            complete[system] = per
    auc = {s: {a: per[a]["branches"]["adaptive"]["adaptive_auc_nats"] for a in assignments}
           for s, per in complete.items()}
    mean_auc = {s: float(np.mean(list(v.values()))) for s, v in auc.items()}
    ranks = _ranks(mean_auc)
    loao_ranks: dict[str, list[int]] = {s: [] for s in complete}
    n_stable = 0
    if len(assignments) > 1:
        for left in assignments:
            r = _ranks({s: float(np.mean([v for a, v in auc[s].items() if a != left])) for s in complete})
            n_stable += r == ranks
            for s in complete:
                loao_ranks[s].append(r[s])
    rows = []
    for s, per in complete.items():
        ms = [per[a] for a in assignments]
        acc = {rule: [] for rule in ("first_passage", "sustained")}
        for m in ms:
            for ac in m.get("acceleration", []):
                if abs(ac["target_ratio"] - target_ratio) < 1e-12 and ac["factor"] is not None:
                    acc[ac["rule"]].append(ac["factor"])
        claims = [m["branches"]["adaptive"]["claim_calibration"] for m in ms]
        n_el = sum(c["n_eligible"] for c in claims)
        sa = [m["branches"]["adaptive"]["sign_agreement"] for m in ms]
        n_both = sum(x["n_both_changed"] for x in sa)
        rows.append(SystemRow(
            system=s, rank=ranks[s], n_assignments=len(ms), adaptive_auc_nats=mean_auc[s],
            loss_pre_nats=float(np.mean([m["branches"]["adaptive"]["loss_pre_nats"] for m in ms])),
            loss_at_budget_nats=float(np.mean([m["branches"]["adaptive"]["loss_at_budget_nats"] for m in ms])),
            selection_lift_nats=_mean([m.get("selection_lift_nats") for m in ms]),
            enhancement_at_budget_nats=_mean([m.get("enhancement_at_budget_nats") for m in ms]),
            evidence_lift_nats=_mean([m.get("evidence_lift_nats") for m in ms]),
            selection_lift_signs="".join(sign(m.get("selection_lift_nats")) for m in ms),
            acceleration_first_passage=geometric_mean(acc["first_passage"]),
            acceleration_first_passage_n=len(acc["first_passage"]),
            acceleration_sustained=geometric_mean(acc["sustained"]), acceleration_sustained_n=len(acc["sustained"]),
            claim_unsupported_fraction=(sum(c["n_unsupported_crossing"] for c in claims) / n_el) if n_el else None,
            local_heldout_same_sign_fraction=(sum(x["n_same_sign"] for x in sa) / n_both) if n_both else None,
            rank_range_loao=(min(loao_ranks[s]), max(loao_ranks[s])) if loao_ranks[s] else (ranks[s], ranks[s])))
    rows.sort(key=lambda r: r.rank)
    return Leaderboard(rows=rows, assignments=assignments, excluded=excluded, target_ratio=target_ratio,
                       loao_rank_stable_fraction=(n_stable / len(assignments)) if len(assignments) > 1 else None,
                       per_assignment_auc=auc)


def curves_frame(results: dict[str, dict[str, dict[str, Any]]]):
    """Long-format pandas DataFrame of learning curves: system, assignment, branch, n_experiments, score_nats."""
    import pandas as pd

    recs = []
    for s, per in results.items():
        for a, m in per.items():
            for b, br in m["branches"].items():
                for k, v in enumerate(br["curve_nats"]):
                    recs.append({"system": s, "assignment": a, "branch": b, "n_experiments": k, "score_nats": v})
    return pd.DataFrame.from_records(recs)
