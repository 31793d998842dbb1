"""Internal consistency: a run's numbers against its own recorded decomposition (A3: formulae, cross-terms).

Checks, each with both numbers in its message:

* ``sigma_inconsistent_with_own_matrix`` (A3, F) — a collective conductivity that does not follow from the
  run's own recorded Onsager matrix, :math:`\\sigma = e^2 \\sum_{ij} z_i z_j L^{ij}` (or
  :math:`\\sum_{ij} \\sigma_{ij}` of a recorded ``sigma_ij_S_m``), up to a unit factor
  (:data:`UNIT_FACTORS` × a power of ten); where it follows from the diagonal-only weighting instead it is
  ``conductivity_without_cross_terms`` (A2, F), from unit charges in a scaled-charge model
  ``charge_weighting_differs`` (A2, F).
* ``tplus_mixed_convention`` (A2, F) / ``tplus_inconsistent_with_own_matrix`` (A3, F) — a transference
  number against its own numerator and denominator, or its own Onsager block: the seed's first failure
  case is F in every case where it is present, whatever the sampling state.
* ``ionicity_inconsistent`` (A3, F) — an ionicity against σ / σ_NE recorded beside it.
* ``whole_outside_blocks`` (A3, F) — a whole-interval value outside the range of its own four blocks
  widened by their 95 % half-width (the whole estimate must be consistent with its blocks).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from mdbench.analysis.blocks import block_estimate
from mdbench.analysis.observables import (ASSOCIATION_GROUP, CONDUCTIVITY_GROUP, COORDINATION_GROUP, RDF,
                                          SELF_DIFFUSION_GROUP,
                                          THERMODYNAMICS_GROUP, TRANSFERENCE_GROUP)
from mdbench.analysis.onsager import identify_transference_convention
from mdbench.analysis.units import AVOGADRO_PER_MOL, E_CHARGE_C
from mdbench.audit.codes import GroupCheck, check
from mdbench.audit.model import Evidence
from mdbench.audit.rulebook import tplus_conventions
from mdbench.audit.runread import Entry, RunData, as_entry, group_entries, is_labelled_extra
from mdbench.audit.simulation import tpr_universe
from mdbench.audit.transport import reported_window, same_window

_SIGMA_GROUP, _T_PLUS_GROUP = CONDUCTIVITY_GROUP.name, TRANSFERENCE_GROUP.name

#: Factors by which a recorded Onsager matrix and σ may differ besides a power of ten (the unit of L):
#: 1, e², F² = (e N_A)², N_A, e, F (constants: :mod:`mdbench.analysis.units`).
UNIT_FACTORS = (1.0, E_CHARGE_C ** 2, (E_CHARGE_C * AVOGADRO_PER_MOL) ** 2, AVOGADRO_PER_MOL, E_CHARGE_C,
                E_CHARGE_C * AVOGADRO_PER_MOL)
#: Relative tolerance of an internal-consistency comparison (recorded numbers are rounded).
REL_TOL = 0.02
#: Relative slack beyond its blocks' range of a fitted or positional whole-interval value.
WHOLE_FIT_TOL = 0.10


def unit_related(a: float, b: float, rel: float = REL_TOL) -> bool:
    """True when a = b · k · 10^n for k in :data:`UNIT_FACTORS` and an integer n, within ``rel``."""
    if not (math.isfinite(a) and math.isfinite(b)) or a == 0 or b == 0:
        return a == b
    if (a > 0) != (b > 0):
        return False
    for k in UNIT_FACTORS:
        x = math.log10(abs(a) / (abs(b) * k))
        if abs(abs(a) / (abs(b) * k * 10.0 ** round(x)) - 1.0) <= rel:
            return True
    return False


def _num(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)) and math.isfinite(x):
        return float(x)
    if isinstance(x, dict):
        return _num(x.get("value"))
    return None


def _charges(raw: dict) -> dict[str, float]:
    for src in (raw, *(raw.get(k) for k in ("details", "onsager", "diagnostics"))):
        if isinstance(src, dict):
            for k in ("charges_e", "charges", "z"):
                d = src.get(k)
                if isinstance(d, dict):
                    out = {str(s): float(q) for s, q in d.items() if _num(q) is not None}
                    if out:
                        return out
    return {}


def _onsager(raw: dict) -> tuple[float, float, float, bool] | None:
    """(L++, L--, L+-, signed) of an entry's own ``onsager`` block; ``signed`` when L+- is charge-weighted."""
    src = raw.get("onsager", raw.get("L", raw.get("onsager_coefficients")))
    if not isinstance(src, dict):
        return None

    def get(*names: str) -> float | None:
        for n in names:
            v = _num(src.get(n))
            if v is not None:
                return v
        return None

    pp, mm, pm = get("L_pp", "L++", "pp", "Lpp"), get("L_mm", "L--", "mm", "Lmm"), get("L_pm", "L+-", "pm", "Lpm")
    if pp is None or mm is None or pm is None:
        return None
    w = str(src.get("weighting", raw.get("weighting", "unweighted"))).lower()
    return pp, mm, pm, ("charge" in w or "signed" in w or w == "weighted")


