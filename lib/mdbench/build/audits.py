"""Setup audits that decide whether a built box may enter minimisation (SAEO item S1).

Each audit is a named check with ``passed``, a ``value`` and a human-readable ``detail``:

* ``forcefield_frozen`` - the itp files in the setup folder are byte-identical to the frozen model;
* ``counts_and_order`` - residues and atom names in the ``.gro`` follow the case counts and the itp
  atom order, molecules in the order Li, FSI, DMC, TTE;
* ``atom_count`` - the total atom count equals the preset's;
* ``molecule_charges`` - the charge of each molecule type (read from the itp) equals the frozen model
  (Li +0.72 e, FSI -0.72 e, DMC 0, TTE 0) within 1e-6 e;
* ``total_charge`` - :math:`|\\sum_s N_s q_s| \\le 10^{-6}` e;
* ``min_intermolecular_distance`` - the smallest distance between atoms of different molecules
  (minimum image) is at least :data:`MIN_DISTANCE_NM`;
* ``box_vs_cutoff`` - every box edge is at least :math:`2 r_c + \\delta`;
* ``grompp_zero_warnings`` - ``gmx grompp`` (never ``-maxwarn``) succeeds with no warning.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial import cKDTree

from mdbench.inputs import forcefield
from mdbench.build import topology

#: smallest acceptable distance between atoms of different molecules [nm]
MIN_DISTANCE_NM = 0.15
#: charge tolerance [e]
CHARGE_TOL_E = 1e-6
EM_MDP_TEMPLATE = Path(__file__).resolve().parent / "data" / "em_audit.mdp"


@dataclass
class Audit:
    """One named setup check."""

    name: str
    passed: bool
    value: Any
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


def itp_charges(path: Path) -> float:
    """Sum of the ``[ atoms ]`` charges [e] of a single-molecule itp file."""
    total, section = 0.0, None
    for line in path.read_text().splitlines():
        s = line.split(";", 1)[0].strip()
        if s.startswith("["):
            section = s.strip("[] ").lower()
        elif s and section == "atoms":
            total += float(s.split()[6])
    return total


def audit_forcefield(setup_dir: Path, reference: Path = forcefield.FORCEFIELD_DIR) -> Audit:
    """The setup folder's itp files are byte-identical to ``reference`` (the frozen model or a bundle's)."""
    bad = [n for n in topology.ITP_FILES
           if hashlib.sha256((setup_dir / n).read_bytes()).digest()
           != hashlib.sha256((Path(reference) / n).read_bytes()).digest()]
    return Audit("forcefield_frozen", not bad, forcefield.forcefield_checksum(reference),
                 "itp files identical to the frozen model" if not bad else f"differ from the frozen model: {bad}")


def audit_counts(gro: Path, counts: dict[str, int], n_expected: int) -> list[Audit]:
    res, names, _, _ = topology.read_gro(gro)
    expected = topology.expected_atoms(counts)
    first_bad = next((i for i, (r, n, e) in enumerate(zip(res, names, expected)) if (r, n) != e[:2]), None)
    ok = len(res) == len(expected) and first_bad is None
    detail = (f"{len(res)} atoms in order {', '.join(f'{forcefield.MOLNAME[s]} x{counts[s]}' for s in forcefield.SPECIES_ORDER if counts[s])}"
              if ok else f"mismatch at atom {first_bad if first_bad is not None else min(len(res), len(expected))} "
              f"(gro has {len(res)} atoms, case expects {len(expected)})")
    return [Audit("counts_and_order", ok, len(res), detail),
            Audit("atom_count", len(res) == n_expected, len(res), f"expected {n_expected} atoms")]


def audit_charges(setup_dir: Path, counts: dict[str, int]) -> list[Audit]:
    model = {"Li": forcefield.ION_CHARGE_SCALE, "FSI": -forcefield.ION_CHARGE_SCALE, "DMC": 0.0, "TTE": 0.0}
    per = {s: itp_charges(setup_dir / f"{forcefield.MOLNAME[s]}.itp") for s in forcefield.SPECIES_ORDER if counts[s]}
    bad = {s: q for s, q in per.items() if abs(q - model[s]) > CHARGE_TOL_E}
    total = sum(counts[s] * q for s, q in per.items())
    return [Audit("molecule_charges", not bad, {s: round(q, 9) for s, q in per.items()},
                  "per-molecule charges equal the frozen model (Li +0.72, FSI -0.72, DMC 0, TTE 0 e)" if not bad
                  else f"differ from the frozen model: {bad}"),
            Audit("total_charge", abs(total) <= CHARGE_TOL_E, round(total, 9), f"|Q| <= {CHARGE_TOL_E} e required")]


def min_intermolecular_distance_nm(xyz_nm: np.ndarray, molecule: np.ndarray, box_nm: np.ndarray,
                                   search_nm: float = 0.4) -> float:
    """Smallest minimum-image distance [nm] between atoms of different molecules (``search_nm`` if none closer)."""
    tree = cKDTree(np.mod(xyz_nm, box_nm), boxsize=box_nm)
    pairs = tree.query_pairs(search_nm, output_type="ndarray")
    if len(pairs) == 0:
        return search_nm
    inter = pairs[molecule[pairs[:, 0]] != molecule[pairs[:, 1]]]
    if len(inter) == 0:
        return search_nm
    d = xyz_nm[inter[:, 0]] - xyz_nm[inter[:, 1]]
    d -= box_nm * np.round(d / box_nm)
    return float(np.sqrt((d * d).sum(1)).min())


def audit_geometry(gro: Path, counts: dict[str, int], cutoff_nm: float, margin_nm: float) -> list[Audit]:
    _, _, xyz, box = topology.read_gro(gro)
    mol = np.array([m for _, _, m in topology.expected_atoms(counts)])
    dmin = min_intermolecular_distance_nm(xyz, mol, box)
    need = 2 * cutoff_nm + margin_nm
    return [Audit("min_intermolecular_distance", dmin >= MIN_DISTANCE_NM, round(dmin, 4),
                  f"smallest distance between atoms of different molecules [nm]; >= {MIN_DISTANCE_NM} required"),
            Audit("box_vs_cutoff", bool(box.min() >= need), round(float(box.min()), 5),
                  f"shortest box edge [nm] >= 2 x {cutoff_nm} + {margin_nm} = {need:.3f} nm required")]


def audit_grompp(setup_dir: Path, gro: str, top: str, cutoff_nm: float) -> Audit:
    """Run ``gmx grompp`` on the EM audit input; pass only with exit code 0 and no warning."""
    exe = shutil.which("gmx") or shutil.which("gmx_mpi")
    if exe is None:
        return Audit("grompp_zero_warnings", False, None, "gmx not found on PATH")
    (setup_dir / "em_audit.mdp").write_text(EM_MDP_TEMPLATE.read_text().format(cutoff_nm=cutoff_nm))
    cmd = [exe, "grompp", "-f", "em_audit.mdp", "-c", gro, "-p", top, "-o", "audit.tpr", "-po", "audit_mdout.mdp"]
    proc = subprocess.run(cmd, cwd=setup_dir, capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    (setup_dir / "grompp_audit.log").write_text(" ".join(["gmx"] + cmd[1:]) + "\n" + text)
    warnings = len(re.findall(r"^WARNING \d+", text, flags=re.M))
    notes = len(re.findall(r"^NOTE \d+", text, flags=re.M))
    ok = proc.returncode == 0 and warnings == 0
    return Audit("grompp_zero_warnings", ok, {"returncode": proc.returncode, "warnings": warnings, "notes": notes},
                 "gmx grompp -f em_audit.mdp (no -maxwarn); log in grompp_audit.log")
