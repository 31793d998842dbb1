"""Fixtures of the analysis-structure tests: a small real GROMACS trajectory, built once per session.

The system is SPC/E water with a few Na⁺/Cl⁻ (OPLS-AA ions from GROMACS's own ``oplsaa.ff``), about
1000 atoms, NVT at 300 K, with the pressure tensor written every 10 fs so Green–Kubo is meaningful.
It is cached in pytest's cache directory (``.pytest_cache``) keyed by the protocol text, so repeated
sessions reuse it; a fresh checkout builds it in about a minute on one core.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: also when a benchmark loads this file
from _testseed import seed_for  # noqa: E402

TOPOL = """#include "oplsaa.ff/forcefield.itp"
#include "oplsaa.ff/spce.itp"
#include "oplsaa.ff/ions.itp"

[ system ]
water with NaCl

[ molecules ]
SOL {nsol}
"""

EM_MDP = """integrator = steep
nsteps = 500
emtol = 500
cutoff-scheme = Verlet
coulombtype = PME
rcoulomb = 0.9
rvdw = 0.9
"""

MD_MDP = """integrator = md
dt = 0.002
nsteps = {nsteps}
cutoff-scheme = Verlet
coulombtype = PME
rcoulomb = 0.9
rvdw = 0.9
DispCorr = EnerPres
tcoupl = v-rescale
tc-grps = System
tau-t = 1.0
ref-t = 300
pcoupl = no
gen-vel = yes
gen-temp = 300
gen-seed = {gen_seed}
ld-seed = {ld_seed}
constraints = h-bonds
comm-grps = System
nstcalcenergy = 5
nstenergy = 5
nstxout-compressed = {nstxtc}
compressed-x-precision = 10000
nstlog = 5000
"""

#: Production protocol of the fixture: 30 ps, frames every 0.1 ps, energies every 0.01 ps.
NSTEPS = 15000
NSTXTC = 50
N_IONS = 4


def _gmx(args: list[str], cwd: Path, stdin: str | None = None) -> None:
    proc = subprocess.run(["gmx", "-quiet", *args], cwd=cwd, input=stdin, text=True,
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"gmx {' '.join(args)} failed:\n{proc.stderr[-3000:]}")


def md_mdp(nsteps: int = NSTEPS, nstxtc: int = NSTXTC) -> str:
    """The production .mdp with this session's velocity and thermostat seeds (``MDBENCH_TEST_SEED``)."""
    return MD_MDP.format(nsteps=nsteps, nstxtc=nstxtc, gen_seed=seed_for("water_nacl/gen-seed"),
                         ld_seed=seed_for("water_nacl/ld-seed"))


def build_water_nacl(workdir: Path, *, box_nm: float = 2.2, n_ions: int = N_IONS, nsteps: int = NSTEPS,
                     nstxtc: int = NSTXTC, threads: int = 1) -> dict[str, Path]:
    """Build, minimise and run the water/NaCl fixture in ``workdir``; return tpr/xtc/edr paths.

    The defaults are the test fixture; benchmarks pass a larger ``box_nm`` [nm] and more ions. Ion placement
    and velocities are seeded from ``MDBENCH_TEST_SEED`` (``tests/_testseed.py``).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    b = f"{box_nm:g}"
    _gmx(["solvate", "-cs", "spc216.gro", "-box", b, b, b, "-o", "solv.gro"], workdir)
    nsol = sum(1 for line in (workdir / "solv.gro").read_text().splitlines()[2:-1]
               if line[5:10].strip() == "SOL") // 3
    (workdir / "topol.top").write_text(TOPOL.format(nsol=nsol))
    (workdir / "em.mdp").write_text(EM_MDP)
    (workdir / "md.mdp").write_text(md_mdp(nsteps, nstxtc))
    _gmx(["grompp", "-f", "em.mdp", "-c", "solv.gro", "-p", "topol.top", "-o", "ions.tpr",
          "-maxwarn", "1"], workdir)
    _gmx(["genion", "-s", "ions.tpr", "-o", "ions.gro", "-p", "topol.top", "-pname", "NA",
          "-nname", "CL", "-np", str(n_ions), "-nn", str(n_ions), "-seed", str(seed_for("water_nacl/genion"))],
         workdir, stdin="SOL\n")
    _gmx(["grompp", "-f", "em.mdp", "-c", "ions.gro", "-p", "topol.top", "-o", "em.tpr"], workdir)
    _gmx(["mdrun", "-nt", str(threads), "-deffnm", "em"], workdir)
    _gmx(["grompp", "-f", "md.mdp", "-c", "em.gro", "-p", "topol.top", "-o", "md.tpr"], workdir)
    _gmx(["mdrun", "-nt", str(threads), "-deffnm", "md"], workdir)
    return {"tpr": workdir / "md.tpr", "xtc": workdir / "md.xtc", "edr": workdir / "md.edr",
            "dir": workdir}


@pytest.fixture(scope="session")
def water_nacl(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Paths of a real ~1000-atom GROMACS NVT trajectory (tpr, xtc, edr) of SPC/E water + NaCl."""
    if shutil.which("gmx") is None:
        pytest.skip("GROMACS (gmx) is not on PATH")
    key = hashlib.sha256((TOPOL + EM_MDP + md_mdp() + f"{NSTEPS}{NSTXTC}{N_IONS}{seed_for('water_nacl/genion')}"
                          ).encode()).hexdigest()[:12]
    if getattr(request.config, "cache", None) is not None:  # reuse across sessions (.pytest_cache)
        cache = Path(request.config.cache.mkdir(f"mdbench_water_nacl_{key}"))
    else:  # cacheprovider disabled: build once for this session
        cache = tmp_path_factory.mktemp(f"mdbench_water_nacl_{key}")
    done = cache / "DONE"
    if not done.exists():
        for child in cache.iterdir():
            if child.is_file():
                child.unlink()
        build_water_nacl(cache)
        done.write_text("ok\n")
    return {"tpr": cache / "md.tpr", "xtc": cache / "md.xtc", "edr": cache / "md.edr", "dir": cache}


@pytest.fixture()
def w_run(tmp_path: Path, water_nacl: dict[str, Path]) -> Path:
    """A run directory holding the fixture as production of case ``W`` (stage recorded valid)."""
    from mdbench.record import RunRecord

    run = tmp_path / "run"
    prod = run / "cases" / "W" / "prod"
    prod.mkdir(parents=True)
    for ext in ("tpr", "xtc", "edr"):
        shutil.copy(water_nacl[ext], prod / f"prod.{ext}")
    RunRecord(run).set_stage_state("W", "production", "valid", "fixture")
    return run