def _normalised_unit(raw: dict) -> bool:
    """True when an entry's Onsager block states a unit already divided by k_B T V (``1/(J m s)``,
    ``mol/(J m s)``): only then is σ = e² Σ z_i z_j L^ij up to a unit factor (raw displacement slopes need
    k_B T and V, which the comparison does not guess)."""
    src = raw.get("onsager", raw.get("L", raw.get("onsager_coefficients")))
    unit = str(src.get("unit", src.get("units", ""))) if isinstance(src, dict) else ""
    return "J" in unit and "s" in unit


def _ion_charges(raw: dict, prod: Any) -> tuple[float, float] | None:
    """(z+, z-) [e] of a 1:1 salt: the entry's recorded charges, else the production topology's."""
    q = _charges(raw) or dict(((getattr(prod, "extra", None) or {}).get("charges_e") or {}))
    pos = [v for v in q.values() if v > 1e-3]
    neg = [v for v in q.values() if v < -1e-3]
    if len(pos) != 1 or len(neg) != 1:
        return None
    return pos[0], neg[0]


def _ev(case: str, e: Entry, note: str) -> tuple[Evidence, ...]:
    return (Evidence(f"analysis/{case}/results.json", key=e.key, note=note),)


def _unweighted_matrix(L: tuple[float, float, float, bool]) -> np.ndarray:
    """The 2 × 2 unweighted Onsager matrix [[L++, L+-], [L+-, L--]] of an entry's block (:func:`_onsager`; a
    charge-weighted L+- is turned back)."""
    pp, mm, pm, signed = L
    lpm = -pm if signed else pm
    return np.array([[pp, lpm], [lpm, mm]], dtype=np.float64)


def weighted_sum(L: np.ndarray, q: np.ndarray) -> float:
    """:math:`\\sum_{ij} q_i q_j L^{ij}`: σ / e² of an unweighted Onsager matrix under the charges ``q`` [e]
    (the analysis' σ = e² Σ z_i z_j L^ij, :mod:`mdbench.analysis.onsager`)."""
    return float(q @ L @ q)


def _sigma_checks(case: str, sig: Entry, L: tuple[float, float, float, bool] | None, z: tuple[float, float] | None,
                  S: Any) -> list[GroupCheck]:
    if not sig.finite_value or sig.value == 0:
        return []
    out: list[GroupCheck] = []
    if isinstance(S, list):
        try:
            mat = np.asarray(S, dtype=np.float64)
            own = float(mat.sum()) if mat.ndim == 2 and np.all(np.isfinite(mat)) else math.nan
        except (TypeError, ValueError):
            own = math.nan
        if math.isfinite(own) and own != 0 and not unit_related(sig.value, own):
            diag = float(np.trace(mat))
            code = ("conductivity_without_cross_terms" if unit_related(sig.value, diag) else
                    "sigma_inconsistent_with_own_matrix")
            out.append(GroupCheck(_SIGMA_GROUP, check(code, f"{sig.key} = {sig.value:.4g} does not follow from "
                                                 f"its own σ_ij matrix (Σ σ_ij = {own:.4g}, diagonal only "
                                                 f"{diag:.4g})", _ev(case, sig, "sigma_ij_S_m"))))
        return out
    if L is None or z is None:
        return []
    zp, zm = z
    mat, q = _unweighted_matrix(L), np.array([zp, zm])
    full = weighted_sum(mat, q)  # σ / e² (the analysis' σ = e² Σ_ij z_i z_j L^ij)
    if full == 0 or unit_related(sig.value, full):
        return []
    diag = weighted_sum(np.diag(np.diag(mat)), q)
    unit = weighted_sum(mat, np.sign(q))
    if unit_related(sig.value, diag):
        code, why = ("conductivity_without_cross_terms",
                     f"it follows the diagonal-only weighting ({diag:.4g}): the cross-correlation L+- is dropped")
    elif abs(abs(zp) - 1.0) > 0.01 and unit_related(sig.value, unit):
        code, why = "charge_weighting_differs", f"it follows unit charges ({unit:.4g}), not the model's ±{abs(zp):g}"
    else:
        code, why = "sigma_inconsistent_with_own_matrix", "no unit factor relates them"
    return [GroupCheck(_SIGMA_GROUP, check(code, f"{sig.key} = {sig.value:.4g} does not follow from the run's "
                                      f"own Onsager matrix: Σ z_i z_j L_ij = {full:.4g} (z = {zp:+g}/{zm:+g}); "
                                      + why, _ev(case, sig, "onsager")))]


