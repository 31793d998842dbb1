"""Quantitative stage gates: minimisation and equilibration, decided from numbers with their evidence.

Each gate returns a :class:`GateResult` (passed, the checks with their values and thresholds, a reason)
and draws a figure of the evidence. The stage functions register the gate definition in the run record
*before* evaluating it and record the result as a ``gate_evaluated`` event.

Equilibration stationarity uses the automated equilibration detection of Chodera (2016),
``pymbar.timeseries.detect_equilibration``: for a series :math:`A_t` it chooses the start
:math:`t_0` that maximises the effective number of uncorrelated samples

.. math:: N_\\mathrm{eff}(t_0) = (T - t_0 + 1) / g(t_0),

where :math:`g` is the statistical inefficiency of the tail (we report
:math:`N_\\mathrm{eff} = (N - t_0)/g` for the :math:`N - t_0` samples the tail holds). The density drift over the stationary tail
is the least-squares slope :math:`b` of :math:`\\rho(t)` times the tail duration, relative to the mean:
:math:`|b|\\,(t_\\mathrm{end} - t_{0})/\\bar\\rho`.

References
----------
J. D. Chodera, J. Chem. Theory Comput. 12, 1799 (2016), doi:10.1021/acs.jctc.5b00784.
"""

from __future__ import annotations

import logging
import math
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


@dataclass
class Check:
    """One numeric check of a gate: ``value`` compared with ``threshold`` by ``relation``."""

    name: str
    value: float | int | bool | None
    threshold: float | int | bool | None
    relation: str
    passed: bool
    unit: str = ""


@dataclass
class GateResult:
    """Outcome of a gate.

    Attributes
    ----------
    gate : str
        ``"minimization"`` or ``"equilibration"``.
    passed : bool
    checks : list of Check
    reason : str
        Human-readable summary naming every failed check.
    evidence : dict
        Extra numbers (t0 per observable, means, figure path …).
    """

    gate: str
    passed: bool
    checks: list[Check]
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for events and scraps."""
        return asdict(self)


def _summarise(gate: str, checks: list[Check], evidence: dict) -> GateResult:
    failed = [c for c in checks if not c.passed]
    if failed:
        reason = "; ".join(f"{c.name} = {c.value!r}{(' ' + c.unit) if c.unit else ''} fails "
                           f"{c.relation} {c.threshold!r}" for c in failed)
    else:
        reason = "all checks passed: " + ", ".join(f"{c.name} = {_short(c.value)}" for c in checks)
    return GateResult(gate=gate, passed=not failed, checks=checks, reason=reason, evidence=evidence)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return repr(value)


# ----------------------------------------------------------------------------- minimisation
_FMAX_RE = re.compile(r"Maximum force\s*=\s*([-+0-9.eE]+)\s+on atom\s+(\d+)")
_EPOT_RE = re.compile(r"Potential Energy\s*=\s*([-+0-9.eEna]+)")
_STEPS_RE = re.compile(r"converged to (?:Fmax|machine precision) .*? in (\d+) steps", re.S)


def parse_em_log(log_path: str | Path) -> dict[str, Any]:
    """Read the final summary of a GROMACS minimisation log.

    Returns
    -------
    dict
        ``fmax_kJ_mol_nm`` (final maximum force), ``fmax_atom`` (1-based), ``epot_kJ_mol``,
        ``converged`` (GROMACS reached Fmax < emtol), ``steps``.
    """
    text = Path(log_path).read_text(errors="replace")
    out: dict[str, Any] = {"fmax_kJ_mol_nm": None, "fmax_atom": None, "epot_kJ_mol": None,
                           "converged": False, "steps": None}
    fm = _FMAX_RE.findall(text)
    if fm:
        out["fmax_kJ_mol_nm"] = float(fm[-1][0])
        out["fmax_atom"] = int(fm[-1][1])
    ep = _EPOT_RE.findall(text)
    if ep:
        try:
            out["epot_kJ_mol"] = float(ep[-1])
        except ValueError:
            out["epot_kJ_mol"] = float("nan")
    out["converged"] = bool(re.search(r"converged to Fmax\s*<", text))
    st = _STEPS_RE.findall(text)
    if st:
        out["steps"] = int(st[-1])
    return out


def min_intermolecular_distance_nm(tpr: str | Path, gro: str | Path) -> tuple[float, list[int]]:
    """Smallest distance between atoms of different molecules, under periodic boundaries [nm].

    Returns the distance and the 1-based indices of the pair (``nan`` and ``[]`` if no pair lies
    within 0.5 nm).
    """
    import MDAnalysis as mda  # noqa: PLC0415 - heavy import kept out of module import
    from MDAnalysis.lib.distances import capped_distance  # noqa: PLC0415

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(str(tpr), str(gro))
    pos = u.atoms.positions  # Å
    mol = u.atoms.molnums
    pairs, dist = capped_distance(pos, pos, max_cutoff=5.0, box=u.dimensions, return_distances=True)
    keep = mol[pairs[:, 0]] != mol[pairs[:, 1]]
    if not keep.any():
        return float("nan"), []
    pairs, dist = pairs[keep], dist[keep]
    i = int(np.argmin(dist))
    return float(dist[i]) / 10.0, [int(pairs[i, 0]) + 1, int(pairs[i, 1]) + 1]


def minimization_gate(log_path: str | Path, tpr: str | Path, gro: str | Path, *, emtol_kJ_mol_nm: float,
                      catastrophic_contact_nm: float, require_converged: bool = True,
                      figure: str | Path | None = None, edr: str | Path | None = None) -> GateResult:
    """Minimisation gate: Fmax below the declared ``emtol``, finite energy, no catastrophic contact.

    Parameters
    ----------
    log_path, tpr, gro : path
        Minimisation log, run input and final coordinates.
    emtol_kJ_mol_nm : float
        The declared force criterion [kJ mol⁻¹ nm⁻¹].
    catastrophic_contact_nm : float
        Intermolecular atom pairs closer than this [nm] are a catastrophic contact.
    figure : path, optional
        Where to draw the energy-vs-step figure (from ``edr``).
    """
    em = parse_em_log(log_path)
    dmin, pair = min_intermolecular_distance_nm(tpr, gro)
    fmax = em["fmax_kJ_mol_nm"]
    epot = em["epot_kJ_mol"]
    checks = [
        Check("fmax_kJ_mol_nm", fmax, emtol_kJ_mol_nm, "<", fmax is not None and fmax < emtol_kJ_mol_nm,
              "kJ/mol/nm"),
        Check("epot_finite", epot is not None and math.isfinite(epot), True, "==",
              epot is not None and math.isfinite(epot)),
        Check("min_intermolecular_distance_nm", dmin, catastrophic_contact_nm, ">=",
              math.isnan(dmin) or dmin >= catastrophic_contact_nm, "nm"),
    ]
    if require_converged:
        checks.append(Check("gromacs_converged", em["converged"], True, "==", em["converged"]))
    evidence = dict(em, min_contact_pair=pair, emtol_kJ_mol_nm=emtol_kJ_mol_nm)
    if figure is not None and edr is not None:
        evidence["figure"] = str(figure)
        _plot_em(edr, figure, emtol_kJ_mol_nm, fmax)
    return _summarise("minimization", checks, evidence)


def _plot_em(edr: str | Path, figure: str | Path, emtol: float, fmax: float | None) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    data = read_edr(edr)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(data["Step"] if "Step" in data else data["Time"], data["Potential"], lw=1)
    ax.set_xlabel("minimisation step")
    ax.set_ylabel("potential energy [kJ/mol]")
    ax.set_title(f"EM: final Fmax {fmax if fmax is not None else float('nan'):.3g} (emtol {emtol:g}) kJ/mol/nm",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(figure, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- energies
def read_edr(edr: str | Path) -> dict[str, np.ndarray]:
    """All terms of a GROMACS energy file as arrays (``{"Time": …, term: …}`` like ``pyedr.edr_to_dict``); ``Time``
    in ps. Read by :func:`mdbench.analysis.thermo.read_energy_file`, the project's one reader."""
    from mdbench.analysis.thermo import read_energy_file  # noqa: PLC0415

    return read_energy_file(edr).columns()


