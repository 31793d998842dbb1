"""Definition-level checks: t+ conventions, surrogates of collective transport, charge weighting,
registration order and frame.

Split from :mod:`mdbench.audit.analysis_items` (which re-exports every name).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from mdbench.analysis.observables import (
    CONDUCTIVITY,
    SELF_DIFFUSION_GROUP,
    SIGMA_NE,
)
from mdbench.audit.codes import _check, check
from mdbench.audit.model import Check, Evidence
from mdbench.audit.rulebook import r5_agrees, r5_interval, tplus_conventions
from mdbench.audit.runread import (
    Entry,
    RunData,
    as_entry,
    tokens,
)
from mdbench.audit.transport import (
    declared_frame,
)


def onsager_from(raw: dict[str, Any]) -> tuple[float, float, float] | None:
    """Unweighted (L++, L--, L+-) from an entry's ``onsager`` block (signed-charge weighting undone)."""
    src = raw.get("onsager", raw.get("L", raw.get("onsager_coefficients")))
    if not isinstance(src, dict):
        return None

    def get(*names: str) -> float | None:
        for n in names:
            v = src.get(n)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
            if isinstance(v, dict) and isinstance(v.get("value"), (int, float)):
                return float(v["value"])
        return None

    pp, mm, pm = get("L_pp", "L++", "pp", "Lpp"), get("L_mm", "L--", "mm", "Lmm"), get("L_pm", "L+-", "pm", "Lpm")
    if pp is None or mm is None or pm is None:
        return None
    weighting = str(src.get("weighting", raw.get("weighting", "unweighted"))).lower()
    if "charge" in weighting or "signed" in weighting or "weighted" == weighting:
        pm = -pm  # sigma_+- = z+ z- L^{+-} has the opposite sign for a 1:1 salt
    return pp, mm, pm


def _close(a: float, b: float, rel: float = 0.02) -> bool:
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def _canonical_tplus_check(reported: float, canonical_results: Any) -> list[str] | None:
    """Formulas (mdbench.analysis.onsager) reproducing a reported t+ from the canonical Onsager matrix."""
    try:
        from mdbench.analysis.onsager import identify_transference_convention  # noqa: PLC0415

        obs = canonical_results["observables"]
        cond = next(v for k, v in obs.items() if isinstance(v, dict) and v.get("category") == CONDUCTIVITY.category
                    and isinstance(v.get("details"), dict) and "L" in v["details"])
        L = cond["details"]["L"]["whole"]
        species = canonical_results["system"]["species"]
        charges = canonical_results["system"]["charges_e"]
        return identify_transference_convention(reported, L, species, charges)
    except Exception:  # noqa: BLE001 - missing pieces mean no canonical diagnosis, not a crash
        return None


def _results_first_seen(run: RunData, case: str) -> tuple[int | None, str | None]:
    """(event id, UTC time) at which the case's results first existed in the record: the earliest
    ``artifact_recorded`` event naming them, or their inventory entry's producer/recorded event."""
    rel = f"analysis/{case}/results.json"
    ids: list[int] = []
    times: list[str] = []
    for _line, ev in run.events:
        payload = ev.get("payload") if isinstance(ev.get("payload"), dict) else {}
        if payload.get("path") == rel or rel in {str(v) for v in payload.values() if isinstance(v, str)}:
            if isinstance(ev.get("id"), int):
                ids.append(ev["id"])
            if isinstance(ev.get("time_utc"), str):
                times.append(ev["time_utc"])
    inv = run.artifacts.get(rel) if isinstance(run.artifacts, dict) else None
    if isinstance(inv, dict):
        ids += [inv[k] for k in ("producer_event", "recorded_event") if isinstance(inv.get(k), int)]
    return (min(ids) if ids else None), (min(times) if times else None)


