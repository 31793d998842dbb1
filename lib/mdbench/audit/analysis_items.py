"""Analysis items A1–A7 per case and observable, observable states, and definition-level diagnosis.

The audit's state of an observable is derived from the evidence only — values, blocks, the estimator's
sampling checks and recorded failures, the canonical reanalysis — never from the state the run declared
(observables.json, the terminal record or a results entry's ``state`` label); :mod:`mdbench.audit.outcome`
compares the two afterwards (O1/O2). States (seed §A.2.2, the order of :mod:`mdbench.analysis.states`):

1. production invalid (Sim4 not satisfied or the run's production stage invalid) → ``invalid_upstream``;
   production never reached → ``not_reached``;
2. a required target is missing → ``M``;
3. a definition failure (transference convention mix-up, conductivity without cross-correlations, a
   self-diffusion surrogate recognised by its content, charges unlike the topology's) or an
   implementation/numerical failure (non-finite whole or block value; a failure the estimator recorded; a
   reported value or block mean outside the canonical four-block interval of a matched definition, on the
   reported fit window where the canonical estimate is outside its regime; a D that does not follow from the
   MSD the run recorded behind it, or a recorded MSD unlike the trajectory's, :func:`recorded_curve_checks`)
   → ``F``;
4. whole value present but the four-block analysis missing → ``M`` (incomplete required delivery);
5. a value withheld with a stated reason (a ratio whose denominator is consistent with zero) →
   ``not_estimable``;
6. a sampling diagnostic fails (the entry's own ``diagnostics.sampling_checks`` where reported — what each
   says, applied to the result it names; otherwise the audit's backstop: block 95 % half-width beyond the
   registered precision threshold of the group (``AuditGroup.precision_thresholds``); the diffusive exponent
   outside the registered range; no viscosity plateau; a reported diagnostic contradicted by the evidence,
   the reported fit window's own included) → ``SI``; the relative half-width is not used for
   quantities fluctuating about zero (pressure);
7. otherwise ``C``.

Each rule is a structured :class:`~mdbench.audit.model.Check` (:data:`CODES`: its code and severity) made
before any decision; the state follows from the severities and every item rating from the codes, so a
reworded message can never change a verdict. The groups, their targets per case and the group-specific
rules (definition checks, regime, treatment, R5) come from the registry (:mod:`mdbench.analysis.observables`).
The item rules and the seed sentence each implements are listed in ``docs/saeo-rules.md``.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mdbench.analysis.adequacy import PRECISION, TREND, PrecisionBound
from mdbench.analysis.states import NOT_ESTIMABLE
from mdbench.analysis.observables import (AUDIT_GROUPS, CONDUCTIVITY, IONICITY, SELF_DIFFUSION_GROUP, SIGMA_NE,
                                          audit_group)
from mdbench.analysis.observables import targets as registry_targets
from mdbench.audit.bundle import Bundle
from mdbench.audit.model import PER_OBSERVABLE_ITEMS, Check, Evidence, Judgment, ObservableAssessment
from mdbench.audit.rulebook import (R5_REL_TOL, audit_state, backstop, r5_agrees, r5_interval,  # noqa: F401
                                     tplus_conventions)
from mdbench.audit.runread import (OBSERVABLE_GROUPS, Entry, RunData, as_entry, group_entries, json_pointer,
                                   match_target, read_recorded_curve, target_entries_first, tokens)
from mdbench.audit.transport import (BETA_MARGIN, Refit, WindowRefit, compare_curves, curve_diffusion, declared_frame,
                                     reported_window, same_window)

@functools.lru_cache(maxsize=1)
def analysis_settings() -> Any:
    """The registered analysis settings (``params/analysis/default.yaml``): the one place every threshold the
    audit applies as a backstop comes from."""
    from mdbench.analysis.settings import AnalysisSettings  # noqa: PLC0415

    return AnalysisSettings()


def beta_window(name: str) -> tuple[float, float]:
    """Accepted log–log slope of an MSD diagnostic called ``name``: the analysis settings' registered range
    (``onsager_beta_range`` for the charge MSD, ``diffusion_beta_range`` otherwise)."""
    st = analysis_settings()
    lo, hi = st.onsager_beta_range if "charge" in name else st.diffusion_beta_range
    return float(lo), float(hi)


#: Groups compared with the canonical reanalysis by the R5 rule (stable structural quantities).
R5_GROUPS = tuple(g.name for g in AUDIT_GROUPS if g.canonical_r5)
#: Groups whose estimator needs a regime/plateau diagnostic (A5).
REGIME_GROUPS = tuple(g.name for g in AUDIT_GROUPS if g.regime)


def _withheld(e: Entry) -> str | None:
    """The estimator's stated reason for withholding a value (``not_estimable``: a ratio whose denominator
    is consistent with zero), when no value is given; None otherwise."""
    if e.finite_value:
        return None
    diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
    why = diag.get(NOT_ESTIMABLE) or e.raw.get(NOT_ESTIMABLE)
    if not why and e.raw.get("state") == NOT_ESTIMABLE:
        why = e.raw.get("reason")
    return str(why) if isinstance(why, str) and why.strip() else None


def _too_short(e: Entry) -> str | None:
    """The estimator's own statement that its window was too short to yield a value (SI, not F)."""
    diag = e.raw.get("diagnostics") if isinstance(e.raw, dict) else None
    short = diag.get("too_short") if isinstance(diag, dict) else None
    return str(short) if short else None

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


@dataclass
class GroupResult:
    """Assessment of one observable group of one case (state plus per-item judgments)."""

    assessment: ObservableAssessment
    judgments: list[Judgment] = field(default_factory=list)
    failure_kind: str | None = None  # "definition" | "implementation" | None


def required_targets(case: str, bundle: Bundle) -> dict[str, list[str]]:
    """Observable group → required targets for a case (bundle first, the registry's otherwise)."""
    req = registry_targets(case)
    cdef = bundle.cases.get(case)
    if cdef is not None and cdef.required_targets:
        req.update({k: list(v) for k, v in cdef.required_targets.items() if k in req})
    return req


def _diag_keys(ent: Entry) -> set[str]:
    """Keys of an entry and of its ``diagnostics``/``window``/``details`` blocks, plus definition words."""
    keys = {str(k).lower() for k in ent.raw}
    for sub in ("diagnostics", "window", "details"):
        if isinstance(ent.raw.get(sub), dict):
            keys |= {str(k).lower() for k in ent.raw[sub]}
    d = str(ent.raw.get("definition", "")).lower()
    keys |= {w for w in ("frame", "barycentric", "unwrapped", "pbc", "minimum image", "periodic", "com")
             if w in d}
    return keys


