"""Figures over episodes (seed 000 Figs. 2, 3, S1–S4), built without pyplot like :mod:`mdbench.report.figures`,
whose rating colours (dark 1, medium ½, light 0), detail matrices and repeat-consistency panels they share."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from mdbench.audit.model import DIMENSIONS
from mdbench.report.figures import RATING_CMAP

#: Observable-state colours: C dark green, SI amber, F red, M grey-blue; invalid_upstream / not_reached pale.
STATE_CODES = {"C": 0, "SI": 1, "F": 2, "M": 3, "invalid_upstream": 4, "not_reached": 5}
STATE_CMAP = ListedColormap(["#1e8449", "#f5b041", "#c0392b", "#7f8c8d", "#d5dbdb", "#eaeded"])
STATE_SHORT = {"C": "C", "SI": "SI", "F": "F", "M": "M", "invalid_upstream": "IU", "not_reached": "NR"}


def _matrix_axes(frame: pd.DataFrame, width_per_column: float, extra_height: float) -> tuple[Figure, object, bool]:
    """A figure sized for a rows × columns matrix; ``False`` (and a note drawn) when there is nothing to show."""
    fig = Figure(figsize=(max(6.0, width_per_column * frame.shape[1] + 3), 0.45 * max(1, len(frame)) + extra_height))
    ax = fig.subplots()
    if frame.empty:
        ax.text(0.5, 0.5, "no scored episode", ha="center")
        ax.axis("off")
        return fig, ax, False
    return fig, ax, True


def composite_by_configuration(scores: pd.DataFrame, order: list[str]) -> Figure:
    """Fig. 2: per configuration, stacked dimension contributions (25 × mean over repeats) and each repeat's
    composite as a point; the mean composite is written above the bar."""
    fig = Figure(figsize=(max(4.5, 1.3 * len(order) + 2), 3.8))
    ax = fig.subplots()
    if scores.empty:
        ax.text(0.5, 0.5, "no scored episode", ha="center")
        ax.axis("off")
        return fig
    x = np.arange(len(order))
    bottom = np.zeros(len(order))
    colors = sns.color_palette("deep", 4)
    means = scores.groupby("configuration")[list(DIMENSIONS) + ["composite"]].mean().reindex(order)
    for k, dim in enumerate(DIMENSIONS):
        vals = 25.0 * means[dim].to_numpy(dtype=float)
        ax.bar(x, vals, bottom=bottom, color=colors[k], alpha=0.8, label=f"{dim} (25 × mean)")
        bottom += vals
    for i, conf in enumerate(order):
        pts = scores.loc[scores["configuration"] == conf, "composite"].to_numpy(dtype=float)
        jitter = np.linspace(-0.15, 0.15, len(pts)) if len(pts) > 1 else np.zeros(1)
        ax.plot(i + jitter, pts, "o", color="black", markersize=5, label="repeat" if i == 0 else None)
        ax.text(i, means.loc[conf, "composite"] + 3, f"{means.loc[conf, 'composite']:.1f}", ha="center", fontsize=8)
    ax.set_xticks(x, order, rotation=25, ha="right", fontsize=8)
    ax.set_ylim(0, 110)
    ax.set_ylabel("SAEO composite score")
    ax.legend(ncol=5, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    fig.set_layout_engine("tight")
    return fig


def rating_matrix(matrix: pd.DataFrame, separators: tuple[tuple[int, float], ...] = (),
                  title: str | None = None) -> Figure:
    """Rows × items heatmap of ratings 0 / ½ / 1, each cell labelled; NaN (not applicable) in grey.

    ``separators`` are (column boundary, line width) pairs, e.g. between items and between dimensions.
    """
    fig, ax, anything = _matrix_axes(matrix, 0.3, 1.8)
    if not anything:
        return fig
    data = matrix.astype(float)
    ax.set_facecolor("#d9d9d9")  # shows through the masked (not applicable) cells
    sns.heatmap(data, vmin=0, vmax=1, cmap=RATING_CMAP, mask=data.isna(), linewidths=0.5, linecolor="white",
                cbar_kws={"ticks": [0, 0.5, 1], "shrink": 0.6}, annot=True, fmt="g", annot_kws={"fontsize": 6},
                ax=ax)
    for xline, width in separators:
        ax.axvline(xline, color="k", lw=width)
    ax.tick_params(axis="x", labelsize=7, rotation=90)
    ax.tick_params(axis="y", labelsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    fig.set_layout_engine("tight")
    return fig


def fig3_heatmap(matrix: pd.DataFrame, per_case_columns: int) -> Figure:
    """Fig. 3: episode × (per-case items for D/H/L, then episode items); thin lines between items, bold lines
    between dimensions; grey cells are not applicable (production not reached or invalid upstream)."""
    thin = tuple((x, 0.6) for x in range(3, per_case_columns, 3))
    n_s = 3 * len(DIMENSIONS["S"])
    n_e = len(DIMENSIONS["E"])
    thin += tuple((per_case_columns + k, 0.6) for k in range(1, n_e + len(DIMENSIONS["O"])) if k != n_e)
    bold = ((n_s, 1.8), (per_case_columns, 1.8), (per_case_columns + n_e, 1.8))
    return rating_matrix(matrix, separators=thin + bold)


def per_case_matrix(matrix: pd.DataFrame, items: tuple[str, ...]) -> Figure:
    """Figs. S1/S2: the ``<item> <D|H|L>`` columns of :func:`~mdbench.episode.aggregate.item_matrix` for
    ``items``, a line between items; grey cells are not applicable."""
    cols = [c for c in matrix.columns if c.split(" ")[0] in items]
    return rating_matrix(matrix[cols], separators=tuple((x, 1.2) for x in range(3, len(cols), 3)))


def state_matrix(states: pd.DataFrame) -> Figure:
    """Episode × ``CASE/observable`` observable states as coloured, labelled cells (C, SI, F, M, IU, NR)."""
    fig, ax, anything = _matrix_axes(states, 0.38, 2.2)
    if not anything:
        return fig
    codes = states.apply(lambda col: col.map(STATE_CODES)).astype(float)
    labels = states.apply(lambda col: col.map(lambda s: STATE_SHORT.get(s, "") if isinstance(s, str) else ""))
    sns.heatmap(codes, vmin=-0.5, vmax=5.5, cmap=STATE_CMAP, mask=codes.isna(), cbar=False, annot=labels, fmt="",
                annot_kws={"fontsize": 6}, linewidths=0.5, linecolor="white", ax=ax)
    ax.tick_params(axis="x", labelsize=7, rotation=90)
    ax.tick_params(axis="y", labelsize=7)
    fig.set_layout_engine("tight")
    return fig


def repeat_consistency(values: pd.DataFrame) -> Figure:
    """Fig. 5: per panel (coordination, density, aggregates, D) each repeat's value per case/target.

    Labels and the legend stay clear of the data: one legend for all panels below them, the x labels rotated
    under their axis, the y range padded by 15 % so no point sits on a frame or under a title.
    """
    panels = list(dict.fromkeys(values["panel"])) if len(values) else []
    n = max(1, len(panels))
    fig = Figure(figsize=(3.6 * n, 4.2))
    axes = np.atleast_1d(fig.subplots(1, n, squeeze=False)[0])
    audits = sorted(dict.fromkeys(values["audit"])) if len(values) else []
    palette = dict(zip(audits, sns.color_palette("deep", max(1, len(audits)))))
    for ax, panel in zip(axes, panels):
        d = values[values["panel"] == panel].copy()
        d["x"] = d["case"] + ":" + d["target"]
        xs = list(dict.fromkeys(d["x"]))
        width = 0.6 / max(1, len(audits))
        for k, a in enumerate(audits):
            sub = d[d["audit"] == a]
            pos = [xs.index(x) - 0.3 + width * (k + 0.5) for x in sub["x"]]
            ax.plot(pos, sub["value"].astype(float), "o", color=palette[a], markersize=6, label=a)
        ax.set_xticks(range(len(xs)), xs, rotation=40, ha="right", fontsize=7)
        ax.set_xlim(-0.6, len(xs) - 0.4)
        vals = d["value"].astype(float)
        lo, hi = float(vals.min()), float(vals.max())
        pad = 0.15 * (hi - lo) if hi > lo else (0.15 * abs(hi) or 1.0)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_title(panel, fontsize=9, pad=16)  # above the axis' ×10^n offset text
        ax.tick_params(axis="y", labelsize=7)
    if not panels:
        axes[0].text(0.5, 0.5, "no comparable values (C or SI) in these audits", ha="center", fontsize=8)
        axes[0].axis("off")
    elif audits:
        from matplotlib.lines import Line2D  # noqa: PLC0415

        handles = [Line2D([], [], marker="o", ls="", color=palette[a], label=a) for a in audits]
        fig.legend(handles, audits, loc="lower center", ncol=min(8, len(audits)),
                   fontsize=7, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.set_layout_engine("tight", rect=(0, 0.08, 1, 1))
    return fig
