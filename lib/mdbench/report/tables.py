"""HTML tables with every cell escaped: run-provided text (reasons, names, paths) renders as text."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd
from IPython.display import HTML


def escape(text: Any) -> str:
    """HTML-escape any value (``<script>`` becomes ``&lt;script&gt;``)."""
    return html.escape("" if text is None else str(text), quote=True)


#: wrap long cells (reasons, paths) instead of widening or cutting them
_STYLE = ("<style>table.saeo td{white-space:normal;overflow-wrap:anywhere;max-width:48em;vertical-align:top}"
          "table.saeo{border-collapse:collapse}</style>")


def html_table(df: pd.DataFrame, max_rows: int = 500, caption: str | None = None) -> HTML:
    """A pandas table rendered with escaping of cells, headers and caption (``escape=True``)."""
    shown = df.head(max_rows)
    with pd.option_context("display.max_colwidth", None):  # never cut a reason mid-word; the page wraps it
        out = shown.to_html(index=False, escape=True, na_rep="–", border=0, classes="saeo")
    out = _STYLE + out
    if caption:
        out = f"<p><b>{escape(caption)}</b></p>" + out
    if len(df) > max_rows:
        out += f"<p>{len(df) - max_rows} more rows not shown.</p>"
    return HTML(out)


def heading(text: str, level: int = 2) -> HTML:
    """An escaped HTML heading (for titles that may contain run-provided names)."""
    level = min(max(int(level), 1), 6)
    return HTML(f"<h{level}>{escape(text)}</h{level}>")