def _tplus_checks(case: str, t: Entry, L: tuple[float, float, float, bool] | None) -> list[GroupCheck]:
    if not t.finite_value:
        return []
    raw = t.raw
    num = _num(raw.get("numerator", (raw.get("details") or {}).get("numerator") if isinstance(raw.get("details"), dict)
                       else None))
    den = _num(raw.get("denominator", (raw.get("details") or {}).get("denominator")
                       if isinstance(raw.get("details"), dict) else None))
    if num is not None and den not in (None, 0.0) and abs(t.value - num / den) > REL_TOL * max(abs(t.value), 0.05):
        return [GroupCheck(_T_PLUS_GROUP, check(
            "tplus_inconsistent_with_own_matrix", f"{t.key} = {t.value:.4g} is not its own "
            f"numerator / denominator = {num:.4g} / {den:.4g} = {num / den:.4g}", _ev(case, t, "numerator")))]
    if L is None:
        return []
    mat = _unweighted_matrix(L)
    conv = tplus_conventions(float(mat[0, 0]), float(mat[1, 1]), float(mat[0, 1]))  # the analysis' algebra
    correct, mixed = conv["correct"], conv["mixed"]
    if not (math.isfinite(correct) and math.isfinite(mixed)):
        return []
    tol = max(REL_TOL * abs(correct), 0.005)
    if abs(t.value - correct) <= tol:
        return []
    if abs(t.value - mixed) <= max(REL_TOL * abs(mixed), 0.005) and abs(mixed - correct) > tol:
        return [GroupCheck(_T_PLUS_GROUP, check(
            "tplus_mixed_convention", f"{t.key} = {t.value:.4g} is its own Onsager matrix in the "
            f"mixed convention ((L++ + L+-)/(L++ + L-- + 2L+-) = {mixed:.4g}; signed-charge L+- fed to the "
            f"unweighted formula), the unweighted one gives {correct:.4g}: a formula error, F whatever the "
            "sampling", _ev(case, t, "onsager")))]
    return [GroupCheck(_T_PLUS_GROUP, check(
        "tplus_inconsistent_with_own_matrix", f"{t.key} = {t.value:.4g} does not follow from its "
        f"own Onsager matrix ((L++ - L+-)/(L++ + L-- - 2L+-) = {correct:.4g})", _ev(case, t, "onsager")))]


def _pipeline_tplus_checks(case: str, t: Entry, results: Any, cond: dict[str, Entry]) -> list[GroupCheck]:
    """A t+ of a results file that records its Onsager matrix with σ (``details.L.whole``, our pipeline's
    format, species and charges in ``system``): the formulas of :func:`mdbench.analysis.onsager.
    identify_transference_convention` that reproduce it from the run's own matrix. Only mixed-up ones: F (A2),
    in every case where it is present; none at all (same frame): A3."""
    if not t.finite_value or not isinstance(results, dict):
        return []
    solvent = "solvent" in t.key.lower()
    for e in cond.values():
        det = e.raw.get("details") if isinstance(e.raw.get("details"), dict) else {}
        blk = det.get("L_solvent" if solvent else "L")
        if isinstance(blk, dict) and isinstance(blk.get("whole"), list):
            break
    else:
        return []
    system = results.get("system") if isinstance(results.get("system"), dict) else {}
    species = system.get("species")
    charges = det.get("charges_e") if isinstance(det.get("charges_e"), dict) else system.get("charges_e")
    try:
        names = identify_transference_convention(t.value, blk["whole"], list(species), dict(charges))
    except Exception:  # noqa: BLE001 - an incomplete or malformed matrix: nothing to compare, never a crash
        return []
    if names and all(n.startswith("mixed") for n in names):
        return [GroupCheck(_T_PLUS_GROUP, check(
            "tplus_mixed_convention", f"{t.key} = {t.value:.4g} is reproduced from the run's own "
            f"Onsager matrix only by a mixed-up formula ({', '.join(names)}): a formula error, F whatever the "
            "sampling", _ev(case, t, "details.L")))]
    if not names:
        return [GroupCheck(_T_PLUS_GROUP, check(
            "tplus_inconsistent_with_own_matrix", f"{t.key} = {t.value:.4g} is reproduced by no "
            "transference formula from the run's own Onsager matrix", _ev(case, t, "details.L")))]
    return []


