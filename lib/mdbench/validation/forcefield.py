r"""Validation of the model against experiment: pure DMC and pure TTE at 298.15 K and 1 bar.

For one liquid and one charge set (the frozen one, or a candidate level of theory from
``data/charge_candidates/``) :func:`run_liquid` runs the study's own protocols
(``params/protocols``: em, nvt, npt, production) on a packmol box of ``n`` molecules:

1. **density**: mean over the second half of the NPT run, standard error from four consecutive blocks
   of that window, :math:`\sigma_{\bar\rho} = \mathrm{std}(\rho_{b=1..4})/\sqrt4`;
2. **transport** (when ``prod_ps > 0``): NVT production at the mean NPT volume of that window (last NPT
   frame scaled isotropically, as the study's production does), analysed by the project's analysis
   (:func:`mdbench.analysis.pipeline.analyze_files`, its ``results.json``): shear viscosity by Green-Kubo
   with the registered plateau rule, its Einstein-Helfand cross-check, and the self-diffusion coefficient,
   corrected for the periodic box by Yeh & Hummer (J. Phys. Chem. B 108, 15873 (2004),
   doi:10.1021/jp0477147) with the run's own Green-Kubo viscosity and box edge:

   .. math:: D_\infty = D_\mathrm{PBC} + \frac{\xi k_B T}{6\pi\eta L},\qquad \xi = 2.837297

   with the 95 % half-width :math:`\delta D_\infty = \sqrt{\delta D^2 + (\Delta_{YH}\,\delta\eta/\eta)^2}`.

:func:`select_level` applies the charge-level rule of ``docs/forcefield.md`` (written before the
comparison) to the results of every candidate.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mdbench.analysis.observables import SELF_DIFFUSION, VISCOSITY
from mdbench.errors import InputError, MdbenchError
from mdbench.inputs import forcefield, units

log = logging.getLogger(__name__)

FROZEN = "frozen"
#: One-line error when the optional peer estimator is absent.
STACIE_MISSING = ("validate-ff needs STACIE for its peer viscosity: pip install -e '.[validate]' "
                  "(or make setup, whose dev extra has it)")


@dataclass(frozen=True)
class Reference:
    """An experimental reference value at 298.15 K / 1 bar with its source."""

    value: float
    unit: str
    source: str
    tolerance_rel: float | None = None  # only for the densities, which gate admissibility
    doi: str | None = None
    verified: bool = False


#: Experimental references with their sources: ``data/experimental_references.json`` (the one place they live).
REFERENCES_FILE = Path(__file__).parents[1] / "inputs" / "data" / "experimental_references.json"


def _load_references() -> dict[str, dict[str, Reference]]:
    doc = json.loads(REFERENCES_FILE.read_text())
    return {sp: {q: Reference(float(r["value"]), r["unit"], r["source"], r.get("tolerance_rel"), r.get("doi"),
                              bool(r.get("verified")))
                 for q, r in quantities.items()}
            for sp, quantities in doc.items() if isinstance(quantities, dict)}


REFERENCES: dict[str, dict[str, Reference]] = _load_references()
PACK_DENSITY = {"DMC": 0.95, "TTE": 1.35}
DEFAULT_MOLECULES = {"DMC": 100, "TTE": 64}


@dataclass
class LiquidResult:
    """Validation numbers of one pure liquid with one charge set; uncertainties are 95 % half-widths
    (density: standard error of four blocks)."""

    species: str
    level: str
    n_molecules: int
    npt_ps: float
    prod_ps: float
    density_window_ps: tuple[float, float]
    density_g_cm3: float
    density_sem_g_cm3: float
    density_target_g_cm3: float
    density_tolerance_rel: float
    density_deviation_rel: float
    density_passed: bool
    box_nm: float = float("nan")
    viscosity_mPa_s: float = float("nan")
    viscosity_hw95_mPa_s: float = float("nan")
    viscosity_state: str = ""
    viscosity_reason: str = ""
    viscosity_eh_mPa_s: float = float("nan")
    viscosity_stacie_mPa_s: float = float("nan")
    viscosity_stacie_hw95_mPa_s: float = float("nan")
    D_pbc_m2_s: float = float("nan")
    D_pbc_hw95_m2_s: float = float("nan")
    D_state: str = ""
    D_yh_m2_s: float = float("nan")
    D_yh_hw95_m2_s: float = float("nan")
    temperature_K: float = float("nan")
    results_json: str = ""
    wall_s: dict[str, float] = field(default_factory=dict)
    seed: int | None = None
    density_equilibration_ps: float = float("nan")
    density_equilibrated: bool | None = None

    @classmethod
    def from_json(cls, path: Path) -> "LiquidResult":
        d = json.loads(Path(path).read_text())
        d["density_window_ps"] = tuple(d["density_window_ps"])
        keep_none = ("seed", "density_equilibrated")
        return cls(**{k: (float("nan") if v is None and k not in keep_none else v) for k, v in d.items()})

    def to_json(self) -> str:
        d = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}
        return json.dumps(d, indent=1) + "\n"

    def relative_error(self, quantity: str) -> tuple[float, float]:
        """(value/reference - 1, its 95 % half-width) of ``viscosity`` or ``self_diffusion`` (YH)."""
        ref = REFERENCES[self.species].get(quantity)
        if ref is None:
            return float("nan"), float("nan")
        v, hw = ((self.viscosity_mPa_s, self.viscosity_hw95_mPa_s) if quantity == VISCOSITY.name
                 else (self.D_yh_m2_s, self.D_yh_hw95_m2_s))
        return v / ref.value - 1.0, hw / ref.value


def level_slug(level: str) -> str:
    """Folder/file form of a level label (``RHF/6-31G*`` -> ``RHF_6-31Gs``)."""
    return level.replace("/", "_").replace("*", "s")


def charges_record(level: str) -> dict:
    """The CHELPG record of ``level`` (``frozen``: the bundle's own)."""
    return forcefield.derived_charges() if level == FROZEN else forcefield.charge_candidate(level)


def record_level(record: dict) -> str:
    """Level-of-theory label of a charge record (``RHF/6-31G*``)."""
    if record.get("level"):
        return record["level"]
    rec = next(iter(record["species"].values()))
    return f"{rec['method']}/{rec['basis']}"


def _gmx(args: list[str], cwd: Path, name: str) -> None:
    exe = shutil.which("gmx")
    if exe is None:
        raise MdbenchError("gmx not found on PATH; run `make setup` (scripts/ensure_tools.sh)")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)
    (cwd / f"{name}.console.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise MdbenchError(f"gmx {' '.join(args[:1])} failed in {cwd} (see {name}.console.log):\n"
                           f"{proc.stderr[-1500:]}")


