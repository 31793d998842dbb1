"""Build a tiny REAL run directory (water + 4 NaCl, GROMACS -nt 1, ~5 s) and its agent-input bundle.

The run record is written with ``mdbench.record.RunRecord``; results.json values are computed from the
run's own files (thermodynamics from the .edr with pyedr, Na–O coordination and Na–Cl association with
MDAnalysis, diffusion/transport with simple collective-displacement estimators). This is the "honest run"
oracle and the base from which the seed §4.3 failure fixtures are derived.

Nothing about its verdicts is written by hand: each entry carries the sampling checks of the project's
registered adequacy rules (``mdbench.analysis.pipeline.registration_definitions``) evaluated on this
trajectory, and every observable state the record declares is what
``mdbench.analysis.states.classify_observable`` makes of them. A trajectory on another CPU or with another
``MDBENCH_TEST_SEED`` may turn a borderline observable from C to SI; the record follows it, and the tests
assert how the audit relates to the record, not which state a borderline observable lands in.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from _testseed import seed_for

GMX_TOP = Path("/usr/share/gromacs/top")
CASE = "W"
KB = 1.380649e-23
E = 1.602176634e-19
#: Excluded start of the production [ps] (measured from its first frame) and the production's length.
GUARD_PS = 0.4
PROD_STEPS = 2000
#: Observable groups of the record, in the seed's order.
GROUPS = ("thermodynamics", "coordination", "association", "self_diffusion", "viscosity", "conductivity",
          "transference_number")
_SEVERITY = {"C": 0, "SI": 1, "M": 2, "F": 3}

EM_MDP = """integrator = steep
emtol = 500
nsteps = 500
cutoff-scheme = Verlet
rlist = 0.8
rcoulomb = 0.8
rvdw = 0.8
coulombtype = PME
"""
MD_COMMON = """integrator = md
dt = 0.002
cutoff-scheme = Verlet
rlist = 0.8
rcoulomb = 0.8
rvdw = 0.8
coulombtype = PME
tcoupl = v-rescale
tc-grps = System
tau-t = 0.2
ref-t = 298.15
comm-grps = System
ld-seed = {ld_seed}
"""
NPT_MDP = MD_COMMON + """nsteps = 5000
nstenergy = 25
nstcalcenergy = 25
pcoupl = C-rescale
tau-p = 1.0
ref-p = 1.0
compressibility = 4.5e-5
gen-vel = yes
gen-temp = 298.15
gen-seed = {gen_seed}
"""
PROD_MDP = MD_COMMON + f"""nsteps = {PROD_STEPS}
nstenergy = 10
nstcalcenergy = 10
nstxout-compressed = 10
continuation = yes
gen-vel = no
"""


def gmx(*args: str, cwd: Path, stdin: str | None = None) -> None:
    proc = subprocess.run(["gmx", "-quiet", *args], cwd=cwd, input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gmx {' '.join(args)} failed:\n{proc.stderr[-2000:]}")


def adequacy_rules() -> dict[str, Any]:
    """The project's registered analysis definitions (thresholds, fitting rules, state rules) for this run."""
    from mdbench.analysis.pipeline import AnalysisSettings, registration_definitions

    return registration_definitions(AnalysisSettings(guard_ps=GUARD_PS))


def copy_forcefield(dst: Path, ion_q: float = 1.0) -> None:
    """The water and ion topologies into ``dst``; with ``ion_q`` ≠ 1 the Na⁺/Cl⁻ charges are scaled to ±``ion_q``
    (a scaled-charge model such as the seed's ±0.72)."""
    shutil.copy(GMX_TOP / "oplsaa.ff" / "spce.itp", dst / "spce.itp")
    lines = (GMX_TOP / "oplsaa.ff" / "ions.itp").read_text().splitlines(keepends=True)
    if ion_q != 1.0:
        for i, line in enumerate(lines):
            f = line.split()
            if len(f) >= 7 and f[1] in ("opls_407", "opls_401") and f[3] in ("NA", "CL"):
                f[6] = f"{ion_q if f[3] == 'NA' else -ion_q:g}"
                lines[i] = "  ".join(f) + "\n"
    (dst / "ions.itp").write_text("".join(lines))


