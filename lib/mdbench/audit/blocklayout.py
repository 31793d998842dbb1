"""The block layout a run recorded (seed: four consecutive, equal, non-overlapping blocks after the guard).

The seed's uncertainty is the spread of four (or the registered number of) consecutive, equal,
non-overlapping blocks after the guard. A run's ``block_ranges_ps`` (per entry, or its ``windows``
section) is checked against that: the registered count, ordered, no overlap, equal lengths (within one
frame or 2 %), starting at or after the guard and ending within the production trajectory. A layout that
breaks it is ``block_layout_invalid`` (sampling: C → SI) with A6 ≤ ½ and A7 ≤ ½. Overlap also declared in
words (``overlap``/``sliding``/``stride`` in the uncertainty definition or the guard/block registration)
counts the same.
"""

from __future__ import annotations

import math
import re
from typing import Any

from mdbench.audit.codes import GroupCheck, check
from mdbench.audit.model import Evidence
from mdbench.audit.runread import RunData, group_entries

_OVERLAP_WORDS = re.compile(r"(?<!non-)(?<!non )\b(overlapping|overlap|sliding|moving window|stride)\b", re.I)
#: Relative tolerance on equal block lengths (besides one frame).
EQUAL_TOL = 0.02


def registered_layout(run: RunData, case: str) -> tuple[int, float | None, str]:
    """(number of blocks, guard [ps] or None, registration text) of the guard/block registration in force."""
    n, guard, text = 4, None, ""
    for reg in run.in_force("guard", "block", case=case):
        d = reg.get("definition") if isinstance(reg.get("definition"), dict) else {}
        text += " " + " ".join(f"{k} {v}" for k, v in d.items())
        for k in ("n_blocks", "blocks", "number_of_blocks"):
            if isinstance(d.get(k), int) and not isinstance(d.get(k), bool) and 2 <= d[k] <= 64:
                n = int(d[k])
                break
        for k in ("guard_ps", "guard_interval_ps", "exclude_ps"):
            if isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool) and guard is None:
                guard = float(d[k])
        break
    return n, guard, text


def layout_problems(ranges: Any, n_blocks: int, guard_from_ps: float | None, t_end_ps: float | None,
                    dt_ps: float, t_start_ps: float | None = None) -> list[str]:
    """What is wrong with a list of [start, end] block ranges [ps] (empty when it is a valid layout)."""
    if not isinstance(ranges, list) or not ranges:
        return []
    try:
        rr = [(float(a), float(b)) for a, b in ranges]
    except (TypeError, ValueError):
        return ["block_ranges_ps is not a list of [start, end] pairs"]
    if not all(math.isfinite(a) and math.isfinite(b) for a, b in rr):
        return ["non-finite block range"]
    out = []
    if len(rr) != n_blocks:
        out.append(f"{len(rr)} blocks, {n_blocks} registered")
    tol = max(dt_ps, 1e-6) * 1.01
    if t_start_ps is not None and t_end_ps is not None and t_start_ps > tol and rr[0][0] < t_start_ps - tol and \
            rr[-1][1] <= (t_end_ps - t_start_ps) + tol:  # times measured from the production's first frame
        rr = [(a + t_start_ps, b + t_start_ps) for a, b in rr]
    for i, (a, b) in enumerate(rr):
        if b <= a:
            out.append(f"block {i + 1} [{a:g}, {b:g}] ps is empty or reversed")
        if i and a < rr[i - 1][1] - 1e-9:
            out.append(f"blocks {i} and {i + 1} overlap ([{rr[i - 1][0]:g}, {rr[i - 1][1]:g}] and [{a:g}, {b:g}] ps)")
        elif i and a - rr[i - 1][1] > tol + 1e-9:
            out.append(f"a gap of {a - rr[i - 1][1]:.3g} ps between blocks {i} and {i + 1}")
    lengths = [b - a for a, b in rr]
    if max(lengths) - min(lengths) > max(tol, EQUAL_TOL * max(lengths)):
        out.append(f"unequal block lengths {', '.join(f'{x:.3g}' for x in lengths)} ps")
    if guard_from_ps is not None and rr[0][0] < guard_from_ps - tol:
        out.append(f"the first block starts at {rr[0][0]:g} ps, before the end of the guard ({guard_from_ps:g} ps)")
    if t_end_ps is not None and rr[-1][1] > t_end_ps + tol:
        out.append(f"the last block ends at {rr[-1][1]:g} ps, after the trajectory ({t_end_ps:g} ps)")
    return out


def checks(run: RunData, case: str, prod: Any) -> list[GroupCheck]:
    """One ``block_layout_invalid`` check per group whose entries record a layout that is not the registered
    consecutive, equal, non-overlapping blocks."""
    n, guard, reg_text = registered_layout(run, case)
    t0 = getattr(prod, "t_first_ps", None)
    t1 = getattr(prod, "t_last_ps", None)
    dt = float((getattr(prod, "extra", None) or {}).get("xtc_dt_ps") or 0.0)
    guard_from = (t0 + guard) if (t0 is not None and guard is not None) else None
    res = run.results.get(case)
    res_rel = f"analysis/{case}/results.json"
    out: list[GroupCheck] = []
    reg_overlap = bool(_OVERLAP_WORDS.search(reg_text))
    windows = res.get("windows") if isinstance(res, dict) and isinstance(res.get("windows"), dict) else {}
    for group, entries in group_entries(res).items():
        why: list[str] = []
        where = None
        for e in entries.values():
            unc = e.raw.get("uncertainty") if isinstance(e.raw.get("uncertainty"), dict) else {}
            ranges = e.raw.get("block_ranges_ps")
            if ranges is None and isinstance(e.raw.get("window"), dict):
                ranges = e.raw["window"].get("block_ranges_ps")
            p = layout_problems(ranges, n, guard_from, t1, dt, t0)
            if _OVERLAP_WORDS.search(str(unc.get("definition", ""))):
                p.append("its uncertainty definition uses overlapping blocks")
            if p:
                why, where = p, e.key
                break
        if not why and reg_overlap:
            why, where = ["the guard/block registration declares overlapping blocks"], None
        if not why and windows:
            why = layout_problems(windows.get("block_ranges_ps"), n, guard_from, t1, dt, t0)
            where = "windows.block_ranges_ps" if why else None
        if why:
            out.append(GroupCheck(group, check("block_layout_invalid",
                                          f"{where or group}: the blocks are not {n} consecutive, equal, "
                                          f"non-overlapping blocks after the guard: " + "; ".join(why[:4]),
                                          (Evidence(res_rel, key=where),))))
    return out
