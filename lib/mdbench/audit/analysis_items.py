"""Analysis items A1–A7 per case and observable, observable states, and definition-level diagnosis.

States (seed §A.2.2) are decided in this order, the first match winning:

1. production invalid (Sim4 not satisfied or the run's production stage invalid) → ``invalid_upstream``;
   production never reached → ``not_reached``;
2. a required target is missing → ``M``;
3. a definition failure (transference convention mix-up, conductivity without cross-correlations) or an
   implementation/numerical failure (non-finite whole or block value; disagreement with the canonical
   reanalysis beyond the R5 rule) → ``F``;
4. whole value present but the four-block analysis missing → ``M`` (incomplete required delivery);
5. a sampling diagnostic fails (the entry's own ``diagnostics.sampling_checks`` when it reports them; otherwise
   the audit's backstop: relative block 95 % half-width above :data:`SI_REL_HALF_WIDTH`; diffusive
   exponent outside [0.9, 1.1], no viscosity plateau, or the run itself declared SI) → ``SI``; the relative
   half-width is not used for quantities fluctuating about zero (pressure);
6. otherwise ``C``.

Each rule is a structured :class:`~mdbench.audit.model.Check` (:data:`CODES`: its code and severity) made
before any decision; the state follows from the severities and every item rating from the codes, so a
reworded message can never change a verdict. The groups, their targets per case and the group-specific
rules (definition checks, regime, treatment, R5) come from the registry (:mod:`mdbench.analysis.observables`).

Item rules per (case, observable): A2 0 for a definition failure, 0.5 when the definition was never
registered, else 1. A3 0 for an implementation/numerical failure (or a wrong definition), else 1 (with the
R5 comparison named when reanalysed). A4 0 when a declared volume/temperature disagrees with the production
files (2 % / 5 K), 0.5 when no trajectory treatment is declared (and no canonical agreement shows it), else 1.
A5 (transport only) 0 for a bare fitted number, 0.5 when the regime/plateau diagnostic fails (the audit's
β or plateau check, or the estimator's own regime check: :data:`REGIME_CHECK_NAMES`), else 1.
A6 0 for non-finite or missing block values, 0.5 for SI, else 1. A7 1 with a defined uncertainty, 0.5
without definition or for some targets, 0 for none. A1 per case: 1 all targets delivered; 0.5 when the
missing ones (at most half the groups) are declared explicitly by the run; else 0.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mdbench.analysis.blocks import T_975_DOF3
from mdbench.analysis.states import NOT_ESTIMABLE
from mdbench.analysis.observables import AUDIT_GROUPS, CONDUCTIVITY, audit_group
from mdbench.analysis.observables import targets as registry_targets
from mdbench.audit.bundle import Bundle
from mdbench.audit.model import PER_OBSERVABLE_ITEMS, Check, Evidence, Judgment, ObservableAssessment
from mdbench.audit.runread import (OBSERVABLE_GROUPS, Entry, RunData, group_entries, match_target,
                                   target_entries_first, tokens)

#: R5 relative tolerance added when block intervals are too narrow.
R5_REL_TOL = 0.05
#: Relative block 95 % half-width above which sampling is judged insufficient.
SI_REL_HALF_WIDTH = 0.25
#: Local log–log MSD slope window accepted as diffusive.
BETA_WINDOW = (0.9, 1.1)
#: Groups compared with the canonical reanalysis by the R5 rule (stable structural quantities).
R5_GROUPS = tuple(g.name for g in AUDIT_GROUPS if g.canonical_r5)
#: Groups whose estimator needs a regime/plateau diagnostic (A5).
REGIME_GROUPS = tuple(g.name for g in AUDIT_GROUPS if g.regime)


def _too_short(e: Entry) -> str | None:
    """The estimator's own statement that its window was too short to yield a value (SI, not F)."""
    diag = e.raw.get("diagnostics") if isinstance(e.raw, dict) else None
    short = diag.get("too_short") if isinstance(diag, dict) else None
    return str(short) if short else None

def r5_interval(canonical_value: float, canonical_blocks: list[float | None] | None) -> float:
    """Half-width of the R5 acceptance interval around a canonical value.

    :math:`h = \\max(t_{0.975,3}\\, s_b / \\sqrt{4},\\ 0.05\\,|x_c|)` with :math:`s_b` the sample standard
    deviation of the four canonical block values (the 5 % relative tolerance is used when the block
    interval is narrower).
    """
    hw = 0.0
    if canonical_blocks and len(canonical_blocks) >= 2 and all(
            b is not None and math.isfinite(b) for b in canonical_blocks):
        arr = np.asarray(canonical_blocks, dtype=np.float64)
        hw = T_975_DOF3 * float(arr.std(ddof=1)) / math.sqrt(arr.size)
    return max(hw, R5_REL_TOL * abs(canonical_value))