def registration_order_checks(run: RunData, case: str, regs: list[dict], path: str) -> list[Check]:
    """A definition in force registered after the results that use it existed (by event order or by time),
    without a ``revises`` entry and its triggering evidence: "definition revised after inspecting results"."""
    first_id, first_time = _results_first_seen(run, case)
    out: list[Check] = []
    if first_id is None and first_time is None:
        return out
    for reg in regs:
        rid, rtime = reg.get("event_id"), reg.get("time_utc")
        after = (isinstance(rid, int) and first_id is not None and rid > first_id) or (
            isinstance(rtime, str) and first_time is not None and rtime > first_time)
        if not after:
            continue
        justified = bool(reg.get("revises")) and bool(reg.get("evidence"))
        if not justified:
            out.append(check("registered_after_results",
                             f"definition revised after inspecting results: registration {reg.get('id')} "
                             f"({reg.get('kind')}, event {rid}, {rtime}) comes after the results first existed "
                             f"(event {first_id}, {first_time}) and names no revised registration with its "
                             "triggering evidence",
                             (Evidence("run_record/registrations.jsonl", key=str(reg.get("id"))),
                              Evidence(path))))
    return out


def _definition_checks(g: Any, chosen: list[Entry], canonical: dict[str, Entry] | None,
                       canonical_results: Any | None, path: str,
                       others: dict[str, dict[str, Entry]] | None = None, reg_text: str = "") -> list[Check]:
    """Definition failures: a t+ that only a mixed-up convention reproduces; a conductivity without
    ionic cross-correlations."""
    out: list[Check] = []
    if g.definition_check == "transference_convention":
        for e in chosen:
            L = onsager_from(e.raw)
            if L is None and canonical:
                ce = next(iter(canonical.values()), None)
                L = onsager_from(ce.raw) if ce is not None else None
            names = _canonical_tplus_check(e.value, canonical_results) if (
                canonical_results is not None and e.finite_value) else None
            if names and all(n.startswith("mixed") for n in names):
                out.append(_check("tplus_mixed_convention", f"t+ = {e.value:.4g} is reproduced from the canonical "
                                  f"Onsager matrix only by a mixed-up formula ({', '.join(names)}), not by either "
                                  "convention", e, path=path))
                continue
            if L is not None and e.finite_value:
                conv = tplus_conventions(*L)
                if _close(e.value, conv["mixed"]) and not _close(e.value, conv["correct"]):
                    out.append(_check("tplus_mixed_convention",
                                      f"t+ = {e.value:.4g} equals the mixed-convention value {conv['mixed']:.4g} "
                                      "(signed-charge Onsager coefficients in the unweighted formula); correct "
                                      f"convention gives {conv['correct']:.4g}", e, path=path))
    if g.definition_check == "cross_correlations":
        for e in chosen:
            if e.raw.get("includes_cross_terms") is False or tokens(e.key) & {"ne", "nernst"}:
                out.append(_check("conductivity_without_cross_terms",
                                  "conductivity omits ionic cross-correlations (Nernst–Einstein only)", e, path=path))
    out += surrogate_checks(g, chosen, others or {}, canonical, reg_text, path, _canonical_ne(canonical_results))
    return out


#: Words of a definition that describe a self-diffusion (self terms only) surrogate of a collective
#: transport quantity (seed Fig. S2a: "NE denotes the Nernst–Einstein surrogate; self-D denotes self-diffusion").
SURROGATE_WORDS = ("nernst", "self-diffusion", "self diffusion", "self terms", "self-terms", "self part",
                   "d+/(d+", "d_+/(d_+", "d_li/(", "without cross", "no cross", "neglects ion correlations")


def _definition_text(e: Entry) -> str:
    parts = [e.raw.get(k) for k in ("definition", "label", "method", "estimator", "formula")]
    diag = e.raw.get("details") if isinstance(e.raw.get("details"), dict) else {}
    parts += [diag.get(k) for k in ("definition", "formula", "method")]
    return " ".join(str(p) for p in parts if isinstance(p, str)).lower()