def _cutoff(ent: Entry) -> float | None:
    for src in (ent.raw, ent.raw.get("details") if isinstance(ent.raw.get("details"), dict) else {}):
        for k in ("cutoff_nm", "contact_cutoff_nm", "r_cut_nm"):
            if isinstance(src.get(k), (int, float)):
                return float(src[k])
    return None


def _definitions_match(group: str, run_entry: Entry, canon: Entry) -> bool:
    """Means of an energy term always match; self-diffusion, σ and η match the canonical estimate (D is the
    same in the lab and barycentric frames of a run whose centre-of-mass motion is removed, σ of an
    electroneutral system does not depend on the reference frame, Green–Kubo and Einstein–Helfand estimate
    the same η); t+ matches in the same reference frame (barycentric unless a solvent frame is named);
    structural quantities need equal declared cutoffs (±0.005 nm)."""
    g = audit_group(group)
    if g.treatment == "energy" or g.definition_check == "cross_correlations" or (g.regime and
                                                                                 g.definition_check is None):
        return True
    if g.definition_check == "transference_convention":
        solvent = "solvent" in (_definition_text(run_entry) + " " + str(run_entry.raw.get("frame", ""))
                                + run_entry.key).lower()
        return solvent == ("solvent" in canon.key.lower())
    a, b = _cutoff(run_entry), _cutoff(canon)
    return a is not None and b is not None and abs(a - b) <= 0.005


def _canonical_match(group: str, e: Entry, canonical: dict[str, Entry]) -> Entry | None:
    g = audit_group(group)
    tail = re.split(r"[./]", e.key)[-1]
    if g.target_by_key:
        return match_target(group, tail, canonical)
    want = tokens(e.key.split(".")[-1]) - {"cn", "d", "value", "observables"} - {group} - tokens(group)
    ordered = target_entries_first(group, canonical)
    if not want and g.regime:  # a single-target transport group: its first canonical entry (frame checked later)
        if g.definition_check == "transference_convention":
            for p, c in ordered.items():
                if _definitions_match(group, e, c):
                    return c
        return next(iter(ordered.values()), None)
    for relax in (False, True):
        w = want - g.centre_tokens if relax else want
        for p, c in ordered.items():
            if w and w <= tokens(p) and (not g.cutoff_defined or _cutoff(e) is None or _cutoff(c) is None
                                         or abs(_cutoff(e) - _cutoff(c)) <= 0.005):
                return c
    return None


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


def _declared(ent: Entry, *names: str) -> float | None:
    for src in (ent.raw, ent.raw.get("diagnostics") if isinstance(ent.raw.get("diagnostics"), dict) else {}):
        for n in names:
            v = src.get(n)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                return float(v)
    return None


def state_consistency(entries: list[Entry], prod_state: dict[str, float] | None) -> list[str]:
    """Declared volume [nm^3] / temperature [K] of transport results that disagree with the production
    files (volume beyond 2 %, temperature beyond 5 K)."""
    bad: list[str] = []
    if not prod_state:
        return bad
    for e in entries:
        v, t = _declared(e, "volume_nm3", "mean_volume_nm3"), _declared(e, "temperature_K", "temperature_k")
        vref, tref = prod_state.get("volume_nm3_mean"), prod_state.get("temperature_K_mean")
        if v is not None and vref and abs(v - vref) > 0.02 * vref:
            bad.append(f"{e.key}: volume {v:.4g} nm^3, production files give {vref:.4g} nm^3")
        if t is not None and tref and abs(t - tref) > 5.0:
            bad.append(f"{e.key}: temperature {t:.5g} K, production files give {tref:.5g} K")
    return bad


#: Check codes (:class:`mdbench.audit.model.Check`) and their severities; the item rules read these.
CODES: dict[str, str] = {
    "missing_target": "missing",
    "tplus_mixed_convention": "definition",
    "conductivity_without_cross_terms": "definition",
    "nonfinite_value": "implementation",
    "nonfinite_blocks": "implementation",
    "outside_canonical_r5": "implementation",
    "estimator_recorded_failure": "implementation",
    "value_contradicts_reanalysis": "implementation",
    "trajectory_treatment_differs": "implementation",
    "surrogate_definition": "definition",
    "charge_weighting_differs": "definition",
    "no_value": "incomplete",
    "four_block_analysis_missing": "incomplete",
    "value_withheld": "withheld",
    "window_too_short": "sampling",
    "run_sampling_check_failed": "sampling",
    "block_half_width": "sampling",
    "block_trend": "sampling",
    "msd_exponent_outside": "sampling",
    "plateau_not_reached": "sampling",
    "run_regime_check_failed": "sampling",
    "diagnostic_contradicts_evidence": "sampling",
    "agrees_with_canonical": "note",
    "definition_differs_from_canonical": "note",
    "registered_after_results": "note",
    "canonical_not_eligible": "note",
    "frame_differs_from_registration": "note",
    "agrees_with_recorded_curve": "note",
    "recorded_curve_not_compared": "note",
}
#: Codes that leave a required target undelivered (A1): missing, or a surrogate delivered in its place.
MISSING_CODES = frozenset({"missing_target", "surrogate_definition", "charge_weighting_differs"})
#: Codes of a regime / plateau diagnostic that failed (A5 0.5).
REGIME_CODES = frozenset({"msd_exponent_outside", "plateau_not_reached", "run_regime_check_failed",
                          "diagnostic_contradicts_evidence"})
#: Sampling checks of our estimators that are regime diagnostics (names in ``diagnostics.sampling_checks``).
REGIME_CHECK_NAMES = frozenset({"diffusive_window", "plateau", "collective_regime"})
#: Words of a sampling-check name that make it a regime / plateau diagnostic (other tools' spellings).
REGIME_CHECK_WORDS = ("diffusive", "plateau", "regime", "beta", "asymptotic")


def is_regime_check(name: str) -> bool:
    """True when a sampling check named ``name`` is a regime / plateau diagnostic (A5)."""
    low = name.lower()
    return low in REGIME_CHECK_NAMES or any(w in low for w in REGIME_CHECK_WORDS)


def _check_applies(name: str, key: str, group: str) -> bool:
    """A shared check named after one result (``sigma_block_precision``, ``t_plus_block_precision``) applies
    to that result only; every other check applies to every entry that reports it."""
    low = name.lower()
    g = audit_group(group)
    if low.startswith(("t_plus_", "tplus_")):
        return g.definition_check == "transference_convention"
    if low.startswith("sigma_"):
        return g.definition_check == "cross_correlations" and IONICITY.rsplit("/", 1)[-1].lower() not in key.lower()
    return True