def r5_agrees(reported: float, canonical_value: float, canonical_blocks: list[float | None] | None) -> bool:
    """True when ``reported`` lies inside the R5 interval of the canonical estimate."""
    return abs(reported - canonical_value) <= r5_interval(canonical_value, canonical_blocks) + 1e-300


def tplus_conventions(L_pp: float, L_mm: float, L_pm: float) -> dict[str, float]:
    """Transference number of a 1:1 salt under the correct and the mixed-up convention.

    With unweighted Onsager coefficients :math:`L^{ij}` (the charge magnitude cancels for a 1:1 salt)

    .. math:: t_+ = \\frac{L^{++} - L^{+-}}{L^{++} + L^{--} - 2L^{+-}}

    Feeding signed-charge-weighted coefficients (:math:`\\sigma_{+-} \\propto -L^{+-}`) into this
    unweighted formula — or unweighted ones into the weighted formula — gives

    .. math:: t_+^{\\mathrm{mix}} = \\frac{L^{++} + L^{+-}}{L^{++} + L^{--} + 2L^{+-}}

    which still satisfies :math:`t_+ + t_- = 1`. See ANALYSIS.md (transference number trap).
    """
    den = L_pp + L_mm - 2.0 * L_pm
    den_mix = L_pp + L_mm + 2.0 * L_pm
    return {"correct": (L_pp - L_pm) / den if den != 0 else math.nan,
            "mixed": (L_pp + L_pm) / den_mix if den_mix != 0 else math.nan}


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
    """Means of an energy term always match; other quantities need equal declared cutoffs (±0.005 nm)."""
    if audit_group(group).treatment == "energy":
        return True
    a, b = _cutoff(run_entry), _cutoff(canon)
    return a is not None and b is not None and abs(a - b) <= 0.005


def _canonical_match(group: str, e: Entry, canonical: dict[str, Entry]) -> Entry | None:
    g = audit_group(group)
    tail = re.split(r"[./]", e.key)[-1]
    if g.target_by_key:
        return match_target(group, tail, canonical)
    want = tokens(e.key.split(".")[-1]) - {"cn", "d", "value", "observables"} - {group}
    ordered = target_entries_first(group, canonical)
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
    "run_recorded_failure": "implementation",
    "no_value": "incomplete",
    "four_block_analysis_missing": "incomplete",
    "window_too_short": "sampling",
    "run_sampling_check_failed": "sampling",
    "block_half_width": "sampling",
    "msd_exponent_outside": "sampling",
    "plateau_not_reached": "sampling",
    "run_regime_check_failed": "sampling",
    "run_declared_insufficient_sampling": "sampling",
    "agrees_with_canonical": "note",
    "definition_differs_from_canonical": "note",
}
#: Codes of a regime / plateau diagnostic that failed (A5 0.5).
REGIME_CODES = frozenset({"msd_exponent_outside", "plateau_not_reached", "run_regime_check_failed"})
#: Sampling checks of our estimators that are regime diagnostics (names in ``diagnostics.sampling_checks``).
REGIME_CHECK_NAMES = frozenset({"diffusive_window", "plateau", "collective_regime"})


def _check(code: str, message: str, *entries: Entry, path: str = "") -> Check:
    return Check(code, CODES[code], message, tuple(Evidence(path, key=e.key) for e in entries))


def _definition_checks(g: Any, chosen: list[Entry], canonical: dict[str, Entry] | None,
                       canonical_results: Any | None, path: str) -> list[Check]:
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
    return out


def _not_estimable(e: Entry) -> bool:
    """The run withheld this value as not estimable and says why (issue 24): honest, not a non-finite value."""
    return e.raw.get("state") == NOT_ESTIMABLE and str(e.raw.get("reason", "")).startswith("not estimable: ")


def _numeric_checks(chosen: list[Entry], extra: list[Entry], path: str) -> list[Check]:
    """Non-finite values, incomplete deliveries, failures the run recorded; a too-short window is SI."""
    out: list[Check] = []
    chosen = [e for e in chosen if not _not_estimable(e)]
    extra = [e for e in extra if not _not_estimable(e)]
    for e in chosen:
        short = _too_short(e)
        if short and not (e.finite_value and not e.nonfinite_blocks()):
            # the estimator says the window is shorter than it needs: a sampling shortfall, not a fault
            out.append(_check("window_too_short", f"{e.key}: no finite value, window too short ({short[:120]})", e,
                              path=path))
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
        if not _too_short(e) and (e.value is not None and not math.isfinite(e.value) or e.nonfinite_blocks()):
            out.append(_check("nonfinite_value", f"{e.key}: non-finite value(s)", e, path=path))
    for e in chosen + extra:
        if e.raw.get("state") == "F":
            out.append(_check("run_recorded_failure", f"{e.key}: the run itself recorded a failure "
                              f"({str(e.raw.get('reason', ''))[:120]})", e, path=path))
    return out