def build_bundle(out: Path, ion_q: float = 1.0) -> Path:
    """Agent-input bundle: case definition, force-field files, checksums (ions at ±``ion_q`` e)."""
    (out / "cases").mkdir(parents=True, exist_ok=True)
    (out / "forcefield").mkdir(exist_ok=True)
    copy_forcefield(out / "forcefield", ion_q)
    (out / "cases" / f"{CASE}.yaml").write_text(
        f"case: {CASE}\nmolecules:\n  SOL: 208\n  NA: 4\n  CL: 4\ncharges:\n  NA: {ion_q:g}\n  CL: {-ion_q:g}\n"
        "target_temperature_K: 298.15\nrequired_targets:\n  coordination: [na_o_sol]\n"
        "  self_diffusion: [na, cl, sol]\n  association: [cip, agg]\n")
    lines = []
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.name != "bundle_checksums.sha256":
            lines.append(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(out).as_posix()}")
    (out / "bundle_checksums.sha256").write_text("\n".join(lines) + "\n")
    return out


_SHARED: dict[str, Path] = {}


def shared_run(tmp_path_factory) -> tuple[Path, Path]:
    """(run_dir, bundle_dir) of the honest reference run, built ONCE per test session for every room that
    reads it (the audit, report and CLI tests: the same deterministic build each made for itself before).
    Read-only: copy what you change."""
    if not _SHARED:
        base = tmp_path_factory.mktemp("realrun")
        _SHARED["bundle"] = build_bundle(base / "bundle")
        _SHARED["run"] = build_run(base / "run")
    return _SHARED["run"], _SHARED["bundle"]