def _own_checks(e: Entry, group: str) -> dict[str, Any]:
    """The estimator's sampling checks that apply to entry ``e`` (name → passed)."""
    diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
    own = diag.get("sampling_checks") if isinstance(diag.get("sampling_checks"), dict) else {}
    return {str(k): v for k, v in own.items() if _check_applies(str(k), e.key, group)}


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
            out.append(Check("registered_after_results", CODES["registered_after_results"],
                             f"definition revised after inspecting results: registration {reg.get('id')} "
                             f"({reg.get('kind')}, event {rid}, {rtime}) comes after the results first existed "
                             f"(event {first_id}, {first_time}) and names no revised registration with its "
                             "triggering evidence",
                             (Evidence("run_record/registrations.jsonl", key=str(reg.get("id"))),
                              Evidence(path))))
    return out


def _check(code: str, message: str, *entries: Entry, path: str = "") -> Check:
    return Check(code, CODES[code], message, tuple(Evidence(path, key=e.key) for e in entries))


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


def _numeric_checks(chosen: list[Entry], extra: list[Entry], path: str) -> list[Check]:
    """Non-finite values, incomplete deliveries, failures the run recorded; a too-short window is SI."""
    out: list[Check] = []
    for e in chosen:
        withheld, short = _withheld(e), _too_short(e)
        if withheld is not None:
            out.append(_check("value_withheld", f"{e.key}: value withheld ({withheld[:160]})", e, path=path))
        if short and not (e.finite_value and not e.nonfinite_blocks()):
            # the estimator says the window is shorter than it needs: a sampling shortfall, not a fault (the
            # analysis' rule 6 comes before its rule 5: too short and withheld is SI)
            out.append(_check("window_too_short", f"{e.key}: no finite value, window too short ({short[:120]})", e,
                              path=path))
        if withheld is not None or (short and not (e.finite_value and not e.nonfinite_blocks())):
            continue
        if e.value is not None and not math.isfinite(e.value):
            out.append(_check("nonfinite_value", f"{e.key}: non-finite whole-interval value", e, path=path))
        bad = e.nonfinite_blocks()
        if bad:
            out.append(_check("nonfinite_blocks", f"{e.key}: non-finite block value(s) in block(s) "
                              f"{[b + 1 for b in bad]}", e, path=path))
        if e.value is None and not e.blocks:
            out.append(_check("no_value", f"{e.key}: no value", e, path=path))
        if not e.blocks or len(e.blocks) < 4:
            out.append(_check("four_block_analysis_missing", f"{e.key}: four-block analysis missing", e, path=path))
    for e in extra:  # other delivered entries of the group: non-finite values
        nonfinite = e.value is not None and not math.isfinite(e.value) or e.nonfinite_blocks()
        if not _too_short(e) and not _withheld(e) and nonfinite:
            out.append(_check("nonfinite_value", f"{e.key}: non-finite value(s)", e, path=path))
    for e in chosen + extra:
        diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
        fails = [str(f) for f in diag.get("failures") or [] if f] if isinstance(diag.get("failures"), list) else []
        if fails:  # what the estimator computed and recorded as failing, not the state label the run chose
            out.append(_check("estimator_recorded_failure", f"{e.key}: the estimator recorded a failure "
                              f"({'; '.join(fails)[:160]})", e, path=path))
    return out


def _treatment_problem(e: Entry, prod_state: dict[str, float] | None) -> str | None:
    """What the entry's own diagnostics say about its trajectory treatment that explains a disagreement
    with the reanalysis (declared volume or temperature unlike the production files; wrapped coordinates)."""
    bad = state_consistency([e], prod_state)
    if bad:
        return bad[0]
    text = (_definition_text(e) + " " + str(e.raw.get("frame", "")) + " " + str(e.raw.get("coordinates", ""))).lower()
    if re.search(r"(?<!un)wrapped|no unwrap|not unwrapped|without unwrapping", text):
        return f"{e.key}: computed from wrapped coordinates"
    return None


def _canonical_dt(canonical_results: Any) -> float:
    win = canonical_results.get("windows") if isinstance(canonical_results, dict) else None
    dt = win.get("dt_ps") if isinstance(win, dict) else None
    return float(dt) if isinstance(dt, (int, float)) and dt > 0 else 0.0


def _analysed_span_ps(canonical_results: Any) -> float | None:
    """Length [ps] of the production the canonical reanalysis read (guard included)."""
    win = canonical_results.get("windows") if isinstance(canonical_results, dict) else None
    whole = win.get("whole_range_ps") if isinstance(win, dict) else None
    guard = canonical_results.get("guard_ps") if isinstance(canonical_results, dict) else None
    if isinstance(whole, list) and len(whole) == 2 and all(isinstance(x, (int, float)) for x in whole):
        return float(whole[1]) - float(whole[0]) + (float(guard) if isinstance(guard, (int, float)) else 0.0)
    return None


def _refit_on(g: Any, ce: Entry, window: tuple[float, float], refit: WindowRefit | None) -> Refit | None:
    """The canonical estimator of ``ce`` re-applied on the run's ``window`` (None where it cannot be)."""
    if refit is None:
        return None
    if g.name == SELF_DIFFUSION_GROUP.name:
        species = ce.raw.get("species") or ce.key.rsplit("/", 1)[-1]
        return refit.diffusion(str(species), window)
    if g.definition_check in ("cross_correlations", "transference_convention"):
        return refit.collective(ce.key.split(".", 1)[-1] if ce.key.startswith("observables.") else ce.key, window)
    return None


def _window_checks(g: Any, e: Entry, ce: Entry, window: tuple[float, float] | None, rf: Refit | None,
                   canonical_results: Any, path: str) -> list[Check]:
    """The reported fit window and MSD exponent against the trajectory: a window longer than the analysed
    production; a regime check reported as passed, or a reported β, that the canonical MSD over the same
    window contradicts (a window that starts in the ballistic or caged part)."""
    out: list[Check] = []
    if window is None:
        return out
    span = _analysed_span_ps(canonical_results)
    dt = _canonical_dt(canonical_results)
    if span is not None and window[1] > span + dt + 1e-9:
        out.append(_check("diagnostic_contradicts_evidence", f"{e.key}: reported fit window "
                          f"[{window[0]:g}, {window[1]:g}] ps extends beyond the {span:.4g} ps of production "
                          "the trajectory holds", e, path=path))
    if rf is None or g.name != SELF_DIFFUSION_GROUP.name:
        return out
    return out + beta_contradiction(g, e, rf.beta_fit, window, "the trajectory's", "canonical MSD re-fitted", path)


