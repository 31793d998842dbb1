"""Issue 35, must show, through the user path: the Brownian electrolytes of ``test_brownian_electrolyte.py`` (the same
analytic trajectories: rigid-body Brownian motion of every molecule of the real micro HCE/LHCE topology, free ions,
60 % bound neutral pairs, all bound) written as GROMACS files and analysed by ``analyze_files`` (what
``mdbench analyze-files`` runs), judged on its ``results.json``:

* no transport observable is C with a 95 % half-width above its registered bound (``self_diffusion/*``,
  ``conductivity/sigma``, ``conductivity/sigma_NE``, ``conductivity/ionicity``, every t+);
* a resolved zero is one statement: all bound, sigma and sigma/sigma_NE are never called insufficient sampling for
  their precision or regime, and every t+ is ``not_estimable``; free or 60 % bound, no t+ is.

The files: the tpr is grompp'd from the built micro system (real topology: masses, charges, bonds); the xtc
holds every molecule translated rigidly along its analytic centre-of-mass walk (unwrapped, 3.0 nm cubic box,
one frame per ps); the edr is GROMACS' own (``mdrun -rerun``) of the same frames with the interactions switched off
(charges and Lennard-Jones zero: Brownian molecules overlap), so the energy file covers the trajectory. A rerun
writes no kinetic energy, so the temperature of the walk (298.15 K) is given as the registered ``temperature_K``,
the analysis' own way for an energy file without a Temperature term.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mdbench.analysis.settings import AnalysisSettings
from mdbench.inputs import forcefield

from _testseed import seed_for

from .test_brownian_electrolyte import DT, F, _trajectory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

BOX_NM = 3.0
T_K = 298.15
RERUN_MDP = """integrator = md
dt = 0.001
nsteps = 0
nstcalcenergy = 1
nstenergy = 1
cutoff-scheme = Verlet
pbc = xyz
coulombtype = cut-off
rcoulomb = 1.0
vdwtype = cut-off
rvdw = 1.0
tcoupl = no
pcoupl = no
constraints = none
"""


def _gmx(args: list[str], cwd: Path) -> None:
    proc = subprocess.run([shutil.which("gmx"), "-quiet", *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _switch_off_interactions(wd: Path) -> None:
    """Copy of the topology for the rerun: every charge, sigma and epsilon zero (bonded terms unchanged)."""
    ff = wd / "forcefield.itp"
    lines, section = [], ""
    for line in ff.read_text().splitlines():
        m = re.match(r"\s*\[\s*(\w+)\s*\]", line)
        section = m.group(1) if m else section
        cols = line.split()
        if section == "atomtypes" and not m and cols and not line.lstrip().startswith(";"):
            line = " ".join(cols[:-2] + ["0.0", "0.0"])
        lines.append(line)
    ff.write_text("\n".join(lines) + "\n")
    for itp in wd.glob("*.itp"):
        if itp.name == "forcefield.itp":
            continue
        lines, section = [], ""
        for line in itp.read_text().splitlines():
            m = re.match(r"\s*\[\s*(\w+)\s*\]", line)
            section = m.group(1) if m else section
            cols = line.split()
            if section == "atoms" and not m and len(cols) >= 8 and not line.lstrip().startswith(";"):
                cols[6] = "0.0"
                line = " ".join(cols)
            lines.append(line)
        itp.write_text("\n".join(lines) + "\n")


def _write_run(case: str, bound_fraction: float, wd: Path) -> dict[str, Path]:
    import MDAnalysis as mda
    from MDAnalysis.coordinates.memory import MemoryReader

    from mdbench.build import build_system
    from mdbench.engine.protocols import Timing, load_protocol, write_mdp
    from dataclasses import asdict

    setup = wd / "setup"
    res = build_system(case, "micro", setup, seed=seed_for(f"brownian_files/{case}") % 2**31)
    assert res.passed, [a for a in res.audits if not a.passed]
    prot = load_protocol("production")
    tm = Timing(**asdict(prot.timing))
    tm.length_ps = 1.0
    write_mdp(prot, setup / "prod.mdp", timing=tm, seed=1)
    _gmx(["grompp", "-f", "prod.mdp", "-c", f"{case}.gro", "-p", "topol.top", "-o", "prod.tpr", "-maxwarn", "0"],
         setup)
    u = mda.Universe(str(setup / "prod.tpr"), str(setup / f"{case}.gro"))
    whole = u.atoms.unwrap(compound="fragments")
    com = _trajectory(case, bound_fraction, 0)
    n_atoms = u.atoms.n_atoms
    x = np.empty((F, n_atoms, 3), dtype=np.float32)
    counters = {sp: 0 for sp in com}
    species_of = {v: k for k, v in forcefield.MOLNAME.items()}
    for res_ in u.residues:
        sp = species_of[res_.resname]
        i = counters[sp]
        counters[sp] += 1
        idx = res_.atoms.indices
        offsets = whole[idx] - np.average(whole[idx], axis=0, weights=res_.atoms.masses)  # Å
        x[:, idx, :] = (com[sp][:, i, None, :] * 10.0 + offsets[None, :, :]).astype(np.float32)
    assert all(counters[sp] == com[sp].shape[1] for sp in com), counters
    dims = np.array([BOX_NM * 10.0] * 3 + [90.0] * 3, dtype=np.float32)
    traj = mda.Merge(u.atoms)
    traj.load_new(x, format=MemoryReader, order="fac", dimensions=dims, dt=DT)
    files = {"tpr": setup / "prod.tpr", "xtc": wd / "prod.xtc", "edr": wd / "prod.edr"}
    with mda.Writer(str(files["xtc"]), n_atoms) as w:
        for _ in traj.trajectory:
            w.write(traj.atoms)
    rerun = wd / "rerun"
    shutil.copytree(setup, rerun)
    _switch_off_interactions(rerun)
    (rerun / "rerun.mdp").write_text(RERUN_MDP)
    _gmx(["grompp", "-f", "rerun.mdp", "-c", f"{case}.gro", "-p", "topol.top", "-o", "rerun.tpr", "-maxwarn", "1"],
         rerun)
    _gmx(["mdrun", "-s", "rerun.tpr", "-rerun", str(files["xtc"]), "-deffnm", "rerun", "-nt", "1", "-pin", "off"], rerun)
    shutil.copy(rerun / "rerun.edr", files["edr"])
    shutil.rmtree(rerun)
    return files


CASES = [(case, frac) for case in ("HCE", "LHCE") for frac in (0.0, 0.6, 1.0)]
_DONE: dict[tuple[str, float], dict] = {}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """(case, bound fraction) → results.json of ``analyze_files`` on the written files (made on first use)."""
    if shutil.which("gmx") is None or shutil.which("packmol") is None:
        pytest.skip("needs gmx and packmol (make setup)")
    from mdbench.analysis.pipeline import analyze_files

    def get(case: str, frac: float) -> dict:
        if (case, frac) not in _DONE:
            wd = tmp_path_factory.mktemp(f"brownian_{case}_{int(frac * 100)}")
            files = _write_run(case, frac, wd)
            _DONE[(case, frac)] = analyze_files(files["tpr"], files["xtc"], files["edr"], wd / "analysis",
                                                case=case, figures=False, workers=1,
                                                settings=AnalysisSettings.from_yaml(temperature_K=T_K))
        return _DONE[(case, frac)]
    return get


def _hw(ob: dict) -> float:
    hw = (ob.get("uncertainty") or {}).get("half_width_95")
    return math.inf if hw is None else float(hw)


@pytest.mark.parametrize("case,bound_fraction", CASES)
def test_no_transport_observable_is_c_with_a_half_width_above_its_bound(analysed, case, bound_fraction):
    doc = analysed(case, bound_fraction)
    s = AnalysisSettings.from_yaml()
    assert doc["energy"]["covers"] is True, doc["energy"]  # the rerun's edr covers the trajectory
    assert doc["temperature_K"] == pytest.approx(T_K)
    obs = doc["observables"]
    sigma, ne = obs["conductivity/sigma"], obs["conductivity/sigma_NE"]
    zero = "resolved zero" in (sigma.get("reason") or "")
    checked = 0
    for name, ob in obs.items():
        if ob["state"] != "C":
            continue
        value = ob["value"]
        if name.startswith("self_diffusion/"):
            bound = s.diffusion_max_rel_half_width * abs(value)
        elif name == "conductivity/sigma":
            bound = (s.ionicity_max_abs_half_width * (ne["value"] - _hw(ne)) if zero
                     else s.sigma_t_plus_max_rel_half_width * abs(value))
        elif name == "conductivity/sigma_NE":
            bound = s.sigma_t_plus_max_rel_half_width * abs(value)
        elif name == "conductivity/ionicity":
            bound = s.ionicity_max_abs_half_width
        elif name.startswith("transference/"):
            bound = s.t_plus_max_abs_half_width
        else:
            continue
        checked += 1
        assert _hw(ob) <= bound * (1 + 1e-9), (case, bound_fraction, name, ob["value"], _hw(ob), ob["reason"])
    # sigma_NE is built from the ions' D: never C while one of them is not
    d_states = [ob["state"] for k, ob in obs.items()  # keyed by the topology's residue names (LI, FSI)
                if k.startswith("self_diffusion/") and k.split("/", 1)[1].upper() in ("LI", "FSI")]
    assert len(d_states) == 2, sorted(obs)
    if any(st != "C" for st in d_states):
        assert ne["state"] != "C", ne["reason"]
    if sigma["state"] != "C" or ne["state"] != "C":
        assert obs["conductivity/ionicity"]["state"] != "C"
    assert checked >= 1  # something was C and judged (the solvent's D at least)


@pytest.mark.parametrize("case", ["HCE", "LHCE"])
def test_a_resolved_zero_is_one_statement_through_analyze_files(analysed, case):
    doc = analysed(case, 1.0)
    obs = doc["observables"]
    t_plus = {k: ob for k, ob in obs.items() if k.startswith("transference/")}
    assert t_plus, sorted(obs)
    for name in ("conductivity/sigma", "conductivity/ionicity"):
        ob = obs[name]
        assert "block_precision" not in ob["reason"] and "collective_regime" not in ob["reason"], (name, ob)
        assert (ob["state"] == "C" and "resolved zero" in ob["reason"]
                or ob["state"] != "C" and "block_trend" in ob["reason"]), (name, ob["state"], ob["reason"])
    assert all(ob["state"] == "not_estimable" for ob in t_plus.values()), {k: ob["state"] for k, ob in t_plus.items()}
    for frac in (0.0, 0.6):
        other = analysed(case, frac)["observables"]
        assert "resolved zero" not in (other["conductivity/sigma"].get("reason") or "")
        assert all(ob["state"] != "not_estimable" for k, ob in other.items() if k.startswith("transference/")), (
            frac, {k: (ob["state"], ob["reason"]) for k, ob in other.items() if k.startswith("transference/")})
