"""Figures of the SDL leaderboard page (matplotlib; the notebook ``notebooks/sdl_leaderboard.ipynb`` calls these).

Every figure takes one :class:`~mdbench.sdl.leaderboard.Leaderboard` table and the verified metrics of its
systems (``{system: {assignment_id: metrics}}``, :meth:`~mdbench.sdl.leaderboard.Leaderboards.results`) and
shows *ranked* systems only (did-not-finish and not-ranked systems are listed in the page's table, never
plotted, so one failed coordinator cannot flatten every honest curve).

* :func:`adaptive_auc_figure` — the primary score: adaptive AUC per system [nats], one point per assignment and
  the mean with its 95 % t-interval over assignments;
* :func:`selection_signs_figure` — selection-lift sign glyphs per system × assignment (sign of the mean over the
  random-control draws; the cell text gives mean ± sd) — a diagnostic: the random control cannot hide itself;
* :func:`enhancement_figure` — enhancement at budget [nats] per system, one point per assignment, and the
  reference selection lift (shipped forecaster on each branch's selections) beside it;
* :func:`learning_curves_figure` — mean held-out learning curves of the adaptive branch per system, full range
  and a zoom on the top five.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mdbench.sdl.scoring import sign

_GLYPH_COLOURS = {"+": "#1b7837", "−": "#b2182b", "0": "#777777", "?": "#bbbbbb"}


def ci95(values: list[float]) -> tuple[float, float] | None:
    """Mean ± Student-t 95 % half-width over ``values`` (None for fewer than two)."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if len(v) < 2:
        return None
    from scipy import stats

    h = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    return float(v.mean() - h), float(v.mean() + h)


def _ranked(table) -> list[str]:
    return [r.system for r in table.rows]


def adaptive_auc_figure(table, results: dict[str, dict[str, dict[str, Any]]]):
    """Adaptive AUC [nats] per ranked system: one point per assignment, mean and 95 % interval."""
    import matplotlib.pyplot as plt

    systems = _ranked(table)
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * max(len(systems), 2) + 1.2))
    rng = np.random.default_rng(0)
    for k, s in enumerate(systems):
        vals = [table.per_assignment_auc[s][a] for a in table.assignments]
        y = len(systems) - 1 - k
        ax.scatter(vals, y + rng.uniform(-0.12, 0.12, len(vals)), s=18, color="#4477aa", alpha=0.7, zorder=2)
        ci = ci95(vals)
        m = float(np.mean(vals))
        if ci:
            ax.plot(ci, [y, y], color="k", lw=2, zorder=3)
        ax.plot([m], [y], marker="D", color="k", ms=6, zorder=4)
    ax.set_yticks(range(len(systems)), [f"#{r.rank} {r.system}" for r in table.rows][::-1])
    ax.set_xlabel("adaptive AUC [nats] (higher is better); points: assignments, ◆ mean, bar: 95 % CI")
    ax.set_title("Primary score: adaptive AUC per system")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def selection_signs_figure(table, results: dict[str, dict[str, dict[str, Any]]]):
    """Selection-lift sign glyphs per system × assignment (mean over random-control draws; cell: mean ± sd)."""
    import matplotlib.pyplot as plt

    systems = _ranked(table)
    aids = list(table.assignments)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.15 * len(aids) + 2.5), 0.6 * max(len(systems), 2) + 1.4))
    for k, s in enumerate(systems):
        y = len(systems) - 1 - k
        for j, a in enumerate(aids):
            m = results[s][a]
            lift = m.get("selection_lift_nats")
            g = sign(lift)
            ax.text(j, y + 0.1, g, ha="center", va="center", fontsize=20, color=_GLYPH_COLOURS[g], weight="bold")
            sd = m.get("selection_lift_sd_nats")
            label = "n/a" if lift is None else f"{lift:+.3f}" + (f"±{sd:.3f}" if sd is not None else "")
            ax.text(j, y - 0.3, label, ha="center", va="center", fontsize=7, color="#333333")
    ax.set_xlim(-0.5, len(aids) - 0.5)
    ax.set_ylim(-0.7, len(systems) - 0.4)
    ax.set_xticks(range(len(aids)), [a.rsplit("-", 1)[-1] for a in aids])
    ax.set_yticks(range(len(systems)), systems[::-1])
    n_draws = max((len(results[s][a].get("random_draws", [])) for s in systems for a in aids), default=0)
    ax.set_title(f"Selection lift per assignment (sign of the mean over {n_draws} random-control draws; "
                 "diagnostic)", fontsize=10)
    ax.set_xlabel("assignment")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig


