"""Definitions recomputed as the run registered them (R5: values compared for matched definitions).

Where a run registers a definition the canonical reanalysis can express, the audit compares the run's numbers
with the reanalysis at *that* definition (one reanalysis per case; the settings object carries it):

* a **contact cutoff** (the association registration in force: ``contact_cutoff_nm`` / ``cutoff_nm`` for every
  anion channel, or a mapping by channel ``"FSI:O"`` or species ``"FSI"``) and the **contact channels** it
  names → ``contact_cutoffs_nm`` / ``contact_channels``;
* a **coordination cutoff** (the coordination registration in force: one ``cutoff_nm`` for the CN channels)
  → ``fixed_cn_cutoff_nm``, so the reanalysis reports every channel's CN at the registered cutoff, and the
  channel the registration selects (``"Na-OW"``, ``"SOL:O"``) is matched by the result's name;
* the **guard** (the guard/block registration) → the reanalysis' ``guard_ps`` (:func:`registered_guard_ps`);
* an **MSD / Onsager fit window** (``fit_window_ps``, ``fit_window_fraction_of_block``, or a text such as
  "over lags [0.1, 0.5] x the block length") → the canonical estimator re-fitted on that window from the
  reanalysis' own reduced trajectory (:class:`~mdbench.audit.transport.WindowRefit`, no second analysis)
  wherever a result states no window of its own (:func:`fit_window`).

Cutoffs outside what the reanalysis stores (``r_store_nm``) and several different CN cutoffs cannot be
expressed: those results stay ``definition_differs_from_canonical … (not compared)``, and a *required*
observable left there is itself a finding (``required_not_compared``, A2 ≤ ½, :func:`not_compared_extras`).
The reanalysis' association entries carry their cutoff (``details.cutoff_nm``, read from the definition
the analysis states) so that the comparison's definition match (equal cutoffs) applies to them.
"""

from __future__ import annotations

import math
import re
from typing import Any

from mdbench.analysis.observables import (ASSOCIATION, ASSOCIATION_GROUP, CONDUCTIVITY, COORDINATION_GROUP,
                                          SELF_DIFFUSION, TRANSFERENCE)
from mdbench.audit.runread import RunData

#: Site labels of a contact channel (``mdbench.analysis`` atom selections: ``<species>:<label>``).
SITE_LABELS = ("ion", "O", "N", "O_carbonyl", "O_ether", "F", "S", "C")
#: Range of a registered contact or coordination cutoff the reanalysis can express [nm] (up to the
#: neighbour range the reduced trajectory stores, ``r_store_nm`` of the default settings).
CUTOFF_RANGE_NM = (0.05, 0.6)
#: Keys of a coordination registration that hold its cutoff [nm].
CN_CUTOFF_KEYS = ("cutoff_nm", "cn_cutoff_nm", "coordination_cutoff_nm", "r_cut_nm", "r_c_nm")


def _cutoff(x: Any) -> float | None:
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and \
            CUTOFF_RANGE_NM[0] <= float(x) <= CUTOFF_RANGE_NM[1]:
        return float(x)
    return None


def registered_contact_cutoffs(run: RunData, case: str, anions: list[str]) -> dict[str, float]:
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


def registered_contact_channels(cutoffs: dict[str, float]) -> dict[str, list[str]]:
    """Anion → site labels of the channels a registration names one by one (``"FSI:O"``, ``"FSI:N"``);
    an anion registered as a whole (every label) keeps the analysis' own channel rule."""
    by: dict[str, list[str]] = {}
    for ch in cutoffs:
        an, _, lab = ch.partition(":")
        by.setdefault(an, []).append(lab)
    return {an: labs for an, labs in by.items() if set(labs) != set(SITE_LABELS) and all(labs)}