def protocol_segment(wd: Path, stage: str, protocol: str, start: str, *, length_ps: float | None = None,
                     seed: int = 2026, threads: int = 1, checkpoint: str | None = None,
                     energy_interval_ps: float | None = None, xtc_interval_ps: float | None = None) -> float:
    """grompp + mdrun of one segment in ``wd`` with the study's protocol ``params/protocols/<protocol>.yaml``.

    ``wd`` holds ``topol.top`` and ``start``; outputs are ``<stage>.*``. Skipped (returns 0) when
    ``<stage>.gro`` exists, so an interrupted series of segments resumes. Returns the wall time [s].
    """
    from mdbench.engine.protocols import Timing, load_protocol, write_mdp

    wd = Path(wd)
    if (wd / f"{stage}.gro").is_file():
        return 0.0
    t0 = time.monotonic()
    prot = load_protocol(protocol)
    tm = Timing(**asdict(prot.timing))
    for name, value in (("length_ps", length_ps), ("energy_interval_ps", energy_interval_ps),
                        ("xtc_interval_ps", xtc_interval_ps)):
        if value is not None:
            setattr(tm, name, float(value))
    tm.log_interval_ps = min(tm.log_interval_ps, max(tm.energy_interval_ps, tm.length_ps or tm.log_interval_ps))
    write_mdp(prot, wd / f"{stage}.mdp", timing=tm if protocol != "em" else None, seed=seed)
    _gmx(["grompp", "-f", f"{stage}.mdp", "-c", start, "-p", "topol.top", "-o", f"{stage}.tpr", "-maxwarn", "0"]
         + (["-t", checkpoint] if checkpoint else []), wd, f"{stage}.grompp")
    _gmx(["mdrun", "-deffnm", stage, "-nt", str(threads), "-pin", "off"], wd, f"{stage}.mdrun")
    return round(time.monotonic() - t0, 1)