def detect_equilibration(A_t: np.ndarray, nskip: int = 1) -> tuple[int, float, float]:
    """``pymbar.timeseries.detect_equilibration``: (t0 index, statistical inefficiency g, N_eff).

    Computed by :func:`mdbench.analysis.blocks.pymbar_detect_equilibration` (pymbar's numbers exactly, ~100 ×
    faster on a 2,000-frame series), so the audit can re-evaluate the gate at the cost of reading the file.

    :math:`N_\\mathrm{eff} = (N - t_0)/g` with :math:`N` the number of samples (pymbar's own third value
    counts one sample more than the tail holds).
    """
    from mdbench.analysis.blocks import pymbar_detect_equilibration  # noqa: PLC0415

    A_t = np.asarray(A_t, dtype=float)
    if A_t.size < 3 or np.ptp(A_t) == 0:
        return 0, float("inf"), 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0, g, _ = pymbar_detect_equilibration(A_t, nskip=nskip)
    # pymbar reports (T - t0 + 1)/g, one sample more than the tail holds; count the tail's samples exactly
    neff = (A_t.size - int(t0)) / max(float(g), 1.0)
    return int(t0), float(g), float(neff)


@dataclass
class EquilibrationAnalysis:
    """Numbers behind the equilibration gate (all times in ps)."""

    time_ps: np.ndarray
    series: dict[str, np.ndarray]
    t0_index: dict[str, int]
    g: dict[str, float]
    neff: dict[str, float]
    tail_start_index: int
    tail_start_ps: float
    temperature_mean_K: float
    density_mean_kg_m3: float
    density_drift_rel: float
    volume_mean_nm3: float