def _whole_vs_blocks(case: str, group: str, e: Entry) -> list[GroupCheck]:
    if not e.finite_value or not e.blocks or len(e.blocks) < 2 or any(
            b is None or not math.isfinite(b) for b in e.blocks):
        return []
    b = np.asarray(e.blocks, dtype=np.float64)
    hw = float(block_estimate(e.value, list(b), "").half_width_95)  # the analysis' t(0.975, n-1) s / √n
    lo, hi = float(b.min()) - hw, float(b.max()) + hw
    # averages over frames (energy-file terms, class fractions) equal the mean of equal blocks; fitted and
    # positional estimates (D, η, σ, t+, g(r) minima) may differ from their blocks by a finite-window bias
    rel = REL_TOL if group in (THERMODYNAMICS_GROUP.name, ASSOCIATION_GROUP.name) else WHOLE_FIT_TOL
    slack = rel * max(abs(float(b.mean())), abs(e.value))
    if lo - slack <= e.value <= hi + slack:
        return []
    return [GroupCheck(group, check("whole_outside_blocks", f"{e.key} = {e.value:.4g} lies outside its "
                               f"own blocks [{b.min():.4g}, {b.max():.4g}] ± their half-width {hw:.2g}: the whole-"
                               "interval value is not consistent with its blocks", _ev(case, e, "blocks")))]


_IONICITY = re.compile(r"ionicity|haven", re.I)
#: Words by which a labelled extra t+ says it is the Nernst–Einstein one, D+/(D+ + D−).
_NE_WORDS = re.compile(r"nernst|\bne\b|self[- ]diffusion|d_?\+\s*/|ideal", re.I)


def _labelled_ne_tplus(case: str, e: Entry, groups: dict[str, dict[str, Entry]], results: Any, prod: Any
                       ) -> list[GroupCheck]:
    """A labelled additional t+ that says it is the Nernst–Einstein one, judged as what it claims: D+/(D+ + D−)
    of the run's own self-diffusion coefficients of the cation and the anion (its charges, else the results'
    system, else the production topology's), within :data:`REL_TOL` (``labelled_extra_off_its_formula``).
    Nothing is compared when it names no NE formula or the two D are not found."""
    text = " ".join(str(e.raw.get(k, "")) for k in ("label", "definition", "formula", "note", "description"))
    if not e.finite_value or not _NE_WORDS.search(text + " " + e.key):
        return []
    system = results.get("system") if isinstance(results, dict) and isinstance(results.get("system"), dict) else {}
    q = _charges(e.raw) or {str(k): float(v) for k, v in (system.get("charges_e") or {}).items()
                            if _num(v) is not None} or dict((getattr(prod, "extra", None) or {}).get("charges_e") or {})
    pos, neg = [s for s, z in q.items() if z > 1e-3], [s for s, z in q.items() if z < -1e-3]
    if len(pos) != 1 or len(neg) != 1:
        return []
    diff = {k: d for k, d in (groups.get(SELF_DIFFUSION_GROUP.name) or {}).items() if d.finite_value and d.value > 0
            and not is_labelled_extra(d.raw)}

    def d_of(species: str) -> float | None:
        hit = [d.value for k, d in diff.items() if species.lower() in set(re.split(r"[^a-z0-9+]+", k.lower()))]
        return hit[0] if len(hit) == 1 else None

    dp, dm = d_of(pos[0]), d_of(neg[0])
    if dp is None or dm is None:
        return []
    want = dp / (dp + dm)
    if abs(e.value - want) <= max(REL_TOL * abs(want), 0.005):
        return []
    return [GroupCheck(TRANSFERENCE_GROUP.name, check(
        "labelled_extra_off_its_formula", f"{e.key} = {e.value:.4g}, labelled a Nernst–Einstein t+, is not "
        f"D+/(D+ + D−) of the run's own D ({pos[0]} {dp:.4g}, {neg[0]} {dm:.4g} → {want:.4g})",
        _ev(case, e, "value")))]