def scale_to_volume(wd: Path, source: str, target: str, volume_nm3: float) -> float:
    """Scale the coordinates and box of ``source`` isotropically to ``volume_nm3`` (``gmx editconf -scale``),
    as the study's NVT production does; returns the scale factor."""
    from mdbench.build import topology

    box = topology.read_gro(Path(wd) / source)[3]
    s = (volume_nm3 / float(np.prod(box))) ** (1.0 / 3.0)
    _gmx(["editconf", "-f", source, "-o", target, "-scale", *(f"{s:.8f}",) * 3], Path(wd), f"{target}.editconf")
    return s


#: The averaging window of the density must hold at least this fraction of the NPT run.
MIN_AVERAGE_FRACTION = 0.2


def _density(edr: Path) -> tuple[float, float, tuple[float, float], float, float, bool]:
    """Mean density [g/cm^3] after the detected equilibration, its 4-block standard error, the window [ps], the
    mean volume [nm^3] of that window, the detected equilibration time [ps], and whether the run equilibrated.

    The start of the averaging window is the equilibration time detected on the density series by
    :func:`mdbench.analysis.blocks.detect_equilibration` (Chodera 2016), no earlier than 20 % of the run. When
    less than :data:`MIN_AVERAGE_FRACTION` of the run is left after it, the run has not equilibrated to the
    rule: the last 20 % is averaged and the result says ``equilibrated = False``.
    """
    from mdbench.analysis.blocks import detect_equilibration
    from mdbench.analysis.thermo import read_energy_file

    e = read_energy_file(edr).columns()
    t, rho, vol = np.asarray(e["Time"]), np.asarray(e["Density"]) / 1000.0, np.asarray(e["Volume"])
    span = t[-1] - t[0]
    t0 = float(t[detect_equilibration(rho)[0]])
    t_start = max(t0, t[0] + MIN_AVERAGE_FRACTION * span)
    equilibrated = t[-1] - t_start >= MIN_AVERAGE_FRACTION * span - 1e-9
    if not equilibrated:
        t_start = t[-1] - MIN_AVERAGE_FRACTION * span
    sel = t >= t_start - 1e-9
    blocks = [b.mean() for b in np.array_split(rho[sel], 4)]
    return (float(rho[sel].mean()), float(np.std(blocks, ddof=1) / 2.0), (float(t[sel][0]), float(t[-1])),
            float(vol[sel].mean()), t0, bool(equilibrated))


def stacie_viscosity(edr: Path, volume_nm3: float) -> tuple[float, float]:
    """Shear viscosity [mPa s] and its 1-sigma from STACIE (a peer estimator: the ``validate`` extra,
    ``pip install -e '.[validate]'``; also in ``dev``).

    STACIE (Toraman et al., J. Chem. Theory Comput. 2025, doi:10.1021/acs.jctc.5c00496) fits
    ``ExpPolyModel([0, 1, 2])`` to the low-frequency power spectrum of the five independent anisotropic
    stress components (Pxy, Pxz, Pyz, (Pxx-Pyy)/2, (2Pzz-Pxx-Pyy)/(2 sqrt 3), off-diagonals symmetrised)
    with prefactor V/(k_B T): its zero-frequency limit is eta. Reported beside the registered Green-Kubo
    value because the plateau rule stops early in carbonate liquids (docs/validation.md, section 2).
    """
    from mdbench.analysis.thermo import read_energy_file

    try:
        from stacie import ExpPolyModel, compute_spectrum, estimate_acint
    except ImportError as exc:
        raise MdbenchError(STACIE_MISSING) from exc
    from mdbench.analysis.units import BAR_PA, KB_J_PER_K, NM3_M3

    e = read_energy_file(edr).columns()
    p = {k: np.asarray(e[f"Pres-{k}"]) * BAR_PA for k in ("XX", "YY", "ZZ", "XY", "XZ", "YZ", "YX", "ZX", "ZY")}
    comps = np.array([(p["XY"] + p["YX"]) / 2, (p["XZ"] + p["ZX"]) / 2, (p["YZ"] + p["ZY"]) / 2,
                      (p["XX"] - p["YY"]) / 2, (2 * p["ZZ"] - p["XX"] - p["YY"]) / (2 * math.sqrt(3))])
    comps -= comps.mean(axis=1, keepdims=True)
    temperature = float(np.mean(e["Temperature"]))
    dt_s = float(np.median(np.diff(e["Time"]))) * 1e-12
    spectrum = compute_spectrum(comps, prefactors=volume_nm3 * NM3_M3 / (KB_J_PER_K * temperature), timestep=dt_s)
    result = estimate_acint(spectrum, ExpPolyModel([0, 1, 2]), rng=np.random.default_rng(7))
    return float(result.acint) * 1e3, float(result.acint_std) * 1e3