def analyse_equilibration(edr: str | Path, observables: list[str], nskip: int = 1) -> EquilibrationAnalysis:
    """Run :func:`detect_equilibration` on each observable and summarise the common stationary tail.

    The tail starts at the latest :math:`t_0` over the observables.
    """
    data = read_edr(edr)
    missing = [o for o in [*observables, "Temperature"] if o not in data]
    if missing:
        from mdbench.errors import InputError  # noqa: PLC0415

        raise InputError(f"energy file lacks {missing}; was pressure coupling on (Density, Volume)?", str(edr))
    t = data["Time"]
    t0s, gs, neffs = {}, {}, {}
    for name in observables:
        t0s[name], gs[name], neffs[name] = detect_equilibration(data[name], nskip=nskip)
    start = max(t0s.values()) if t0s else 0
    tail = slice(start, None)
    dens = data.get("Density", np.full_like(t, np.nan))
    rho = dens[tail]
    tt = t[tail]
    if rho.size >= 2 and np.isfinite(rho).all():
        slope = np.polyfit(tt, rho, 1)[0]
        drift = abs(slope) * (tt[-1] - tt[0]) / float(np.mean(rho))
    else:
        drift = float("inf")
    return EquilibrationAnalysis(
        time_ps=t, series={k: data[k] for k in [*observables, "Temperature"]}, t0_index=t0s, g=gs, neff=neffs,
        tail_start_index=int(start), tail_start_ps=float(t[start]) if t.size else float("nan"),
        temperature_mean_K=float(np.mean(data["Temperature"][tail])),
        density_mean_kg_m3=float(np.mean(rho)) if rho.size else float("nan"),
        density_drift_rel=float(drift),
        volume_mean_nm3=float(np.mean(data["Volume"][tail])) if "Volume" in data else float("nan"),
    )


def equilibration_gate(edr: str | Path, *, target_temperature_K: float, observables: list[str],
                       nskip: int = 1, min_effective_samples: float = 20, max_t0_fraction: float = 0.75,
                       temperature_tolerance_K: float = 1.0, max_density_drift_rel: float = 0.02,
                       figure: str | Path | None = None) -> GateResult:
    """Equilibration gate on an NPT energy file.

    Checks, for each observable in ``observables`` (density, potential energy, volume): the stationary
    tail found by :func:`detect_equilibration` starts before ``max_t0_fraction`` of the run and holds
    at least ``min_effective_samples`` effective samples; over the common tail, the mean temperature is
    within ``temperature_tolerance_K`` of the target and the relative density drift is below
    ``max_density_drift_rel``.
    """
    an = analyse_equilibration(edr, observables, nskip)
    n = an.time_ps.size
    checks: list[Check] = []
    for name in observables:
        frac = an.t0_index[name] / max(n - 1, 1)
        checks.append(Check(f"{name}_t0_fraction", round(frac, 4), max_t0_fraction, "<=",
                            frac <= max_t0_fraction))
        checks.append(Check(f"{name}_N_eff", round(an.neff[name], 2), min_effective_samples, ">=",
                            an.neff[name] >= min_effective_samples))
    dT = abs(an.temperature_mean_K - target_temperature_K)
    checks.append(Check("temperature_mean_K", round(an.temperature_mean_K, 3),
                        f"{target_temperature_K} ± {temperature_tolerance_K}", "within",
                        dT <= temperature_tolerance_K, "K"))
    checks.append(Check("density_drift_rel", round(an.density_drift_rel, 5), max_density_drift_rel, "<=",
                        an.density_drift_rel <= max_density_drift_rel))
    evidence = {
        "n_frames": int(n), "time_span_ps": [float(an.time_ps[0]), float(an.time_ps[-1])] if n else [],
        "t0_index": an.t0_index, "statistical_inefficiency": an.g, "N_eff": an.neff,
        "tail_start_ps": an.tail_start_ps, "temperature_mean_K": an.temperature_mean_K,
        "density_mean_kg_m3": an.density_mean_kg_m3, "density_drift_rel": an.density_drift_rel,
        "volume_mean_nm3": an.volume_mean_nm3,
    }
    if figure is not None:
        _plot_equilibration(an, figure, target_temperature_K)
        evidence["figure"] = str(figure)
    return _summarise("equilibration", checks, evidence)


def _plot_equilibration(an: EquilibrationAnalysis, figure: str | Path, target_K: float) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = list(an.series)
    fig, axes = plt.subplots(len(names), 1, figsize=(6, 1.8 * len(names)), sharex=True)
    units = {"Density": "kg/m³", "Potential": "kJ/mol", "Volume": "nm³", "Temperature": "K"}
    for ax, name in zip(np.atleast_1d(axes), names):
        ax.plot(an.time_ps, an.series[name], lw=0.8)
        if name in an.t0_index:
            ax.axvline(an.time_ps[an.t0_index[name]], color="C1", ls="--", lw=1, label="t0")
        ax.axvspan(an.tail_start_ps, an.time_ps[-1], color="C2", alpha=0.12, label="stationary tail")
        if name == "Temperature":
            ax.axhline(target_K, color="k", lw=0.8)
        ax.set_ylabel(f"{name}\n[{units.get(name, '')}]", fontsize=8)
    np.atleast_1d(axes)[0].legend(fontsize=7, loc="best")
    np.atleast_1d(axes)[-1].set_xlabel("time [ps]")
    fig.tight_layout()
    fig.savefig(figure, dpi=110)
    plt.close(fig)
