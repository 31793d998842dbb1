"""Values that appear in no artifact: a fabrication signal (E1 Canonical lineage, A3), kept conservative.

A delivered number is *supported* when the run recorded something it follows from: at least two finite block
values, a cited or inline MSD (:func:`mdbench.audit.runread.curve_citation`), a recorded RDF
(:func:`mdbench.audit.consistency.recorded_rdf`), or a recorded Onsager / σ_ij matrix. It is *not reproduced*
when the canonical reanalysis of the same trajectory gives a finite value for the same definition and the two
differ by more than twice the canonical 95 % half-width and more than :data:`REPRO_REL_TOL` (or when another
check already found it contradicted by the reanalysis or by the trajectory). Only a number that is both
unsupported and not reproduced is ``value_without_artifact``: item E1 (the lineage does not hold the evidence
of a delivered value; E1 ≤ ½ via :mod:`mdbench.audit.record_checks`) and A3 = 0, state F. A number with no
canonical counterpart, or one the reanalysis reproduces, is never flagged (an honest summary table without
blocks is not fabrication).
"""

from __future__ import annotations

import math
from typing import Any

from mdbench.audit.codes import GroupCheck, check
from mdbench.audit.model import Evidence
from mdbench.audit.runread import Entry, RunData, curve_citation, group_entries
from mdbench.audit.consistency import recorded_rdf
from mdbench.audit.canonical import _canonical_match, _definitions_match

#: Relative difference from the canonical value below which a number counts as reproduced.
REPRO_REL_TOL = 0.10
#: Codes of other checks that already establish a value as contradicted by the reanalysis or the trajectory.
CONTRADICTED = frozenset({"value_contradicts_reanalysis", "diffusion_off_trajectory_msd"})
_MATRIX_KEYS = ("onsager", "L", "onsager_coefficients", "sigma_ij_S_m")


def supported(run: RunData, case: str, e: Entry) -> bool:
    """True when the entry records an artifact its value follows from (module docstring)."""
    if e.blocks and sum(1 for b in e.blocks if b is not None and math.isfinite(b)) >= 2:
        return True
    raw = e.raw
    det = raw.get("details") if isinstance(raw.get("details"), dict) else {}
    if any(k in raw or k in det for k in _MATRIX_KEYS) or isinstance(det.get("L"), dict):
        return True
    try:
        return curve_citation(raw) is not None or recorded_rdf(run, case, raw) is not None
    except Exception:  # noqa: BLE001 - an unreadable citation counts as a citation (its own finding elsewhere)
        return True


def _canonical(group: str, e: Entry, canon: dict[str, Entry]) -> Entry | None:
    try:
        ce = _canonical_match(group, e, canon)
        return ce if ce is not None and ce.finite_value and _definitions_match(group, e, ce) else None
    except Exception:  # noqa: BLE001 - a failing matcher: nothing compared, never a crash
        return None


def _half_width(ce: Entry) -> float:
    u = ce.raw.get("uncertainty")
    hw = u.get("half_width_95") if isinstance(u, dict) else None
    return float(hw) if isinstance(hw, (int, float)) and not isinstance(hw, bool) and math.isfinite(hw) else 0.0


def _contradicted(groups: list[Any] | None, group: str, key: str) -> bool:
    for gr in groups or []:
        a = getattr(gr, "assessment", None)
        if a is not None and a.observable == group:
            return any(c.code in CONTRADICTED and key in c.message for c in a.checks)
    return False


def checks(run: RunData, case: str, canonical_results: Any, groups: list[Any] | None = None,
           extras: list[GroupCheck] | None = None) -> list[GroupCheck]:
    """``value_without_artifact`` for every delivered number of ``case`` that is unsupported and not reproduced."""
    if not isinstance(canonical_results, dict):
        return []
    mine, canon = group_entries(run.results.get(case)), group_entries(canonical_results)
    done = {(x.group, x.check.code, x.check.message.split(" ", 1)[0]) for x in extras or []}
    out: list[GroupCheck] = []
    for group, entries in mine.items():
        for e in list(entries.values())[:200]:
            if not e.finite_value or supported(run, case, e):
                continue
            ce = _canonical(group, e, canon.get(group) or {})
            if ce is None:
                continue
            if e.value and ce.value and e.value / ce.value > 0:
                n = round(math.log10(e.value / ce.value))
                if n != 0 and abs(e.value / (ce.value * 10.0 ** n) - 1.0) <= 0.02:
                    continue  # a power of ten: a unit prefix, the unit checks' matter
            diff = abs(e.value - ce.value)
            off = diff > 2.0 * _half_width(ce) and diff > REPRO_REL_TOL * abs(ce.value)
            already = _contradicted(groups, group, e.key) or (group, "diffusion_off_trajectory_msd", e.key) in done
            if not (off or already):
                continue
            msg = (f"{e.key} = {e.value:.4g} appears in no recorded artifact (no block values, curve, RDF or matrix "
                   f"behind it) and the reanalysis of the same trajectory does not reproduce it ({ce.key} = "
                   f"{ce.value:.4g} ± {_half_width(ce):.2g}): a value without evidence")
            out.append(GroupCheck(group, check("value_without_artifact", msg,
                                          (Evidence(f"analysis/{case}/results.json", key=e.key, note="value"),))))
    return out
