"""Packing molecules into a cubic box with packmol at a declared density and seed.

The box edge for a target density :math:`\\rho` is :math:`L = (M / (N_A \\rho))^{1/3}` with
:math:`M = \\sum_s N_s M_s`. packmol 20.14 has no periodic packing, so molecules are placed inside
the box shrunk by half the tolerance on every face; periodic images are then at least ``tolerance``
apart as well.

Before packmol runs, the van der Waals packing fraction :math:`\\phi = \\sum_s N_s V_s / L^3` is
checked (:math:`V_s` from Bondi radii on a grid); :math:`\\phi` above :data:`MAX_PACKING_FRACTION`
(close packing of spheres, 0.74) cannot be packed and is refused at once.

Reference: L. Martinez, R. Andrade, E. G. Birgin, J. M. Martinez, J. Comput. Chem. 30 (2009) 2157,
doi:10.1002/jcc.21224.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np

from mdbench.errors import MdbenchError
from mdbench.inputs import forcefield

log = logging.getLogger(__name__)

#: packmol distance tolerance [Angstrom]
TOLERANCE_A = 2.0
#: close packing of equal spheres; a van der Waals packing fraction above this is impossible
MAX_PACKING_FRACTION = 0.74
#: Bondi van der Waals radii [Angstrom] (A. Bondi, J. Phys. Chem. 68 (1964) 441); Li+ ionic radius 0.76
BONDI_RADII_A = {1: 1.20, 3: 0.76, 6: 1.70, 7: 1.55, 8: 1.52, 9: 1.47, 16: 1.80}


class PackingError(MdbenchError):
    """A box could not be packed; carries the density tried [g/cm^3]."""

    def __init__(self, message: str, density_g_cm3: float):
        self.density_g_cm3 = density_g_cm3
        super().__init__(message)


@lru_cache(maxsize=None)
def vdw_volume_A3(species: str, spacing_A: float = 0.1) -> float:
    """Van der Waals volume [A^3] of one molecule: union of Bondi spheres counted on a grid."""
    atoms = forcefield.species_atoms(species)
    z = np.array([forcefield.ATOMTYPES[a.atomtype].atomic_number for a in atoms])
    r = np.array([BONDI_RADII_A[int(k)] for k in z])
    if species == "Li":
        return float(4.0 / 3.0 * np.pi * r[0] ** 3)
    _, xyz, _ = forcefield.read_pdb(forcefield.GEOMETRY_DIR / f"{species}.pdb")
    xyz = np.asarray(xyz)
    lo, hi = xyz.min(0) - r.max(), xyz.max(0) + r.max()
    axes = [np.arange(lo[d], hi[d], spacing_A) + spacing_A / 2 for d in range(3)]
    pts = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    inside = np.zeros(len(pts), bool)
    for p, rad in zip(xyz, r):
        inside |= ((pts - p) ** 2).sum(1) <= rad * rad
    return float(inside.sum() * spacing_A**3)


def packing_fraction(counts: dict[str, int], box_nm: float) -> float:
    """Van der Waals packing fraction of ``counts`` molecules in a cube of edge ``box_nm``."""
    v = sum(n * vdw_volume_A3(s) for s, n in counts.items() if n)
    return v / (box_nm * 10.0) ** 3


def packmol_input(counts: dict[str, int], box_nm: float, seed: int, output: str = "packed.pdb") -> str:
    """The packmol input text (molecules in the order Li, FSI, DMC, TTE)."""
    lo = TOLERANCE_A / 2.0
    hi = box_nm * 10.0 - TOLERANCE_A / 2.0
    lines = [f"# mdbench build: cubic box {box_nm:.6f} nm, seed {seed}", f"tolerance {TOLERANCE_A}",
             f"seed {seed}", "filetype pdb", f"output {output}", ""]
    for sp in forcefield.SPECIES_ORDER:
        n = counts.get(sp, 0)
        if n:
            lines += [f"structure {forcefield.MOLNAME[sp]}.pdb", f"  number {n}",
                      f"  inside box {lo:.4f} {lo:.4f} {lo:.4f} {hi:.4f} {hi:.4f} {hi:.4f}", "end structure", ""]
    return "\n".join(lines)


def run_packmol(workdir: Path, counts: dict[str, int], box_nm: float, seed: int, density_g_cm3: float,
                geometry_dir: Path | None = None) -> Path:
    """Pack ``counts`` into ``workdir/packed.pdb``; raise :class:`PackingError` if impossible.

    Parameters
    ----------
    workdir : Path
        Scratch folder; molecule PDBs, ``packmol.inp`` and ``packmol.log`` are written there.
    counts : dict
        Molecules per species.
    box_nm : float
        Cubic box edge [nm].
    seed : int
        packmol random seed (recorded in ``packmol.inp``).
    density_g_cm3 : float
        The density the box corresponds to (for the error message) [g/cm^3].
    geometry_dir : Path, optional
        Folder of ``<MOL>.pdb`` molecule geometries (a bundle's ``geometries/``); default the frozen model's.
    """
    phi = packing_fraction(counts, box_nm)
    if phi > MAX_PACKING_FRACTION:
        raise PackingError(
            f"cannot pack at density {density_g_cm3:.4g} g/cm^3: the molecules' van der Waals volume fills "
            f"{phi:.2f} of the {box_nm:.3f} nm box (more than close packing, {MAX_PACKING_FRACTION}); "
            "use a lower density (--density)", density_g_cm3)
    exe = shutil.which("packmol")
    if exe is None:
        raise MdbenchError("packmol not found on PATH; install it (conda install -c conda-forge packmol)")
    for sp, n in counts.items():
        if n:
            name = f"{forcefield.MOLNAME[sp]}.pdb"
            text = (Path(geometry_dir) / name).read_text() if geometry_dir else forcefield.geometry_pdb(sp)
            (workdir / name).write_text(text)
    inp = packmol_input(counts, box_nm, seed)
    (workdir / "packmol.inp").write_text(inp)
    log.info("packmol: %s molecules in %.3f nm box (phi = %.2f)", sum(counts.values()), box_nm, phi)
    with open(workdir / "packmol.inp") as fin, open(workdir / "packmol.log", "w") as flog:
        proc = subprocess.run([exe], stdin=fin, stdout=flog, stderr=subprocess.STDOUT, cwd=workdir)
    text = (workdir / "packmol.log").read_text(errors="replace")
    out = workdir / "packed.pdb"
    if proc.returncode != 0 or "Success!" not in text or not out.is_file():
        raise PackingError(
            f"packmol could not pack the box at density {density_g_cm3:.4g} g/cm^3 (box {box_nm:.3f} nm, "
            f"seed {seed}, exit code {proc.returncode}); use a lower density (--density)", density_g_cm3)
    return out


def read_packed_pdb(path: Path) -> np.ndarray:
    """Coordinates [nm] from packmol's PDB output, in file order."""
    xyz = [[float(line[30:38]), float(line[38:46]), float(line[46:54])]
           for line in path.read_text().splitlines() if line.startswith(("ATOM", "HETATM"))]
    return np.asarray(xyz) * 0.1
