"""Validation of the frozen model before freezing: pure-liquid densities at 298.15 K and 1 bar.

Targets (``data/sources/reference_values.txt``): pure DMC 1.065 g/cm^3 within 3 %; pure TTE
1.54 g/cm^3 within 5 % (a second-hand value). Each liquid is packed with packmol, minimised, run
NVT then NPT (v-rescale 0.1 ps, C-rescale 2 ps, compressibility 4.5e-5 /bar, PME, h-bond
constraints, dt 2 fs) and the density is averaged over the second half of the NPT run, with a
standard error from four consecutive blocks:

.. math:: \\bar\\rho = \\frac{1}{n}\\sum_t \\rho_t, \\qquad
          \\sigma_{\\bar\\rho} = \\mathrm{std}(\\rho_{b=1..4}) / \\sqrt{4}
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mdbench.build import packing, topology
from mdbench.errors import MdbenchError
from mdbench.inputs import units

log = logging.getLogger(__name__)

TARGETS = {"DMC": (1.065, 0.03), "TTE": (1.54, 0.05)}  # density g/cm^3, relative tolerance
PACK_DENSITY = {"DMC": 0.95, "TTE": 1.35}

_MDP_COMMON = """cutoff-scheme = Verlet
pbc = xyz
coulombtype = PME
rcoulomb = {rc}
vdwtype = Cut-off
rvdw = {rc}
DispCorr = EnerPres
"""
_MDP_EM = "integrator = steep\nemtol = 500\nnsteps = 5000\n" + _MDP_COMMON
_MDP_MD = """integrator = md
dt = 0.002
nsteps = {nsteps}
nstenergy = 50
nstcalcenergy = 50
nstlog = 5000
continuation = {cont}
gen-vel = {genvel}
gen-temp = 298.15
gen-seed = {seed}
ld-seed = {seed}
constraints = h-bonds
constraint-algorithm = lincs
tcoupl = v-rescale
tc-grps = System
tau-t = 0.1
ref-t = 298.15
pcoupl = {pcoupl}
pcoupltype = isotropic
tau-p = 2.0
ref-p = 1.0
compressibility = 4.5e-5
""" + _MDP_COMMON


@dataclass
class DensityResult:
    """Density of one pure liquid."""

    species: str
    n_molecules: int
    npt_ps: float
    average_window_ps: tuple[float, float]
    density_g_cm3: float
    density_sem_g_cm3: float
    target_g_cm3: float
    tolerance_rel: float
    deviation_rel: float
    passed: bool
    wall_s: float


def _gmx(args: list[str], cwd: Path) -> None:
    exe = shutil.which("gmx")
    if exe is None:
        raise MdbenchError("gmx not found on PATH")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)
    (cwd / f"{args[0]}_{args[args.index('-deffnm') + 1] if '-deffnm' in args else 'grompp'}.log").write_text(
        proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise MdbenchError(f"gmx {' '.join(args)} failed in {cwd}:\n{proc.stderr[-2000:]}")


def run_density(species: str, out_dir: Path, n_molecules: int = 150, nvt_ps: float = 20.0, npt_ps: float = 200.0,
                threads: int = 2, seed: int = 2026, cutoff_nm: float = 1.0) -> DensityResult:
    """Pack, minimise, equilibrate and measure the density of pure ``species`` (``DMC`` or ``TTE``)."""
    import pyedr

    t0 = time.time()
    wd = Path(out_dir) / species
    wd.mkdir(parents=True, exist_ok=True)
    counts = {"Li": 0, "FSI": 0, "DMC": 0, "TTE": 0, species: n_molecules}
    from mdbench.inputs.cases import case_mass_u

    box = units.cubic_box_nm(case_mass_u(counts), PACK_DENSITY[species])
    xyz = packing.read_packed_pdb(packing.run_packmol(wd, counts, box, seed, PACK_DENSITY[species]))
    topology.write_gro(wd / "conf.gro", f"pure {species}", counts, xyz, box)
    topology.copy_forcefield(wd)
    (wd / "topol.top").write_text(topology.topology_text(f"pure {species}", counts))
    (wd / "em.mdp").write_text(_MDP_EM.format(rc=cutoff_nm))
    (wd / "nvt.mdp").write_text(_MDP_MD.format(nsteps=int(nvt_ps / 0.002), cont="no", genvel="yes", seed=seed,
                                               pcoupl="no", rc=cutoff_nm))
    (wd / "npt.mdp").write_text(_MDP_MD.format(nsteps=int(npt_ps / 0.002), cont="yes", genvel="no", seed=seed,
                                               pcoupl="C-rescale", rc=cutoff_nm))
    nt = ["-nt", str(threads)]
    prev = "conf.gro"
    for stage in ("em", "nvt", "npt"):
        _gmx(["grompp", "-f", f"{stage}.mdp", "-c", prev, "-p", "topol.top", "-o", f"{stage}.tpr"]
             + (["-t", "nvt.cpt"] if stage == "npt" else []), wd)
        _gmx(["mdrun", "-deffnm", stage, *nt], wd)
        prev = f"{stage}.gro"
    edr = pyedr.edr_to_dict(str(wd / "npt.edr"))
    t, rho = np.asarray(edr["Time"]), np.asarray(edr["Density"]) / 1000.0
    sel = t >= t[-1] / 2
    blocks = np.array_split(rho[sel], 4)
    mean = float(rho[sel].mean())
    sem = float(np.std([b.mean() for b in blocks], ddof=1) / 2.0)
    target, tol = TARGETS[species]
    dev = (mean - target) / target
    res = DensityResult(species, n_molecules, npt_ps, (float(t[sel][0]), float(t[-1])), round(mean, 4),
                        round(sem, 4), target, tol, round(dev, 4), abs(dev) <= tol, round(time.time() - t0, 1))
    (wd / "density.json").write_text(json.dumps(asdict(res), indent=1) + "\n")
    return res


def validate_forcefield(out_dir: Path, species: tuple[str, ...] = ("DMC", "TTE"), **kwargs) -> list[DensityResult]:
    """Run :func:`run_density` for each liquid; results also in ``out_dir/<SPECIES>/density.json``."""
    return [run_density(sp, out_dir, **kwargs) for sp in species]