def _num(x: Any) -> float:
    """JSON number or null -> float (nan)."""
    return float("nan") if x is None else float(x)


def _observable(doc: dict, name: str) -> dict:
    ob = doc.get("observables", {}).get(name)
    if ob is None:
        raise InputError(f"results.json has no observable {name!r}; the analysis interface changed",
                         doc.get("source", {}).get("edr", {}).get("path", "results.json"))
    return ob


def run_liquid(species: str, out_dir: Path, *, level: str = FROZEN, n_molecules: int | None = None,
               nvt_ps: float = 20.0, npt_ps: float = 200.0, prod_ps: float = 0.0, threads: int = 1,
               seed: int = 2026, guard_ps: float | None = None, replicate: str | None = None) -> LiquidResult:
    """Density (and, with ``prod_ps > 0``, viscosity and self-diffusion) of pure ``species``.

    Work folder ``out_dir/<level>/<species>/`` (``.../<species>/<replicate>/`` for one of several
    independent replicates, e.g. ``seed2026``); a rerun skips finished segments. The result is also
    written to ``validation.json`` there.
    """
    if species not in REFERENCES:
        raise InputError(f"species must be DMC or TTE, got {species!r}")
    n = int(n_molecules or DEFAULT_MOLECULES[species])
    record = charges_record(level)
    level = record_level(record)
    wd = Path(out_dir) / level_slug(level) / species
    if replicate:
        wd = wd / replicate
    wd.mkdir(parents=True, exist_ok=True)
    from mdbench.build import packing, topology
    from mdbench.inputs.cases import case_mass_u

    counts = {"Li": 0, "FSI": 0, "DMC": 0, "TTE": 0, species: n}
    wall: dict[str, float] = {}
    if not (wd / "conf.gro").is_file():
        box = units.cubic_box_nm(case_mass_u(counts), PACK_DENSITY[species])
        xyz = packing.read_packed_pdb(packing.run_packmol(wd, counts, box, seed, PACK_DENSITY[species]))
        topology.copy_forcefield(wd)
        (wd / f"{forcefield.MOLNAME[species]}.itp").write_text(forcefield.molecule_itp(species, record))
        (wd / "topol.top").write_text(topology.topology_text(f"pure {species} ({level} charges)", counts))
        topology.write_gro(wd / "conf.gro", f"pure {species}", counts, xyz, box)
    wall["em"] = protocol_segment(wd, "em", "em", "conf.gro", seed=seed, threads=threads)
    wall["nvt"] = protocol_segment(wd, "nvt", "nvt", "em.gro", length_ps=nvt_ps, seed=seed, threads=threads)
    wall["npt"] = protocol_segment(wd, "npt", "npt", "nvt.gro", length_ps=npt_ps, seed=seed, threads=threads,
                                   checkpoint="nvt.cpt")
    rho, sem, window, v_mean, t0, equilibrated = _density(wd / "npt.edr")
    ref = REFERENCES[species]["density"]
    dev = (rho - ref.value) / ref.value
    res = LiquidResult(species, level, n, float(npt_ps), float(prod_ps), window, round(rho, 4), round(sem, 4),
                       ref.value, float(ref.tolerance_rel), round(dev, 4), abs(dev) <= ref.tolerance_rel,
                       density_equilibration_ps=round(t0, 2), density_equilibrated=equilibrated)
    if prod_ps > 0:
        res = _transport(res, wd, v_mean, prod_ps, seed, threads, wall, guard_ps)
    previous = wd / "validation.json"
    if previous.is_file():  # a rerun skips finished segments: keep the wall time they took then
        old = json.loads(previous.read_text()).get("wall_s", {})
        wall = {k: (v if v or not old.get(k) else old[k]) for k, v in wall.items()}
    res.wall_s = wall
    res.seed = int(seed)
    previous.write_text(res.to_json())
    return res


