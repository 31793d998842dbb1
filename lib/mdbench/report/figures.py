"""Report figures (matplotlib/seaborn): overall scores (seed Fig. 2), item heatmap (Fig. 3), simulation
detail matrices (Fig. S1), repeat consistency (Fig. 5), and the block bars of one case's observables that
results.json and every analysis template show (:func:`block_bars`, drawn by the analysis room in
:mod:`mdbench.analysis.blockbars` and re-exported here). Each function returns a matplotlib Figure built
without pyplot (no global backend state); :func:`as_image` turns it into an embeddable PNG. seaborn and
IPython are imported by the functions that use them."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from mdbench.analysis.blockbars import block_bars as block_bars  # re-export: the templates draw it from here
from mdbench.audit.model import DIMENSIONS, ITEM_TITLES, ITEMS

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
    ax.set_xticks(np.arange(len(ITEMS)) + 0.5)
    ax.set_xticklabels([f"{i} {ITEM_TITLES.get(i, '')}" for i in ITEMS], rotation=60, ha="right", fontsize=7)
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
    """Per panel (coordination, density, aggregates, D) the values of each audit per case/target.

    Repeat consistency needs repeats: with fewer than two audited runs the figure says so instead of
    drawing single points (a single run's spread is in its block bars and intervals).
    """
    import seaborn as sns

    if len(values) and values["audit"].nunique() < 2:
        fig, axes = _subplots(1, 1, (5, 1.2))
        axes[0][0].text(0.5, 0.5, "repeat consistency needs at least two audited runs (one given)",
                        ha="center", va="center", fontsize=9)
        axes[0][0].axis("off")
        return fig
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
        if ax.get_legend() is not None:  # below the panel: a legend inside hides points
            ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2, frameon=False)
    if not panels:
        axes[0][0].text(0.5, 0.5, "no comparable values (C or SI) in these audits", ha="center", fontsize=8)
        axes[0][0].axis("off")
    fig.set_layout_engine("tight")
    return fig


def _cross_panels():
    """Cross-system figure panels, one per registry member of a required family (the rows of the report's
    cross-system table): (title, y label, selector of result names, target label of a result name)."""
    import re

    from mdbench.analysis.observables import report_order
    from mdbench.report.science import _family, _member

    panels = []
    for fam in report_order():
        if not fam.required:
            continue
        for m in fam.members:
            fixed_key = fam.key(*([m.pattern] if m.pattern else [])) if m.fixed else None
            label = re.sub(r"\s+", " ", m.label.replace("{q}", "")).strip()
            unit = re.search(r"\[([^\]]+)\]\s*$", label)

            def pick(name: str, fam=fam, m=m, fixed_key=fixed_key) -> bool:
                return name == fixed_key if m.fixed else (_family(name) is fam and m.matches(_member(name)))

            def target(name: str, m=m, fam=fam) -> str:
                q = _member(name)
                return fam.name if m.fixed else (q.removesuffix(m.strip) if m.strip else q)

            ylabel = unit.group(1) if unit else (fam.unit if len(fam.members) == 1 else "1")
            panels.append((label, ylabel, pick, target))
    return tuple(panels)


def cross_system_points(cases: list) -> pd.DataFrame:
    """Long table (panel, ylabel, target, case, value, half_width_95, state) of the cross-system figure from
    the cases' results.json (:class:`mdbench.report.science.CaseResults`); the state is the one results.json
    gives the value, the same one every table of the report shows. Withheld/absent values are left out."""
    import pandas as pd

    from mdbench.report.science import state_text

    rows = []
    for title, ylabel, pick, target_of in _cross_panels():
        for c in cases:
            for name, e in c.observables.items():
                if not isinstance(name, str) or not isinstance(e, dict) or not pick(name):
                    continue
                v = e.get("value")
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                    continue
                unc = e.get("uncertainty") if isinstance(e.get("uncertainty"), dict) else {}
                hw = unc.get("half_width_95")
                hw = float(hw) if isinstance(hw, (int, float)) and not isinstance(hw, bool) and math.isfinite(hw) \
                    else float("nan")
                rows.append({"panel": title, "ylabel": ylabel, "target": str(target_of(name)),
                             "case": c.case if len({x.run for x in cases}) == 1 else f"{c.run}/{c.case}",
                             "value": float(v), "half_width_95": hw, "state": state_text(name, e)})
    return pd.DataFrame(rows, columns=["panel", "ylabel", "target", "case", "value", "half_width_95", "state"])


def cross_system(points: pd.DataFrame) -> Figure:
    """DE/HCE/LHCE side by side: one panel per quantity family (CN per channel, association fractions, D per
    species, eta, sigma beside sigma_NE, t+), value with its 95 % interval per case; filled markers are C,
    open markers anything else (SI: sampling-insufficient), as the tables label them."""
    panels = list(dict.fromkeys(points["panel"])) if len(points) else []
    n = max(1, len(panels))
    ncol = min(3, n)
    nrow = int(math.ceil(n / ncol))
    fig, axes = _subplots(nrow, ncol, (4.2 * ncol, 3.2 * nrow))
    cases = list(dict.fromkeys(points["case"])) if len(points) else []
    for ax, panel in zip(axes.flat, panels):
        d = points[points["panel"] == panel]
        targets = list(dict.fromkeys(d["target"]))
        width = 0.8 / max(1, len(cases))
        for k, case in enumerate(cases):
            dc = d[d["case"] == case]
            for _, r in dc.iterrows():
                x = targets.index(r["target"]) - 0.4 + width * (k + 0.5)
                filled = r["state"] == "C"
                ax.errorbar(x, r["value"], yerr=None if math.isnan(r["half_width_95"]) else r["half_width_95"],
                            fmt="o", color=f"C{k}", mfc=f"C{k}" if filled else "white", capsize=3, ms=5,
                            label=case if r["target"] == dc["target"].iloc[0] else None)
        ax.set_xticks(range(len(targets)))
        ax.set_xticklabels(targets, rotation=30, fontsize=7, ha="right")
        ax.set_title(panel, fontsize=9)
        ax.set_ylabel(str(d["ylabel"].iloc[0]), fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        if d["ylabel"].iloc[0].startswith("D ["):
            ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if panels:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncol=max(1, len(cases)), fontsize=8, frameon=False,
                   bbox_to_anchor=(0.5, 1.04), title="filled: C · open: SI or other state (error bars: 95 % CI)",
                   title_fontsize=7)
    else:
        axes[0][0].text(0.5, 0.5, "no cross-system values in the analysis results", ha="center", fontsize=8)
        axes[0][0].axis("off")
    fig.set_layout_engine("tight")
    return fig


def show_cross_system(runs: list[tuple[str, str]]) -> int:
    """Display (in a notebook) the cross-system figure of each ``(label, run_dir)`` that has analysis
    results; returns how many were drawn."""
    from IPython.display import display

    from mdbench.report import science, tables

    drawn = 0
    for label, run_dir in runs:
        cases = science.load_case_results(run_dir, label) if run_dir else []
        points = cross_system_points(cases)
        if not len(points):
            continue
        display(tables.heading(f"{label}: DE / HCE / LHCE side by side", 3))
        display(as_image(cross_system(points)))
        drawn += 1
    return drawn