def beta_contradiction(g: Any, e: Entry, beta_fit: float, window: tuple[float, float], whose: str, how: str,
                       path: str) -> list[Check]:
    """A reported regime check passed, or a reported β, that an MSD exponent ``beta_fit`` measured over the
    reported window contradicts: β outside the registered range by more than :data:`BETA_MARGIN` while a
    diffusive-regime check is reported passed, or a reported β more than the margin away from it (where
    either lies outside the range widened by the margin)."""
    if not math.isfinite(beta_fit):
        return []
    lo, hi = beta_window("beta")
    outside = beta_fit < lo - BETA_MARGIN or beta_fit > hi + BETA_MARGIN
    claimed = [k for k, v in _own_checks(e, g.name).items() if v is True and is_regime_check(k)
               and any(w in k.lower() for w in ("diffusive", "beta", "regime"))]
    beta_r = _declared(e, "beta", "msd_exponent")
    where = f"over the reported fit window [{window[0]:g}, {window[1]:g}] ps"
    if outside and claimed:
        return [_check("diagnostic_contradicts_evidence", f"{e.key}: reports {', '.join(claimed)} as passed, "
                       f"{whose} MSD exponent {where} is β = {beta_fit:.2f} (outside {(lo, hi)}; {how})", e,
                       path=path)]
    if beta_r is not None and abs(beta_r - beta_fit) > BETA_MARGIN and (
            outside or not (lo - BETA_MARGIN <= beta_r <= hi + BETA_MARGIN)):
        return [_check("diagnostic_contradicts_evidence", f"{e.key}: reported MSD exponent β = {beta_r:.2f}, "
                       f"{whose} {where} is β = {beta_fit:.2f} ({how})", e, path=path)]
    return []


def _canonical_checks(g: Any, chosen: list[Entry], canonical: dict[str, Entry] | None,
                      path: str, prod_state: dict[str, float] | None = None, canonical_results: Any = None,
                      refit: WindowRefit | None = None, curve_causes: dict[str, str] | None = None
                      ) -> tuple[list[Check], float | None]:
    """Claims against the canonical reanalysis (seed Table A4, R5, applied to every matched definition): the
    reported whole-interval value and the mean of its blocks against the canonical four-block 95 % interval
    (with the 5 % tolerance when narrow); a disagreement is an implementation fault (A3) unless the entry's
    own diagnostics show a trajectory-treatment cause (A4).

    A transport estimate whose canonical regime checks fail depends on its fit window: it is compared with
    the canonical estimator on the window the run reported (the canonical one when they agree, else
    re-fitted, :class:`~mdbench.audit.transport.WindowRefit`) with twice the interval — the half-width of a
    sampling-limited estimate is itself uncertain, and no finding may rest on a borderline state — and not
    at all when the run states no window. Reported regime diagnostics (MSD exponent, fit window, plateau) are
    compared with the trajectory's."""
    out: list[Check] = []
    canon_value = None
    if not canonical or not (g.canonical_r5 or g.regime):
        return out, canon_value
    dt = _canonical_dt(canonical_results)
    for e in chosen:
        ce = _canonical_match(g.name, e, canonical)
        if ce is None or not e.finite_value:
            continue
        if not _definitions_match(g.name, e, ce):
            out.append(_check("definition_differs_from_canonical",
                              f"{e.key}: definition differs from the canonical one (not compared)", e, path=path))
            continue
        window = reported_window(e.raw) if g.regime else None
        cwin = reported_window(ce.raw)
        rf = None
        if window is not None and not (cwin is not None and same_window(window, cwin, dt)):
            rf = _refit_on(g, ce, window, refit)
        out += _window_checks(g, e, ce, window, rf, canonical_results, path)
        if not ce.finite_value and rf is None:
            continue
        canon_value = ce.value if canon_value is None and ce.finite_value else canon_value
        own_c = _own_checks(ce, g.name)
        # a sampling-limited canonical estimate: its interval is itself uncertain (a four-block half-width
        # scatters by ~50 %) and its block mean carries the block noise twice -- the whole value is compared
        # with twice the interval, so that no finding rests on a borderline state
        limited = any(v is False for v in own_c.values())
        ref_value, ref_blocks, ref_label, widen = ce.value, ce.blocks, ce.key, (2.0 if limited else 1.0)
        unmet = [k for k, v in own_c.items() if v is False and is_regime_check(k)]
        compare = ce.finite_value
        if g.regime and (unmet or not own_c or not ce.finite_value):
            why = ', '.join(unmet) or ('no finite value' if not ce.finite_value else 'no regime diagnostic')
            compare = True
            if window is not None and cwin is not None and same_window(window, cwin, dt) and ce.finite_value:
                ref_label, widen = f"{ce.key}, same fit window, its {why} not met", 2.0
            elif rf is not None:
                ref_value, ref_blocks, widen = rf.value, rf.blocks, 2.0
                ref_label = (f"{ce.key} re-fitted on the reported window [{window[0]:g}, {window[1]:g}] ps, "
                             f"its {why} not met")
            else:
                # seed Table A4 (R4): outside its regime a canonical value depends on the fit window; with no
                # window stated (or none that fits inside a block) there is nothing like-for-like to compare
                out.append(Check("canonical_not_eligible", "note", f"{e.key}: canonical estimate not eligible for "
                                 f"comparison ({why} not met) and " + ("no fit window reported" if window is None
                                                                       else "the reported window cannot be re-fitted")
                                 + "; value not compared", (Evidence(path, key=e.key),)))
                compare = False
        if compare:
            h = widen * r5_interval(ref_value, ref_blocks)
            ev = Evidence(path, key=e.key, note=f"reported {e.value:.6g}; canonical {ref_value:.6g} ± {h:.3g} "
                                                f"({ref_label})")
            blocks = [b for b in (e.blocks or []) if b is not None and math.isfinite(b)]
            block_mean = float(np.mean(blocks)) if len(blocks) >= 2 else None
            outside = [f"whole-interval value {e.value:.5g}"] if abs(e.value - ref_value) > h else []
            if block_mean is not None and widen == 1.0 and abs(block_mean - ref_value) > h:
                outside.append(f"block mean {block_mean:.5g}")
            if not outside:
                out.append(Check("agrees_with_canonical", "note", f"{e.key} inside the canonical interval "
                                 f"{ref_value:.5g} ± {h:.3g} ({ref_label})", (ev,)))
            else:
                cause = _treatment_problem(e, prod_state) or (curve_causes or {}).get(e.key)
                code = "trajectory_treatment_differs" if cause else (
                    "outside_canonical_r5" if g.canonical_r5 else "value_contradicts_reanalysis")
                out.append(Check(code, CODES[code], f"{e.key}: {' and '.join(outside)} outside the canonical "
                                 f"interval {ref_value:.5g} ± {h:.3g} of the reanalysis ({ref_label})"
                                 + (f"; cause: {cause}" if cause else ""), (ev,)))
        # reported regime diagnostics against the canonical reanalysis' own window
        beta = _declared(e, "beta", "msd_exponent")
        cw = ce.raw.get("window") if isinstance(ce.raw.get("window"), dict) else {}
        lo, hi = cw.get("beta_min"), cw.get("beta_max")
        if rf is None and beta is not None and isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
            bw = beta_window("beta")
            if bw[0] <= beta <= bw[1] and not cw.get("found", True) and abs(beta - (lo + hi) / 2) > 0.15:
                out.append(_check("diagnostic_contradicts_evidence", f"{e.key}: reported MSD exponent β = {beta:.2f} "
                                  f"is diffusive, the trajectory's is {lo:.2f}–{hi:.2f} (canonical reanalysis)", e,
                                  path=path))
        plateau = e.raw.get("plateau")
        cchecks = (ce.raw.get("diagnostics") or {}).get("sampling_checks") if isinstance(ce.raw.get("diagnostics"),
                                                                                          dict) else None
        if isinstance(plateau, dict) and plateau.get("reached") is True and isinstance(cchecks, dict) \
                and cchecks.get("plateau") is False:
            out.append(_check("diagnostic_contradicts_evidence", f"{e.key}: reports a Green–Kubo plateau the "
                              "canonical reanalysis does not find", e, path=path))
        out += frame_drift_checks(g, e, ce, window or cwin, path)
    return out, canon_value