def _transport(res: LiquidResult, wd: Path, v_mean: float, prod_ps: float, seed: int, threads: int,
               wall: dict[str, float], guard_ps: float | None) -> LiquidResult:
    from mdbench.analysis.diffusion import yeh_hummer_correction
    from mdbench.analysis.pipeline import analyze_files
    if not (wd / "prod_start.gro").is_file():
        scale_to_volume(wd, "npt.gro", "prod_start.gro", v_mean)
    wall["prod"] = protocol_segment(wd, "prod", "production", "prod_start.gro", length_ps=prod_ps, seed=seed + 1,
                                    threads=threads)
    t0 = time.monotonic()
    guard = float(guard_ps if guard_ps is not None else min(20.0, prod_ps / 10.0))
    doc = analyze_files(wd / "prod.tpr", wd / "prod.xtc", wd / "prod.edr", wd / "analysis", guard_ps=guard,
                        case=f"pure-{res.species}", workers=1)
    wall["analysis"] = round(time.monotonic() - t0, 1)
    visc = _observable(doc, VISCOSITY.name)
    dif = _observable(doc, SELF_DIFFUSION.key(res.species))
    eta, eta_hw = _num(visc["value"]), _num(visc["uncertainty"]["half_width_95"])
    D, D_hw = _num(dif["value"]), _num(dif["uncertainty"]["half_width_95"])
    T = float(doc["temperature_K"])
    L = float(doc["system"]["mean_volume_nm3"]) ** (1.0 / 3.0)
    if eta > 0 and math.isfinite(D):
        D_yh = yeh_hummer_correction(D, T, eta, L)
        corr = D_yh - D
        D_yh_hw = math.hypot(D_hw, corr * eta_hw / eta)
    else:
        D_yh = D_yh_hw = float("nan")
    res.box_nm = round(L, 4)
    res.viscosity_mPa_s, res.viscosity_hw95_mPa_s = eta, eta_hw
    res.viscosity_state, res.viscosity_reason = visc["state"], visc["reason"]
    res.viscosity_eh_mPa_s = _num(visc["diagnostics"].get("einstein_helfand_mPa_s"))
    eta_s, sd_s = stacie_viscosity(wd / "prod.edr", L ** 3)
    res.viscosity_stacie_mPa_s, res.viscosity_stacie_hw95_mPa_s = eta_s, 1.96 * sd_s
    res.D_pbc_m2_s, res.D_pbc_hw95_m2_s, res.D_state = D, D_hw, dif["state"]
    res.D_yh_m2_s, res.D_yh_hw95_m2_s = D_yh, D_yh_hw
    res.temperature_K = T
    res.results_json = str(wd / "analysis" / "results.json")
    return res


@dataclass
class Selection:
    """Outcome of the charge-level rule (docs/forcefield.md)."""

    chosen: str
    admissible: list[str]
    transport_error: dict[str, tuple[float, float]]  # level -> (E, 95 % half-width)
    reason: str


def combined_transport_error(dmc: LiquidResult) -> tuple[float, float]:
    """E = sqrt(e_eta^2 + e_D^2) of pure DMC and its propagated 95 % half-width."""
    e_eta, h_eta = dmc.relative_error(VISCOSITY.name)
    e_D, h_D = dmc.relative_error(SELF_DIFFUSION.name)
    E = math.hypot(e_eta, e_D)
    if not math.isfinite(E) or E == 0:
        return E, float("nan")
    return E, math.hypot(e_eta * h_eta, e_D * h_D) / E


