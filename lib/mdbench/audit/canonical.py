"""Claims against the canonical reanalysis (R5, refits on the reported window) and against the MSD a run recorded.

Split from :mod:`mdbench.audit.analysis_items` (which re-exports every name).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from mdbench.analysis.observables import (
    SELF_DIFFUSION_GROUP,
    audit_group,
)
from mdbench.audit import registered_definitions
from mdbench.audit.codes import _check, check, is_regime_check
from mdbench.audit.definitions import _definition_text
from mdbench.audit.model import Check, Evidence
from mdbench.audit.rulebook import R5_REL_TOL, r5_interval
from mdbench.audit.runread import (
    Entry,
    RunData,
    json_pointer,
    match_target,
    read_recorded_curve,
    target_entries_first,
    tokens,
)
from mdbench.audit.sampling import _declared, _own_checks, beta_window
from mdbench.audit.transport import (
    BETA_MARGIN,
    Refit,
    WindowRefit,
    compare_curves,
    curve_diffusion,
    declared_frame,
    reported_window,
    same_window,
)


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
    structural quantities need equal declared cutoffs (±0.005 nm) or, where one entry declares none, the same
    stated definition (whose text names the cutoffs, as the reanalysis at the run's registered cutoffs writes it)."""
    g = audit_group(group)
    if g.treatment == "energy" or g.definition_check == "cross_correlations" or (g.regime and
                                                                                 g.definition_check is None):
        return True
    if g.definition_check == "transference_convention":
        solvent = "solvent" in (_definition_text(run_entry) + " " + str(run_entry.raw.get("frame", ""))
                                + run_entry.key).lower()
        return solvent == ("solvent" in canon.key.lower())
    a, b = _cutoff(run_entry), _cutoff(canon)
    if a is None or b is None:  # a cutoff field on one side only: the same stated definition (cutoffs in its text)
        text = str(run_entry.raw.get("definition") or "").strip()
        return len(text) > 20 and text == str(canon.raw.get("definition") or "").strip()
    return a is not None and b is not None and abs(a - b) <= 0.005


def _canonical_match(group: str, e: Entry, canonical: dict[str, Entry]) -> Entry | None:
    g = audit_group(group)
    tail = re.split(r"[./]", e.key)[-1]
    if g.target_by_key:
        return match_target(group, tail, canonical)
    # the key's last dotted part, where a dot between digits (a cutoff such as @0.40nm) is not a separator
    want = tokens(re.split(r"\.(?!\d)", e.key)[-1]) - {"cn", "d", "value", "observables"} - {group} - tokens(group)
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


def _r5_comparison(g: Any, e: Entry, ref_value: float, ref_blocks: list[float | None] | None, ref_label: str,
                   widen: float, path: str, prod_state: dict[str, float] | None,
                   curve_causes: dict[str, str] | None) -> Check:
    """A reported value (and the mean of its blocks) against ``widen`` × the R5 interval of the canonical
    reference: agrees (a note), or a finding — a treatment cause where the entry's diagnostics or its
    recorded curve show one (A4), else an implementation fault (A3)."""
    h = widen * r5_interval(ref_value, ref_blocks)
    ev = Evidence(path, key=e.key, note=f"reported {e.value:.6g}; canonical {ref_value:.6g} ± {h:.3g} ({ref_label})")
    blocks = [b for b in (e.blocks or []) if b is not None and math.isfinite(b)]
    block_mean = float(np.mean(blocks)) if len(blocks) >= 2 else None
    outside = [f"whole-interval value {e.value:.5g}"] if abs(e.value - ref_value) > h else []
    if block_mean is not None and widen == 1.0 and abs(block_mean - ref_value) > h:
        outside.append(f"block mean {block_mean:.5g}")
    if not outside:
        return check("agrees_with_canonical", f"{e.key} inside the canonical interval "
                     f"{ref_value:.5g} ± {h:.3g} ({ref_label})", (ev,))
    cause = _treatment_problem(e, prod_state) or (curve_causes or {}).get(e.key)
    code = "trajectory_treatment_differs" if cause else (
        "outside_canonical_r5" if g.canonical_r5 else "value_contradicts_reanalysis")
    return check(code, f"{e.key}: {' and '.join(outside)} outside the canonical interval "
                 f"{ref_value:.5g} ± {h:.3g} of the reanalysis ({ref_label})"
                 + (f"; cause: {cause}" if cause else ""), (ev,))