def _canonical_checks(g: Any, chosen: list[Entry], canonical: dict[str, Entry] | None,
                      path: str) -> tuple[list[Check], float | None]:
    """R5 comparison of stable structural quantities with matched definitions (and the canonical value)."""
    out: list[Check] = []
    canon_value = None
    if canonical and g.canonical_r5:
        for e in chosen:
            ce = _canonical_match(g.name, e, canonical)
            if ce is None or not ce.finite_value or not e.finite_value:
                continue
            if not _definitions_match(g.name, e, ce):
                out.append(_check("definition_differs_from_canonical",
                                  f"{e.key}: definition differs from the canonical one (R5 not applied)", e, path=path))
                continue
            canon_value = ce.value if canon_value is None else canon_value
            if r5_agrees(e.value, ce.value, ce.blocks):
                out.append(_check("agrees_with_canonical", f"{e.key} inside the canonical R5 interval", e, path=path))
            else:
                h = r5_interval(ce.value, ce.blocks)
                out.append(_check("outside_canonical_r5", f"{e.key} = {e.value:.5g} outside the R5 interval "
                                  f"{ce.value:.5g} ± {h:.3g} of the canonical reanalysis", e, path=path))
    elif canonical and chosen:
        ce = next(iter(canonical.values()))
        canon_value = ce.value if ce.finite_value else None
    return out, canon_value


def _sampling_checks(g: Any, chosen: list[Entry], extra: list[Entry], run_state: str | None, path: str,
                     prior: list[Check]) -> list[Check]:
    """The estimator's own sampling checks where it reports them, else the audit's backstop (relative block
    half-width); the diffusive exponent and the Green–Kubo plateau; what the run declared SI."""
    out: list[Check] = []
    for e in chosen:
        fluctuates_about_zero = re.split(r"[./]", e.key)[-1].lower().startswith(g.fluctuates_about_zero or ("\0",))
        diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
        own = diag.get("sampling_checks") if isinstance(diag.get("sampling_checks"), dict) else None
        failed = [str(k) for k, v in (own or {}).items() if v is False]
        regime = "run_regime_check_failed" if REGIME_CHECK_NAMES & set(failed) else "run_sampling_check_failed"
        if own is not None or (e.raw.get("state") in ("C", "SI")
                               and "sampling diagnostic" in str(e.raw.get("reason", ""))):
            if e.raw.get("state") in ("C", "SI"):  # the estimator says which of its checks apply
                if e.raw["state"] == "SI":
                    out.append(_check(regime, f"{e.key}: {str(e.raw.get('reason') or 'sampling check failed')[:160]}",
                                      e, path=path))
            elif failed:
                out.append(_check(regime, f"{e.key}: sampling check(s) failed: {', '.join(failed)}", e, path=path))
        elif e.blocks and len(e.blocks) >= 4 and not e.nonfinite_blocks() and e.finite_value and e.value != 0 \
                and not fluctuates_about_zero:
            arr = np.asarray(e.blocks, dtype=np.float64)
            rel = T_975_DOF3 * float(arr.std(ddof=1)) / 2.0 / abs(e.value)
            if rel > SI_REL_HALF_WIDTH:
                out.append(_check("block_half_width", f"{e.key}: block 95 % half-width {100 * rel:.0f} % of the value",
                                  e, path=path))
        beta = e.raw.get("beta", e.raw.get("msd_exponent"))
        if isinstance(beta, (int, float)) and not (BETA_WINDOW[0] <= beta <= BETA_WINDOW[1]):
            out.append(_check("msd_exponent_outside", f"{e.key}: MSD exponent β = {beta:.2f} outside {BETA_WINDOW}",
                              e, path=path))
        plateau = e.raw.get("plateau")
        if isinstance(plateau, dict) and plateau.get("reached") is False:
            out.append(_check("plateau_not_reached", f"{e.key}: Green–Kubo plateau not reached", e, path=path))
    sampled = out or [c for c in prior if c.severity == "sampling"]
    if (run_state == "SI" or any(e.raw.get("state") == "SI" for e in chosen + extra)) and not sampled:
        out.append(_check("run_declared_insufficient_sampling", "the run declared insufficient sampling", path=path))
    return out


def _state(checks: list[Check], missing: list[str]) -> tuple[str, str]:
    """The group's state from the severities of its checks (rules 2–6 of the module docstring)."""
    def said(*severities: str) -> list[str]:
        return [c.message for c in checks if c.severity in severities]

    if missing:
        return "M", f"missing targets: {', '.join(missing)}"
    if said("definition", "implementation"):
        return "F", "; ".join(said("definition") + said("implementation"))
    if said("incomplete"):
        return "M", "; ".join(said("incomplete"))
    if said("sampling"):
        return "SI", "; ".join(said("sampling"))
    compared = sum(c.code == "agrees_with_canonical" for c in checks)
    not_compared = [c.message for c in checks if c.code == "definition_differs_from_canonical"]
    return "C", "estimator delivered, finite, blocks consistent" + (
        f", {compared} value(s) inside the canonical R5 interval" if compared else "") + (
        "; " + "; ".join(not_compared) if not_compared else "")