def recorded_curve_checks(g: Any, chosen: list[Entry], run: RunData, case: str, canonical: dict[str, Entry] | None,
                          refit: WindowRefit | None, path: str, prod_state: dict[str, Any] | None = None
                          ) -> tuple[list[Check], dict[str, str]]:
    """A self-diffusion result against the MSD it cites as its source (a file of the run or an inline curve,
    :func:`~mdbench.audit.runread.read_recorded_curve`).

    1. D and β re-computed from the recorded curve over the reported fit window by the diffusion module's own
       definition (:func:`~mdbench.audit.transport.curve_diffusion`): a reported D that differs from it by more
       than the seed's 5 % relative tolerance does not follow from its own MSD (A3, both numbers); a reported
       β or passed regime check the curve's exponent contradicts is A5 (:func:`beta_contradiction`).
    2. Where the canonical reanalysis ran, the recorded curve against the trajectory's MSD of the same species
       over their common lags (:func:`~mdbench.audit.transport.compare_curves`): a curve that disagrees
       beyond twice the canonical block interval is a trajectory-treatment fault (A4) where the entry's
       diagnostics or the curve's time dependence say so — an exponent shifted by more than
       :data:`BETA_MARGIN` (another frame, wrapped or wrongly unwrapped coordinates) — else an implementation
       fault (A3: a constant factor, units or normalisation).

    Returns the checks and, per entry whose D follows from a curve with a treatment fault, that cause (the
    comparison of D with the reanalysis then classifies the same way)."""
    if g.name != SELF_DIFFUSION_GROUP.name:
        return [], {}
    out: list[Check] = []
    causes: dict[str, str] = {}
    for e in chosen:
        if not e.finite_value:
            continue
        ce = _canonical_match(g.name, e, canonical) if canonical else None
        species = str(ce.raw.get("species") or ce.key.rsplit("/", 1)[-1]) if ce is not None else None
        curve = read_recorded_curve(run, case, e, species)
        if curve is None:
            continue
        window = reported_window(e.raw)
        follows: bool | None = None
        src = f"{curve.source}, {curve.units}"
        if window is None:
            out.append(_check("recorded_curve_not_compared", f"{e.key}: recorded MSD ({src}) not re-fitted: the "
                              "result reports no fit window", e, path=path))
        else:
            D, beta, n = curve_diffusion(curve.lag_ps, curve.msd_nm2, window)
            step = float(np.median(np.diff(curve.lag_ps)))
            covers = curve.lag_ps[0] <= window[0] + step + 1e-9 and curve.lag_ps[-1] >= window[1] - step - 1e-9
            if n < 2 or not math.isfinite(D) or not covers:
                out.append(_check("recorded_curve_not_compared", f"{e.key}: recorded MSD ({src}, lags "
                                  f"{curve.lag_ps[0]:g}–{curve.lag_ps[-1]:g} ps) does not cover the reported fit "
                                  f"window [{window[0]:g}, {window[1]:g}] ps; D not re-computed from it", e, path=path))
            else:
                # located at the reported value (apart from the file-level comparison with the reanalysis)
                ev = Evidence(json_pointer(path, e.key), key=e.key,
                              note=f"reported {e.value:.6g} m^2/s; its recorded MSD gives {D:.6g} m^2/s over "
                                   f"[{window[0]:g}, {window[1]:g}] ps ({n} lags; {src})")
                follows = abs(e.value - D) <= R5_REL_TOL * abs(D)
                if follows:
                    out.append(Check("agrees_with_recorded_curve", "note", f"{e.key}: D follows from its recorded "
                                     f"MSD ({D:.5g} m^2/s re-fitted)", (ev,)))
                else:
                    out.append(Check("value_contradicts_reanalysis", CODES["value_contradicts_reanalysis"],
                                     f"{e.key}: reported D = {e.value:.5g} m^2/s does not follow from its own recorded "
                                     f"MSD ({curve.source}): slope/6 over the reported fit window [{window[0]:g}, "
                                     f"{window[1]:g}] ps gives {D:.5g} m^2/s ({e.value / D:.3g} ×)", (ev,)))
                out += beta_contradiction(g, e, beta, window, "its recorded MSD's", f"recorded in {curve.source}",
                                          path)
        canon = refit.msd(species) if refit is not None and species else None
        if canon is None:
            continue
        cmp = compare_curves(curve.lag_ps, curve.msd_nm2, canon, window, R5_REL_TOL)
        if cmp is None:
            out.append(_check("recorded_curve_not_compared", f"{e.key}: recorded MSD ({src}) shares fewer than three "
                              "lags with the trajectory's; not compared", e, path=path))
            continue
        what = (f"{e.key}: its recorded MSD ({curve.source}) against the trajectory's (canonical, barycentric) "
                f"over {cmp.n_lags} common lags {cmp.lag_range_ps[0]:.3g}–{cmp.lag_range_ps[1]:.3g} ps")
        if not cmp.disagrees:
            out.append(_check("agrees_with_recorded_curve", f"{what}: agree (median deviation "
                              f"{cmp.median_excess:.2f} × the tolerance)", e, path=path))
            continue
        shape = None
        if cmp.shape_differs:
            shape = (f"it grows with an exponent {cmp.exponent_shift:+.2f} off the trajectory's, "
                     + ("faster (centre-of-mass drift not removed: another reference frame)" if cmp.exponent_shift > 0
                        else "slower (wrapped or wrongly unwrapped coordinates)"))
        cause = _treatment_problem(e, prod_state) or shape
        code = "trajectory_treatment_differs" if cause else "value_contradicts_reanalysis"
        ev = Evidence(curve.location or path, key=e.key, note=f"{cmp.worst}; recorded/trajectory median "
                                                                f"{cmp.ratio_median:.3g}")
        out.append(Check(code, CODES[code], f"{what}: disagree beyond the uncertainty (median deviation "
                         f"{cmp.median_excess:.1f} × the tolerance, recorded/trajectory ≈ {cmp.ratio_median:.3g}); "
                         + (f"cause: {cause}" if cause else "a constant factor (units or normalisation of the MSD)"),
                         (ev,)))
        if cause and follows is not False:
            causes[e.key] = cause
    return out, causes


