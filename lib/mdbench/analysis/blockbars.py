"""The block bars of one case's observables: each observable's block values against its whole-interval value
and 95 % band — the figure ``results.json`` names and every analysis template shows.

It lives in the analysis room (which draws it into each run's figures); the report shows the same figure
through :func:`mdbench.report.figures.block_bars`, a re-export. Built without pyplot (no global backend state).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.figure import Figure

if TYPE_CHECKING:
    import pandas as pd


def block_bars(table: pd.DataFrame, ncols: int = 4, max_panels: int | None = None) -> Figure:
    """One panel per observable: its block values against the whole-interval value and its 95 % band.

    ``table`` has the columns of :func:`mdbench.analysis.results.observables_frame` (``observable``,
    ``value``, ``blocks``, ``half_width_95``, ``state``); rows without a value or with a missing block are
    left out. Blocks are windows of one trajectory, not replicas.
    """
    rows = [r for r in table.to_dict("records") if drawable(r)][:max_panels]
    n = max(1, len(rows))
    ncol = min(ncols, n)
    nrow = int(math.ceil(n / ncol))
    fig = Figure(figsize=(3 * ncol, 2.4 * nrow))
    axes = np.atleast_2d(fig.subplots(nrow, ncol, squeeze=False))
    for ax, row in zip(axes.flat, rows):
        blocks = [np.nan if b is None else b for b in row["blocks"]]
        ax.bar(range(1, len(blocks) + 1), blocks, color="C0", alpha=0.7)
        ax.axhline(row["value"], color="k", lw=1)
        hw = row.get("half_width_95")
        if hw is not None and np.isfinite(hw):
            ax.axhspan(row["value"] - hw, row["value"] + hw, color="0.8", alpha=0.5)
        ax.set_title(f"{row['observable']} [{row['state']}]", fontsize=7)
        ax.set_xlabel("block (window of one trajectory)", fontsize=7)
        unit = row.get("unit")
        ax.set_ylabel(f"value [{unit}]" if isinstance(unit, str) and unit else "value [dimensionless]", fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    if not rows:
        axes[0][0].text(0.5, 0.5, "no observable with a value and four finite blocks", ha="center", fontsize=8)
    fig.set_layout_engine("tight")
    return fig


def drawable(row: dict[str, Any]) -> bool:
    """Whether a row of :func:`mdbench.analysis.results.observables_frame` has a value and a finite block."""
    value, blocks = row.get("value"), row.get("blocks")
    return (value is not None and not (isinstance(value, float) and math.isnan(value)) and isinstance(blocks, list)
            and len(blocks) > 0 and any(b is not None for b in blocks))
