"""The ``report`` room of mdbench: figures, escaped tables and one self-contained HTML page per report.

Public API: :func:`render_report` (``from mdbench.report import render_report``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["render_report"]


def __getattr__(name: str) -> Any:  # lazy: keep ``mdbench --help`` fast
    if name == "render_report":
        from mdbench.report.render import render_report

        return render_report
    raise AttributeError(name)