def _canonical_ne(canonical_results: Any) -> Entry | None:
    """The canonical Nernst–Einstein σ_NE entry (kept out of the conductivity group as a related number)."""
    obs = canonical_results.get("observables") if isinstance(canonical_results, dict) else None
    for k, v in (obs or {}).items():
        if SIGMA_NE.rsplit("/", 1)[-1].lower() in str(k).lower() and isinstance(v, dict):
            ent = as_entry(str(k), v)
            if ent is not None and ent.finite_value:
                return ent
    return None


def _self_diffusion_values(others: dict[str, dict[str, Entry]]) -> list[tuple[str, float]]:
    found = (others.get(SELF_DIFFUSION_GROUP.name) or {}).items()
    return [(k, e.value) for k, e in found if e.finite_value and e.value > 0]


def surrogate_checks(g: Any, chosen: list[Entry], others: dict[str, dict[str, Entry]],
                     canonical: dict[str, Entry] | None, reg_text: str, path: str,
                     canonical_ne: Entry | None = None) -> list[Check]:
    """A collective transport quantity recognised by its content as a self-diffusion surrogate: its recorded
    formula or registration says so (Nernst–Einstein, self terms only), its Onsager block has no cross term,
    a reported t+ equals D+/(D+ + D−) of the run's own self-diffusion coefficients while the run's own
    Onsager coefficients give another value, or a reported σ equals the canonical σ_NE and not σ."""
    if g.definition_check not in ("cross_correlations", "transference_convention"):
        return []
    out: list[Check] = []
    for e in chosen:
        text = _definition_text(e) + " " + reg_text
        why: list[str] = []
        words = [w for w in SURROGATE_WORDS if w in text]
        if words and not any(w in text for w in ("cross-correlation", "cross correlation", "cross term",
                                                 "cross-term", "l^{+-}", "l^ij", "l^{ij}", "collective")):
            why.append(f"its definition says {words[0]!r}")
        L = onsager_from(e.raw)
        if L is not None and L[2] == 0.0:
            why.append("its Onsager block has L+- = 0 exactly (self terms only)")
        if e.finite_value and g.definition_check == "transference_convention":
            D = _self_diffusion_values(others)
            correct = tplus_conventions(*L)["correct"] if L is not None else None
            for (ka, da) in D:
                for (kb, db) in D:
                    if ka != kb and _close(e.value, da / (da + db), 0.005) and (
                            correct is None and words or correct is not None and not _close(e.value, correct, 0.02)):
                        why.append(f"t+ = {e.value:.4g} equals D({ka})/(D({ka}) + D({kb})) = {da / (da + db):.4g} "
                                   "of the run's own self-diffusion coefficients")
                        break
                else:
                    continue
                break
        if e.finite_value and g.definition_check == "cross_correlations" and canonical and canonical_ne:
            ne = [canonical_ne]
            full = [c for c in canonical.values() if c.finite_value]
            if ne and full and _close(e.value, ne[0].value, 0.02) and not r5_agrees(e.value, full[0].value,
                                                                                     full[0].blocks):
                why.append(f"σ = {e.value:.4g} S/m equals the canonical Nernst–Einstein σ_NE = {ne[0].value:.4g} S/m, "
                           f"not the collective σ = {full[0].value:.4g} S/m")
        if why:
            out.append(_check("surrogate_definition", f"{e.key} is a self-diffusion surrogate delivered as the "
                              "required "
                              f"{g.title.lower()}: " + "; ".join(why), e, path=path))
    return out


def _species_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


