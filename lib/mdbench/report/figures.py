"""Report figures (matplotlib/seaborn): overall scores (seed Fig. 2), item heatmap (Fig. 3), simulation
detail matrices (Fig. S1), repeat consistency (Fig. 5), and the block bars of one case's observables that
results.json and every analysis template show. Each function returns a matplotlib Figure built without
pyplot (no global backend state); :func:`as_image` turns it into an embeddable PNG. seaborn and IPython
are imported by the functions that use them (the analysis draws its block bars without either)."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from mdbench.audit.model import DIMENSIONS, ITEMS

if TYPE_CHECKING:
    import pandas as pd
    from IPython.display import Image

#: light (0), medium (0.5), dark (1) — seed Figs. S1–S4 shading.
RATING_CMAP = ListedColormap(["#f2d7d5", "#f5b041", "#1e8449"])


def as_image(fig: Figure, dpi: int = 110) -> Image:
    """PNG of a figure as an IPython Image (embedded base64 by nbconvert)."""
    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return Image(data=buf.getvalue(), format="png")


def _subplots(nrows: int, ncols: int, figsize: tuple[float, float]) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=figsize)
    return fig, np.atleast_2d(fig.subplots(nrows, ncols, squeeze=False))


def overall_scores(scores: pd.DataFrame) -> Figure:
    """Stacked dimension contributions (25·mean per dimension) per audit; composite in [0, 100]."""
    import seaborn as sns

    fig, axes = _subplots(1, 1, (max(4, 1.2 * len(scores) + 2), 3.6))
    ax = axes[0][0]
    bottom = np.zeros(len(scores))
    colors = sns.color_palette("deep", 4)
    for k, dim in enumerate(DIMENSIONS):
        vals = 25.0 * scores[dim].to_numpy(dtype=float)
        ax.bar(scores["audit"], vals, bottom=bottom, label=dim, color=colors[k])
        bottom += vals
    ax.plot(scores["audit"], scores["composite_preliminary"], "k_", markersize=22, label="preliminary")
    for x, y in zip(scores["audit"], scores["composite_final"]):
        ax.text(x, y + 1.5, f"{y:.1f}", ha="center", fontsize=8)
    ax.set_ylim(0, 108)
    ax.set_ylabel("SAEO score (final)")
    ax.legend(ncol=5, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    ax.tick_params(axis="x", rotation=30, labelsize=8)
    fig.set_layout_engine("tight")
    return fig


def item_heatmap(items: pd.DataFrame) -> Figure:
    """Audit × 21-item heatmap of final ratings (0 / 0.5 / 1)."""
    import seaborn as sns

    fig, axes = _subplots(1, 1, (10, 0.5 * len(items) + 1.6))
    ax = axes[0][0]
    sns.heatmap(items[list(ITEMS)].astype(float), vmin=0, vmax=1, cmap=RATING_CMAP, linewidths=0.5,
                linecolor="white", cbar_kws={"ticks": [0, 0.5, 1], "shrink": 0.6}, ax=ax, annot=True, fmt="g",
                annot_kws={"fontsize": 7})
    for x in np.cumsum([len(v) for v in DIMENSIONS.values()])[:-1]:
        ax.axvline(x, color="k", lw=1.2)
    ax.set_ylabel("")
    fig.set_layout_engine("tight")
    return fig


def case_matrices(case_items: pd.DataFrame) -> Figure:
    """One (audit × case) matrix per item (Sim1–Sim4 by default), as in seed Fig. S1."""
    import seaborn as sns

    item_names = sorted(case_items["item"].unique()) if len(case_items) else []
    n = max(1, len(item_names))
    fig, axes = _subplots(1, n, (2.6 * n + 1, 0.45 * max(1, case_items["audit"].nunique()) + 1.6))
    for ax, item in zip(axes[0], item_names):
        m = case_items[case_items["item"] == item].pivot_table(index="audit", columns="case", values="rating",
                                                                 aggfunc="min")
        sns.heatmap(m.astype(float), vmin=0, vmax=1, cmap=RATING_CMAP, cbar=False, annot=True, fmt="g",
                    linewidths=0.5, linecolor="white", ax=ax)
        ax.set_title(item)
        ax.set_ylabel("")
    if not item_names:
        axes[0][0].text(0.5, 0.5, "no per-case judgments", ha="center")
        axes[0][0].axis("off")
    fig.set_layout_engine("tight")
    return fig


def repeat_consistency(values: pd.DataFrame) -> Figure:
    """Per panel (coordination, density, aggregates, D) the values of each audit per case/target."""
    import seaborn as sns

    panels = list(dict.fromkeys(values["panel"])) if len(values) else []
    n = max(1, len(panels))
    fig, axes = _subplots(1, n, (3.4 * n, 3.2))
    for ax, panel in zip(axes[0], panels):
        d = values[values["panel"] == panel].copy()
        d["x"] = d["case"] + ":" + d["target"]
        sns.stripplot(data=d, x="x", y="value", hue="audit", dodge=True, ax=ax, size=6)
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("")
        ax.tick_params(axis="x", rotation=40, labelsize=7)
        if ax.get_legend() is not None:
            ax.get_legend().set_title(None)
    if not panels:
        axes[0][0].text(0.5, 0.5, "no comparable values (C or SI) in these audits", ha="center", fontsize=8)
        axes[0][0].axis("off")
    fig.set_layout_engine("tight")
    return fig


def block_bars(table: pd.DataFrame, ncols: int = 4, max_panels: int | None = None) -> Figure:
    """One panel per observable: its block values against the whole-interval value and its 95 % band.

    ``table`` has the columns of :func:`mdbench.analysis.results.observables_frame` (``observable``,
    ``value``, ``blocks``, ``half_width_95``, ``state``); rows without a value or with a missing block are
    left out. Blocks are windows of one trajectory, not replicas.
    """
    rows = [r for r in table.to_dict("records") if _drawable(r)][:max_panels]
    n = max(1, len(rows))
    ncol = min(ncols, n)
    fig, axes = _subplots(int(math.ceil(n / ncol)), ncol, (3 * ncol, 2.4 * int(math.ceil(n / ncol))))
    for ax, row in zip(axes.flat, rows):
        blocks = [np.nan if b is None else b for b in row["blocks"]]
        ax.bar(range(1, len(blocks) + 1), blocks, color="C0", alpha=0.7)
        ax.axhline(row["value"], color="k", lw=1)
        hw = row.get("half_width_95")
        if hw is not None and np.isfinite(hw):
            ax.axhspan(row["value"] - hw, row["value"] + hw, color="0.8", alpha=0.5)
        ax.set_title(f"{row['observable']} [{row['state']}]", fontsize=7)
        ax.set_xlabel("block", fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    if not rows:
        axes[0][0].text(0.5, 0.5, "no observable with a value and four finite blocks", ha="center", fontsize=8)
    fig.set_layout_engine("tight")
    return fig


def _drawable(row: dict[str, Any]) -> bool:
    value, blocks = row.get("value"), row.get("blocks")
    return (value is not None and not (isinstance(value, float) and math.isnan(value)) and isinstance(blocks, list)
            and len(blocks) > 0 and any(b is not None for b in blocks))