def registered_cn_cutoff(run: RunData, case: str) -> float | None:
    """The one coordination cutoff [nm] the coordination registration in force names (None: none, one the
    reanalysis cannot store, or several different ones)."""
    found: set[float] = set()
    for reg in run.in_force(COORDINATION_GROUP.name, case=case)[:1]:
        d = reg.get("definition") if isinstance(reg.get("definition"), dict) else {}
        for k, v in list(d.items())[:64]:
            if str(k).lower() not in CN_CUTOFF_KEYS and not (isinstance(v, dict) and "cutoff" in str(k).lower()):
                continue
            vals = list(v.values())[:64] if isinstance(v, dict) else [v]
            cuts = [_cutoff(x) for x in vals]
            if any(c is None for c in cuts):
                return None
            found.update(c for c in cuts if c is not None)
    return found.pop() if len(found) == 1 else None


def settings_overrides(run: RunData, case: str, charges_e: dict[str, float] | None) -> dict[str, Any] | None:
    """``AnalysisSettings`` fields the run registered for ``case`` (None when it registered none the audit can
    express): contact cutoffs and channels, and the coordination cutoff."""
    anions = [sp for sp, q in (charges_e or {}).items() if isinstance(q, (int, float)) and q < -0.05]
    cut = registered_contact_cutoffs(run, case, anions)
    cn = registered_cn_cutoff(run, case)
    if not cut and cn is None:
        return None
    from mdbench.analysis.settings import AnalysisSettings  # noqa: PLC0415

    out: dict[str, Any] = {}
    if cut:
        default = AnalysisSettings()
        merged = dict(default.contact_cutoffs_nm)
        merged.update(cut)
        out["contact_cutoffs_nm"] = merged
        channels = registered_contact_channels(cut)
        if channels:
            out["contact_channels"] = {**default.contact_channels, **channels}
    if cn is not None:
        out["fixed_cn_cutoff_nm"] = cn
    return out


def registered_guard_ps(run: RunData, case: str) -> float | None:
    """The guard interval [ps] of the registration in force for ``case`` (its latest revision), if any."""
    for reg in run.in_force("guard", case=case):
        d = reg.get("definition") or {}
        for k in ("guard_ps", "guard_interval_ps", "exclude_ps"):
            v = d.get(k) if isinstance(d, dict) else None
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0:
                return float(v)
    return None


#: Words that put a registered fit window on the self-diffusion MSD or on the collective (Onsager) fits.
_WINDOW_KINDS = {"diffusion": ("diffusion", "msd", "self"),
                 "collective": ("onsager", "conductiv", "collective", "transfer", "sigma", "charge")}
_BRACKET = re.compile(r"\[\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*,\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*\]"
                      r"\s*(ps|x|×|\*|times)?\s*(?:the\s+)?(block)?", re.I)


def _parse_window(key: str, value: Any) -> tuple[str, tuple[float, float]] | None:
    """(``"ps"`` or ``"fraction"``, (lo, hi)) of one registered field, or None."""
    low = key.lower()
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value):
        lo, hi = float(value[0]), float(value[1])
        unit = "fraction" if "fraction" in low else ("ps" if low.endswith("_ps") else None)
    elif isinstance(value, str):
        m = _BRACKET.search(value[:2000])
        if m is None or "lag" not in value[:2000].lower() and "window" not in low:
            return None
        lo, hi = float(m.group(1)), float(m.group(2))
        unit = "ps" if (m.group(3) or "").lower() == "ps" else ("fraction" if m.group(3) and m.group(4) else None)
    else:
        return None
    if unit is None or not 0.0 <= lo < hi or (unit == "fraction" and hi > 1.0):
        return None
    return unit, (lo, hi)


def registered_fit_windows(run: RunData, case: str) -> dict[str, tuple[str, tuple[float, float]]]:
    """``"diffusion"`` / ``"collective"`` → (unit, window) of the fit windows the registrations in force name
    (a field that names neither kind applies to both)."""
    out: dict[str, tuple[str, tuple[float, float]]] = {}
    for reg in run.in_force("fit", "window", "diffusion", "transport", "onsager", case=case)[:16]:
        d = reg.get("definition") if isinstance(reg.get("definition"), dict) else {}
        kind = str(reg.get("kind", "")).lower()
        stack = [(str(k), v) for k, v in list(d.items())[:64]]
        seen = 0
        while stack and seen < 256:
            key, v = stack.pop(0)
            seen += 1
            if isinstance(v, dict):
                stack += [(f"{key}.{k}", x) for k, x in list(v.items())[:64]]
                continue
            if not ("window" in key.lower() or "fit" in key.lower() or isinstance(v, str)):
                continue
            w = _parse_window(key.rsplit(".", 1)[-1] if not isinstance(v, str) else key, v)
            if w is None:
                continue
            text = (key + " " + (v if isinstance(v, str) else "")).lower()
            kinds = [k for k, words in _WINDOW_KINDS.items() if any(x in text for x in words)] or \
                [k for k, words in _WINDOW_KINDS.items() if any(x in kind for x in words)] or list(_WINDOW_KINDS)
            for k in kinds:
                out.setdefault(k, w)
    return out