def frame_drift_checks(g: Any, e: Entry, ce: Entry, window: tuple[float, float] | None, path: str) -> list[Check]:
    r"""A self-diffusion coefficient declared in the lab frame while the system's centre of mass drifts
    enough to bias the MSD beyond the R5 tolerance: :math:`|\Delta R_\mathrm{COM}|^2 / (6 D t_\mathrm{hi})`
    (the drift adds to every molecule's displacement; σ of an electroneutral system does not see it)."""
    if g.name != SELF_DIFFUSION_GROUP.name or window is None:
        return []
    if declared_frame(str(e.raw.get("frame", "")) + " " + _definition_text(e)) != "lab":
        return []
    diag = ce.raw.get("diagnostics") if isinstance(ce.raw.get("diagnostics"), dict) else {}
    drift = diag.get("barycentre_drift_nm")
    if not isinstance(drift, (int, float)) or not math.isfinite(drift) or not ce.value or ce.value <= 0:
        return []
    msd_hi_nm2 = 6.0 * ce.value * 1e6 * window[1]          # D [m^2/s] → nm^2/ps
    bias = drift ** 2 / msd_hi_nm2 if msd_hi_nm2 > 0 else 0.0
    if bias <= R5_REL_TOL:
        return []
    return [_check("trajectory_treatment_differs", f"{e.key}: declared in the lab frame while the system's centre "
                   f"of mass drifts {drift:.3g} nm over the analysed interval: a bias of {100 * bias:.0f} % of the "
                   f"MSD at {window[1]:g} ps (centre-of-mass motion not removed)", e, path=path)]


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


def precision_limits(run: RunData, case: str, group: str) -> tuple[float | None, float | None]:
    """(relative, absolute) block half-width limits of ``group``: the thresholds its registry entry names
    (:attr:`~mdbench.analysis.observables.AuditGroup.precision_thresholds`), as the registration in force
    gives them, else the analysis settings' values; (None, None) for a group without one."""
    rel_key, abs_key = audit_group(group).precision_thresholds
    thresholds: dict[str, Any] = {}
    for reg in run.in_force("adequacy", "thresholds", case=case):
        d = reg.get("definition") if isinstance(reg.get("definition"), dict) else {}
        if isinstance(d.get("thresholds"), dict):
            thresholds = d["thresholds"]
            break

    def value(key: str | None) -> float | None:
        if key is None:
            return None
        v = thresholds.get(key, getattr(analysis_settings(), key))
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    return value(rel_key), value(abs_key)


def _sampling_checks(g: Any, chosen: list[Entry], path: str,
                     limits: tuple[float | None, float | None] = (None, None)) -> list[Check]:
    """The audit's own reading of the sampling evidence: the estimator's sampling diagnostics where it
    reports them (what each says, not the state label the run chose), else the audit's backstop (relative
    block half-width); the diffusive exponent and the Green–Kubo plateau, and a reported diagnostic that
    contradicts its own numbers. The run's declared states are never read here."""
    out: list[Check] = []
    for e in chosen:
        if _withheld(e) is not None:
            continue
        fluctuates_about_zero = re.split(r"[./]", e.key)[-1].lower().startswith(g.fluctuates_about_zero or ("\0",))
        diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
        own = diag.get("sampling_checks") if isinstance(diag.get("sampling_checks"), dict) else None
        own = {str(k): v for k, v in (own or {}).items() if _check_applies(str(k), e.key, g.name)} \
            if own is not None else None
        failed = [k for k, v in (own or {}).items() if v is False]
        regime = [k for k in failed if is_regime_check(k)]
        other = [k for k in failed if k not in regime]
        if regime:
            out.append(_check("run_regime_check_failed", f"{e.key}: regime diagnostic(s) failed: {', '.join(regime)}",
                              e, path=path))
        if other:
            out.append(_check("run_sampling_check_failed", f"{e.key}: sampling check(s) failed: {', '.join(other)}",
                              e, path=path))
        if own is None and limits != (None, None) and e.blocks and len(e.blocks) >= 4 and not e.nonfinite_blocks() \
                and e.finite_value and e.value != 0 and not fluctuates_about_zero:
            # the analysis' adequacy rule (precision and block trend) on the reported blocks
            unit = e.raw.get("unit", e.raw.get("units", "")) if isinstance(e.raw, dict) else ""
            verdict = backstop(e.value, e.blocks, str(unit or ""), PrecisionBound(*limits),
                               float(analysis_settings().block_trend_alpha))
            ok, why = verdict[PRECISION]
            if not ok:
                out.append(_check("block_half_width", f"{e.key}: {why} (beyond the registered limit)", e, path=path))
            ok, why = verdict[TREND]
            if not ok:
                out.append(_check("block_trend", f"{e.key}: the blocks drift: {why}", e, path=path))
        beta_name = next((n for n in ("beta", "msd_exponent", "charge_msd_beta") if _declared(e, n) is not None),
                         None)
        beta = _declared(e, beta_name) if beta_name else None
        window = beta_window(beta_name or "")
        if beta is not None and not (window[0] <= beta <= window[1]):
            out.append(_check("msd_exponent_outside", f"{e.key}: MSD exponent β = {beta:.2f} outside {window}",
                              e, path=path))
            passed = [k for k, v in (own or {}).items() if v is True and is_regime_check(k)
                      and any(w in k.lower() for w in ("diffusive", "beta", "regime"))]
            if passed:
                out.append(_check("diagnostic_contradicts_evidence", f"{e.key}: reports {', '.join(passed)} as "
                                  f"passed while its own exponent β = {beta:.2f} lies outside {window}", e,
                                  path=path))
        plateau = e.raw.get("plateau")
        if isinstance(plateau, dict) and plateau.get("reached") is False:
            out.append(_check("plateau_not_reached", f"{e.key}: Green–Kubo plateau not reached", e, path=path))
            if any(v is True and "plateau" in k.lower() for k, v in (own or {}).items()):
                out.append(_check("diagnostic_contradicts_evidence", f"{e.key}: reports the plateau check as passed "
                                  "while its plateau block says it was not reached", e, path=path))
    return out


