r"""Collective (Einstein) Onsager coefficients, conductivity with cross-correlations, ionicity, t+.

For species *i* with molecules α the collective displacement is
:math:`\Delta R_i(t) = \sum_\alpha [r_\alpha(t_0+t) - r_\alpha(t_0)]`, in the barycentric frame (the
total-mass-weighted centre of ALL atoms, solvent included, is subtracted from every molecule).

.. math::

    L^{ij} = \frac{1}{6 k_B T V}\frac{d}{dt}\langle \Delta R_i(t)\cdot\Delta R_j(t)\rangle, \qquad
    \langle \Delta R_i\cdot\Delta R_j\rangle = \tfrac12\left[\mathrm{MSD}(R_i+R_j)-\mathrm{MSD}(R_i)
    -\mathrm{MSD}(R_j)\right]

    \sigma = e^2 \sum_{ij} z_i z_j L^{ij}, \qquad
    \sigma_{NE} = \frac{e^2}{k_B T V}\sum_i z_i^2 N_i D_i \;(\text{additional, labelled}),\qquad
    \text{ionicity} = \sigma/\sigma_{NE}

Slopes are linear least-squares fits of the correlation vs lag over one registered window (cross terms
can be negative; no log-space fit). V is the mean volume of the analysed window. ``z`` are the model's
charges per molecule as declared (e.g. scaled ±0.72 e). L units: 1/(J m s); σ: S/m (1 S/m = 10 mS/cm).

Transference number of the cation (frame and convention always stated):

* unweighted L:  :math:`t_+ = \sum_j z_+ z_j L^{+j} / \sum_{ij} z_i z_j L^{ij}`
  (1:1: :math:`(L^{++}-L^{+-})/(L^{++}+L^{--}-2L^{+-})`)
* charge-weighted :math:`\sigma_{ij} = e^2 z_i z_j L^{ij}`:
  :math:`t_+ = \sum_j \sigma_{+j} / \sum_{ij}\sigma_{ij}` (1:1: :math:`(\sigma_{++}+\sigma_{+-})/
  (\sigma_{++}+\sigma_{--}+2\sigma_{+-})`)

Both are the same number when each is applied to its own matrix; mixing them is a convention error that
:func:`transference_conventions` exposes. Solvent frame with reference species 0:
:math:`L_0^{ij} = L^{ij} - (N_j/N_0)L^{i0} - (N_i/N_0)L^{0j} + (N_iN_j/N_0^2)L^{00}`.

References
----------
France-Lanord & Grossman, Phys. Rev. Lett. 122, 136001 (2019), doi:10.1103/PhysRevLett.122.136001
Fong et al., Macromolecules 53, 8901 (2020), doi:10.1021/acs.macromol.0c01547
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from mdbench.analysis.adequacy import PRECISION, PrecisionBound, adequacy_checks, withheld
from mdbench.analysis.blocks import BlockEstimate, BlockWindows, _json_float, block_estimate, block_windows
from mdbench.analysis.diffusion import fit_slope, msd_each_series, msd_fft, msd_fft_windows
from mdbench.analysis.estimator import Estimate, EstimatorBase, Measurement
from mdbench.analysis.observables import CONDUCTIVITY, SELF_DIFFUSION, TRANSFERENCE
from mdbench.analysis.reduce.series import as_positions, count_non_finite_positions, molecule_sum
from mdbench.analysis.states import classify_observable, classify_result, resolved_zero
from mdbench.analysis.thermo import coverage_check
from mdbench.analysis.units import (E_CHARGE_C, KB_J_PER_K, NM2_PER_PS_TO_M2_PER_S, NM3_M3,
                                    as_float64)
from mdbench.errors import InputError
from mdbench.analysis.settings import AnalysisSettings, registered

logger = logging.getLogger(__name__)

L_UNIT = "1/(J*m*s)"
CONVENTION_UNWEIGHTED = "unweighted_L"
CONVENTION_CHARGE_WEIGHTED = "charge_weighted_sigma"
FORMULA_UNWEIGHTED = "t+ = sum_j z+ z_j L^{+j} / sum_ij z_i z_j L^{ij}"
FORMULA_CHARGE_WEIGHTED = "t+ = sum_j sigma_{+j} / sum_ij sigma_{ij}, sigma_ij = e^2 z_i z_j L^{ij}"


@dataclass(frozen=True)
class TransferenceCheck:
    """Cation transference number recomputed under both conventions and under the two mix-ups.

    Attributes
    ----------
    t_plus_unweighted_L : float
        Unweighted-L formula applied to L (correct).
    t_plus_charge_weighted : float
        Charge-weighted formula applied to σ_ij = e² z_i z_j L^{ij} (correct; equals the former).
    t_plus_mixed_L_in_weighted : float
        Mix-up: unweighted L inserted in the charge-weighted formula, Σ_j L^{+j}/Σ_ij L^{ij} over ions.
    t_plus_mixed_sigma_in_unweighted : float
        Mix-up: σ_ij inserted in the unweighted formula, Σ_j z+ z_j σ_{+j}/Σ z_i z_j σ_ij.
    consistent : bool
        True when both correct conventions agree (rtol 1e-9).
    """

    t_plus_unweighted_L: float
    t_plus_charge_weighted: float
    t_plus_mixed_L_in_weighted: float
    t_plus_mixed_sigma_in_unweighted: float
    consistent: bool

    def as_dict(self) -> dict[str, float]:
        """Name → value of the four formulas."""
        return {"unweighted_L": self.t_plus_unweighted_L, "charge_weighted_sigma": self.t_plus_charge_weighted,
                "mixed_L_in_weighted": self.t_plus_mixed_L_in_weighted,
                "mixed_sigma_in_unweighted": self.t_plus_mixed_sigma_in_unweighted}


@dataclass
class TransferenceEstimate:
    """t+ in one frame under one convention, whole and per block (computed per block, not pooled).

    Attributes
    ----------
    frame : str
        ``"barycentric"`` or ``"solvent"``.
    reference_species : str or None
        Reference species of the solvent frame.
    convention : str
        ``"unweighted_L"`` or ``"charge_weighted_sigma"``.
    formula : str
        The formula used.
    cation : str
        Species whose transference number this is.
    t_plus : BlockEstimate
        Dimensionless.
    """

    frame: str
    reference_species: str | None
    convention: str
    formula: str
    cation: str
    t_plus: BlockEstimate

    @property
    def key(self) -> str:
        """``barycentric/unweighted_L`` or ``solvent:DMC/charge_weighted_sigma``."""
        f = self.frame if self.reference_species is None else f"{self.frame}:{self.reference_species}"
        return f"{f}/{self.convention}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        d = self.t_plus.to_dict()
        d.update({"frame": self.frame, "reference_species": self.reference_species,
                  "convention": self.convention, "formula": self.formula, "cation": self.cation})
        return d


@dataclass
class OnsagerResult:
    """Onsager matrix, conductivity, Nernst–Einstein conductivity, ionicity and t+ (whole and blocks).

    Attributes
    ----------
    species : list of str
        Order of rows/columns of every matrix.
    charges_e : dict
        Charge per molecule of each species [e] as declared by the model.
    n_molecules : dict
        Molecules per species.
    temperature_K : float
        Temperature used [K].
    volume_nm3 : float
        Mean volume of the whole analysed window [nm^3].
    frame : str
        Frame of ``L_matrix`` (``"barycentric"`` or ``"as given (lab)"``).
    reference_species : str or None
        Reference of the solvent frame (``L_solvent``), when requested.
    fit_window_ps : tuple of float
        Lag window of the linear fits [ps].
    fit_rule : str
        Window rule.
    L_matrix : numpy.ndarray, shape (S, S)
        Whole-interval L^{ij} [1/(J m s)].
    L_blocks : list of numpy.ndarray
        Per-block L^{ij}.
    L_solvent, L_solvent_blocks : numpy.ndarray or None
        Solvent-frame matrices.
    L_self : numpy.ndarray, shape (S,)
        Self part N_i D_i/(k_B T V) [1/(J m s)].
    sigma_ij_S_m : numpy.ndarray, shape (S, S)
        e² z_i z_j L^{ij} [S/m].
    sigma : BlockEstimate
        Collective conductivity incl. cross-correlations [S/m].
    sigma_NE : BlockEstimate
        Nernst–Einstein conductivity [S/m] — additional, labelled result only.
    ionicity : BlockEstimate
        σ/σ_NE (dimensionless).
    self_diffusion_m2_s : dict
        D_i used for σ_NE (same frame and window) [m^2/s].
    self_diffusion_blocks_m2_s : dict
        D_i of each block, fitted over the same lags as σ_NE's [m^2/s]: what σ_NE's block values are made
        of, so a reader sees which ion's D drives its block scatter.
    transference : list of TransferenceEstimate
        t+ in each frame × convention.
    charge_msd_lag_ps, charge_msd_e2nm2 : numpy.ndarray
        ⟨|ΔM|²⟩ with M = Σ z_i R_i [e² nm²] (whole interval).
    charge_msd_beta : float
        Log–log slope of ⟨|ΔM|²⟩ fitted over the window (diffusive ≈ 1).
    barycentre_drift_nm : float
        Largest barycentre displacement in the window [nm].
    windows : BlockWindows
        Guard and blocks.
    failures : list of str
        → F.
    sampling_checks : dict of str to bool
        ``collective_regime`` (charge-MSD β within range), ``sigma_block_precision`` / ``_block_trend``,
        ``ionicity_…`` and ``t_plus_…`` of the barycentric unweighted t+ (→ SI; every t+ variant is judged
        on its own blocks by :meth:`state_inputs`).
    check_details : dict of str to str
        The numbers behind each check.
    precision : dict
        The registered bounds: ``sigma`` and ``ionicity``/``t_plus`` :class:`~mdbench.analysis.adequacy.
        PrecisionBound` and ``trend_alpha``.
    """

    species: list[str]
    charges_e: dict[str, float]
    n_molecules: dict[str, int]
    temperature_K: float
    volume_nm3: float
    frame: str
    reference_species: str | None
    fit_window_ps: tuple[float, float]
    fit_rule: str
    L_matrix: np.ndarray
    L_blocks: list[np.ndarray]
    L_solvent: np.ndarray | None
    L_solvent_blocks: list[np.ndarray] | None
    L_self: np.ndarray
    sigma_ij_S_m: np.ndarray
    sigma: BlockEstimate
    sigma_NE: BlockEstimate
    ionicity: BlockEstimate
    self_diffusion_m2_s: dict[str, float]
    transference: list[TransferenceEstimate]
    charge_msd_lag_ps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    charge_msd_e2nm2: np.ndarray = field(default_factory=lambda: np.zeros(0))
    charge_msd_beta: float = float("nan")
    barycentre_drift_nm: float = float("nan")
    windows: BlockWindows | None = None
    failures: list[str] = field(default_factory=list)
    sampling_checks: dict[str, bool] = field(default_factory=dict)
    check_details: dict[str, str] = field(default_factory=dict)
    precision: dict[str, Any] = field(default_factory=dict)
    self_diffusion_blocks_m2_s: dict[str, list[float]] = field(default_factory=dict)

    @property
    def sigma_S_m(self) -> float:
        """Whole-interval σ [S/m]."""
        return self.sigma.whole

    @property
    def sigma_NE_S_m(self) -> float:
        """Whole-interval Nernst–Einstein σ_NE [S/m] (additional result)."""
        return self.sigma_NE.whole

    def t_plus(self, convention: str = CONVENTION_UNWEIGHTED, frame: str = "barycentric") -> TransferenceEstimate:
        """The transference estimate for a convention and frame (``"barycentric"`` or ``"solvent"``)."""
        for te in self.transference:
            if te.convention == convention and te.frame == frame:
                return te
        raise KeyError(f"no t+ for frame={frame!r}, convention={convention!r}")

    @property
    def t_plus_unweighted_L(self) -> float:
        """Barycentric whole-interval t+ by the unweighted-L convention."""
        return self.t_plus(CONVENTION_UNWEIGHTED).t_plus.whole

    @property
    def t_plus_charge_weighted(self) -> float:
        """Barycentric whole-interval t+ by the charge-weighted convention."""
        return self.t_plus(CONVENTION_CHARGE_WEIGHTED).t_plus.whole

    def L(self, i: str, j: str) -> float:
        """Whole-interval L^{ij} by species labels [1/(J m s)]."""
        return float(self.L_matrix[self.species.index(i), self.species.index(j)])

    def sigma_resolved_zero_reason(self) -> str | None:
        """The resolved-zero rule (:func:`mdbench.analysis.states.resolved_zero`) applied to σ: zero within its
        95 % interval and |σ| + half-width at most the registered ionicity bound × σ_NE (its lower 95 % limit,
        so an imprecise σ_NE cannot make a zero look resolved). None when σ is not a resolved zero."""
        rules = self.precision or _default_precision()
        ne = self.sigma_NE
        scale = ne.whole - ne.half_width_95 if math.isfinite(ne.half_width_95) else float("nan")
        why = resolved_zero(self.sigma.whole, self.sigma.half_width_95, scale, rules["ionicity"].abs)
        return None if why is None else f"sigma {why.removeprefix('value ')} (scale: lower 95 % limit of sigma_NE) S/m"

    def sigma_not_estimable_reason(self) -> str | None:
        """Why a ratio over σ (t+) has no value: σ is a resolved zero (:meth:`sigma_resolved_zero_reason`), so
        more sampling would only confirm σ ≈ 0. A σ that is merely imprecise (a wide interval about zero) leaves
        t+ SI, not this."""
        why = self.sigma_resolved_zero_reason()
        if why is None:
            return None
        return (f"{why}: t+ = sum_j sigma_+j / sigma has no defined value (ions move as neutral pairs or "
                "clusters); more sampling cannot give it one")

    def state_inputs(self, observable: str = "sigma", transference: TransferenceEstimate | None = None, *,
                     input_states: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Inputs for the state classifier for ``sigma``, ``sigma_NE``, ``ionicity`` or ``t_plus`` (of
        ``transference``, default the barycentric unweighted-L one).

        Every one gets the precision bound and the block-trend check (σ_NE: σ's relative bound). Derived
        values carry their inputs' states (rule 8 of :mod:`mdbench.analysis.states`): σ_NE those given in
        ``input_states`` (the ions' self-diffusion states, by observable name), σ/σ_NE those of σ and σ_NE.
        A resolved-zero σ (the one rule of :func:`mdbench.analysis.states.resolved_zero`) makes σ and σ/σ_NE
        resolved zeros (no relative-precision or charge-MSD regime check: neither applies to a zero) and t+
        not_estimable."""
        common_fail = list(self.failures)
        rules = self.precision or _default_precision()
        regime = ({"collective_regime": self.sampling_checks["collective_regime"]}
                  if "collective_regime" in self.sampling_checks else {})
        details = {"collective_regime": self.check_details.get("collective_regime", "")}
        not_estimable = None
        zero = None
        inputs: dict[str, Any] = {}
        if observable == "sigma":
            est, prefix, bound = self.sigma, "sigma_", rules["sigma"]
            zero = self.sigma_resolved_zero_reason()
        elif observable == "sigma_NE":
            est, prefix, bound = self.sigma_NE, "sigma_NE_", rules["sigma"]
            regime = {}
            inputs = dict(input_states or {})
        elif observable == "ionicity":
            est, prefix, bound = self.ionicity, "ionicity_", rules["ionicity"]
            zero = self.sigma_resolved_zero_reason()
            inputs = {f"{CONDUCTIVITY.name}/{k}": classify_observable(**self.state_inputs(k, input_states=input_states))
                      for k in ("sigma", "sigma_NE")}
        elif observable == "t_plus":
            te = transference or (self.t_plus(CONVENTION_UNWEIGHTED) if self.transference else None)
            if te is None:
                return {"values": None, "failures": common_fail + ["no cation: t+ undefined"],
                        "sampling_checks": {}}
            est, prefix, bound = te.t_plus, "t_plus_", rules["t_plus"]
            not_estimable = self.sigma_not_estimable_reason()
        else:
            raise KeyError(f"unknown observable {observable!r}")
        checks, why = adequacy_checks(prefix, est, bound, rules["trend_alpha"])
        checks = {**regime, **checks}
        if zero is not None:  # a zero has no relative precision, and a bounded charge MSD is what it looks like
            checks = {k: ok for k, ok in checks.items() if k not in ("collective_regime", prefix + PRECISION)}
        return {"values": [est.whole, *est.blocks], "failures": common_fail, "sampling_checks": checks,
                "check_details": {**details, **why}, "not_estimable": not_estimable, "inputs": inputs,
                "resolved_zero": zero}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict with every estimate, its definition, window and diagnostics."""
        def mat(a: np.ndarray | None) -> list[list[float | None]] | None:
            return None if a is None else [[_json_float(v) for v in row] for row in np.asarray(a)]

        sigma = self.sigma.to_dict()
        sigma["definition"] = "sigma = e^2 sum_ij z_i z_j L^ij (collective, includes ionic cross-correlations)"
        sne = self.sigma_NE.to_dict()
        sne["label"] = "Nernst-Einstein (additional result; neglects ion correlations)"
        return {
            "species": list(self.species),
            "charges_e": dict(self.charges_e),
            "charges_note": "model charges as declared (per molecule)",
            "n_molecules": dict(self.n_molecules),
            "temperature_K": self.temperature_K,
            "volume_nm3": _json_float(self.volume_nm3),
            "frame": self.frame,
            "reference_species": self.reference_species,
            "window": {"fit_window_ps": [_json_float(v) for v in self.fit_window_ps], "rule": self.fit_rule},
            "L": {"unit": L_UNIT, "whole": mat(self.L_matrix), "blocks": [mat(b) for b in self.L_blocks],
                  "self_part": [_json_float(v) for v in self.L_self]},
            "L_solvent": None if self.L_solvent is None else {
                "unit": L_UNIT, "reference_species": self.reference_species, "whole": mat(self.L_solvent),
                "blocks": [mat(b) for b in (self.L_solvent_blocks or [])]},
            "sigma_ij_S_m": mat(self.sigma_ij_S_m),
            "sigma": sigma,
            "sigma_NE": sne,
            "ionicity": self.ionicity.to_dict(),
            "self_diffusion_m2_s": {k: _json_float(v) for k, v in self.self_diffusion_m2_s.items()},
            "self_diffusion_blocks_m2_s": {k: [_json_float(v) for v in b]
                                           for k, b in self.self_diffusion_blocks_m2_s.items()},
            TRANSFERENCE.name: {te.key: te.to_dict() for te in self.transference},
            "diagnostics": {
                "charge_msd_beta": _json_float(self.charge_msd_beta),
                "barycentre_drift_nm": _json_float(self.barycentre_drift_nm),
                "sampling_checks": dict(self.sampling_checks),
                "check_details": dict(self.check_details),
                "failures": list(self.failures),
                "analysis_windows": None if self.windows is None else self.windows.to_dict(),
            },
        }


def _default_precision() -> dict[str, Any]:
    """The library defaults of :func:`onsager_transport` (results built without ``precision``)."""
    return {"sigma": PrecisionBound(rel=0.2), "ionicity": PrecisionBound(abs=0.1), "t_plus": PrecisionBound(abs=0.1),
            "trend_alpha": 0.05}


def _ion_indices(species: Sequence[str], charges: Mapping[str, float], cation: str | None
                 ) -> tuple[int, np.ndarray]:
    z = np.array([float(charges[s]) for s in species], dtype=np.float64)
    if cation is None:
        pos = [i for i, q in enumerate(z) if q > 0]
        if len(pos) != 1:
            raise InputError(f"cannot infer the cation: {len(pos)} positively charged species "
                             f"({[species[i] for i in pos]}); pass cation=...")
        return pos[0], z
    if cation not in species:
        raise InputError(f"cation {cation!r} is not one of the species {list(species)}")
    return list(species).index(cation), z


def transference_number(L: Any, species: Sequence[str], charge_by_species_e: Mapping[str, float], *,
                        cation: str | None = None, convention: str = CONVENTION_UNWEIGHTED) -> float:
    """Cation transference number from an Onsager matrix under one named convention.

    Parameters
    ----------
    L : array_like, shape (S, S)
        For ``unweighted_L``: L^{ij} [any consistent unit]. For ``charge_weighted_sigma``: the
        charge-weighted matrix σ_ij = e² z_i z_j L^{ij} (note: the σ matrix, not L).
    species : sequence of str
        Row/column order.
    charge_by_species_e : mapping
        z_i [e].
    cation : str, optional
        Cation label (inferred when exactly one species is positive).
    convention : str
        ``"unweighted_L"`` or ``"charge_weighted_sigma"``.

    Returns
    -------
    float
        t+ (nan when the denominator is 0 or non-finite).
    """
    A = as_float64(L, "L")
    c, z = _ion_indices(species, charge_by_species_e, cation)
    with np.errstate(divide="ignore", invalid="ignore"):
        if convention == CONVENTION_UNWEIGHTED:
            num = float(np.sum(z[c] * z * A[c, :]))
            den = float(z @ A @ z)
        elif convention == CONVENTION_CHARGE_WEIGHTED:
            ions = z != 0
            num = float(np.sum(A[c, ions]))
            den = float(np.sum(A[np.ix_(ions, ions)]))
        else:
            raise ValueError(f"unknown convention {convention!r}")
        return float(num / den) if den != 0 and math.isfinite(den) else float("nan")


def transference_conventions(L: Any, species: Sequence[str], charge_by_species_e: Mapping[str, float], *,
                             cation: str | None = None) -> TransferenceCheck:
    """Recompute t+ from an unweighted L matrix under both conventions and under both mix-ups.

    Used by the audit to recognise a convention error: a reported t+ that matches
    ``t_plus_mixed_*`` but not the correct conventions was computed with the wrong formula.

    Parameters
    ----------
    L : array_like, shape (S, S)
        Unweighted Onsager matrix L^{ij}.
    species, charge_by_species_e, cation
        As in :func:`transference_number`.

    Returns
    -------
    TransferenceCheck
    """
    A = as_float64(L, "L")
    c, z = _ion_indices(species, charge_by_species_e, cation)
    S = E_CHARGE_C ** 2 * np.outer(z, z) * A
    t_u = transference_number(A, species, charge_by_species_e, cation=species[c], convention=CONVENTION_UNWEIGHTED)
    t_w = transference_number(S, species, charge_by_species_e, cation=species[c],
                              convention=CONVENTION_CHARGE_WEIGHTED)
    t_mix_lw = transference_number(A, species, charge_by_species_e, cation=species[c],
                                   convention=CONVENTION_CHARGE_WEIGHTED)
    t_mix_su = transference_number(S, species, charge_by_species_e, cation=species[c],
                                   convention=CONVENTION_UNWEIGHTED)
    return TransferenceCheck(t_u, t_w, t_mix_lw, t_mix_su,
                             bool(np.isclose(t_u, t_w, rtol=1e-9, atol=1e-12)))


def identify_transference_convention(reported_t_plus: float, L: Any, species: Sequence[str],
                                     charge_by_species_e: Mapping[str, float], *, cation: str | None = None,
                                     rtol: float = 0.02) -> list[str]:
    """Names of the formulas (see :meth:`TransferenceCheck.as_dict`) that reproduce a reported t+.

    Returns e.g. ``["unweighted_L", "charge_weighted_sigma"]`` for a correct value and
    ``["mixed_L_in_weighted"]`` for the classic mix-up; empty when nothing matches within ``rtol``.
    """
    chk = transference_conventions(L, species, charge_by_species_e, cation=cation)
    return [k for k, v in chk.as_dict().items()
            if math.isfinite(v) and math.isclose(v, float(reported_t_plus), rel_tol=rtol, abs_tol=1e-12)]


def solvent_frame(L: Any, species: Sequence[str], n_molecules: Mapping[str, int], reference_species: str
                  ) -> np.ndarray:
    """Transform a barycentric L matrix to the frame of a reference species.

    .. math:: L_0^{ij} = L^{ij} - \\frac{N_j}{N_0}L^{i0} - \\frac{N_i}{N_0}L^{0j} + \\frac{N_i N_j}{N_0^2}L^{00}

    Parameters
    ----------
    L : array_like, shape (S, S)
        Barycentric L^{ij}.
    species : sequence of str
        Order.
    n_molecules : mapping
        N_i per species.
    reference_species : str
        The species whose mean velocity is zero in the new frame (e.g. ``"DMC"``).

    Returns
    -------
    numpy.ndarray, shape (S, S)
        L_0^{ij}; the row/column of the reference becomes 0.
    """
    A = as_float64(L, "L")
    if reference_species not in species:
        raise InputError(f"reference species {reference_species!r} is not one of {list(species)}")
    k = list(species).index(reference_species)
    N = np.array([float(n_molecules[s]) for s in species])
    r = N / N[k]
    return A - np.outer(np.ones_like(r), r) * A[:, [k]] - np.outer(r, np.ones_like(r)) * A[[k], :] \
        + np.outer(r, r) * A[k, k]


def onsager_transport(com_by_species_nm: Mapping[str, Any], charge_by_species_e: Mapping[str, float],
                      time_ps: Any, volume_nm3: float | Any, temperature_K: float, *,
                      system_com_nm: Any | None = None, mass_by_species_amu: Mapping[str, float] | None = None,
                      reference_species: str | None = None, cation: str | None = None, guard_ps: float = 0.0,
                      n_blocks: int | None = None, fit_window_ps: tuple[float, float] | None = None,
                      fit_window_fraction: tuple[float, float] = (0.05, 0.25),
                      beta_range: tuple[float, float] | None = None,
                      max_relative_half_width: float | None = None, t_plus_max_abs_half_width: float | None = None,
                      ionicity_max_abs_half_width: float | None = None, trend_alpha: float | None = None,
                      self_msd_nm2: Mapping[str, Sequence[Any]] | None = None) -> OnsagerResult:
    r"""Onsager L^{ij}, σ (with cross-correlations), σ_NE (labelled), ionicity and t+ per block.

    Parameters
    ----------
    com_by_species_nm : mapping of str to array_like, shape (F, N_s, 3)
        Unwrapped molecular centres of mass per species [nm]; include neutral species (they enter the
        barycentre and the solvent frame). A file-backed
        :class:`~mdbench.analysis.reduce.series.ComSeries` is read lazily: its float64 species sums give
        the collective coordinates, and only self MSDs not given in ``self_msd_nm2`` read it.
    charge_by_species_e : mapping of str to float
        Charge per molecule [e] as declared by the model (e.g. Li +0.72, FSI −0.72, DMC 0).
    time_ps : array_like, shape (F,)
        Evenly spaced frame times [ps].
    volume_nm3 : float or array_like, shape (F,)
        Box volume [nm^3]; the mean over each analysed window is used.
    temperature_K : float
        Temperature [K].
    system_com_nm : array_like, shape (F, 3), optional
        Total-mass-weighted centre of all atoms [nm] (barycentric frame).
    mass_by_species_amu : mapping, optional
        Molecular masses [amu]; used to build the barycentre when ``system_com_nm`` is None.
    reference_species : str, optional
        Also report the solvent frame with this reference species (named in the output).
    cation : str, optional
        Species of t+ (inferred when exactly one species is positive).
    guard_ps : float
        Excluded initial interval [ps].
    n_blocks : int
        Number of blocks (4).
    fit_window_ps : tuple of float, optional
        Registered lag window [ps]; default ``fit_window_fraction`` × block length.
    fit_window_fraction : tuple of float
        Window as fractions of the block length (used when ``fit_window_ps`` is None).
    beta_range : tuple of float
        Accepted log–log slope of the charge MSD over the window (sampling check).
    max_relative_half_width : float
        Sampling threshold on the 95 % half-width / |σ|.
    t_plus_max_abs_half_width, ionicity_max_abs_half_width : float
        Sampling thresholds on the 95 % half-width of t+ and of the ionicity (absolute: both may sit near 0).
    trend_alpha : float
        Blocks' OLS slope with a p-value below this fails ``…_block_trend``.
    self_msd_nm2 : mapping of str to sequence of array_like, optional
        Per-molecule self MSD of each species in the same frame as here (barycentric when a barycentre is
        given), for the whole interval followed by each block of the same guard and blocks, on lags
        0, dt, 2 dt, … [nm^2] — e.g. ``[res.msd_nm2, *res.msd_blocks_nm2]`` of
        :func:`mdbench.analysis.diffusion.self_diffusion`. Used for the self terms (D, σ_NE) instead of
        recomputing the same FFTs; a species whose curves are missing or too short is recomputed.

    Returns
    -------
    OnsagerResult
        Non-finite inputs give nan values with a recorded failure (→ F), not an exception.

    Raises
    ------
    InputError
        Inconsistent shapes, unknown species, missing charges.
    """
    n_blocks = registered(n_blocks, "n_blocks")
    beta_range = registered(beta_range, "onsager_beta_range")
    max_relative_half_width = registered(max_relative_half_width, "sigma_t_plus_max_rel_half_width")
    t_plus_max_abs_half_width = registered(t_plus_max_abs_half_width, "t_plus_max_abs_half_width")
    ionicity_max_abs_half_width = registered(ionicity_max_abs_half_width, "ionicity_max_abs_half_width")
    trend_alpha = registered(trend_alpha, "block_trend_alpha")
    species = list(com_by_species_nm)
    if not species:
        raise InputError("com_by_species_nm is empty")
    missing = [s for s in species if s not in charge_by_species_e]
    if missing:
        raise InputError(f"no charge given for species {missing}; add them to charge_by_species_e")
    arrays = {}
    for s in species:
        a = as_positions(com_by_species_nm[s], f"com_by_species_nm[{s!r}]")
        if a.ndim != 3 or a.shape[2] != 3:
            raise InputError(f"com_by_species_nm[{s!r}] must have shape (F, N, 3), got {a.shape}")
        arrays[s] = a
    F = arrays[species[0]].shape[0]
    if any(a.shape[0] != F for a in arrays.values()):
        raise InputError("all species must have the same number of frames")
    t = as_float64(time_ps, "time_ps")
    if t.shape != (F,):
        raise InputError(f"time_ps has shape {t.shape}, expected ({F},)")
    vol = as_float64(volume_nm3, "volume_nm3")
    if vol.ndim == 0:
        vol = np.full(F, float(vol))
    if vol.shape != (F,):
        raise InputError(f"volume_nm3 must be a scalar or shape ({F},), got {vol.shape}")
    T = float(temperature_K)
    if reference_species is not None and reference_species not in species:
        raise InputError(f"reference species {reference_species!r} is not one of {species}")
    cidx, z = _ion_indices(species, charge_by_species_e, cation)
    cation = species[cidx]
    N = {s: int(arrays[s].shape[1]) for s in species}
    win = block_windows(t, guard_ps, n_blocks)
    dt = win.dt_ps
    failures: list[str] = []
    for s in species:
        nb = count_non_finite_positions(arrays[s])
        if nb:
            failures.append(f"com_by_species_nm[{s!r}] contains {nb} non-finite values")
    if not np.all(np.isfinite(vol)) or np.any(vol[np.isfinite(vol)] <= 0):
        failures.append("volume_nm3 contains non-finite or non-positive values")
    if not (math.isfinite(T) and T > 0):
        failures.append(f"temperature_K = {T} is not a positive finite number")
    frame = "as given (lab)"
    sys_com = None
    if system_com_nm is not None:
        sys_com = as_float64(system_com_nm, "system_com_nm")
        if sys_com.shape != (F, 3):
            raise InputError(f"system_com_nm has shape {sys_com.shape}, expected ({F}, 3)")
        frame = "barycentric"
    elif mass_by_species_amu is not None:
        mtot = sum(float(mass_by_species_amu[s]) * N[s] for s in species)
        sys_com = sum(float(mass_by_species_amu[s]) * molecule_sum(arrays[s]) for s in species) / mtot
        frame = "barycentric"
    if sys_com is not None and not np.all(np.isfinite(sys_com)):
        failures.append("system centre of mass contains non-finite values")

    if fit_window_ps is None:
        lo = max(dt, fit_window_fraction[0] * win.block_length_ps)
        hi = max(lo + dt, fit_window_fraction[1] * win.block_length_ps)
        fit_rule = (f"linear fit over lags [{fit_window_fraction[0]}, {fit_window_fraction[1]}] x block length "
                    f"({win.block_length_ps:g} ps)")
    else:
        lo, hi = map(float, fit_window_ps)
        fit_rule = f"registered fixed lag window [{lo:g}, {hi:g}] ps, linear fit"
    max_lag_frames = int(math.ceil(hi / dt)) + 1
    if hi > win.block_length_ps:
        failures.append(f"fit window upper lag {hi:g} ps exceeds the block length {win.block_length_ps:g} ps")

    S = len(species)
    nan_mat = np.full((S, S), np.nan)
    if failures:
        nanb = block_estimate(float("nan"), [float("nan")] * n_blocks, "S/m")
        return OnsagerResult(
            species=species, charges_e={s: float(charge_by_species_e[s]) for s in species}, n_molecules=N,
            temperature_K=T, volume_nm3=float("nan"), frame=frame, reference_species=reference_species,
            fit_window_ps=(lo, hi), fit_rule=fit_rule, L_matrix=nan_mat, L_blocks=[nan_mat] * n_blocks,
            L_solvent=None, L_solvent_blocks=None, L_self=np.full(S, np.nan), sigma_ij_S_m=nan_mat,
            sigma=nanb, sigma_NE=nanb, ionicity=block_estimate(float("nan"), [float("nan")] * n_blocks, "1"),
            self_diffusion_m2_s={s: float("nan") for s in species}, transference=[], windows=win,
            failures=failures)

    # collective coordinates R_i = sum_alpha r_alpha in the barycentric frame (no per-molecule copy; a
    # file-backed series gives the pass's float64 species sums)
    R = {s: (molecule_sum(arrays[s]) - N[s] * sys_com) if sys_com is not None
         else molecule_sum(arrays[s]) for s in species}
    windows_all = [win.whole, *win.blocks]
    given: dict[str, list[np.ndarray]] = {}
    for s, curves in (self_msd_nm2 or {}).items():
        c = [np.asarray(m, dtype=np.float64) for m in curves]
        if s in arrays and len(c) == len(windows_all) and all(m.ndim == 1 and m.size > max_lag_frames for m in c):
            given[s] = [m[:max_lag_frames + 1] for m in c]

    def self_msd(s: str, sl: slice) -> np.ndarray:
        """Per-molecule MSD of species s over window sl (given, or computed in the barycentric frame for
        all windows at once, one transposition of the positions)."""
        if s not in given:
            given[s] = msd_fft_windows(arrays[s], windows_all, max_lag_frames, reference_nm=sys_com)
        return given[s][windows_all.index(sl)]
    drift = (float(np.max(np.linalg.norm(sys_com[win.whole] - sys_com[win.whole.start], axis=1)))
             if sys_com is not None else float("nan"))

    def window_estimate(sl: slice) -> dict[str, Any]:
        V_m3 = float(np.mean(vol[sl])) * NM3_M3
        kTV = KB_J_PER_K * T * V_m3
        # MSDs of every R_i and every pair sum R_i + R_j in one call: <ΔR_i·ΔR_j> = (MSD(R_i + R_j) −
        # MSD(R_i) − MSD(R_j)) / 2
        pairs = [(a, b) for a in range(S) for b in range(a + 1, S)]
        msds = msd_each_series(np.stack([R[s][sl] for s in species]
                                        + [R[species[a]][sl] + R[species[b]][sl] for a, b in pairs], axis=1),
                               max_lag_frames)
        msd_i = {s: msds[k] for k, s in enumerate(species)}
        msd_pair = {pair: msds[S + n] for n, pair in enumerate(pairs)}
        lag = np.arange(msds.shape[1]) * dt
        L = np.zeros((S, S))
        for a, si in enumerate(species):
            for b in range(a, S):
                sj = species[b]
                if a == b:
                    corr = msd_i[si]
                else:
                    corr = 0.5 * (msd_pair[(a, b)] - msd_i[si] - msd_i[sj])
                slope_m2_s = fit_slope(lag, corr, lo, hi) * NM2_PER_PS_TO_M2_PER_S
                L[a, b] = L[b, a] = slope_m2_s / (6.0 * kTV)
        D = {}
        for s in species:
            m = self_msd(s, sl)
            D[s] = fit_slope(lag[:m.size], m, lo, hi) / 6.0 * NM2_PER_PS_TO_M2_PER_S
        L_self = np.array([N[s] * D[s] / kTV for s in species])
        sig_ij = E_CHARGE_C ** 2 * np.outer(z, z) * L
        sigma = float(sig_ij.sum())
        sigma_ne = float(E_CHARGE_C ** 2 * np.sum(z ** 2 * L_self))
        with np.errstate(divide="ignore", invalid="ignore"):
            ionicity = sigma / sigma_ne if sigma_ne != 0 else float("nan")
        out = {"L": L, "D": D, "L_self": L_self, "sig_ij": sig_ij, "sigma": sigma, "sigma_ne": sigma_ne,
               "ionicity": ionicity, "V_nm3": V_m3 / NM3_M3,
               "t_bary": transference_conventions(L, species, charge_by_species_e, cation=cation)}
        if reference_species is not None:
            L0 = solvent_frame(L, species, N, reference_species)
            out["L0"] = L0
            out["t_solv"] = transference_conventions(L0, species, charge_by_species_e, cation=cation)
        return out

    whole = window_estimate(win.whole)
    blocks = [window_estimate(s) for s in win.blocks]
    br = win.block_ranges_ps

    def be(key: str, unit: str) -> BlockEstimate:
        return block_estimate(whole[key], [b[key] for b in blocks], unit, block_ranges_ps=br)

    transference = []
    frames = [("barycentric", None, "t_bary")]
    if reference_species is not None:
        frames.append(("solvent", reference_species, "t_solv"))
    for fname, ref, key in frames:
        for conv, formula, attr in ((CONVENTION_UNWEIGHTED, FORMULA_UNWEIGHTED, "t_plus_unweighted_L"),
                                    (CONVENTION_CHARGE_WEIGHTED, FORMULA_CHARGE_WEIGHTED,
                                     "t_plus_charge_weighted")):
            est = block_estimate(getattr(whole[key], attr), [getattr(b[key], attr) for b in blocks], "1",
                                 block_ranges_ps=br)
            transference.append(TransferenceEstimate(fname, ref, conv, formula, cation, est))

    # collective-regime diagnostic on the charge MSD <|dM|^2>, M = sum_i z_i R_i
    Mq = sum(z[k] * R[s][win.whole] for k, s in enumerate(species))
    msd_M = msd_fft(Mq, max_lag_frames)
    lagM = np.arange(msd_M.size) * dt
    sel = (lagM >= lo) & (lagM <= hi) & (msd_M > 0)
    beta_M = float(np.polyfit(np.log(lagM[sel]), np.log(msd_M[sel]), 1)[0]) if sel.sum() >= 2 else float("nan")
    sigma = be("sigma", "S/m")
    t_u = transference[0].t_plus
    precision = {"sigma": PrecisionBound(rel=max_relative_half_width),
                 "ionicity": PrecisionBound(abs=ionicity_max_abs_half_width),
                 "t_plus": PrecisionBound(abs=t_plus_max_abs_half_width), "trend_alpha": float(trend_alpha)}
    ionicity = be("ionicity", "1")
    checks = {"collective_regime": bool(math.isfinite(beta_M) and beta_range[0] <= beta_M <= beta_range[1])}
    details = {"collective_regime": f"charge-MSD beta {beta_M:.2f} over [{lo:g}, {hi:g}] ps (accepted {beta_range})"}
    for prefix, est in (("sigma_", sigma), ("ionicity_", ionicity), ("t_plus_", t_u)):
        ok, why = adequacy_checks(prefix, est, precision[prefix[:-1]], trend_alpha)
        checks.update(ok)
        details.update(why)
    return OnsagerResult(
        species=species, charges_e={s: float(charge_by_species_e[s]) for s in species}, n_molecules=N,
        temperature_K=T, volume_nm3=whole["V_nm3"], frame=frame, reference_species=reference_species,
        fit_window_ps=(lo, hi), fit_rule=fit_rule, L_matrix=whole["L"], L_blocks=[b["L"] for b in blocks],
        L_solvent=whole.get("L0"), L_solvent_blocks=[b["L0"] for b in blocks] if reference_species else None,
        L_self=whole["L_self"], sigma_ij_S_m=whole["sig_ij"], sigma=sigma, sigma_NE=be("sigma_ne", "S/m"),
        ionicity=ionicity, self_diffusion_m2_s=whole["D"], transference=transference,
        charge_msd_lag_ps=lagM, charge_msd_e2nm2=msd_M, charge_msd_beta=beta_M, barycentre_drift_nm=drift,
        windows=win, failures=[], sampling_checks=checks, check_details=details, precision=precision,
        self_diffusion_blocks_m2_s={s: [b["D"][s] for b in blocks] for s in species})


def _with_checks(inputs: dict[str, Any], checks: Mapping[str, bool], details: Mapping[str, str]) -> dict[str, Any]:
    """Classifier inputs with extra sampling checks (and their details) added."""
    return dict(inputs, sampling_checks={**(inputs.get("sampling_checks") or {}), **checks},
                check_details={**(inputs.get("check_details") or {}), **details})


class CollectiveTransportEstimator(EstimatorBase):
    """Registered estimator of :data:`mdbench.analysis.observables.CONDUCTIVITY` and
    :data:`~mdbench.analysis.observables.TRANSFERENCE`: one Onsager analysis gives σ, σ_NE, ionicity and
    every t+ (nothing when the system has no ions). Reuses the self-diffusion MSDs (``diffusion``)."""

    inputs = ("trajectory", "guard_ps", "products.temperature_K", "products.diffusion", "products.energy_coverage")

    def compute(self) -> Estimate:
        s, c = self.settings, self.case
        rd = c.trajectory
        section = CONDUCTIVITY.details_section
        charges = dict(rd.species_charge_e)
        if not rd.ions():
            return Estimate(sections={section: None})
        neutral = rd.neutral_species()
        ref = s.solvent_reference
        if ref is None and neutral:
            ref = max(neutral, key=lambda sp: int(np.sum(rd.mol_species == sp)))
        diff = c.products["diffusion"]
        onsager = onsager_transport({sp: rd.species_com_nm(sp) for sp in rd.species}, charges, rd.time_ps,
                                    rd.volume_nm3, c.products["temperature_K"], system_com_nm=rd.system_com_nm,
                                    reference_species=ref, guard_ps=c.guard_ps, n_blocks=s.n_blocks,
                                    fit_window_fraction=s.onsager_fit_window_fraction, beta_range=s.onsager_beta_range,
                                    max_relative_half_width=s.sigma_t_plus_max_rel_half_width,
                                    t_plus_max_abs_half_width=s.t_plus_max_abs_half_width,
                                    ionicity_max_abs_half_width=s.ionicity_max_abs_half_width,
                                    trend_alpha=s.block_trend_alpha,
                                    self_msd_nm2={sp: [dr.msd_nm2, *dr.msd_blocks_nm2]
                                                  for sp, dr in diff.items() if not dr.failures})
        od = onsager.to_dict()
        # trajectory treatment behind every collective-transport number (declared with each of them)
        diag = dict(od["diagnostics"], frame=od["frame"], reference_species=od["reference_species"],
                    com="molecular centres of mass, unwrapped by the displacement scheme (NPT-safe)",
                    volume_nm3=od["volume_nm3"], temperature_K=od["temperature_K"])
        # sigma_NE is built from the ions' D: it inherits their states (rule 8), by observable name
        d_states = {SELF_DIFFUSION.key(sp): classify_result(diff.get(sp)) for sp in rd.ions()}
        # the transport temperature comes from the energy file: an energy file that does not cover the
        # trajectory's window keeps sigma, sigma_NE, the ionicity and t+ out of C (issue 35)
        coverage = c.products.get("energy_coverage") or {}
        cov_ok, cov_why = ({}, {}) if coverage.get("temperature_from_energy") is False else coverage_check(coverage)
        diag["computed_on_ps"] = list(onsager.windows.whole_range_ps) if onsager.windows else None
        out = []
        for key, definition in (("sigma", od["sigma"]["definition"]), ("sigma_NE", od["sigma_NE"]["label"]),
                                ("ionicity", "sigma / sigma_NE")):
            details = ({"L": od["L"], "L_solvent": od["L_solvent"], "sigma_ij_S_m": od["sigma_ij_S_m"],
                        "charges_e": od["charges_e"], "charges_note": od["charges_note"]} if key == "sigma" else {})
            inputs = _with_checks(onsager.state_inputs(key, input_states=d_states), cov_ok, cov_why)
            own_diag = dict(diag)
            if inputs.get("resolved_zero"):  # the audit and readers see why no precision/regime check applied
                own_diag["resolved_zero"] = inputs["resolved_zero"]
            if inputs.get("inputs"):
                own_diag["derived_from"] = sorted(inputs["inputs"])
            payload = dict(od[key], window=od["window"], diagnostics=own_diag)
            out.append(Measurement(CONDUCTIVITY, (key,), payload, definition, inputs, details=details))
        by_key = {te.key: te for te in onsager.transference}
        for tkey, te in od[TRANSFERENCE.name].items():
            t_inputs = _with_checks(onsager.state_inputs("t_plus", by_key.get(tkey)), cov_ok, cov_why)
            payload = dict(te, window=od["window"], diagnostics=diag)
            if t_inputs.get("not_estimable"):  # the value is withheld; the number stays in the diagnostics
                payload = withheld(payload)
            out.append(Measurement(
                TRANSFERENCE, (tkey,), payload,
                f"{te['formula']} ({te['frame']} frame"
                f"{', reference ' + te['reference_species'] if te['reference_species'] else ''})", t_inputs))
        return Estimate(out, sections={section: od})


    @classmethod
    def definition(cls, settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
        """Its part of ``analysis_fitting_rules``."""
        s = settings
        return {"analysis_fitting_rules": {
            "onsager": {"fit_window_fraction_of_block": list(s.onsager_fit_window_fraction),
                        "beta_range": list(s.onsager_beta_range), "fit": "linear in time (cross terms may be <0)",
                        "frames": "barycentric and solvent (reference species named)",
                        "solvent_reference": s.solvent_reference or "most numerous neutral species",
                        "temperature_K": s.temperature_K if s.temperature_K is not None
                        else "mean edr Temperature over the analysed window"}}}