#: Where :func:`annotate` puts a registered fit window [ps] on the reanalysis' entries (``details``).
REGISTERED_WINDOW_KEY = "registered_fit_window_ps"
#: Reanalysis categories → the kind of registered fit window that applies to them.
_WINDOW_CATEGORY = {SELF_DIFFUSION.category: "diffusion", CONDUCTIVITY.category: "collective",
                    TRANSFERENCE.category: "collective"}


def fit_window(canonical_entry: Any) -> tuple[float, float] | None:
    """The fit window [ps] the run registered for the quantity of a reanalysis entry (:func:`annotate` put it
    there), if any."""
    raw = getattr(canonical_entry, "raw", None)
    det = raw.get("details") if isinstance(raw, dict) else None
    w = det.get(REGISTERED_WINDOW_KEY) if isinstance(det, dict) else None
    return (float(w[0]), float(w[1])) if isinstance(w, (list, tuple)) and len(w) == 2 else None


def _block_length_ps(canonical_results: dict[str, Any]) -> float | None:
    win = canonical_results.get("windows")
    br = win.get("block_ranges_ps") if isinstance(win, dict) else None
    try:
        return float(br[0][1]) - float(br[0][0]) if br else None
    except (TypeError, ValueError, IndexError):
        return None


_WITHIN = re.compile(r"within\s+([0-9]*\.?[0-9]+)\s*nm")


def annotate(canonical_results: Any, run: RunData = None, case: str | None = None) -> Any:
    """The reanalysis' association entries with ``details.cutoff_nm`` from the definition they state, and (with
    ``run`` and ``case``) the fit window [ps] the run registered on each transport entry it applies to
    (:data:`REGISTERED_WINDOW_KEY`; fractions of a block converted with the reanalysis' block length)."""
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
    if run is not None and case is not None:
        block = _block_length_ps(canonical_results)
        wins = {}
        for kind, (unit, (lo, hi)) in registered_fit_windows(run, case).items():
            if unit == "fraction" and block:
                lo, hi = lo * block, hi * block
            elif unit == "fraction":
                continue
            wins[kind] = [lo, hi]
        for v in obs.values():
            kind = _WINDOW_CATEGORY.get(str(v.get("category"))) if isinstance(v, dict) else None
            if kind in wins and isinstance(v.get("details", {}), dict):
                v.setdefault("details", {})[REGISTERED_WINDOW_KEY] = wins[kind]
    return canonical_results


def not_compared_extras(groups: list[Any], required: dict[str, list[str]]) -> list[Any]:
    """One ``required_not_compared`` check (A2 ≤ ½) per required observable group whose results the audit could
    not compare with the reanalysis at their definition (``definition_differs_from_canonical``): a registered
    definition the reanalysis cannot express leaves the required number unverified."""
    from mdbench.audit.codes import (
        GroupCheck,  # noqa: PLC0415
        check,  # noqa: PLC0415
    )

    out = []
    for gr in groups:
        a = gr.assessment
        if not required.get(a.observable):
            continue
        diff = [c for c in a.checks if c.code == "definition_differs_from_canonical"]
        if not diff:
            continue
        keys = ", ".join(e.key for c in diff for e in c.evidence if e.key)[:400]
        msg = (f"required {a.observable} not compared with the reanalysis: its definition ({keys}) is not one the "
               "canonical reanalysis can express, so the required value is unverified")
        out.append(GroupCheck(a.observable, check("required_not_compared", msg, diff[0].evidence)))
    return out