def recorded_charges(e: Entry) -> dict[str, float]:
    """Charge per molecule [e] by species that a result says its definition used (``charges_e``,
    ``charges``, in the entry, its ``details``, ``onsager`` or ``diagnostics`` block)."""
    for src in (e.raw, *(e.raw.get(k) for k in ("details", "onsager", "diagnostics", "inputs"))):
        if not isinstance(src, dict):
            continue
        for k in ("charges_e", "charges", "charge_by_species_e", "z"):
            d = src.get(k)
            if isinstance(d, dict):
                out = {str(sp): float(q) for sp, q in d.items()
                       if isinstance(q, (int, float)) and not isinstance(q, bool) and math.isfinite(q)}
                if out:
                    return out
    return {}


#: Words of a σ definition that drop the charges or their signs (an unsigned sum of Onsager coefficients).
UNSIGNED_WORDS = ("unsigned", "without charge", "no charge weighting", "charge-unweighted", "charge unweighted",
                  "absolute charges")


#: Words of a definition that put unit (formal) charges in place of the model's charges.
UNIT_CHARGE_WORDS = ("unit charge", "formal charge", "z = ±1", "z=±1", "integer charge", "unscaled charge")


def sigma_weightings(canonical_results: Any) -> tuple[float, float, dict[str, float]] | None:
    """(σ, its R5 half-width, {weighting: σ'}) of the canonical reanalysis: σ' = Σ_ij σ_ij w_i w_j / (q_i q_j)
    of its species-resolved σ_ij [S/m] with other charges w — unit charges where the model's are scaled,
    and each ion's sign flipped. None without a canonical σ_ij."""
    try:
        obs = canonical_results["observables"]
        key, ent = next((k, v) for k, v in obs.items() if isinstance(v, dict) and v.get("category") ==
                        CONDUCTIVITY.category and isinstance(v.get("details"), dict) and "sigma_ij_S_m" in v["details"])
        S = np.asarray(ent["details"]["sigma_ij_S_m"], dtype=np.float64)
        species = list(canonical_results["system"]["species"])
        q = np.asarray([float(canonical_results["system"]["charges_e"][sp]) for sp in species])
        sigma = float(ent["value"])
    except Exception:  # noqa: BLE001 - no canonical matrix: nothing to compare
        return None
    if S.shape != (q.size, q.size) or not np.all(np.isfinite(S)) or not math.isfinite(sigma):
        return None
    ions = np.abs(q) > 1e-3
    alts: dict[str, float] = {}

    def weighted(w: np.ndarray) -> float:
        r = np.where(ions, w / np.where(ions, q, 1.0), 0.0)
        return float(np.einsum("ij,i,j->", S, r, r))

    if np.any(np.abs(np.abs(q[ions]) - np.round(np.abs(q[ions]))) > 0.01):
        alts["unit (formal) charges"] = weighted(np.sign(q))
    for k in np.flatnonzero(ions):
        w = q.copy()
        w[k] = -w[k]
        alts[f"the sign of {species[k]} flipped"] = weighted(w)
    ce = as_entry(f"observables.{key}", ent)
    return sigma, r5_interval(sigma, ce.blocks if ce is not None else None), alts