def enhancement_figure(table, results: dict[str, dict[str, dict[str, Any]]]):
    """Enhancement at budget and reference selection lift [nats] per ranked system, one point per assignment."""
    import matplotlib.pyplot as plt

    systems = _ranked(table)
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.55 * max(len(systems), 2) + 1.3), sharey=True)
    for ax, key, title in ((axes[0], "enhancement_at_budget_nats", "enhancement at budget [nats]"),
                           (axes[1], "reference_selection_lift_nats", "reference selection lift [nats]")):
        for k, s in enumerate(systems):
            y = len(systems) - 1 - k
            vals = [results[s][a].get(key) for a in table.assignments]
            vals = [v for v in vals if v is not None]
            if vals:
                ax.scatter(vals, [y] * len(vals), s=18, color="#cc6677", alpha=0.7)
                ax.plot([float(np.mean(vals))], [y], marker="D", color="k", ms=6)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlabel(title)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(systems)), systems[::-1])
    axes[0].set_title("adaptive − random control at the experiment budget", fontsize=10)
    axes[1].set_title("same selections, shipped forecaster (sabotage-proof)", fontsize=10)
    fig.tight_layout()
    return fig


def learning_curves_figure(table, results: dict[str, dict[str, dict[str, Any]]], top: int = 5):
    """Mean adaptive held-out learning curves of ranked systems: full range and a zoom on the top ``top``."""
    import matplotlib.pyplot as plt

    systems = _ranked(table)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    curves = {s: np.mean([results[s][a]["branches"]["adaptive"]["curve_nats"] for a in table.assignments], axis=0)
              for s in systems}
    for ax, shown, title in ((axes[0], systems, "all ranked systems"),
                             (axes[1], systems[:top], f"top-{min(top, len(systems))} zoom")):
        for s in shown:
            ax.plot(range(len(curves[s])), curves[s], marker="o", ms=3, label=s)
        if shown:
            lo = min(float(curves[s].min()) for s in shown)
            hi = max(float(curves[s].max()) for s in shown)
            pad = max(0.02, 0.1 * (hi - lo))
            ax.set_ylim(lo - pad, hi + pad)
        ax.set_xlabel("closed experiments")
        ax.set_ylabel("held-out score [nats]")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="best")
    fig.suptitle("Adaptive branch, mean over assignments (did-not-finish systems are not plotted)", fontsize=10)
    fig.tight_layout()
    return fig


def table_header(table, results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Markdown header of a table: assignments, horizon(s), budgets, random-control draws."""
    ms = [m for per in results.values() for a, m in per.items() if a in table.assignments]
    budgets = sorted({tuple(sorted(m.get("budgets", {}).items())) for m in ms})
    b = "; ".join(", ".join(f"{k} {v}" for k, v in bb) for bb in budgets) or "n/a"
    draws = sorted({len(m.get("random_draws", [])) for m in ms})
    return (f"**{len(table.assignments)} assignments · horizon {', '.join(map(str, table.horizons))} experiments · "
            f"budgets: {b} · random-control draws per assignment: {', '.join(map(str, draws))}** "
            f"(assignment set sha256 `{table.assignment_set_sha256[:16]}…`)")