def build_run(run: Path, ion_q: float = 1.0) -> Path:
    """Run setup → EM → NPT → NVT production for case W (ions at ±``ion_q`` e) and write record, results and
    report."""
    from mdbench.record import RunRecord

    rec = RunRecord(run)
    rec.append_event("startup_audit", {"gmx": "2022.5", "threads": 1})
    c = run / "cases" / CASE
    setup, em, eq, prod = (c / s for s in ("setup", "em", "equil", "prod"))
    for d in (setup, em, eq, prod):
        d.mkdir(parents=True, exist_ok=True)
    copy_forcefield(setup, ion_q)
    shutil.copy(GMX_TOP / "spc216.gro", setup / "water.gro")
    (setup / "topol.top").write_text('#include "oplsaa.ff/forcefield.itp"\n#include "spce.itp"\n#include "ions.itp"\n\n'
                                     "[ system ]\ntiny NaCl water\n\n[ molecules ]\nSOL 216\n")
    (setup / "em.mdp").write_text(EM_MDP)
    gmx("grompp", "-f", "em.mdp", "-c", "water.gro", "-p", "topol.top", "-o", "ion.tpr", "-maxwarn", "1", cwd=setup)
    gmx("genion", "-s", "ion.tpr", "-p", "topol.top", "-o", "conf.gro", "-np", "4", "-nn", "4", "-pname", "NA",
        "-nname", "CL", "-seed", str(seed_for("audit/genion")), cwd=setup, stdin="SOL\n")
    for p in setup.glob("#*"):
        p.unlink()
    (setup / "ion.tpr").unlink()
    rec.register("setup_audit", {"counts": {"SOL": 208, "NA": 4, "CL": 4}, "net_charge_e": 0.0}, case=CASE)
    rec.set_stage_state(CASE, "10_setup", "valid", "counts, ordering and charge match the bundle")
    top = "../setup/topol.top"
    (em / "em.mdp").write_text(EM_MDP)
    gmx("grompp", "-f", "em.mdp", "-c", "../setup/conf.gro", "-p", top, "-o", "em.tpr", cwd=em)
    gmx("mdrun", "-nt", "1", "-reprod", "-deffnm", "em", cwd=em)
    rec.set_stage_state(CASE, "20_minimize", "valid", "Fmax < 500 kJ/mol/nm")
    ld_seed = seed_for("audit/ld-seed")
    (eq / "npt.mdp").write_text(NPT_MDP.format(ld_seed=ld_seed, gen_seed=seed_for("audit/gen-seed")))
    gmx("grompp", "-f", "npt.mdp", "-c", "../em/em.gro", "-p", top, "-o", "npt.tpr", cwd=eq)
    a = rec.reserve(CASE, planned_steps=5000, dt_ps=0.002, kind="equilibration", stage="30_equilibrate")
    gmx("mdrun", "-nt", "1", "-reprod", "-notunepme", "-deffnm", "npt", cwd=eq)
    rec.complete(a, completed_steps=5000, status="completed")
    rec.set_stage_state(CASE, "30_equilibrate", "valid", "T and density stationary", evidence={"edr": "cases/W/equil/npt.edr"})
    (prod / "prod.mdp").write_text(PROD_MDP.format(ld_seed=ld_seed))
    gmx("grompp", "-f", "prod.mdp", "-c", "../equil/npt.gro", "-t", "../equil/npt.cpt", "-p", top, "-o", "prod.tpr",
        cwd=prod)
    p = rec.reserve(CASE, planned_steps=PROD_STEPS, dt_ps=0.002, kind="production", stage="40_production",
                    parent=a, relation="branch")
    gmx("mdrun", "-nt", "1", "-reprod", "-notunepme", "-deffnm", "prod", cwd=prod)
    for d in (setup, em, eq, prod):
        for f in list(d.glob("#*")) + list(d.glob("step*.pdb")) + [d / "mdout.mdp"]:
            if f.exists():
                f.unlink()
    arts = {k: f"cases/{CASE}/prod/prod.{k}" for k in ("tpr", "xtc", "edr", "log", "cpt")}
    rec.complete(p, completed_steps=PROD_STEPS, status="completed", artifacts=arts)
    rec.set_stage_state(CASE, "40_production", "valid", "canonical production branch complete")
    for f in arts.values():
        rec.add_artifact(f)
    rules = adequacy_rules()
    rec.register("guard_block_policy", {"guard_ps": GUARD_PS, "n_blocks": 4}, case=CASE)
    rec.register("coordination_definition", {"selection": "Na-OW", "cutoff_nm": 0.32}, case=CASE)
    rec.register("association_contact_definition", {"contact_cutoff_nm": 0.35, "classes": "0 free, 1 CIP, >=2 AGG"},
                 case=CASE)
    rec.register("transport_definitions", {
        "diffusion_fit": "linear fit of the time-origin-averaged MSD over lags [0.1, 0.5] x the block length",
        "frame": "barycentric: system centre-of-mass motion removed by mdrun (comm-grps System), unwrapped positions",
        "transference_convention": "unweighted L, 1:1 salt",
        "viscosity": "Green-Kubo, plateau rule of the fitting rules"}, case=CASE)
    rec.register("analysis_adequacy_and_stopping", rules["analysis_adequacy_and_stopping"], case=CASE)
    results = compute_results(run, GUARD_PS, rules, ion_q)
    res_path = run / "analysis" / CASE / "results.json"
    res_path.parent.mkdir(parents=True, exist_ok=True)
    res_path.write_text(json.dumps(results, indent=1))
    rec.add_artifact(f"analysis/{CASE}/results.json")
    for f in sorted((run / "analysis" / CASE).glob("msd_*")):
        rec.add_artifact(f"analysis/{CASE}/{f.name}")
    rec.set_stage_state(CASE, "50_analysis", "valid", "all analyses delivered")
    declare_states(run)
    return run


