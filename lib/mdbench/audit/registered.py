"""Definitions recomputed as the run registered them (issue 37, class 2).

The canonical reanalysis of a case runs with the run's registered contact cutoff (the association
registration in force: ``contact_cutoff_nm`` / ``cutoff_nm`` for every anion channel, or a mapping by
channel ``"FSI:O"`` or species ``"FSI"``), so a run's CIP/AGG fractions are compared at the definition it
registered, and a contact cutoff silently different from the registered one shows as a disagreement (A3).
The reanalysis' association entries carry their cutoff (``details.cutoff_nm``, read from the definition
the analysis states) so that the comparison's definition match (equal cutoffs) applies to them.
"""

from __future__ import annotations

import math
import re
from typing import Any

from mdbench.analysis.observables import ASSOCIATION, ASSOCIATION_GROUP

#: Site labels of a contact channel (``mdbench.analysis`` atom selections: ``<species>:<label>``).
SITE_LABELS = ("ion", "O", "N", "O_carbonyl", "O_ether", "F", "S", "C")
#: Range of a registered contact cutoff the audit accepts [nm].
CUTOFF_RANGE_NM = (0.05, 2.0)


def _cutoff(x: Any) -> float | None:
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and \
            CUTOFF_RANGE_NM[0] <= float(x) <= CUTOFF_RANGE_NM[1]:
        return float(x)
    return None


def registered_contact_cutoffs(run: Any, case: str, anions: list[str]) -> dict[str, float]:
    """Channel name → registered contact cutoff [nm] for the case's ``anions`` (empty without a registration)."""
    out: dict[str, float] = {}
    for reg in run.in_force(ASSOCIATION_GROUP.name, "contact", case=case)[:1]:
        d = reg.get("definition") if isinstance(reg.get("definition"), dict) else {}
        for k, v in d.items():
            if "cutoff" not in str(k).lower():
                continue
            c = _cutoff(v)
            if c is not None:
                out.update({f"{an}:{lab}": c for an in anions for lab in SITE_LABELS})
            elif isinstance(v, dict):
                for name, x in list(v.items())[:64]:
                    c = _cutoff(x)
                    if c is None:
                        continue
                    if ":" in str(name):
                        out[str(name)] = c
                    elif str(name) in anions:
                        out.update({f"{name}:{lab}": c for lab in SITE_LABELS})
    return out


def settings_overrides(run: Any, case: str, charges_e: dict[str, float] | None) -> dict[str, Any] | None:
    """``AnalysisSettings`` fields the run registered for ``case`` (None when it registered none the audit can
    express)."""
    anions = [sp for sp, q in (charges_e or {}).items() if isinstance(q, (int, float)) and q < -0.05]
    cut = registered_contact_cutoffs(run, case, anions)
    if not cut:
        return None
    from mdbench.analysis.settings import AnalysisSettings  # noqa: PLC0415

    merged = dict(AnalysisSettings().contact_cutoffs_nm)
    merged.update(cut)
    return {"contact_cutoffs_nm": merged}


_WITHIN = re.compile(r"within\s+([0-9]*\.?[0-9]+)\s*nm")


def annotate(canonical_results: Any) -> Any:
    """The reanalysis' association entries with ``details.cutoff_nm`` from the definition they state."""
    obs = canonical_results.get("observables") if isinstance(canonical_results, dict) else None
    if not isinstance(obs, dict):
        return canonical_results
    for k, v in obs.items():
        if not (isinstance(v, dict) and v.get("category") == ASSOCIATION.category):
            continue
        m = _WITHIN.search(str(v.get("definition", "")))
        if m is None:
            continue
        det = v.setdefault("details", {}) if isinstance(v.get("details", {}), dict) else None
        if det is not None and "cutoff_nm" not in det:
            det["cutoff_nm"] = float(m.group(1))
    return canonical_results