def select_level(results: dict[str, dict[str, LiquidResult]]) -> Selection:
    """Apply the registered rule to ``{level: {"DMC": result, "TTE": result}}``.

    1. admissible: DMC and TTE densities within their tolerances (a candidate lacking either result is not);
    2. smallest combined DMC transport
    error E; 3. if the two best differ by less than the 95 % half-width of the difference, the smaller
    |DMC density deviation| decides; 4. no admissible level: smallest |DMC density deviation|.
    """
    results = {lv: r for lv, r in results.items() if "DMC" in r}
    if not results:
        raise InputError("no candidate with a pure-DMC result to select from")
    dens = {lv: abs(r["DMC"].density_deviation_rel) for lv, r in results.items()}
    # a candidate without its TTE result cannot be shown admissible
    adm = [lv for lv, r in results.items() if r["DMC"].density_passed and "TTE" in r and r["TTE"].density_passed]
    errs = {lv: combined_transport_error(results[lv]["DMC"]) for lv in results}
    if not adm:
        best = min(dens, key=dens.get)
        return Selection(best, [], errs, f"no candidate meets both density tolerances; {best} has the smallest "
                         f"DMC density deviation ({results[best]['DMC'].density_deviation_rel:+.1%})")
    if len(adm) == 1:
        return Selection(adm[0], adm, errs, f"{adm[0]} is the only candidate within both density tolerances")
    ranked = sorted(adm, key=lambda lv: (not math.isfinite(errs[lv][0]), errs[lv][0]))
    a, b = ranked[0], ranked[1]
    (ea, ha), (eb, hb) = errs[a], errs[b]
    if not math.isfinite(ea):
        best = min(adm, key=dens.get)
        return Selection(best, adm, errs, f"no transport error available; {best} has the smallest DMC density "
                         "deviation among the admissible candidates")
    diff_hw = math.hypot(ha, hb) if math.isfinite(hb) else float("inf")
    if math.isfinite(eb) and eb - ea <= diff_hw:
        best = min((a, b), key=dens.get)
        return Selection(best, adm, errs, f"transport does not resolve {a} (E = {ea:.2f} +- {ha:.2f}) and {b} "
                         f"(E = {eb:.2f} +- {hb:.2f}); {best} has the smaller DMC density deviation")
    return Selection(a, adm, errs, f"{a} has the smallest combined DMC transport error among the admissible "
                     f"candidates (E = {ea:.2f} +- {ha:.2f}; next {b}: {eb:.2f} +- {hb:.2f})")


def _pm(v: float, hw: float, scale: float = 1.0, fmt: str = ".3f") -> str:
    if not math.isfinite(v):
        return "-"
    return f"{v * scale:{fmt}} +- {hw * scale:{fmt}}" if math.isfinite(hw) else f"{v * scale:{fmt}}"