def declare_states(run: Path) -> str:
    """Record each group's state as the registered rules classify ``results.json``, list the non-C ones as
    unresolved and write the report and the terminal claim that follow from them; returns the claim."""
    from mdbench.record import RunRecord

    rec = RunRecord(run)
    results = json.loads((run / "analysis" / CASE / "results.json").read_text())
    unresolved = []
    for group, decision in group_states(results).items():
        rec.set_observable_state(CASE, group, decision.state, decision.reason,
                                 results_ref=f"analysis/{CASE}/results.json#/observables/{group}")
        if decision.state != "C":
            unresolved.append({"case": CASE, "observable": group, "state": decision.state, "reason": decision.reason,
                               "next_action": "stop: tiny demo budget (4 ps of production)"})
    # mdbench.analysis.results.CLAIM_RULE for one case with a valid production and no failed attempt
    outcome = "partial" if unresolved else "clean_valid"
    rec.append_event("stopping_decision", {"reason": f"tiny demo: {len(unresolved)} observable(s) unresolved"})
    (run / "report.md").write_text(f"# Tiny NaCl water study\n\nOutcome: {outcome.replace('_', ' ')}. Density "
                                   f"{results['observables']['thermodynamics']['density']['value']:.1f} kg/m3.\n")
    rec.add_artifact("report.md")
    rec.write_terminal(outcome, final_stages={CASE: {"40_production": f"stage_states.json#/{CASE}/40_production"}},
                       observables={CASE: {g: f"observables.json#/{CASE}/{g}" for g in results["observables"]}},
                       unresolved=unresolved)
    return outcome


def group_entries(results: dict) -> dict[str, dict[str, dict]]:
    """Observable group → {name: entry} of a results.json written by :func:`compute_results`."""
    out = {}
    for group in GROUPS:
        node = results["observables"][group]
        out[group] = {group: node} if "value" in node else {k: v for k, v in node.items() if isinstance(v, dict)}
    return out


def entry_state(entry: dict):
    """The registered state rules (``classify_observable``) applied to one entry's values and checks."""
    from mdbench.analysis.states import classify_observable

    diag = entry.get("diagnostics") or {}
    values = [entry.get("value"), *(entry.get("blocks") or [])]
    return classify_observable(values=[np.nan if v is None else v for v in values],
                               sampling_checks=diag.get("sampling_checks"), too_short=diag.get("too_short"))


def group_states(results: dict) -> dict[str, Any]:
    """Group → its weakest entry's :class:`~mdbench.analysis.states.StateDecision` (C < SI < M < F)."""
    states = {}
    for group, entries in group_entries(results).items():
        decisions = {name: entry_state(e) for name, e in entries.items()}
        name, worst = max(decisions.items(), key=lambda kv: _SEVERITY.get(kv[1].state, 0))
        states[group] = worst if worst.state == "C" else type(worst)(
            worst.state, f"{name}: {worst.reason}", worst.rule, worst.failed_checks)
    return states


def _entry(est, checks: dict[str, bool], **extra) -> dict:
    """A results.json entry: value, unit, blocks, uncertainty (with definition) and its sampling checks."""
    d = est.to_dict()
    d["diagnostics"] = {"sampling_checks": {k: bool(v) for k, v in checks.items()}}
    d.update(extra)
    return d


def _precision(est, max_rel: float) -> dict[str, bool]:
    rel = est.relative_half_width
    return {f"block_precision (half-width <= {max_rel:g} x |value|)": bool(np.isfinite(rel) and rel <= max_rel)}


#: How the honest run records the whole-interval MSD behind each D, one format per species (the ways runs
#: record it: a GROMACS ``gmx msd``-style .xvg, a CSV table beside the results, the curve inline).
MSD_FORMATS = {"na": "xvg", "cl": "csv", "sol": "inline"}


def write_msd(path: Path, fmt: str, lag_ps: np.ndarray, msd_nm2: np.ndarray, label: str) -> None:
    """Write an MSD table as a run would: ``xvg`` (GROMACS: ``@`` axis labels and legend) or ``csv``."""
    if fmt == "xvg":
        head = ['# MSD written by the tiny run', '@    title "Mean Square Displacement"',
                '@    xaxis  label "Time (ps)"', '@    yaxis  label "MSD (nm\\S2\\N)"', '@TYPE xy',
                f'@ s0 legend "{label}"']
        body = [f"{t:12.6f} {m:.10g}" for t, m in zip(lag_ps, msd_nm2)]
    else:
        head, body = ["lag_ps,msd_nm2"], [f"{t:.6f},{m:.10g}" for t, m in zip(lag_ps, msd_nm2)]
    path.write_text("\n".join(head + body) + "\n")


