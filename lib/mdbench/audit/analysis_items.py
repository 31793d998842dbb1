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

Item rules per (case, observable): A2 0 for a definition failure, 0.5 when the definition was never
registered, else 1. A3 0 for an implementation/numerical failure (or a wrong definition), else 1 (with the
R5 comparison named when reanalysed). A4 0 when a declared volume/temperature disagrees with the production
files (2 % / 5 K), 0.5 when no trajectory treatment is declared (and no canonical agreement shows it), else 1.
A5 (transport only) 0 for a bare fitted number, 0.5 when the regime/plateau diagnostic fails, else 1.
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
from mdbench.analysis.observables import AUDIT_GROUPS, CONDUCTIVITY, audit_group
from mdbench.analysis.observables import targets as registry_targets
from mdbench.audit.bundle import Bundle
from mdbench.audit.model import Evidence, Judgment, ObservableAssessment
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


def assess_group(run: RunData, case: str, group: str, targets: list[str], entries: dict[str, Entry],
                 canonical: dict[str, Entry] | None, upstream: str | None,
                 canonical_results: Any | None = None, prod_state: dict[str, float] | None = None) -> GroupResult:
    """State and A2–A7 judgments of one observable group of one case (rules in the module docstring)."""
    res_rel = f"analysis/{case}/results.json"
    run_state = run.run_observable_states(case).get(group, {}).get("state") if run.run_observable_states(case) \
        else None
    for k, v in run.run_observable_states(case).items():
        if run_state is None and group in tokens(k) | {k.lower()}:
            run_state = v.get("state")

    def done(state: str, reason: str, ratings: dict[str, tuple[float | None, str]], ev: list[Evidence],
             kind: str | None = None, reported: float | None = None, canon: float | None = None,
             units: str | None = None) -> GroupResult:
        a = ObservableAssessment(case, group, state, reason, run_state=run_state, reported_value=reported,
                                 canonical_value=canon, units=units, evidence=ev,
                                 values={e.key: float(e.value) for e in chosen_all if e.finite_value})
        js = [Judgment(item, r, why, case, group, evidence=list(ev)) for item, (r, why) in ratings.items()]
        return GroupResult(a, js, kind)

    chosen_all: list[Entry] = []
    na = {i: (None, "not applicable: " + (upstream or "")) for i in ("A2", "A3", "A4", "A5", "A6", "A7")}
    if upstream in ("invalid_upstream", "not_reached"):
        return done(upstream, f"production data {upstream.replace('_', ' ')}", na, [])
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
    chosen_all.extend(chosen)
    if not chosen:
        r = {i: (None, "observable not delivered (scored under A1)") for i in na}
        return done("M", f"missing: {', '.join(missing)}", r, ev)
    main = chosen[0]
    units = main.raw.get("unit", main.raw.get("units")) if isinstance(main.raw, dict) else None
    reported = main.value if main.finite_value else None
    ratings: dict[str, tuple[float | None, str]] = {}
    definition_fail: list[str] = []
    impl_fail: list[str] = []
    si: list[str] = []
    incomplete: list[str] = []
    g = audit_group(group)
    # --- definition-level checks
    if g.definition_check == "transference_convention":
        for e in chosen:
            L = onsager_from(e.raw)
            if L is None and canonical:
                ce = next(iter(canonical.values()), None)
                L = onsager_from(ce.raw) if ce is not None else None
            names = _canonical_tplus_check(e.value, canonical_results) if (
                canonical_results is not None and e.finite_value) else None
            if names and all(n.startswith("mixed") for n in names):
                definition_fail.append(f"t+ = {e.value:.4g} is reproduced from the canonical Onsager matrix only "
                                       f"by a mixed-up formula ({', '.join(names)}), not by either convention")
                continue
            if L is not None and e.finite_value:
                conv = tplus_conventions(*L)
                if _close(e.value, conv["mixed"]) and not _close(e.value, conv["correct"]):
                    definition_fail.append(
                        f"t+ = {e.value:.4g} equals the mixed-convention value {conv['mixed']:.4g} (signed-charge "
                        f"Onsager coefficients in the unweighted formula); correct convention gives "
                        f"{conv['correct']:.4g}")
    if g.definition_check == "cross_correlations":
        for e in chosen:
            if e.raw.get("includes_cross_terms") is False or tokens(e.key) & {"ne", "nernst"}:
                definition_fail.append("conductivity omits ionic cross-correlations (Nernst–Einstein only)")
    # --- numerical checks
    for e in chosen:
        short = _too_short(e)
        if short and not (e.finite_value and not e.nonfinite_blocks()):
            # the estimator says the window is shorter than it needs: a sampling shortfall, not a fault
            si.append(f"{e.key}: no finite value, window too short ({short[:120]})")
            continue
        if e.value is not None and not math.isfinite(e.value):
            impl_fail.append(f"{e.key}: non-finite whole-interval value")
        bad = e.nonfinite_blocks()
        if bad:
            impl_fail.append(f"{e.key}: non-finite block value(s) in block(s) {[b + 1 for b in bad]}")
        if e.value is None and not e.blocks:
            incomplete.append(f"{e.key}: no value")
        if not e.blocks or len(e.blocks) < 4:
            incomplete.append(f"{e.key}: four-block analysis missing")
    # --- canonical reanalysis (R5: stable structural quantities with matched definitions only)
    canon_value = None
    compared = 0
    not_compared: list[str] = []
    if canonical and group in R5_GROUPS:
        for e in chosen:
            ce = _canonical_match(group, e, canonical)
            if ce is None or not ce.finite_value or not e.finite_value:
                continue
            if not _definitions_match(group, e, ce):
                not_compared.append(f"{e.key}: definition differs from the canonical one (R5 not applied)")
                continue
            compared += 1
            canon_value = ce.value if canon_value is None else canon_value
            if not r5_agrees(e.value, ce.value, ce.blocks):
                h = r5_interval(ce.value, ce.blocks)
                impl_fail.append(f"{e.key} = {e.value:.5g} outside the R5 interval {ce.value:.5g} ± {h:.3g} "
                                 "of the canonical reanalysis")
    elif canonical and chosen:
        ce = next(iter(canonical.values()))
        canon_value = ce.value if ce.finite_value else None
    extra_entries = [e for e in entries.values() if e not in chosen]
    for e in extra_entries:  # other delivered entries of the group: run-recorded failures and non-finite values
        if _too_short(e):
            continue
        if e.value is not None and not math.isfinite(e.value) or e.nonfinite_blocks():
            impl_fail.append(f"{e.key}: non-finite value(s)")
    for e in chosen + extra_entries:
        if e.raw.get("state") == "F":
            impl_fail.append(f"{e.key}: the run itself recorded a failure ({str(e.raw.get('reason', ''))[:120]})")
    # --- sampling diagnostics
    for e in chosen:
        fluctuates_about_zero = re.split(r"[./]", e.key)[-1].lower().startswith(g.fluctuates_about_zero or ("\0",))
        diag = e.raw.get("diagnostics") if isinstance(e.raw.get("diagnostics"), dict) else {}
        own_checks = isinstance(diag.get("sampling_checks"), dict) or (
            e.raw.get("state") in ("C", "SI") and "sampling diagnostic" in str(e.raw.get("reason", "")))
        if own_checks:
            failed = [k for k, v in (diag.get("sampling_checks") or {}).items() if v is False]
            if e.raw.get("state") in ("C", "SI"):  # the estimator says which of its checks apply
                if e.raw["state"] == "SI":
                    si.append(f"{e.key}: {str(e.raw.get('reason') or 'sampling check failed')[:160]}")
            elif failed:
                si.append(f"{e.key}: sampling check(s) failed: {', '.join(map(str, failed))}")
        elif e.blocks and len(e.blocks) >= 4 and not e.nonfinite_blocks() and e.finite_value and e.value != 0 \
                and not fluctuates_about_zero:
            arr = np.asarray(e.blocks, dtype=np.float64)
            rel = T_975_DOF3 * float(arr.std(ddof=1)) / 2.0 / abs(e.value)
            if rel > SI_REL_HALF_WIDTH:
                si.append(f"{e.key}: block 95 % half-width {100 * rel:.0f} % of the value")
        beta = e.raw.get("beta", e.raw.get("msd_exponent"))
        if isinstance(beta, (int, float)) and not (BETA_WINDOW[0] <= beta <= BETA_WINDOW[1]):
            si.append(f"{e.key}: MSD exponent β = {beta:.2f} outside {BETA_WINDOW}")
        plateau = e.raw.get("plateau")
        if isinstance(plateau, dict) and plateau.get("reached") is False:
            si.append(f"{e.key}: Green–Kubo plateau not reached")
    if (run_state == "SI" or any(e.raw.get("state") == "SI" for e in chosen + extra_entries)) and not si:
        si.append("the run declared insufficient sampling")
    # --- state
    if missing:
        state, reason = "M", f"missing targets: {', '.join(missing)}"
    elif definition_fail or impl_fail:
        state, reason = "F", "; ".join(definition_fail + impl_fail)
    elif any("four-block" in m or "no value" in m for m in incomplete):
        state, reason = "M", "; ".join(incomplete)
    elif si:
        state, reason = "SI", "; ".join(si)
    else:
        state, reason = "C", "estimator delivered, finite, blocks consistent" + (
            f", {compared} value(s) inside the canonical R5 interval" if compared else "") + (
            "; " + "; ".join(not_compared) if not_compared else "")
    kind = "definition" if definition_fail else ("implementation" if impl_fail else None)
    # --- item ratings
    regs = run.in_force(*g.definition_words, case=case) if g.definition_words else []
    if definition_fail:
        ratings["A2"] = (0.0, "; ".join(definition_fail))
    elif g.definition_words and not regs:
        ratings["A2"] = (0.5, "definition not registered in registrations.jsonl")
    else:
        ratings["A2"] = (1.0, "definition answers the physical question" + (f" (registered {regs[0].get('id')})"
                                                                          if regs else ""))
    if impl_fail:
        ratings["A3"] = (0.0, "; ".join(impl_fail))
    elif definition_fail:
        ratings["A3"] = (0.0, "estimator implements a wrong definition")
    elif compared:
        ratings["A3"] = (1.0, f"{compared} value(s) agree with the canonical reanalysis (R5)")
    else:
        ratings["A3"] = (1.0, "no numerical fault found (not reanalysed)")
    usable = [e for e in chosen if e.finite_value] or chosen
    keys = set().union(*(_diag_keys(e) for e in usable))
    inconsistent = state_consistency(usable, prod_state) if group in REGIME_GROUPS else []
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
        elif compared and not impl_fail:
            ratings["A4"] = (1.0, "values agree with the canonical reanalysis (PBC handled consistently)")
        else:
            ratings["A4"] = (0.5, "trajectory treatment (PBC/unwrapping/frame/volume) not declared with the result")
    else:
        ratings["A4"] = (1.0, "energy-file time series; no trajectory treatment needed")
    if group in REGIME_GROUPS:
        diag = {k for k in keys if any(w in k for w in ("beta", "msd_exponent", "fit_window", "plateau",
                                                         "running_integral", "regime", "window_ps", "lo_ps"))}
        if not diag:
            ratings["A5"] = (0.0, "a fitted number alone: no regime/plateau diagnostic reported")
        elif any("β" in s or "plateau" in s for s in si):
            ratings["A5"] = (0.5, "regime diagnostic reported but not satisfied: " + "; ".join(si))
        else:
            ratings["A5"] = (1.0, f"regime diagnostic reported ({', '.join(sorted(diag))})")
    else:
        ratings["A5"] = (None, "no fitting regime for this observable")
    if any("non-finite block" in s for s in impl_fail):
        ratings["A6"] = (0.0, "non-finite block values prevent the block-stability assessment")
    elif any("four-block" in s for s in incomplete):
        ratings["A6"] = (0.0, "four-block analysis missing")
    elif si:
        ratings["A6"] = (0.5, "blocks examined; sampling insufficient: " + "; ".join(si))
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
    return done(state, reason, ratings, ev, kind, reported, canon_value, units if isinstance(units, str) else None)


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
    missing = [gr.assessment for gr in out if gr.assessment.state == "M" and gr.assessment.reason.startswith("missing")]
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