def _regime_claims(e: Entry, ce: Entry, rf: Any, path: str) -> list[Check]:
    """Reported regime diagnostics against the canonical reanalysis' own window: a diffusive β where the
    trajectory's is not; a plateau the reanalysis does not find."""
    out: list[Check] = []
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
    return out


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
        # the run's window: stated by the result, else the one it registered (mdbench.audit.registered_definitions)
        window = (reported_window(e.raw) or registered_definitions.fit_window(ce)) if g.regime else None
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
                out.append(check("canonical_not_eligible", f"{e.key}: canonical estimate not eligible for "
                                 f"comparison ({why} not met) and " + ("no fit window reported" if window is None
                                                                       else "the reported window cannot be re-fitted")
                                 + "; value not compared", (Evidence(path, key=e.key),)))
                compare = False
        if compare:
            out.append(_r5_comparison(g, e, ref_value, ref_blocks, ref_label, widen, path, prod_state, curve_causes))
        out += _regime_claims(e, ce, rf, path)
        out += frame_drift_checks(g, e, ce, window or cwin, path, rf.value if rf is not None else None)
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
        window = reported_window(e.raw) or registered_definitions.fit_window(ce)  # stated, else registered
        own, follows = _own_curve_checks(g, e, curve, window, path)
        out += own
        canon = refit.msd(species) if refit is not None and species else None
        if canon is None:
            continue
        check, cause = _curve_against_trajectory(e, curve, canon, window, path, prod_state)
        out.append(check)
        if cause and follows is not False:
            causes[e.key] = cause
    return out, causes


def _own_curve_checks(g: Any, e: Entry, curve: Any, window: tuple[float, float] | None, path: str
                      ) -> tuple[list[Check], bool | None]:
    """A reported D (and β) against its own recorded MSD re-fitted over the reported window (step 1 of
    :func:`recorded_curve_checks`). Returns the checks and whether D follows from the curve (None: not
    re-computed)."""
    src = f"{curve.source}, {curve.units}"
    if window is None:
        return [_check("recorded_curve_not_compared", f"{e.key}: recorded MSD ({src}) not re-fitted: the "
                       "result reports no fit window", e, path=path)], None
    D, beta, n = curve_diffusion(curve.lag_ps, curve.msd_nm2, window)
    step = float(np.median(np.diff(curve.lag_ps)))
    covers = curve.lag_ps[0] <= window[0] + step + 1e-9 and curve.lag_ps[-1] >= window[1] - step - 1e-9
    if n < 2 or not math.isfinite(D) or not covers:
        return [_check("recorded_curve_not_compared", f"{e.key}: recorded MSD ({src}, lags "
                       f"{curve.lag_ps[0]:g}–{curve.lag_ps[-1]:g} ps) does not cover the reported fit "
                       f"window [{window[0]:g}, {window[1]:g}] ps; D not re-computed from it", e, path=path)], None
    # located at the reported value (apart from the file-level comparison with the reanalysis)
    ev = Evidence(json_pointer(path, e.key), key=e.key,
                  note=f"reported {e.value:.6g} m^2/s; its recorded MSD gives {D:.6g} m^2/s over "
                       f"[{window[0]:g}, {window[1]:g}] ps ({n} lags; {src})")
    follows = abs(e.value - D) <= R5_REL_TOL * abs(D)
    if follows:
        out = [check("agrees_with_recorded_curve", f"{e.key}: D follows from its recorded "
                     f"MSD ({D:.5g} m^2/s re-fitted)", (ev,))]
    else:
        out = [check("value_contradicts_reanalysis",
                     f"{e.key}: reported D = {e.value:.5g} m^2/s does not follow from its own recorded "
                     f"MSD ({curve.source}): slope/6 over the reported fit window [{window[0]:g}, "
                     f"{window[1]:g}] ps gives {D:.5g} m^2/s ({e.value / D:.3g} ×)", (ev,))]
    return out + beta_contradiction(g, e, beta, window, "its recorded MSD's", f"recorded in {curve.source}",
                                    path), follows