def _ratings(g: Any, checks: list[Check], regs: list[dict], usable: list[Entry],
             prod_state: dict[str, float] | None) -> dict[str, tuple[float | None, str]]:
    """A2–A7 of one group from the codes of its checks (rules in the module docstring)."""
    def said(*severities: str) -> list[str]:
        return [c.message for c in checks if c.severity in severities]

    codes = {c.code for c in checks}
    definition, implementation, sampling = said("definition"), said("implementation"), said("sampling")
    compared = sum(c.code == "agrees_with_canonical" for c in checks) + sum(
        c.code == "outside_canonical_r5" for c in checks)
    ratings: dict[str, tuple[float | None, str]] = {}
    if definition:
        ratings["A2"] = (0.0, "; ".join(definition))
    elif g.definition_words and not regs:
        ratings["A2"] = (0.5, "definition not registered in registrations.jsonl")
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
    inconsistent = state_consistency(usable, prod_state) if g.regime else []
    if inconsistent:
        ratings["A4"] = (0.0, "; ".join(inconsistent))
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
        if not diag:
            ratings["A5"] = (0.0, "a fitted number alone: no regime/plateau diagnostic reported")
        elif codes & REGIME_CODES:
            ratings["A5"] = (0.5, "regime diagnostic reported but not satisfied: " + "; ".join(sampling))
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
                 canonical_results: Any | None = None, prod_state: dict[str, float] | None = None) -> GroupResult:
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
    checks = gaps + _definition_checks(g, chosen, canonical, canonical_results, res_rel)
    checks += _numeric_checks(chosen, extra, res_rel)
    r5, canon_value = _canonical_checks(g, chosen, canonical, res_rel)
    checks += r5
    checks += _sampling_checks(g, chosen, extra, run_state, res_rel, checks)
    state, reason = _state(checks, missing)
    severities = {c.severity for c in checks}
    kind = "definition" if "definition" in severities else ("implementation" if "implementation" in severities
                                                            else None)
    regs = run.in_force(*g.definition_words, case=case) if g.definition_words else []
    usable = [e for e in chosen if e.finite_value] or chosen
    ratings = _ratings(g, checks, regs, usable, prod_state)
    return done(state, reason, ratings, ev, checks, chosen, kind, main.value if main.finite_value else None,
                canon_value, units if isinstance(units, str) else None)


def assess_case(run: RunData, bundle: Bundle, case: str, upstream: str | None,
                canonical_results: Any | None, prod_state: dict[str, float] | None = None
                ) -> tuple[list[Judgment], list[GroupResult]]:
    """All analysis judgments (A1 per case; A2–A7 per observable) and observable states of one case."""
    groups = group_entries(run.results.get(case))
    canon_groups = group_entries(canonical_results) if canonical_results is not None else None
    req = required_targets(case, bundle)
    out: list[GroupResult] = []
    for g in OBSERVABLE_GROUPS:
        out.append(assess_group(run, case, g, req[g], groups[g], canon_groups[g] if canon_groups else None,
                                upstream, canonical_results, prod_state))
    judgments = [j for gr in out for j in gr.judgments]
    res_rel = f"analysis/{case}/results.json"
    if upstream in ("invalid_upstream", "not_reached"):
        judgments.append(Judgment("A1", None, f"production {upstream}: coverage not applicable", case))
        return judgments, out
    missing = [gr.assessment for gr in out if gr.assessment.state == "M"
               and any(c.code == "missing_target" for c in gr.assessment.checks)]
    declared = run.run_observable_states(case)
    explicit = [m for m in missing if m.observable in declared or any(
        m.observable in tokens(k) or k.lower() == m.observable for k in declared)]
    if not missing:
        judgments.append(Judgment("A1", 1.0, "every required observable and species-specific target delivered",
                                  case, evidence=[Evidence(res_rel)]))
    elif len(explicit) == len(missing) and len(missing) <= len(OBSERVABLE_GROUPS) // 2:
        judgments.append(Judgment("A1", 0.5, "missing (declared explicitly): " + "; ".join(
            f"{m.observable} ({m.reason})" for m in missing), case, evidence=[Evidence(res_rel)]))
    else:
        judgments.append(Judgment("A1", 0.0, "missing: " + "; ".join(f"{m.observable} ({m.reason})" for m in missing),
                                  case, evidence=[Evidence(res_rel)]))
    return judgments, out