def _state(checks: list[Check], missing: list[str]) -> tuple[str, str]:
    """The group's state from its checks by the analysis' own classifier
    (:func:`~mdbench.audit.rulebook.audit_state`)."""
    return audit_state(checks, missing)


def _ratings(g: Any, checks: list[Check], regs: list[dict], usable: list[Entry],
             prod_state: dict[str, float] | None) -> dict[str, tuple[float | None, str]]:
    """A2–A7 of one group from the codes of its checks (rules in the module docstring)."""
    def said(*severities: str) -> list[str]:
        return [c.message for c in checks if c.severity in severities]

    codes = {c.code for c in checks}
    definition, implementation, sampling = said("definition"), said("implementation"), said("sampling")
    compared = sum(c.code in ("agrees_with_canonical", "outside_canonical_r5", "value_contradicts_reanalysis",
                              "trajectory_treatment_differs") for c in checks)
    treatment = [c.message for c in checks if c.code == "trajectory_treatment_differs"]
    implementation = [c.message for c in checks if c.severity == "implementation"
                      and c.code != "trajectory_treatment_differs"]
    late = [c.message for c in checks if c.code == "registered_after_results"]
    ratings: dict[str, tuple[float | None, str]] = {}
    if definition:
        ratings["A2"] = (0.0, "; ".join(definition))
    elif g.definition_words and not regs:
        ratings["A2"] = (0.5, "definition not registered in registrations.jsonl")
    elif late:
        ratings["A2"] = (0.5, "; ".join(late))
    else:
        ratings["A2"] = (1.0, "definition answers the physical question" + (f" (registered {regs[0].get('id')})"
                                                                          if regs else ""))
    if implementation:
        ratings["A3"] = (0.0, "; ".join(implementation))
    elif definition:
        ratings["A3"] = (0.0, "estimator implements a wrong definition")
    elif compared:
        ratings["A3"] = (1.0, f"{compared} value(s) agree with the canonical reanalysis (R5)")
    else:
        ratings["A3"] = (1.0, "no numerical fault found (not reanalysed)")
    keys = set().union(*(_diag_keys(e) for e in usable))
    inconsistent = (state_consistency(usable, prod_state) if g.regime else []) + treatment
    frame = [c.message for c in checks if c.code == "frame_differs_from_registration"]
    if inconsistent:
        ratings["A4"] = (0.0, "; ".join(inconsistent + frame))
    elif frame:
        ratings["A4"] = (0.5, "; ".join(frame))
    elif g.treatment == "pressure_tensor":
        declared = keys & {"ensemble", "barostat", "volume_nm3", "temperature_k", "pressure_interval_ps"}
        ratings["A4"] = (1.0, f"pressure-tensor treatment declared ({', '.join(sorted(declared))})") if declared \
            else (0.5, "ensemble/volume of the pressure-tensor window not declared with the result")
    elif g.treatment == "trajectory":
        declared = keys & {"frame", "reference_frame", "unwrapped", "unwrap", "com", "pbc", "volume_nm3",
                           "temperature_k", "molecular_com", "whole_molecules", "barycentric", "minimum image",
                           "periodic"}
        if declared:
            ratings["A4"] = (1.0, f"trajectory treatment declared ({', '.join(sorted(declared))})")
        elif compared and not implementation:
            ratings["A4"] = (1.0, "values agree with the canonical reanalysis (PBC handled consistently)")
        else:
            ratings["A4"] = (0.5, "trajectory treatment (PBC/unwrapping/frame/volume) not declared with the result")
    else:
        ratings["A4"] = (1.0, "energy-file time series; no trajectory treatment needed")
    if g.regime:
        diag = {k for k in keys if any(w in k for w in ("beta", "msd_exponent", "fit_window", "plateau",
                                                         "running_integral", "regime", "window_ps", "lo_ps"))}
        diag |= {k for e in usable for k in _own_checks(e, g.name) if is_regime_check(k)}
        contradicted = [c.message for c in checks if c.code == "diagnostic_contradicts_evidence"]
        unmet = [c.message for c in checks if c.code in REGIME_CODES and c.code != "diagnostic_contradicts_evidence"]
        if not diag:
            ratings["A5"] = (0.0, "a fitted number alone: no regime/plateau diagnostic reported")
        elif contradicted:
            ratings["A5"] = (0.0, "reported regime diagnostic contradicted by the evidence: " + "; ".join(contradicted))
        elif unmet:
            ratings["A5"] = (0.5, "regime diagnostic reported and it says the regime was not reached: "
                             + "; ".join(unmet))
        else:
            ratings["A5"] = (1.0, f"regime diagnostic reported ({', '.join(sorted(diag))})")
    else:
        ratings["A5"] = (None, "no fitting regime for this observable")
    if any(c.code == "nonfinite_blocks" for c in checks):
        ratings["A6"] = (0.0, "non-finite block values prevent the block-stability assessment")
    elif "four_block_analysis_missing" in codes:
        ratings["A6"] = (0.0, "four-block analysis missing")
    elif sampling:
        ratings["A6"] = (0.5, "blocks examined; sampling insufficient: " + "; ".join(sampling))
    elif "value_withheld" in codes:
        ratings["A6"] = (0.5, "value withheld with a stated reason (not estimable from these blocks)")
    else:
        ratings["A6"] = (1.0, "whole-interval and four block values finite and consistent")
    unc = [e for e in usable if e.has_uncertainty()]
    defined = [e for e in unc if isinstance(e.raw.get("uncertainty"), dict) and e.raw["uncertainty"].get("definition")]
    if len(defined) == len(usable):
        ratings["A7"] = (1.0, "uncertainty reported with its definition")
    elif unc:
        ratings["A7"] = (0.5, "uncertainty reported for some targets or without a definition")
    else:
        ratings["A7"] = (0.0, "no uncertainty reported")
    return ratings