def charge_weighting_checks(g: Any, chosen: list[Entry], system_charges: dict[str, float] | None,
                            canonical_results: Any, reg_text: str, path: str) -> list[Check]:
    """Classify a delivered σ / t+ by the charges its definition uses against the system's charges (the
    production topology; the canonical reanalysis' where the audit read none).

    σ = e² Σ z_i z_j L^ij needs the model's charges with their signs: recorded charges that are not
    ``c · z`` with c = ±1 (unit charges for a scaled-charge model, a wrong sign, another charge set), or a
    definition that says it drops the signs or uses formal charges in a scaled-charge model, make it another
    quantity. t+ is invariant under a common scaling of the charges: only recorded charges whose ratios
    differ from the system's (a sign or an asymmetric scaling) — or an unweighted formula for a salt whose
    ions' charge magnitudes differ — change it. Such a surrogate is A2 F and leaves the required quantity
    missing (A1)."""
    if g.definition_check not in ("cross_correlations", "transference_convention"):
        return []
    sysq = dict(system_charges or {})
    if not sysq and isinstance(canonical_results, dict):
        sysq = dict(((canonical_results.get("system") or {}).get("charges_e") or {}))
    ions = {_species_key(k): float(v) for k, v in sysq.items() if isinstance(v, (int, float)) and abs(v) > 1e-3}
    if not ions:
        return []
    out: list[Check] = []
    sigma = g.definition_check == "cross_correlations"
    for e in chosen:
        text = _definition_text(e) + " " + reg_text
        why: list[str] = []
        rec = {_species_key(k): v for k, v in recorded_charges(e).items()}
        shared = [k for k in ions if k in rec]
        if shared:
            ratios = [rec[k] / ions[k] for k in shared]
            if any(abs(r) < 1e-9 for r in ratios) or any(abs(r - ratios[0]) > 0.01 * abs(ratios[0]) for r in ratios):
                why.append("its recorded charges (" + ", ".join(f"{k}: {rec[k]:+g}" for k in shared)
                           + ") do not follow the topology's (" + ", ".join(f"{k}: {ions[k]:+g}" for k in shared)
                           + ") species by species (a sign or a scaling differs)")
            elif sigma and abs(abs(ratios[0]) - 1.0) > 0.01:
                why.append(f"its recorded charges are {abs(ratios[0]):.3g} × the topology's (σ scales with their "
                           "square)")
        scaled_model = any(abs(abs(q) - round(abs(q))) > 0.01 for q in ions.values())
        if sigma and any(w in text for w in UNSIGNED_WORDS):
            why.append("its definition drops the charges' signs")
        if sigma and scaled_model and any(w in text for w in UNIT_CHARGE_WORDS):
            why.append("its definition uses formal (unit) charges, the topology's are scaled ("
                       + ", ".join(f"{k}: {q:+g}" for k, q in ions.items()) + ")")
        weights = sigma_weightings(canonical_results) if sigma and e.finite_value else None
        if weights is not None:
            sig_c, h, alts = weights
            for label, alt in alts.items():
                # the value is that weighting's σ, and that weighting is distinguishable from the topology's
                if _close(e.value, alt, 0.02) and abs(alt - sig_c) > 2.0 * h and abs(e.value - sig_c) > 2.0 * h:
                    why.append(f"σ = {e.value:.4g} S/m is the canonical Onsager matrix weighted with {label} "
                               f"({alt:.4g} S/m), not with the topology's charges ({sig_c:.4g} ± {h:.2g} S/m)")
                    break
        if not sigma and len({round(abs(q), 3) for q in ions.values()}) > 1 and "unweighted" in (
                text + str(e.raw.get("convention", "")).lower()):
            why.append("an unweighted formula for ions of unequal charge magnitude")
        if why:
            out.append(_check("charge_weighting_differs", f"{e.key} is not the required {g.title.lower()}: "
                              + "; ".join(why), e, path=path))
    return out


def frame_registration_checks(g: Any, chosen: list[Entry], regs: list[dict], path: str) -> list[Check]:
    """A transport result whose declared reference frame differs from the frame its registered definition
    names (barycentric / solvent / lab; centre-of-mass motion removed counts as barycentric)."""
    if not g.regime:
        return []
    frames = {declared_frame(f"{k} {v}") for r in regs if isinstance(r.get("definition"), dict)
              for k, v in r["definition"].items() if "frame" in str(k).lower() and isinstance(v, str)} - {None}
    if len(frames) != 1:
        return []
    reg = frames.pop()
    out = []
    for e in chosen:
        decl = declared_frame(str(e.raw.get("frame", "")) + " " + _definition_text(e))
        if decl is not None and decl != reg:
            out.append(_check("frame_differs_from_registration", f"{e.key}: declared in the {decl} frame, its "
                              f"registered definition names the {reg} frame", e, path=path))
    return out
