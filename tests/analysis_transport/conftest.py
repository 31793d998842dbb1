"""Synthetic trajectories with analytically known transport for the analysis_transport tests."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from _testseed import seed_for


def brownian(rng: np.random.Generator, n_frames: int, n_particles: int, D_nm2_ps: float, dt_ps: float
             ) -> np.ndarray:
    """Unwrapped 3-D Brownian walkers with diffusion coefficient D: positions (F, N, 3) [nm]."""
    steps = rng.normal(0.0, math.sqrt(2.0 * D_nm2_ps * dt_ps), size=(n_frames, n_particles, 3))
    steps[0] = rng.uniform(0.0, 3.0, size=(n_particles, 3))
    return np.cumsum(steps, axis=0)


def ou_series(rng: np.random.Generator, n: int, sigma: float, tau_ps: float, dt_ps: float) -> np.ndarray:
    """Stationary Ornstein–Uhlenbeck series with <x(t)x(0)> = sigma² exp(-t/tau)."""
    from scipy.signal import lfilter

    a = math.exp(-dt_ps / tau_ps)
    e = rng.normal(0.0, sigma * math.sqrt(1.0 - a * a), n)
    x0 = rng.normal(0.0, sigma)
    return lfilter([1.0], [1.0, -a], e) + x0 * a ** np.arange(n)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261129)


_MDP = """integrator = md
dt = 0.002
nsteps = 500
nstenergy = 5
nstcalcenergy = 5
nstlog = 0
cutoff-scheme = Verlet
rcoulomb = 0.9
rvdw = 0.9
coulombtype = PME
tcoupl = v-rescale
tc-grps = System
tau-t = 0.1
ref-t = 300
gen-vel = yes
gen-temp = 300
gen-seed = {gen_seed}
ld-seed = {ld_seed}
constraints = h-bonds
"""
_TOP = """#include "oplsaa.ff/forcefield.itp"
#include "oplsaa.ff/spc.itp"
[ system ]
water
[ molecules ]
SOL 216
"""


@pytest.fixture(scope="session")
def water_nvt_run(tmp_path_factory):
    """A 1 ps NVT run of 216 SPC waters (real GROMACS, one thread, ~2 s): directory with md.edr."""
    import shutil
    import subprocess

    gmx = shutil.which("gmx")
    if gmx is None:
        pytest.skip("GROMACS (gmx) not on PATH")
    d = tmp_path_factory.mktemp("water_nvt")
    (d / "md.mdp").write_text(_MDP.format(gen_seed=seed_for("water_nvt/gen-seed"),
                                          ld_seed=seed_for("water_nvt/ld-seed")))
    (d / "topol.top").write_text(_TOP)
    top_dir = None
    for cand in ("/usr/share/gromacs/top", "/usr/local/gromacs/share/gromacs/top"):
        if (Path(cand) / "spc216.gro").is_file():
            top_dir = cand
    if top_dir is None:
        pytest.skip("GROMACS share/top (spc216.gro) not found")
    for cmd in ([gmx, "-quiet", "grompp", "-f", "md.mdp", "-c", f"{top_dir}/spc216.gro", "-p", "topol.top",
                 "-o", "md.tpr"],
                [gmx, "-quiet", "mdrun", "-nt", "1", "-deffnm", "md"]):
        p = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
    return d