def assess_group(run: RunData, case: str, group: str, targets: list[str], entries: dict[str, Entry],
                 canonical: dict[str, Entry] | None, upstream: str | None,
                 canonical_results: Any | None = None, prod_state: dict[str, Any] | None = None,
                 others: dict[str, dict[str, Entry]] | None = None, refit: WindowRefit | None = None
                 ) -> GroupResult:
    """State and A2–A7 judgments of one observable group of one case (rules in the module docstring).

    The checks (:class:`~mdbench.audit.model.Check`) are made first, each with a code and a severity; the
    state and every rating follow from those codes, never from the wording of a message.
    """
    g = audit_group(group)
    res_rel = f"analysis/{case}/results.json"
    states = run.run_observable_states(case)
    run_state = states.get(group, {}).get("state") if states else None
    for k, v in states.items():
        if run_state is None and group in tokens(k) | {k.lower()}:
            run_state = v.get("state")

    def done(state: str, reason: str, ratings: dict[str, tuple[float | None, str]], ev: list[Evidence],
             checks: list[Check], chosen: list[Entry], kind: str | None = None, reported: float | None = None,
             canon: float | None = None, units: str | None = None) -> GroupResult:
        a = ObservableAssessment(case, group, state, reason, run_state=run_state, reported_value=reported,
                                 canonical_value=canon, units=units, evidence=ev,
                                 values={e.key: float(e.value) for e in chosen if e.finite_value}, checks=checks)
        js = [Judgment(item, r, why, case, group, evidence=list(ev)) for item, (r, why) in ratings.items()]
        return GroupResult(a, js, kind)

    if upstream in ("invalid_upstream", "not_reached"):
        na = {i: (None, "not applicable: " + upstream) for i in PER_OBSERVABLE_ITEMS}
        return done(upstream, f"production data {upstream.replace('_', ' ')}", na, [], [], [])
    chosen: list[Entry] = []
    missing: list[str] = []
    if targets:
        for t in targets:
            e = match_target(group, t, entries)
            (chosen.append(e) if e is not None else missing.append(t))
    else:
        chosen = list(target_entries_first(group, entries).values())[:1] if entries else []
        if not chosen:
            missing.append(group)
    ev = [Evidence(res_rel, key=e.key) for e in chosen]
    gaps = [Check("missing_target", CODES["missing_target"], f"{group}: {t} not delivered", (Evidence(res_rel),))
            for t in missing]
    if not chosen:
        r = {i: (None, "observable not delivered (scored under A1)") for i in PER_OBSERVABLE_ITEMS}
        return done("M", f"missing: {', '.join(missing)}", r, ev, gaps, chosen)
    main = chosen[0]
    units = main.raw.get("unit", main.raw.get("units")) if isinstance(main.raw, dict) else None
    extra = [e for e in entries.values() if e not in chosen]
    regs = run.in_force(*g.definition_words, case=case) if g.definition_words else []
    reg_text = " ".join(f"{k} {v}" for r in regs for k, v in (r.get("definition") or {}).items()
                        if isinstance(r.get("definition"), dict) and any(w in str(k).lower() for w in (
                            g.name, *g.definition_words[:1]) if g.definition_check)).lower()
    checks = gaps + _definition_checks(g, chosen, canonical, canonical_results, res_rel, others, reg_text)
    checks += _numeric_checks(chosen, extra, res_rel)
    curves, causes = recorded_curve_checks(g, chosen, run, case, canonical, refit, res_rel, prod_state)
    checks += curves
    r5, canon_value = _canonical_checks(g, chosen, canonical, res_rel, prod_state, canonical_results, refit, causes)
    checks += r5 + frame_registration_checks(g, chosen, regs, res_rel)
    checks += charge_weighting_checks(g, chosen, (prod_state or {}).get("charges_e"), canonical_results, reg_text,
                                      res_rel)
    # Table A3: block sensitivity of every delivered member of the group (RDF minima beside the CNs)
    checks += _sampling_checks(g, chosen + [e for e in extra if e.finite_value], res_rel,
                               precision_limits(run, case, group))
    state, reason = _state(checks, missing)
    severities = {c.severity for c in checks}
    kind = "definition" if "definition" in severities else ("implementation" if "implementation" in severities
                                                            else None)
    checks += registration_order_checks(run, case, regs, res_rel)
    usable = [e for e in chosen if e.finite_value] or chosen
    ratings = _ratings(g, checks, regs, usable, prod_state)
    return done(state, reason, ratings, ev, checks, chosen, kind, main.value if main.finite_value else None,
                canon_value, units if isinstance(units, str) else None)


def assess_case(run: RunData, bundle: Bundle, case: str, upstream: str | None,
                canonical_results: Any | None, prod_state: dict[str, Any] | None = None,
                refit: WindowRefit | None = None) -> tuple[list[Judgment], list[GroupResult]]:
    """All analysis judgments (A1 per case; A2–A7 per observable) and observable states of one case."""
    groups = group_entries(run.results.get(case))
    canon_groups = group_entries(canonical_results) if canonical_results is not None else None
    req = required_targets(case, bundle)
    out: list[GroupResult] = []
    for g in OBSERVABLE_GROUPS:
        out.append(assess_group(run, case, g, req[g], groups[g], canon_groups[g] if canon_groups else None,
                                upstream, canonical_results, prod_state, groups, refit))
    judgments = [j for gr in out for j in gr.judgments]
    res_rel = f"analysis/{case}/results.json"
    if upstream in ("invalid_upstream", "not_reached"):
        judgments.append(Judgment("A1", None, f"production {upstream}: coverage not applicable", case))
        return judgments, out
    # seed A.1: "Missing required estimators or results ... are rated as not satisfied" -- whether or not the
    # run declared them; a surrogate delivered in place of the required quantity leaves it missing
    missing = [gr.assessment for gr in out if any(c.code in MISSING_CODES for c in gr.assessment.checks)]
    if not missing:
        judgments.append(Judgment("A1", 1.0, "every required observable and species-specific target delivered",
                                  case, evidence=[Evidence(res_rel)]))
    else:
        judgments.append(Judgment("A1", 0.0, "missing: " + "; ".join(f"{m.observable} ({m.reason})" for m in missing),
                                  case, evidence=[Evidence(res_rel)]))
    return judgments, out