def record_msd(run: Path, species: str, lag_ps: np.ndarray, msd_nm2: np.ndarray) -> dict[str, Any]:
    """The results-entry keys citing the MSD behind D (:data:`MSD_FORMATS`), its file written if any."""
    fmt = MSD_FORMATS[species]
    if fmt == "inline":
        return {"curves": {"lag_ps": [float(x) for x in lag_ps], "msd_nm2": [float(x) for x in msd_nm2]}}
    d = run / "analysis" / CASE
    d.mkdir(parents=True, exist_ok=True)
    name = f"msd_{species}.{fmt}"
    write_msd(d / name, fmt, lag_ps, msd_nm2, species.upper())
    return {"msd_file": f"analysis/{CASE}/{name}" if fmt == "xvg" else name}


def compute_results(run: Path, guard_ps: float, rules: dict[str, Any], ion_q: float = 1.0) -> dict:
    """Observables of case W from the real production files (simple, honest estimators) with the sampling
    checks of the registered ``rules`` (:func:`adequacy_rules`); σ at the model's ion charges ±``ion_q`` e."""
    import MDAnalysis as mda
    import pyedr
    import tidynamics
    from MDAnalysis.lib.distances import capped_distance

    from mdbench.analysis.association import AssociationResult
    from mdbench.analysis.blocks import block_estimate, block_windows
    from mdbench.analysis.coordination import CoordinationResult
    from mdbench.analysis.thermo import thermo_observable
    from mdbench.analysis.viscosity import green_kubo_viscosity

    limits = rules["analysis_adequacy_and_stopping"]["thresholds"]
    beta_lo, beta_hi = rules["analysis_fitting_rules"]["diffusion"]["beta_range"]
    prod = run / "cases" / CASE / "prod"
    edr = pyedr.edr_to_dict(str(prod / "prod.edr"))
    t_edr = np.asarray(edr["Time"], dtype=np.float64)
    u = mda.Universe(str(prod / "prod.tpr"), str(prod / "prod.xtc"))
    vol_nm3 = float(np.prod(u.dimensions[:3])) / 1000.0
    mass_kg = float(u.atoms.masses.sum()) * 1.66053906660e-27
    dens = mass_kg / (vol_nm3 * 1e-27)

    na, cl, ow = u.select_atoms("resname NA"), u.select_atoms("resname CL"), u.select_atoms("name OW")
    times, cn, cip, agg, free = [], [], [], [], []
    pos: dict[str, list[np.ndarray]] = {"na": [], "cl": [], "sol": []}
    for ts in u.trajectory:
        times.append(ts.time)
        pairs = capped_distance(na.positions, ow.positions, 3.2, box=ts.dimensions, return_distances=False)
        cn.append(len(pairs) / len(na))
        pc = capped_distance(cl.positions, na.positions, 3.5, box=ts.dimensions, return_distances=False)
        per_cl = np.bincount(pc[:, 0], minlength=len(cl)) if len(pc) else np.zeros(len(cl), int)
        free.append(float(np.mean(per_cl == 0)))
        cip.append(float(np.mean(per_cl == 1)))
        agg.append(float(np.mean(per_cl >= 2)))
        for k, sel in (("na", na), ("cl", cl), ("sol", ow)):
            pos[k].append(sel.positions.astype(np.float64) / 10.0)
    times = np.asarray(times, dtype=np.float64)
    win = block_windows(times, guard_ps)          # guard from the first frame, four equal blocks

    def blocked(series: np.ndarray, unit: str):
        x = np.asarray(series, dtype=np.float64)
        return block_estimate(float(x[win.whole].mean()), [float(x[b].mean()) for b in win.blocks], unit,
                              block_ranges_ps=win.block_ranges_ps)

    # thermodynamics: the library's estimator and checks on every energy-file series (NVT: V constant)
    thermo = {}
    for name, series, t, unit in (("volume", np.full(times.size, vol_nm3), times, "nm^3"),
                                  ("density", np.full(times.size, dens), times, "kg/m^3"),
                                  *((name, edr[key], t_edr, unit) for key, name, unit in (
                                      ("Temperature", "temperature", "K"), ("Pressure", "pressure", "bar"),
                                      ("Potential", "potential_energy", "kJ/mol"),
                                      ("Total Energy", "total_energy", "kJ/mol")))):
        th = thermo_observable(series, t, name=name, unit=unit, guard_ps=guard_ps)
        thermo[name] = _entry(th.estimate, th.sampling_checks)

    cn_est = blocked(cn, "1")
    cn_checks = CoordinationResult("SOL", ["SOL:OW"], 0.32, "registered fixed cutoff", cn_est).sampling_checks()
    fractions = {"free_or_SSIP": blocked(free, "fraction"), "CIP": blocked(cip, "fraction"),
                 "AGG": blocked(agg, "fraction")}
    assoc_checks = AssociationResult(  # only its sampling checks are used: the class fractions' block stability
        cation="NA", anion="CL", channels=["CL"], cutoff_nm=0.35, cutoff_rule="registered contact cutoff",
        fractions=fractions, anions_per_cation=blocked(cn, "1"), largest_cluster_fraction=blocked(cn, "1"),
        cluster_size_fraction={}, n_cations=len(na), n_anions=len(cl)).sampling_checks()

    def only(prefix: str) -> dict[str, bool]:
        return {k: v for k, v in assoc_checks.items() if k.startswith(prefix)}

    # unwrapped displacements from the first frame [nm]
    L = float(u.dimensions[0]) / 10.0
    disp = {}
    for k, frames in pos.items():
        dx = np.diff(np.asarray(frames), axis=0)
        dx -= np.round(dx / L) * L
        disp[k] = np.concatenate([np.zeros((1,) + dx.shape[1:]), np.cumsum(dx, axis=0)])

    # every transport fit uses one lag window, [0.1, 0.5] x the block length, for the whole interval and
    # each block; MSDs average over all time origins (tidynamics: an implementation independent of ours)
    dt = float(np.median(np.diff(times)))
    lags = np.arange(int(round(0.5 * win.block_length_ps / dt)) + 1) * dt
    fit_sel = lags >= 0.1 * win.block_length_ps - 1e-9
    fit_window = [float(lags[fit_sel][0]), float(lags[-1])]

    def msd(x: np.ndarray) -> np.ndarray:
        """Time-origin-averaged MSD [nm^2] of (F, ..., 3) displacements on ``lags``, summed over dimensions
        and averaged over molecules."""
        x = x.reshape(x.shape[0], -1, 3)
        return np.mean([tidynamics.msd(x[:, i, :])[:lags.size] for i in range(x.shape[1])], axis=0)

    def msd_fit(d: np.ndarray, sl: slice) -> tuple[float, float]:
        """(slope [nm^2/ps], log-log exponent β) of the MSD over the registered lag window."""
        m = msd(d[sl])
        return (float(np.polyfit(lags[fit_sel], m[fit_sel], 1)[0]),
                float(np.polyfit(np.log(lags[fit_sel]), np.log(m[fit_sel]), 1)[0]))

    frame = "barycentric: system centre-of-mass motion removed by mdrun (comm-grps System); unwrapped positions"
    diff = {}
    for k in ("na", "cl", "sol"):
        (whole, beta), blocks = msd_fit(disp[k], win.whole), [msd_fit(disp[k], b)[0] for b in win.blocks]
        est = block_estimate(whole / 6.0 * 1e-6, [b / 6.0 * 1e-6 for b in blocks], "m^2/s",
                             block_ranges_ps=win.block_ranges_ps)
        checks = dict(_precision(est, limits["diffusion_max_rel_half_width"]),
                      **{f"diffusive regime (beta in [{beta_lo:g}, {beta_hi:g}])": beta_lo <= beta <= beta_hi})
        diff[f"D_{k}"] = _entry(est, checks, beta=beta, frame=frame, fit_window_ps=fit_window,
                                **record_msd(run, k, lags, msd(disp[k][win.whole])))
    kT = KB * 298.15
    V = vol_nm3 * 1e-27

    def onsager(sl: slice) -> tuple[float, float, float]:
        """Unweighted L++, L--, L+- [mol/(J m s)] from the collective displacements' MSDs (cross term by
        polarisation: <ΔRp·ΔRm> = (MSD(Rp + Rm) - MSD(Rp) - MSD(Rm)) / 2)."""
        Rp, Rm = disp["na"][sl].sum(axis=1), disp["cl"][sl].sum(axis=1)
        mp, mm, ms = msd(Rp[:, None]), msd(Rm[:, None]), msd((Rp + Rm)[:, None])
        fit = lambda y: float(np.polyfit(lags[fit_sel], y[fit_sel], 1)[0]) * 1e-18 / 1e-12
        return (fit(mp) / (6 * kT * V), fit(mm) / (6 * kT * V), fit((ms - mp - mm) / 2.0) / (6 * kT * V))

    def sigma_t(Ls: tuple[float, float, float]) -> tuple[float, float]:
        pp, mm, pm = Ls
        return (E * ion_q) ** 2 * (pp + mm - 2 * pm), (pp - pm) / (pp + mm - 2 * pm)

    Lw = onsager(win.whole)
    sw, tw = sigma_t(Lw)
    sb, tb = zip(*[sigma_t(onsager(b)) for b in win.blocks])
    sigma = block_estimate(sw, list(sb), "S/m", block_ranges_ps=win.block_ranges_ps)
    tplus = block_estimate(tw, list(tb), "1", block_ranges_ps=win.block_ranges_ps)
    # viscosity: the library's Green-Kubo estimator with its registered plateau rule
    gk = green_kubo_viscosity({k: edr[k] for k in edr if k.startswith("Pres-")}, float(np.median(np.diff(t_edr))),
                              vol_nm3, 298.15, guard_ps=guard_ps)
    eta = _entry(gk.viscosity, dict(_precision(gk.viscosity, limits["viscosity_max_rel_half_width"]),
                                    plateau=gk.plateau_found),
                 plateau={"window_ps": list(gk.plateau_window_ps), "reached": gk.plateau_found}, ensemble="NVT")
    obs = {
        "thermodynamics": thermo,
        "coordination": {"cn_na_o_sol": _entry(cn_est, cn_checks, cutoff_nm=0.32, pbc=True)},
        "association": {"cip": _entry(fractions["CIP"], only("CIP"), pbc=True, cutoff_nm=0.35),
                        "agg": _entry(fractions["AGG"], only("AGG"), pbc=True, cutoff_nm=0.35)},
        "self_diffusion": diff,
        "viscosity": eta,
        "conductivity": _entry(sigma, _precision(sigma, limits["sigma_t_plus_max_rel_half_width"]),
                               includes_cross_terms=True, frame="barycentric", volume_nm3=vol_nm3,
                               fit_window_ps=fit_window, charges_e={"NA": ion_q, "CL": -ion_q}),
        "transference_number": _entry(tplus, _precision(tplus, limits["sigma_t_plus_max_rel_half_width"]),
                                      convention="unweighted", frame="barycentric", volume_nm3=vol_nm3,
                                      fit_window_ps=fit_window, charges_e={"NA": ion_q, "CL": -ion_q},
                                      onsager={"L_pp": Lw[0], "L_mm": Lw[1], "L_pm": Lw[2],
                                               "weighting": "unweighted", "unit": "mol/(J m s)"}),
    }
    return {"case": CASE, "guard_ps": guard_ps, "observables": obs}


def with_changed_na_sigma(topology: Path, out: Path, factor: float) -> tuple[str, list[str]]:
    """Write ``out``: ``topology`` with the Na⁺ type (``opls_407``) redefined in an ``[ atomtypes ]`` block whose
    Lennard-Jones σ is ``factor`` × the force field's. Returns (the force field's line, the planted fields)."""
    line = next(x for x in (GMX_TOP / "oplsaa.ff/ffnonbonded.itp").read_text().splitlines()
                if x.split()[:1] == ["opls_407"])
    f = line.split()
    f[6] = f"{float(f[6]) * factor:.5e}"
    head, rest = topology.read_text().split("\n", 1)
    out.write_text(head + "\n\n[ atomtypes ]\n" + " ".join(f) + "\n\n" + rest)
    return line, f