def markdown_table(results: dict[str, dict[str, LiquidResult]]) -> str:
    """One row per candidate and liquid: density, eta (GK, EH), D (PBC, Yeh-Hummer), errors, wall times."""
    rows = ["| level | liquid | N | NPT / prod [ps] | density [g/cm^3] | dev. | eta GK [mPa s] | eta EH [mPa s] "
            "| eta STACIE [mPa s] | D PBC [1e-9 m^2/s] | D YH [1e-9 m^2/s] | e_eta | e_D | wall [s] |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lv in sorted(results):
        for sp in ("DMC", "TTE"):
            r = results[lv].get(sp)
            if r is None:
                continue
            e_eta, e_D = r.relative_error(VISCOSITY.name)[0], r.relative_error(SELF_DIFFUSION.name)[0]
            rows.append(
                f"| {lv} | {sp} | {r.n_molecules} | {r.npt_ps:g} / {r.prod_ps:g} | "
                f"{_pm(r.density_g_cm3, r.density_sem_g_cm3, fmt='.4f')} | {r.density_deviation_rel:+.1%} | "
                f"{_pm(r.viscosity_mPa_s, r.viscosity_hw95_mPa_s, fmt='.2f')} | "
                f"{_pm(r.viscosity_eh_mPa_s, float('nan'), fmt='.2f')} | "
                f"{_pm(r.viscosity_stacie_mPa_s, r.viscosity_stacie_hw95_mPa_s, fmt='.2f')} | "
                f"{_pm(r.D_pbc_m2_s, r.D_pbc_hw95_m2_s, 1e9, '.2f')} | "
                f"{_pm(r.D_yh_m2_s, r.D_yh_hw95_m2_s, 1e9, '.2f')} | "
                f"{e_eta:+.0%} | {e_D:+.0%} | {sum(r.wall_s.values()):.0f} |".replace("+nan%", "-"))
    return "\n".join(rows) + "\n"


def collect(out_dir: Path) -> dict[str, dict[str, LiquidResult]]:
    """Every ``<level>/<species>/validation.json`` under ``out_dir``, keyed by level and species."""
    out: dict[str, dict[str, LiquidResult]] = {}
    for path in sorted(Path(out_dir).glob("*/*/validation.json")):
        r = LiquidResult.from_json(path)
        out.setdefault(r.level, {})[r.species] = r
    return out


def validate_forcefield(out_dir: Path, species: tuple[str, ...] = ("DMC", "TTE"), **kwargs: Any) -> list[LiquidResult]:
    """Run :func:`run_liquid` for each liquid."""
    return [run_liquid(sp, out_dir, **kwargs) for sp in species]


# ------------------------------------------------------------------------------------------------- replicates
#: Quantities summarised over replicates: LiquidResult field -> (results key, unit, experimental reference key).
REPLICATE_QUANTITIES: dict[str, tuple[str, str, str | None]] = {
    "density_g_cm3": ("density", "g/cm^3", "density"),
    "viscosity_mPa_s": ("viscosity_gk", "mPa s", VISCOSITY.name),
    "viscosity_stacie_mPa_s": ("viscosity_stacie", "mPa s", VISCOSITY.name),
    "D_pbc_m2_s": ("self_diffusion_pbc", "m^2/s", None),
    "D_yh_m2_s": ("self_diffusion_yh", "m^2/s", SELF_DIFFUSION.name),
}
#: Default replicate seeds (independent packmol boxes and velocities).
DEFAULT_SEEDS = (2026, 3026, 4026)


def replicate_interval(values: list[float]) -> dict[str, Any]:
    """Mean and 95 % confidence half-width of the mean of independent replicates,
    ``t_{0.975, n-1} s / sqrt(n)`` (Student t; s = sample standard deviation); None below two replicates."""
    from scipy.stats import t as student_t

    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if x.size == 0:
        return {"n": 0, "mean": None, "sd": None, "hw95": None, "values": []}
    if x.size == 1:
        return {"n": 1, "mean": float(x[0]), "sd": None, "hw95": None, "values": x.tolist()}
    sd = float(np.std(x, ddof=1))
    return {"n": int(x.size), "mean": float(x.mean()), "sd": sd,
            "hw95": float(student_t.ppf(0.975, x.size - 1) * sd / math.sqrt(x.size)), "values": x.tolist()}


def collect_replicates(out_dir: Path) -> dict[str, dict[str, list[LiquidResult]]]:
    """Every ``<level>/<species>/seed*/validation.json`` under ``out_dir``: ``{level: {species: [results]}}``."""
    out: dict[str, dict[str, list[LiquidResult]]] = {}
    for path in sorted(Path(out_dir).glob("*/*/seed*/validation.json")):
        r = LiquidResult.from_json(path)
        if r.seed is None and path.parent.name.removeprefix("seed").isdigit():
            r.seed = int(path.parent.name.removeprefix("seed"))
        if (path.parent / "npt.edr").is_file():  # the density by the current averaging rule, from the run itself
            rho, sem, window, _, t0, eq = _density(path.parent / "npt.edr")
            ref = REFERENCES[r.species]["density"]
            r.density_g_cm3, r.density_sem_g_cm3, r.density_window_ps = round(rho, 4), round(sem, 4), window
            r.density_deviation_rel = round((rho - ref.value) / ref.value, 4)
            r.density_passed = abs(r.density_deviation_rel) <= ref.tolerance_rel
            r.density_equilibration_ps, r.density_equilibrated = round(t0, 2), eq
        out.setdefault(r.level, {}).setdefault(r.species, []).append(r)
    return out


def replicate_summary(results: dict[str, dict[str, list[LiquidResult]]]) -> dict[str, Any]:
    """The validation JSON: per level and liquid, each quantity's per-seed values, mean and 95 % interval
    between replicates, and its deviation from the sourced experimental value (relative, with the interval
    divided by the reference value)."""
    doc: dict[str, Any] = {"schema": "mdbench.validate_ff.replicates/1",
                           "interval": "mean of independent replicates +- t(0.975, n-1) s / sqrt(n)",
                           "references": json.loads(REFERENCES_FILE.read_text()), "levels": {}}
    for level, by_species in sorted(results.items()):
        lv = doc["levels"].setdefault(level, {})
        for sp, runs in sorted(by_species.items()):
            entry: dict[str, Any] = {
                "seeds": [r.seed for r in runs],
                "n_molecules": runs[0].n_molecules, "npt_ps": runs[0].npt_ps, "prod_ps": runs[0].prod_ps,
                "density_windows_ps": [list(r.density_window_ps) for r in runs],
                "density_equilibration_ps": [r.density_equilibration_ps for r in runs],
                "density_equilibrated": [r.density_equilibrated for r in runs],
                "viscosity_states": [r.viscosity_state for r in runs], "D_states": [r.D_state for r in runs],
                "quantities": {}}
            for fld, (key, unit, ref_key) in REPLICATE_QUANTITIES.items():
                q = replicate_interval([getattr(r, fld) for r in runs])
                q["unit"] = unit
                ref = REFERENCES.get(sp, {}).get(ref_key) if ref_key else None
                if ref is not None and q["mean"] is not None:
                    q["reference"] = ref.value
                    q["deviation_rel"] = q["mean"] / ref.value - 1.0
                    q["deviation_hw95_rel"] = None if q["hw95"] is None else q["hw95"] / ref.value
                if q["n"]:
                    entry["quantities"][key] = q
            lv[sp] = entry
    return doc


def _fmt(q: dict[str, Any] | None, scale: float = 1.0, digits: int = 3) -> str:
    if not q or q.get("mean") is None:
        return "-"
    m = q["mean"] * scale
    return f"{m:.{digits}f}" if q.get("hw95") is None else f"{m:.{digits}f} +- {q['hw95'] * scale:.{digits}f}"


def _dev(q: dict[str, Any] | None) -> str:
    if not q or q.get("deviation_rel") is None:
        return "-"
    hw = q.get("deviation_hw95_rel")
    return f"{q['deviation_rel']:+.1%}" + ("" if hw is None else f" +- {hw:.1%}")


def replicate_table(doc: dict[str, Any]) -> str:
    """Markdown table of :func:`replicate_summary` (what docs/forcefield.md shows; generated, never typed)."""
    rows = [("| level | liquid | seeds | N | NPT / prod [ps] | density [g/cm^3] | vs exp. | eta GK [mPa s] | "
             "eta STACIE [mPa s] | vs exp. (STACIE) | D PBC [1e-9 m^2/s] | D YH [1e-9 m^2/s] | vs exp. (YH) |"),
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for level, by_species in doc["levels"].items():
        for sp, e in by_species.items():
            q = e["quantities"]
            rows.append(
                f"| {level} | {sp} | {len(e['seeds'])} | {e['n_molecules']} | {e['npt_ps']:g} / {e['prod_ps']:g} | "
                f"{_fmt(q.get('density'), digits=4)} | {_dev(q.get('density'))} | "
                f"{_fmt(q.get('viscosity_gk'), digits=2)} | {_fmt(q.get('viscosity_stacie'), digits=2)} | "
                f"{_dev(q.get('viscosity_stacie'))} | {_fmt(q.get('self_diffusion_pbc'), 1e9, 2)} | "
                f"{_fmt(q.get('self_diffusion_yh'), 1e9, 2)} | {_dev(q.get('self_diffusion_yh'))} |")
    return "\n".join(rows) + "\n"


def validate_replicates(out_dir: Path, species: tuple[str, ...] = ("DMC", "TTE"),
                        seeds: tuple[int, ...] = DEFAULT_SEEDS, **kwargs: Any) -> dict[str, Any]:
    """Run :func:`run_liquid` for every liquid and seed (folders ``<level>/<species>/seed<seed>/``; a rerun
    skips finished segments), then write and return the replicate summary (``validation_replicates.json``)."""
    if len(seeds) < 3:
        raise InputError(f"validate-ff needs at least 3 independent seeds for a 95 % interval, got {len(seeds)}")
    for sp in species:
        for seed in seeds:
            run_liquid(sp, out_dir, seed=int(seed), replicate=f"seed{int(seed)}", **kwargs)
    doc = replicate_summary(collect_replicates(out_dir))
    (Path(out_dir) / "validation_replicates.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc
