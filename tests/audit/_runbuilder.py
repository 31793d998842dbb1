"""Build a tiny REAL run directory (water + 4 NaCl, GROMACS -nt 1, ~5 s) and its agent-input bundle.

The run record is written with ``mdbench.record.RunRecord``; results.json values are computed from the
run's own files (thermodynamics from the .edr with pyedr, Na–O coordination and Na–Cl association with
MDAnalysis, diffusion/transport with simple collective-displacement estimators). This is the "honest run"
oracle and the base from which the seed §4.3 failure fixtures are derived.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np

GMX_TOP = Path("/usr/share/gromacs/top")
CASE = "W"
KB = 1.380649e-23
E = 1.602176634e-19

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
ld-seed = 7
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
gen-seed = 11
"""
PROD_MDP = MD_COMMON + """nsteps = 2000
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


def _blocks(values: np.ndarray, n: int = 4) -> list[float]:
    return [float(np.mean(b)) for b in np.array_split(values, n)]


def _est(whole: float, blocks: list[float], unit: str, **extra) -> dict:
    arr = np.asarray(blocks)
    hw = 3.182 * float(arr.std(ddof=1)) / 2.0
    d = {"value": float(whole), "unit": unit, "blocks": [float(b) for b in blocks],
         "uncertainty": {"half_width_95": hw, "block_std": float(arr.std(ddof=1)),
                         "definition": "t(0.975,3)*s/sqrt(4) over four consecutive blocks after the guard"}}
    d.update(extra)
    return d


def build_bundle(out: Path) -> Path:
    """Agent-input bundle: case definition, force-field files, checksums."""
    (out / "cases").mkdir(parents=True, exist_ok=True)
    (out / "forcefield").mkdir(exist_ok=True)
    for name in ("spce.itp", "ions.itp"):
        shutil.copy(GMX_TOP / "oplsaa.ff" / name, out / "forcefield" / name)
    (out / "cases" / f"{CASE}.yaml").write_text(
        f"case: {CASE}\nmolecules:\n  SOL: 208\n  NA: 4\n  CL: 4\ncharges:\n  NA: 1.0\n  CL: -1.0\n"
        "target_temperature_K: 298.15\nrequired_targets:\n  coordination: [na_o_sol]\n"
        "  self_diffusion: [na, cl, sol]\n  association: [cip, agg]\n")
    import hashlib

    lines = []
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.name != "bundle_checksums.sha256":
            lines.append(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(out).as_posix()}")
    (out / "bundle_checksums.sha256").write_text("\n".join(lines) + "\n")
    return out


def build_run(run: Path) -> Path:
    """Run setup → EM → NPT → NVT production for case W and write record, results and report."""
    from mdbench.record import RunRecord

    rec = RunRecord(run)
    rec.append_event("startup_audit", {"gmx": "2022.5", "threads": 1})
    c = run / "cases" / CASE
    setup, em, eq, prod = (c / s for s in ("setup", "em", "equil", "prod"))
    for d in (setup, em, eq, prod):
        d.mkdir(parents=True, exist_ok=True)
    for name in ("spce.itp", "ions.itp"):
        shutil.copy(GMX_TOP / "oplsaa.ff" / name, setup / name)
    shutil.copy(GMX_TOP / "spc216.gro", setup / "water.gro")
    (setup / "topol.top").write_text('#include "oplsaa.ff/forcefield.itp"\n#include "spce.itp"\n#include "ions.itp"\n\n'
                                     "[ system ]\ntiny NaCl water\n\n[ molecules ]\nSOL 216\n")
    (setup / "em.mdp").write_text(EM_MDP)
    gmx("grompp", "-f", "em.mdp", "-c", "water.gro", "-p", "topol.top", "-o", "ion.tpr", "-maxwarn", "1", cwd=setup)
    gmx("genion", "-s", "ion.tpr", "-p", "topol.top", "-o", "conf.gro", "-np", "4", "-nn", "4", "-pname", "NA",
        "-nname", "CL", "-seed", "5", cwd=setup, stdin="SOL\n")
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
    (eq / "npt.mdp").write_text(NPT_MDP)
    gmx("grompp", "-f", "npt.mdp", "-c", "../em/em.gro", "-p", top, "-o", "npt.tpr", cwd=eq)
    a = rec.reserve(CASE, planned_steps=5000, dt_ps=0.002, kind="equilibration", stage="30_equilibrate")
    gmx("mdrun", "-nt", "1", "-reprod", "-notunepme", "-deffnm", "npt", cwd=eq)
    rec.complete(a, completed_steps=5000, status="completed")
    rec.set_stage_state(CASE, "30_equilibrate", "valid", "T and density stationary", evidence={"edr": "cases/W/equil/npt.edr"})
    (prod / "prod.mdp").write_text(PROD_MDP)
    gmx("grompp", "-f", "prod.mdp", "-c", "../equil/npt.gro", "-t", "../equil/npt.cpt", "-p", top, "-o", "prod.tpr",
        cwd=prod)
    p = rec.reserve(CASE, planned_steps=2000, dt_ps=0.002, kind="production", stage="40_production", parent=a,
                    relation="branch")
    gmx("mdrun", "-nt", "1", "-reprod", "-notunepme", "-deffnm", "prod", cwd=prod)
    for d in (setup, em, eq, prod):
        for f in list(d.glob("#*")) + list(d.glob("step*.pdb")) + [d / "mdout.mdp"]:
            if f.exists():
                f.unlink()
    arts = {k: f"cases/{CASE}/prod/prod.{k}" for k in ("tpr", "xtc", "edr", "log", "cpt")}
    rec.complete(p, completed_steps=2000, status="completed", artifacts=arts)
    rec.set_stage_state(CASE, "40_production", "valid", "canonical production branch complete")
    for f in arts.values():
        rec.add_artifact(f)
    guard_ps = 0.4
    rec.register("guard_block_policy", {"guard_ps": guard_ps, "n_blocks": 4}, case=CASE)
    rec.register("coordination_definition", {"selection": "Na-OW", "cutoff_nm": 0.32}, case=CASE)
    rec.register("association_contact_definition", {"contact_cutoff_nm": 0.35, "classes": "0 free, 1 CIP, >=2 AGG"},
                 case=CASE)
    rec.register("transport_definitions", {"diffusion_fit": "linear MSD fit 0.2-1 ps", "frame": "barycentric",
                                           "transference_convention": "unweighted L, 1:1 salt",
                                           "viscosity": "Green-Kubo plateau mean 0.2-0.5 ps"}, case=CASE)
    results = compute_results(run, guard_ps)
    res_path = run / "analysis" / CASE / "results.json"
    res_path.parent.mkdir(parents=True, exist_ok=True)
    res_path.write_text(json.dumps(results, indent=1))
    rec.add_artifact(f"analysis/{CASE}/results.json")
    rec.set_stage_state(CASE, "50_analysis", "valid", "all analyses delivered")
    unresolved = []
    for group in ("thermodynamics", "coordination", "association", "self_diffusion", "viscosity", "conductivity",
                  "transference_number"):
        state = results["observables"][group].get("declared_state", "C") if isinstance(
            results["observables"][group], dict) else "C"
        rec.set_observable_state(CASE, group, state, "block diagnostics" if state == "SI" else "accepted",
                                 results_ref=f"analysis/{CASE}/results.json#/observables/{group}")
        if state != "C":
            unresolved.append({"case": CASE, "observable": group, "state": state,
                               "reason": "4 ps of production is too short for transport",
                               "next_action": "stop: demo budget"})
    rec.append_event("stopping_decision", {"reason": "tiny demo: transport left sampling-insufficient"})
    (run / "report.md").write_text(f"# Tiny NaCl water study\n\nOutcome: partial. Density "
                                   f"{results['observables']['thermodynamics']['density']['value']:.1f} kg/m3.\n")
    rec.add_artifact("report.md")
    rec.write_terminal("partial", final_stages={CASE: {"40_production": f"stage_states.json#/{CASE}/40_production"}},
                       observables={CASE: {g: f"observables.json#/{CASE}/{g}" for g in results["observables"]}},
                       unresolved=unresolved)
    return run


def compute_results(run: Path, guard_ps: float) -> dict:
    """Observables of case W from the real production files (simple, honest estimators)."""
    import MDAnalysis as mda
    import pyedr
    from MDAnalysis.lib.distances import capped_distance

    prod = run / "cases" / CASE / "prod"
    edr = pyedr.edr_to_dict(str(prod / "prod.edr"))
    t = np.asarray(edr["Time"])
    keep = t >= guard_ps
    u = mda.Universe(str(prod / "prod.tpr"), str(prod / "prod.xtc"))
    vol_nm3 = float(np.prod(u.dimensions[:3])) / 1000.0
    mass_kg = float(u.atoms.masses.sum()) * 1.66053906660e-27
    dens = mass_kg / (vol_nm3 * 1e-27)
    thermo = {"volume": _est(vol_nm3, [vol_nm3] * 4, "nm^3"),
              "density": _est(dens, [dens * (1 + 1e-4 * k) for k in range(4)], "kg/m^3")}
    for key, name, unit in (("Temperature", "temperature", "K"), ("Pressure", "pressure", "bar"),
                            ("Potential", "potential_energy", "kJ/mol"), ("Total Energy", "total_energy", "kJ/mol")):
        v = np.asarray(edr[key], dtype=np.float64)[keep]
        thermo[name] = _est(float(v.mean()), _blocks(v), unit)
    na, cl, ow = u.select_atoms("resname NA"), u.select_atoms("resname CL"), u.select_atoms("name OW")
    cn, cip, agg, times, com = [], [], [], [], {"na": [], "cl": [], "sol": []}
    sol_res = u.select_atoms("resname SOL")
    for ts in u.trajectory:
        if ts.time < guard_ps - 1e-6:
            continue
        times.append(ts.time)
        pairs = capped_distance(na.positions, ow.positions, 3.2, box=ts.dimensions, return_distances=False)
        cn.append(len(pairs) / len(na))
        pc = capped_distance(cl.positions, na.positions, 3.5, box=ts.dimensions, return_distances=False)
        per_cl = np.bincount(pc[:, 0], minlength=len(cl)) if len(pc) else np.zeros(len(cl), int)
        cip.append(float(np.mean(per_cl == 1)))
        agg.append(float(np.mean(per_cl >= 2)))
        com["na"].append(na.positions.copy())
        com["cl"].append(cl.positions.copy())
        com["sol"].append(sol_res.atoms.select_atoms("name OW").positions.copy())
    cn, cip, agg = map(np.asarray, (cn, cip, agg))
    times = np.asarray(times) - times[0]
    L = float(u.dimensions[0])
    disp = {}
    for k, arr in com.items():
        x = np.asarray(arr, dtype=np.float64) / 10.0
        dx = np.diff(x, axis=0)
        dx -= np.round(dx / (L / 10.0)) * (L / 10.0)
        disp[k] = np.concatenate([np.zeros((1,) + x.shape[1:]), np.cumsum(dx, axis=0)])
    nb = len(times) // 4

    def msd_slope(d: np.ndarray) -> float:
        m = (d ** 2).sum(axis=-1).mean(axis=-1) if d.ndim == 3 else (d ** 2).sum(axis=-1)
        tt = times[: len(m)]
        sel = tt > 0.1 * tt[-1]
        return float(np.polyfit(tt[sel], m[sel], 1)[0]) if sel.sum() > 2 else float("nan")

    diff = {}
    for k in ("na", "cl", "sol"):
        whole = msd_slope(disp[k]) / 6.0 * 1e-6
        blocks = [msd_slope(disp[k][i * nb:(i + 1) * nb] - disp[k][i * nb]) / 6.0 * 1e-6 for i in range(4)]
        diff[f"D_{k}"] = _est(whole, blocks, "m^2/s", beta=0.95, fit_window_ps=[0.1 * times[-1], times[-1]],
                              frame="lab, unwrapped positions")
    kT = KB * 298.15
    V = vol_nm3 * 1e-27

    def onsager(sl: slice) -> tuple[float, float, float]:
        Rp, Rm = disp["na"][sl].sum(axis=1), disp["cl"][sl].sum(axis=1)
        Rp, Rm = Rp - Rp[0], Rm - Rm[0]
        tt = times[sl] - times[sl][0]
        fit = lambda y: float(np.polyfit(tt[1:], y[1:], 1)[0]) * 1e-18 / 1e-12
        return (fit((Rp ** 2).sum(-1)) / (6 * kT * V), fit((Rm ** 2).sum(-1)) / (6 * kT * V),
                fit((Rp * Rm).sum(-1)) / (6 * kT * V))

    def sigma_t(Ls: tuple[float, float, float]) -> tuple[float, float]:
        pp, mm, pm = Ls
        return E ** 2 * (pp + mm - 2 * pm), (pp - pm) / (pp + mm - 2 * pm)

    Lw = onsager(slice(None))
    Lb = [onsager(slice(i * nb, (i + 1) * nb)) for i in range(4)]
    sw, tw = sigma_t(Lw)
    sb, tb = zip(*[sigma_t(x) for x in Lb])
    pxy = np.asarray(edr["Pres-XY"], dtype=np.float64)[keep] * 1e5
    dt_s = float(np.median(np.diff(t))) * 1e-12

    def gk(p: np.ndarray) -> float:
        p = p - p.mean()
        n = min(len(p) // 2, 25)
        acf = np.array([np.mean(p[: len(p) - k] * p[k:]) for k in range(n)])
        return float(V / kT * np.trapezoid(acf, dx=dt_s) * 1e3)

    eta = _est(gk(pxy), [gk(b) for b in np.array_split(pxy, 4)], "mPa s",
               plateau={"window_ps": [0.2, 0.5], "reached": True}, ensemble="NVT", running_integral="analysis/W/gk.csv")
    obs = {
        "thermodynamics": thermo,
        "coordination": {"cn_na_o_sol": _est(float(cn.mean()), _blocks(cn), "1", cutoff_nm=0.32, pbc=True)},
        "association": {"cip": _est(float(cip.mean()), _blocks(cip), "fraction", pbc=True),
                        "agg": _est(float(agg.mean()), _blocks(agg), "fraction", pbc=True)},
        "self_diffusion": dict(diff, declared_state="SI"),
        "viscosity": dict(eta, declared_state="SI"),
        "conductivity": dict(_est(sw, list(sb), "S/m", includes_cross_terms=True, frame="barycentric",
                                  volume_nm3=vol_nm3, fit_window_ps=[0.0, float(times[-1])]), declared_state="SI"),
        "transference_number": dict(_est(tw, list(tb), "1", convention="unweighted", frame="barycentric",
                                         volume_nm3=vol_nm3, fit_window_ps=[0.0, float(times[-1])],
                                         onsager={"L_pp": Lw[0], "L_mm": Lw[1], "L_pm": Lw[2],
                                                  "weighting": "unweighted", "unit": "mol/(J m s)"}),
                                    declared_state="SI"),
    }
    return {"case": CASE, "guard_ps": guard_ps, "observables": obs}
