"""Fabricated evidence: what a run records but its files cannot have produced (E1, A3, A6).

* :class:`NotARunDirectory` — a directory without ``run_record/`` is refused, never scored
  (``mdbench audit /etc`` used to score 17.5).
* :func:`block_spread_checks` — block values whose spread is implausibly small against the canonical
  reanalysis' blocks of the same trajectory (four blocks copied from the whole value): a one-sided
  variance-ratio (F) test, :math:`s_r^2 / s_c^2 < F_{\\alpha}(n_r - 1, n_c - 1)` with
  :data:`SPREAD_ALPHA`; A3 = 0 and A6 = 0, state F.
* :func:`lineage_artifacts` — E1 requires the artifacts the attempts ledger names to exist, and the
  production files of every completed production attempt to be present and readable.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mdbench.audit import canonical
from mdbench.audit.codes import GroupCheck, check
from mdbench.audit.model import Evidence
from mdbench.audit.runread import Entry, RunData, canonical_stage, group_entries
from mdbench.audit.simulation import _artifact_rel, production_attempts
from mdbench.errors import InputError

#: One-sided level of the variance-ratio test of a run's block spread against the canonical blocks.
SPREAD_ALPHA = 1e-3
RUN_RECORD = "run_record"


class NotARunDirectory(InputError):
    """The directory given to the audit holds no ``run_record/`` directory: it is no run directory.

    The audit refuses it (nothing is scored); ``path`` is the directory given. The CLI may catch it and
    offer ``--force``.
    """


def require_run_directory(run_dir: Any) -> None:
    """Raise :class:`NotARunDirectory` unless ``run_dir`` holds a real (not linked) ``run_record/``."""
    from pathlib import Path  # noqa: PLC0415

    rec = Path(run_dir) / RUN_RECORD
    if rec.is_symlink() or not rec.is_dir():
        raise NotARunDirectory(f"not a run directory: it has no {RUN_RECORD}/ (pass the directory that holds "
                               f"{RUN_RECORD}/)", str(run_dir))


def _finite_blocks(e: Entry) -> np.ndarray | None:
    if not e.blocks or len(e.blocks) < 2 or any(b is None or not math.isfinite(b) for b in e.blocks):
        return None
    return np.asarray(e.blocks, dtype=np.float64)


def variance_ratio_too_small(run_blocks: np.ndarray, canon_blocks: np.ndarray, alpha: float = SPREAD_ALPHA
                             ) -> tuple[bool, float, float]:
    """(too small, variance ratio s_r²/s_c², its lower critical value) of two sets of block values."""
    from scipy.stats import f as fdist  # noqa: PLC0415

    s_r, s_c = float(np.var(run_blocks, ddof=1)), float(np.var(canon_blocks, ddof=1))
    scale = max(float(np.max(np.abs(canon_blocks))), 1e-300)
    if not (s_c > (1e-9 * scale) ** 2):  # the canonical blocks agree exactly (a constant, e.g. NVT volume)
        return False, math.nan, math.nan
    crit = float(fdist.ppf(alpha, run_blocks.size - 1, canon_blocks.size - 1))
    ratio = s_r / s_c
    return ratio < crit, ratio, crit


def _canonical_match(group: str, e: Entry, canon_entries: dict[str, Entry]) -> Entry | None:
    try:  # the analysis items' matcher (same pairing as the R5 comparison), where the definitions match
        ce = canonical._canonical_match(group, e, canon_entries)
        return ce if ce is not None and canonical._definitions_match(group, e, ce) else None
    except Exception:  # noqa: BLE001 - renamed or failing matcher: no comparison, never a crash
        return None


def block_spread_checks(run: RunData, case: str, canonical_results: Any) -> list[GroupCheck]:
    """Blocks of a delivered entry far tighter than the canonical blocks of the same production."""
    if canonical_results is None:
        return []
    mine, canon = group_entries(run.results.get(case)), group_entries(canonical_results)
    res_rel = f"analysis/{case}/results.json"
    out: list[GroupCheck] = []
    for group, entries in mine.items():
        for e in entries.values():
            rb = _finite_blocks(e)
            ce = _canonical_match(group, e, canon.get(group) or {})
            cb = _finite_blocks(ce) if ce is not None else None
            if rb is None or cb is None:
                continue
            low, ratio, crit = variance_ratio_too_small(rb, cb)
            if low:
                msg = (f"{e.key}: block spread s = {float(np.std(rb, ddof=1)):.3g} is implausibly small against the "
                       f"canonical blocks of the same production (s = {float(np.std(cb, ddof=1)):.3g}; variance ratio "
                       f"{ratio:.2g} < F_{SPREAD_ALPHA:g}({rb.size - 1},{cb.size - 1}) = {crit:.2g}): block values "
                       "not computed from the blocks")
                out.append(GroupCheck(group, check("block_spread_implausible", msg,
                                              (Evidence(res_rel, key=e.key, note="blocks"),))))
    return out


def lineage_artifacts(run: RunData, prods: dict[str, Any]) -> list[str]:
    """E1 problems: artifacts named in the attempts ledger that do not exist, and completed production
    attempts whose trajectory or energy file is absent or unreadable."""
    problems: list[str] = []
    for aid, a in run.attempts.items():
        arts = a.get("artifacts")
        if not isinstance(arts, dict) or a.get("status") != "completed":
            continue
        stage = canonical_stage(str(a.get("stage", ""))) or canonical_stage(str(a.get("kind", "")))
        d = run.stage_dirs.get(str(a.get("case")), {}).get(stage or "")
        for k, v in arts.items():
            if not isinstance(v, str):
                continue
            rel = _artifact_rel(run, v, d)
            if rel is None or run.fs.resolve(rel) is None:
                problems.append(f"attempt {aid} names {k} artifact {v!r}, which does not exist")
    for case in run.cases:
        leaves = production_attempts(run, case)
        pf = prods.get(case)
        if not leaves:
            continue
        if pf is None or pf.xtc is None or pf.edr is None:
            problems.append(f"{case}: completed production attempt {leaves[-1].get('id')} has no trajectory and "
                            "energy file on disk")
        elif not pf.readable and pf.n_frames == 0:
            problems.append(f"{case}: production trajectory {pf.xtc} does not parse")
    return problems[:20]