def _ionicity(case: str, entries: dict[str, Entry]) -> list[GroupCheck]:
    ion = next((e for k, e in entries.items() if _IONICITY.search(k) and e.finite_value), None)
    if ion is None:
        return []
    ne = next((e for k, e in entries.items() if re.search(r"(^|[._/])(sigma_?ne|nernst)", k, re.I)
               and e.finite_value and e is not ion), None)
    sig = next((e for k, e in entries.items() if e.finite_value and e is not ion and e is not ne
                and re.search(r"(^|[._/])(sigma|conductivity)$", k, re.I)), None)
    if ne is None or sig is None or ne.value == 0:
        return []
    want = sig.value / ne.value
    if "haven" in ion.key.lower():
        want = 1.0 / want if want else math.nan
    if math.isfinite(want) and abs(ion.value - want) > REL_TOL * max(abs(want), 0.01):
        return [GroupCheck(_SIGMA_GROUP, check("ionicity_inconsistent",
                                          f"{ion.key} = {ion.value:.4g}, its own σ / σ_NE = {sig.value:.4g} / "
                                          f"{ne.value:.4g} = {want:.4g}", _ev(case, ion, "ionicity")))]
    return []


def checks(run: RunData, case: str, prod: Any) -> list[GroupCheck]:
    """Every internal-consistency check of one case's results.json (nothing when it has none)."""
    groups = group_entries(run.results.get(case))
    out: list[GroupCheck] = []
    for group, entries in groups.items():
        for e in entries.values():
            out += _whole_vs_blocks(case, group, e)
    cond, tp = groups.get(CONDUCTIVITY_GROUP.name) or {}, groups.get(TRANSFERENCE_GROUP.name) or {}
    L_any = next((L for e in list(cond.values()) + list(tp.values())
                  if (L := _onsager(e.raw)) is not None and _normalised_unit(e.raw)), None)
    ne = [e for e in tp.values() if is_labelled_extra(e.raw)]
    cond = {k: e for k, e in cond.items() if not is_labelled_extra(e.raw)}  # judged as what they claim, not σ/t+
    tp = {k: e for k, e in tp.items() if not is_labelled_extra(e.raw)}
    for e in ne:
        out += _labelled_ne_tplus(case, e, groups, run.results.get(case), prod)
    for e in cond.values():
        if _IONICITY.search(e.key) or re.search(r"(sigma_?ne|nernst)", e.key, re.I):
            continue
        details = e.raw.get("details") if isinstance(e.raw.get("details"), dict) else {}
        S = e.raw.get("sigma_ij_S_m", details.get("sigma_ij_S_m"))
        own = _onsager(e.raw) if _normalised_unit(e.raw) else None
        out += _sigma_checks(case, e, own or L_any, _ion_charges(e.raw, prod), S)
        break  # the collective σ: the group's first entry
    for e in tp.values():
        own = _tplus_checks(case, e, _onsager(e.raw))
        out += own or _pipeline_tplus_checks(case, e, run.results.get(case), cond)
    res = run.results.get(case)
    flat = dict(cond)
    if isinstance(res, dict) and isinstance(res.get("observables"), dict):  # σ_NE and ionicity sit beside σ
        for k, v in list(res["observables"].items())[:500]:
            if isinstance(k, str) and (_IONICITY.search(k) or re.search(r"sigma_?ne|nernst", k, re.I)):
                e = as_entry(f"observables.{k}", v)
                if e is not None:
                    flat[e.key] = e
    out += _ionicity(case, flat)
    return out


# ---------------------------------------------------------------------------------------------- CN vs g(r)
#: Keys under which a coordination result may carry (or cite) the RDF it integrates.
RDF_KEYS = (RDF.name, "g_r", "rdf_file", "rdf_curve")
#: Relative tolerance of a CN against the integral of its own RDF (besides the half-bin term).
CN_REL_TOL = 0.05
#: Largest recorded RDF read [bytes] and number of points.
MAX_RDF_BYTES = 4 << 20
MAX_RDF_POINTS = 200_000
_NUM_ROW = re.compile(r"^\s*([-+0-9.eE]+)[\s,;]+([-+0-9.eE]+)")