def _curve_against_trajectory(e: Entry, curve: Any, canon: Any, window: tuple[float, float] | None, path: str,
                              prod_state: dict[str, Any] | None) -> tuple[Check, str | None]:
    """The recorded curve against the trajectory's MSD of the same species (step 2 of
    :func:`recorded_curve_checks`). Returns the check and the treatment cause it found (None: none)."""
    src = f"{curve.source}, {curve.units}"
    cmp = compare_curves(curve.lag_ps, curve.msd_nm2, canon, window, R5_REL_TOL)
    if cmp is None:
        return _check("recorded_curve_not_compared", f"{e.key}: recorded MSD ({src}) shares fewer than three "
                      "lags with the trajectory's; not compared", e, path=path), None
    what = (f"{e.key}: its recorded MSD ({curve.source}) against the trajectory's (canonical, barycentric) "
            f"over {cmp.n_lags} common lags {cmp.lag_range_ps[0]:.3g}–{cmp.lag_range_ps[1]:.3g} ps")
    if not cmp.disagrees:
        return _check("agrees_with_recorded_curve", f"{what}: agree (median deviation "
                      f"{cmp.median_excess:.2f} × the tolerance)", e, path=path), None
    shape = None
    if cmp.shape_differs:
        shape = (f"it grows with an exponent {cmp.exponent_shift:+.2f} off the trajectory's, "
                 + ("faster (centre-of-mass drift not removed: another reference frame)" if cmp.exponent_shift > 0
                    else "slower (wrapped or wrongly unwrapped coordinates)"))
    cause = _treatment_problem(e, prod_state) or shape
    code = "trajectory_treatment_differs" if cause else "value_contradicts_reanalysis"
    ev = Evidence(curve.location or path, key=e.key, note=f"{cmp.worst}; recorded/trajectory median "
                                                            f"{cmp.ratio_median:.3g}")
    return check(code, f"{what}: disagree beyond the uncertainty (median deviation "
                 f"{cmp.median_excess:.1f} × the tolerance, recorded/trajectory ≈ {cmp.ratio_median:.3g}); "
                 + (f"cause: {cause}" if cause else "a constant factor (units or normalisation of the MSD)"),
                 (ev,)), cause


def frame_drift_checks(g: Any, e: Entry, ce: Entry, window: tuple[float, float] | None, path: str,
                       refit_value: float | None = None) -> list[Check]:
    r"""A self-diffusion coefficient declared in the lab frame while the system's centre of mass drifts
    enough to bias the MSD beyond the R5 tolerance: :math:`|\Delta R_\mathrm{COM}|^2 / (6 D t_\mathrm{hi})`
    (the drift adds to every molecule's displacement; σ of an electroneutral system does not see it). ``D`` is
    the canonical value, else (withheld outside its regime) the canonical MSD re-fitted on the run's window
    (``refit_value``), else the reported one: the drift is measured whatever the D's own state."""
    if g.name != SELF_DIFFUSION_GROUP.name or window is None:
        return []
    if declared_frame(str(e.raw.get("frame", "")) + " " + _definition_text(e)) != "lab":
        return []
    diag = ce.raw.get("diagnostics") if isinstance(ce.raw.get("diagnostics"), dict) else {}
    drift = diag.get("barycentre_drift_nm")
    d_scale = next((float(v) for v in (ce.value, refit_value, e.value) if isinstance(v, (int, float))
                    and not isinstance(v, bool) and math.isfinite(v) and v > 0), None)
    if not isinstance(drift, (int, float)) or not math.isfinite(drift) or d_scale is None:
        return []
    msd_hi_nm2 = 6.0 * d_scale * 1e6 * window[1]          # D [m^2/s] → nm^2/ps
    bias = drift ** 2 / msd_hi_nm2 if msd_hi_nm2 > 0 else 0.0
    if bias <= R5_REL_TOL:
        return []
    return [_check("trajectory_treatment_differs", f"{e.key}: declared in the lab frame while the system's centre "
                   f"of mass drifts {drift:.3g} nm over the analysed interval: a bias of {100 * bias:.0f} % of the "
                   f"MSD at {window[1]:g} ps (centre-of-mass motion not removed)", e, path=path)]
