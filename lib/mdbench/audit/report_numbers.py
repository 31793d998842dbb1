"""Report numbers per case (``report_number_differs``, E5 ≤ ½): a table row of a report.md section whose
heading names one case against that case's results (a comparison table's row may give it in any column)."""

from __future__ import annotations

import re
from typing import Any

from mdbench.audit.evidence import _same_up_to_unit, comparison_lines
from mdbench.audit.runread import RunData

_HEADER = re.compile(r"^(#{1,6})\s+(.*)$")


_CELL_NUMBER = re.compile(r"^\s*\**\s*([-+−]?\d+(?:\.\d+)?(?:[eE][-+−]?\d+)?)")


def _norm_name(text: str) -> str:
    """A table cell's name part, normalised (``D_li (m²/s)`` → ``d_li``; spaces and hyphens as ``_``)."""
    t = re.split(r"[(\[]", text.replace("`", "").replace("*", ""), maxsplit=1)[0].strip().lower()
    return re.sub(r"[\s-]+", "_", t)


def report_case_mismatches(run: RunData, assessments: list[Any]) -> list[tuple[int, str]]:
    """(line, message) where a table row of a report.md section whose header names exactly one case gives a
    result of that case (first cell: its name) with a number (first number of the next cells) that matches no
    value of that result (powers of ten allowed: unit prefixes). In a comparison table (a header column or the
    section heading says original / revised / superseded / sensitivity …) the row is consistent when any of its
    columns gives the value."""
    text = run.report_md or ""
    if not text:
        return []
    per_case: dict[str, dict[str, list[float]]] = {}
    for a in assessments:
        for key, val in a.values.items():
            per_case.setdefault(a.case, {}).setdefault(re.split(r"[./]", key)[-1].lower(), []).append(val)
    out: list[tuple[int, str]] = []
    current: str | None = None
    compares = comparison_lines(text)
    for n, line in enumerate(text.splitlines()[:100_000], start=1):
        m = _HEADER.match(line)
        if m:
            named = [c for c in run.cases
                     if re.search(rf"(?<![A-Za-z0-9_]){re.escape(c)}(?![A-Za-z0-9_])", m.group(2))]
            current = named[0] if len(named) == 1 else None
            continue
        comparison = n in compares
        if current is None or not line.lstrip().startswith("|") or current not in per_case:
            continue
        cells = [c for c in line.strip().strip("|").split("|")]
        if len(cells) < 2:
            continue
        vals = per_case[current].get(_norm_name(cells[0]))
        if not vals:
            continue
        nums = []
        for cell in cells[1:]:
            num = _CELL_NUMBER.match(cell)
            if num is None:
                continue
            try:
                nums.append((num.group(1), float(num.group(1).replace("−", "-"))))
            except ValueError:
                break
            if not comparison:
                break  # a value table: the first number is the case's value
        if not nums:
            continue
        # a comparison table (original | revised guard, a sensitivity table): the case's value is one of its columns
        if not any(_same_up_to_unit(x, v) for _s, x in nums for v in vals):
            out.append((n, f"report.md:{n} ({current}) gives {cells[0].strip()[:40]} = "
                           f"{' / '.join(s for s, _x in nums)}, results.json has "
                           f"{', '.join(f'{v:.6g}' for v in vals[:3])}"))
    return out