def _rdf_arrays(r: Any, g: Any) -> tuple[np.ndarray, np.ndarray] | None:
    if not (isinstance(r, list) and isinstance(g, list)) or len(r) != len(g) or not 3 <= len(r) <= MAX_RDF_POINTS:
        return None
    try:
        ra, ga = np.asarray(r, dtype=np.float64), np.asarray(g, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if ra.ndim != 1 or ga.ndim != 1 or not (np.all(np.isfinite(ra)) and np.all(np.isfinite(ga))
                                           and np.all(np.diff(ra) > 0) and ra[0] >= 0):
        return None
    return ra, ga


def recorded_rdf(run: RunData, case: str, raw: dict) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(r [nm], g(r), source) of the RDF a coordination result carries inline (``{"r_nm": [...], "g_r": [...]}``
    under :data:`RDF_KEYS` or ``curves``) or cites as a two-column file (xvg/csv/dat, run-relative or relative to
    ``analysis/<case>/``, read through the run's safe reader); None when it records none or an unusable one."""
    for key in (*RDF_KEYS, "curves"):
        val = raw.get(key)
        if isinstance(val, dict):
            r = next((val[k] for k in ("r_nm", "r") if k in val), None)
            g = next((val[k] for k in ("g_r", "g", RDF.name) if k in val), None)
            got = _rdf_arrays(r, g)
            if got is not None:
                return got[0], got[1], f"inline {key!r}"
        elif isinstance(val, str) and key != "curves" and len(val) < 512 and ".." not in val.split("/"):
            rel = val if val.startswith(("analysis/", "cases/")) else f"analysis/{case}/{val}"
            text = run.fs.read_text(rel, item="E3", follow_symlinks=False, max_bytes=MAX_RDF_BYTES)
            if not text:
                continue
            rows = [(float(m.group(1)), float(m.group(2))) for line in text.splitlines()[:MAX_RDF_POINTS]
                    if not line.lstrip().startswith(("#", "@")) and (m := _NUM_ROW.match(line))]
            got = _rdf_arrays([a for a, _ in rows], [b for _, b in rows])
            if got is not None:
                return got[0], got[1], rel
    return None


def rdf_integral(r_nm: np.ndarray, g: np.ndarray, rho_nm3: float, cutoff_nm: float) -> tuple[float, float]:
    """(CN, its discretisation allowance) of :math:`4\\pi\\rho\\int_0^{r_c} g(r) r^2 dr` by the trapezoid rule on
    the recorded points (the curve interpolated at :math:`r_c`); the allowance is the half-bin term
    :math:`4\\pi\\rho r_c^2 g(r_c) \\Delta r / 2`."""
    rc = float(cutoff_nm)
    keep = r_nm < rc
    gc = float(np.interp(rc, r_nm, g))
    r = np.r_[r_nm[keep], rc]
    y = np.r_[g[keep], gc] * r ** 2
    cn = 4.0 * math.pi * rho_nm3 * float(np.sum(0.5 * (y[1:] + y[:-1]) * np.diff(r)))
    dr = float(np.median(np.diff(r_nm)))
    return cn, 4.0 * math.pi * rho_nm3 * rc * rc * abs(gc) * dr / 2.0


def _partner_density(run: RunData, case: str, e: Entry, prod: Any) -> tuple[float, str] | None:
    """(ρ [nm⁻³], how) of the partner atoms of a coordination result: the density it records, else the number
    of atoms named by its selection (the entry's or the registered coordination definition's ``A-B``, atom
    name B in the production topology) over the production's mean volume."""
    raw = e.raw
    for k in ("number_density_nm3", "partner_number_density_nm3", "rho_nm3"):
        v = _num(raw.get(k))
        if v is not None and v > 0:
            return v, f"its recorded {k}"
    vol = _num(raw.get("volume_nm3")) or _num(((getattr(prod, "extra", None) or {}).get("volume_nm3_mean")))
    tpr = getattr(prod, "tpr", None)
    if not vol or vol <= 0 or tpr is None:
        return None
    sel = raw.get("selection")
    if not isinstance(sel, str):
        reg = run.in_force(COORDINATION_GROUP.name, case=case)
        d = reg[0].get("definition") if reg and isinstance(reg[0].get("definition"), dict) else {}
        sel = d.get("selection") if isinstance(d.get("selection"), str) else None
    if not sel or not re.fullmatch(r"\s*[A-Za-z0-9_+]+\s*[-–]\s*[A-Za-z0-9_]+\s*", sel[:64]):
        return None
    atom = re.split(r"[-–]", sel)[-1].strip()
    try:
        names = np.asarray(tpr_universe(run, tpr).atoms.names).astype(str)
    except Exception:  # noqa: BLE001 - no topology: no density, nothing compared
        return None
    n = int(np.sum(names == atom))
    if n == 0:
        return None
    return n / vol, f"{n} {atom} atoms (selection {sel.strip()!r}) / {vol:.4g} nm^3"


def cn_checks(run: RunData, case: str, prod: Any) -> list[GroupCheck]:
    """``cn_inconsistent_with_own_rdf`` (A3, F): a coordination number that is not
    :math:`4\\pi\\rho\\int_0^{r_c} g(r) r^2 dr` of the run's own recorded RDF (:func:`recorded_rdf`) with its own
    cutoff and the partner density of the run (:func:`_partner_density`), beyond :data:`CN_REL_TOL` plus the
    half-bin allowance. Both numbers in the message."""
    out: list[GroupCheck] = []
    cn_group = COORDINATION_GROUP.name
    for e in list((group_entries(run.results.get(case)).get(cn_group) or {}).values())[:50]:
        if not e.finite_value or e.value <= 0:
            continue
        rc = _num(e.raw.get("cutoff_nm"))
        curve = recorded_rdf(run, case, e.raw) if rc is not None and rc > 0 else None
        if curve is None or curve[0][-1] < rc or curve[0][0] > 0.5 * rc:
            continue
        dens = _partner_density(run, case, e, prod)
        if dens is None:
            continue
        with np.errstate(all="ignore"):  # a hostile curve may hold numbers near the float range's ends
            cn, allow = rdf_integral(curve[0], curve[1], dens[0], rc)
        if not math.isfinite(cn) or abs(e.value - cn) <= CN_REL_TOL * abs(cn) + allow:
            continue
        out.append(GroupCheck(cn_group, check(
            "cn_inconsistent_with_own_rdf", f"{e.key} = {e.value:.4g} is not the integral of its "
            f"own RDF ({curve[2]}): 4πρ∫₀^{rc:g} g(r) r² dr = {cn:.4g} (ρ = {dens[0]:.4g} nm^-3 from {dens[1]}; "
            f"tolerance {100 * CN_REL_TOL:g} % + {allow:.2g})", _ev(case, e, RDF.name))))
    return out


# ------------------------------------------------------------------------ σ classified by its charges
#: A weighting is told apart only when it changes σ by at least this factor (log distance from the model's).
CHARGE_CLASS_MIN_FACTOR = 1.15
#: A reported σ is classified as a weighting when its log ratio to the reference lies within this fraction of
#: the weighting's log distance from the model's (and at least 1 − this fraction of it away from the model).
CHARGE_CLASS_FRACTION = 0.25


def charge_weightings(L: np.ndarray, species: list[str], charges: dict[str, float]) -> dict[str, float]:
    """σ under other charges relative to σ at the model's charges, :math:`\\sum c_i c_j L^{ij} / \\sum q_i q_j
    L^{ij}`, from an unweighted Onsager matrix: ``formal`` (each ion's charge rounded to its integer, ±1 for a
    model scaled to ±0.72: × 1/0.72² = 1.93) and ``unsigned`` (every ion weighted +1: cross terms added).
    Empty when the model's σ vanishes or the matrix does not match the species."""
    L = np.asarray(L, dtype=np.float64)
    if L.shape != (len(species), len(species)) or not np.all(np.isfinite(L)):
        return {}
    q = np.array([float(charges.get(s, 0.0)) for s in species])
    ions = np.abs(q) > 1e-3
    model = weighted_sum(L, q)
    if not ions.any() or model == 0 or not math.isfinite(model):
        return {}
    formal = np.where(ions, np.where(np.rint(q) != 0, np.rint(q), np.sign(q)), 0.0)
    unsigned = ions.astype(np.float64)
    return {"formal": weighted_sum(L, formal) / model, "unsigned": weighted_sum(L, unsigned) / model}


def classify_sigma(ratio: float, weightings: dict[str, float]) -> str | None:
    """The weighting (of :func:`charge_weightings`) that a reported σ / the model's σ = ``ratio`` follows, when it
    follows one clearly (module constants); None when it follows the model's charges or none clearly."""
    if not (math.isfinite(ratio) and ratio > 0):
        return None
    lr = math.log(ratio)
    for name, k in weightings.items():
        if not (math.isfinite(k) and k > 0) or abs(math.log(k)) < math.log(CHARGE_CLASS_MIN_FACTOR):
            continue
        lk = math.log(k)
        if abs(lr - lk) <= CHARGE_CLASS_FRACTION * abs(lk) and abs(lr) >= (1 - CHARGE_CLASS_FRACTION) * abs(lk):
            return name
    return None


def sigma_charge_checks(run: RunData, case: str, canonical_results: Any, prod: Any, refit: Any = None
                        ) -> list[GroupCheck]:
    """``charge_weighting_differs`` (A2, F): a collective σ *without* a recorded matrix, classified by the charges
    that reproduce it from the canonical Onsager matrix of the same trajectory (:func:`charge_weightings`,
    :func:`classify_sigma`): σ at formal ±1 charges under a model scaled to ±0.72 (× 1.93), or with unsigned
    weights. The reference σ is the canonical one on the window the result reports (re-fitted where it differs,
    :class:`~mdbench.audit.transport.WindowRefit`), else the canonical σ. A definition error: F in every case
    where it is present, whatever the sampling state."""
    if not isinstance(canonical_results, dict):
        return []
    cond = group_entries(run.results.get(case)).get(CONDUCTIVITY_GROUP.name) or {}
    sig = next((e for e in cond.values() if not _IONICITY.search(e.key) and not is_labelled_extra(e.raw)
                and not re.search(r"(sigma_?ne|nernst)", e.key, re.I)), None)
    if sig is None or not sig.finite_value or sig.value <= 0:
        return []
    det = sig.raw.get("details") if isinstance(sig.raw.get("details"), dict) else {}
    if _onsager(sig.raw) is not None or isinstance(sig.raw.get("sigma_ij_S_m", det.get("sigma_ij_S_m")), list) \
            or isinstance(det.get("L"), dict):
        return []  # a recorded matrix: _sigma_checks compares with it
    ons = canonical_results.get("onsager") if isinstance(canonical_results.get("onsager"), dict) else {}
    L = (ons.get("L") or {}).get("whole") if isinstance(ons.get("L"), dict) else None
    species, charges = ons.get("species"), ons.get("charges_e")
    canon = (group_entries(canonical_results).get(CONDUCTIVITY_GROUP.name) or {})
    ref = next((e for k, e in canon.items() if k.rsplit("/", 1)[-1] == "sigma" and e.finite_value), None)
    if not isinstance(L, list) or not isinstance(species, list) or not isinstance(charges, dict) or ref is None:
        return []
    try:
        ks = charge_weightings(np.asarray(L, dtype=np.float64), [str(s) for s in species], charges)
    except (TypeError, ValueError):
        return []
    ref_value, ref_label = ref.value, f"canonical {ref.key}"
    try:
        win, cwin = reported_window(sig.raw), reported_window(ref.raw)
        if refit is not None and win is not None and not (cwin is not None and same_window(win, cwin, 0.0)):
            rf = refit.collective(ref.key.split(".", 1)[-1] if ref.key.startswith("observables.") else ref.key, win)
            if rf is not None and rf.value > 0:
                ref_value, ref_label = rf.value, f"canonical {ref.key} re-fitted on [{win[0]:g}, {win[1]:g}] ps"
    except Exception:  # noqa: BLE001 - no re-fit: the canonical window's σ
        pass
    if not ref_value or ref_value <= 0:
        return []
    if ref_label != f"canonical {ref.key}":  # re-fitted: the weightings of the matrix on that window
        try:
            o = refit.onsager(win)
            ks = charge_weightings(np.asarray(o.L_matrix), list(o.species), dict(o.charges_e)) or ks
        except Exception:  # noqa: BLE001 - the canonical window's weightings
            pass
    name = classify_sigma(sig.value / ref_value, ks)
    if name is None:
        return []
    q = ", ".join(f"{s} {float(charges.get(s, 0)):+g}" for s in species if abs(float(charges.get(s, 0))) > 1e-3)
    return [GroupCheck(CONDUCTIVITY_GROUP.name, check(
        "charge_weighting_differs", f"{sig.key} = {sig.value:.4g} S/m is {sig.value / ref_value:.3g} × "
        f"the σ at the model's charges ({q}: {ref_value:.4g} S/m, {ref_label}); the same trajectory's Onsager "
        f"matrix gives × {ks[name]:.3g} with {name} charges: σ computed with {name} charges, not the model's — a "
        "definition error, F whatever the sampling", _ev(case, sig, "value")))]
