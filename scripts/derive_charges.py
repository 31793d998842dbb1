#!/usr/bin/env python
"""Derive DMC and TTE partial charges: CHELPG fit to a PySCF ESP at one level of theory.

Run once per candidate level (``pip install mdbench[derive]``), not at build time::

    python scripts/derive_charges.py --level RHF/6-31G*            # -> data/charge_candidates/
    python scripts/derive_charges.py --level B3LYP/def2-TZVP
    python scripts/derive_charges.py --level wB97X-D/def2-TZVP

Each run writes ``lib/mdbench/inputs/data/charge_candidates/<level>.json``; the frozen record
``data/derived_charges.json`` is a copy of the candidate chosen by the rule in ``docs/forcefield.md``
(``--freeze LEVEL`` copies it).

Method (Breneman & Wiberg, J. Comput. Chem. 11 (1990) 361, doi:10.1002/jcc.540110311):

* wave function: restricted Hartree-Fock or Kohn-Sham DFT (:data:`LEVELS`), single point on the frozen
  input geometry (``lib/mdbench/inputs/data/geometries/<SPECIES>.pdb``; no re-optimisation, so the charges
  belong to exactly the geometry shipped in the bundle). SCF converged to 1e-9 Eh. DFT: PySCF's
  default integration grid (level 3) and density fitting of the Coulomb and exchange integrals
  (def2-universal-jkfit; its effect on ESP charges is of order 1e-4 e, below the 4-decimal rounding). The empirical dispersion term of wB97X-D is an energy correction that leaves the density,
  and so the ESP, unchanged; it is not evaluated;
* grid: cubic, spacing 0.3 Angstrom, extending 2.8 Angstrom beyond the nuclei; a point is kept when it
  lies outside every atomic radius (H 1.45, C 1.50, N 1.70, O 1.70 Angstrom from Breneman-Wiberg; F 1.47
  Angstrom, Bondi, since that table has no F) and within 2.8 Angstrom of at least one nucleus;
* ESP: :math:`V(r) = \\sum_A Z_A/|r-R_A| - \\sum_{\\mu\\nu} D_{\\mu\\nu} (\\mu|1/|r-r'||\\nu)` (atomic units);
* fit: least squares :math:`\\min_q \\sum_k (V_k - \\sum_A q_A/|r_k-R_A|)^2` subject to
  :math:`\\sum_A q_A = Q` (Lagrange multiplier), with topologically symmetry-equivalent atoms
  constrained to one charge (classes from iterative neighbour refinement of the bond graph);
* rounding: charges rounded to 4 decimals; the rounding residual is put on the atom class of size 1
  with the largest |q| so that the total is exactly Q.

The JSON written records method, basis, grid, radii, geometry sha256, PySCF version, RMS fit error and
the charges, so the force-field manifest can cite the derivation with its inputs and checksum.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from pathlib import Path

import numpy as np

ANGSTROM_TO_BOHR = 1.0 / 0.529177210903
RADII_ANGSTROM = {"H": 1.45, "C": 1.50, "N": 1.70, "O": 1.70, "F": 1.47}
SPACING_ANGSTROM = 0.3
EXTENT_ANGSTROM = 2.8
#: Candidate levels of theory: label -> (method, libxc functional or None for RHF, basis). B3LYP is
#: PySCF's "B3LYP" (libxc 402, VWN-RPA correlation as in Gaussian); wB97X-D is libxc 471 by its libxc
#: name (PySCF refuses the short name because it cannot add the D2 dispersion, which is not needed here).
LEVELS = {
    "RHF/6-31G*": ("RHF", None, "6-31G*"),
    "B3LYP/def2-TZVP": ("B3LYP", "B3LYP", "def2-TZVP"),
    "wB97X-D/def2-TZVP": ("wB97X-D", "HYB_GGA_XC_WB97X_D", "def2-TZVP"),
}

log = logging.getLogger("derive_charges")


def read_pdb(path: Path) -> tuple[list[str], list[str], np.ndarray, list[tuple[int, int]]]:
    """Atom names, elements, coordinates [Angstrom] and bonds (0-based) from a PDB with CONECT."""
    names, elements, xyz, bonds = [], [], [], set()
    for line in path.read_text().splitlines():
        if line.startswith(("ATOM", "HETATM")):
            names.append(line[12:16].strip())
            xyz.append([float(line[30:38]), float(line[38:46]), float(line[46:54])])
            elements.append(line[76:78].strip())
        elif line.startswith("CONECT"):
            ids = [int(x) for x in line[6:].split()]
            for j in ids[1:]:
                bonds.add(tuple(sorted((ids[0] - 1, j - 1))))
    return names, elements, np.array(xyz), sorted(bonds)


def equivalence_classes(elements: list[str], bonds: list[tuple[int, int]]) -> list[int]:
    """Topological equivalence classes by iterative refinement of (element, sorted neighbour classes)."""
    n = len(elements)
    nbr = [[] for _ in range(n)]
    for i, j in bonds:
        nbr[i].append(j)
        nbr[j].append(i)
    labels = [hash(e) for e in elements]
    for _ in range(n):
        new = [hash((labels[i], tuple(sorted(labels[j] for j in nbr[i])))) for i in range(n)]
        if len(set(new)) == len(set(labels)):
            break
        labels = new
    order = {lab: k for k, lab in enumerate(dict.fromkeys(labels))}
    return [order[lab] for lab in labels]


def chelpg_grid(xyz_A: np.ndarray, elements: list[str]) -> np.ndarray:
    """CHELPG grid points [Angstrom]."""
    lo, hi = xyz_A.min(0) - EXTENT_ANGSTROM, xyz_A.max(0) + EXTENT_ANGSTROM
    axes = [np.arange(lo[d], hi[d] + 1e-9, SPACING_ANGSTROM) for d in range(3)]
    pts = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    d = np.linalg.norm(pts[:, None, :] - xyz_A[None, :, :], axis=-1)
    radii = np.array([RADII_ANGSTROM[e] for e in elements])
    keep = np.all(d > radii, axis=1) & np.any(d <= EXTENT_ANGSTROM, axis=1)
    return pts[keep]


def esp_at(mol, dm: np.ndarray, pts_bohr: np.ndarray, chunk: int = 200) -> np.ndarray:
    """Electrostatic potential [hartree/e] of nuclei + electrons at points [bohr]."""
    coords = mol.atom_coords()
    charges = mol.atom_charges()
    v_nuc = (charges[None, :] / np.linalg.norm(pts_bohr[:, None] - coords[None], axis=-1)).sum(1)
    v_el = np.empty(len(pts_bohr))
    for s in range(0, len(pts_bohr), chunk):
        ints = mol.intor("int1e_grids", grids=pts_bohr[s : s + chunk])
        v_el[s : s + chunk] = np.einsum("gij,ij->g", ints, dm)
    return v_nuc - v_el


def fit_charges(pts_bohr, coords_bohr, v, classes, total_charge):
    """Constrained least squares; returns per-atom charges [e] and RMS error [hartree/e]."""
    a = 1.0 / np.linalg.norm(pts_bohr[:, None] - coords_bohr[None], axis=-1)
    ncls = max(classes) + 1
    m = np.zeros((len(classes), ncls))
    m[np.arange(len(classes)), classes] = 1.0
    b = a @ m  # columns: summed over equivalent atoms
    counts = m.sum(0)
    lhs = np.zeros((ncls + 1, ncls + 1))
    lhs[:ncls, :ncls] = b.T @ b
    lhs[:ncls, ncls] = counts
    lhs[ncls, :ncls] = counts
    rhs = np.concatenate([b.T @ v, [total_charge]])
    qc = np.linalg.solve(lhs, rhs)[:ncls]
    q = m @ qc
    rms = float(np.sqrt(np.mean((a @ q - v) ** 2)))
    return q, rms


def round_exact(q: np.ndarray, classes: list[int], total: float) -> np.ndarray:
    """Round to 4 decimals keeping equivalent atoms equal and the sum exactly ``total``."""
    qr = np.round(q, 4)
    resid = round(total - qr.sum(), 4)
    singles = [i for i in range(len(q)) if classes.count(classes[i]) == 1]
    target = max(singles, key=lambda i: abs(q[i]))
    qr[target] = round(qr[target] + resid, 4)
    return qr


def level_slug(level: str) -> str:
    """File-name form of a level label (``B3LYP/def2-TZVP`` -> ``B3LYP_def2-TZVP``)."""
    return level.replace("/", "_").replace("*", "s")


def derive(species: str, pdb: Path, level: str = "RHF/6-31G*") -> dict:
    from pyscf import __version__ as pyscf_version
    from pyscf import dft, gto, scf

    method, xc, basis = LEVELS[level]
    names, elements, xyz, bonds = read_pdb(pdb)
    classes = equivalence_classes(elements, bonds)
    mol = gto.M(atom=[(e, tuple(x)) for e, x in zip(elements, xyz)], basis=basis, unit="Angstrom",
                charge=0, spin=0, verbose=0)
    if xc is None:
        mf = scf.RHF(mol)
    else:
        mf = dft.RKS(mol).density_fit(auxbasis="def2-universal-jkfit")
        mf.xc = xc
    mf.conv_tol = 1e-9
    energy = mf.kernel()
    if not mf.converged:
        raise RuntimeError(f"{species}: SCF did not converge")
    pts_A = chelpg_grid(xyz, elements)
    pts_b = pts_A * ANGSTROM_TO_BOHR
    v = esp_at(mol, mf.make_rdm1(), pts_b)
    q, rms = fit_charges(pts_b, mol.atom_coords(), v, classes, 0.0)
    qr = round_exact(q, classes, 0.0)
    log.info("%s: E = %.6f Eh, %d grid points, RMS = %.2e", species, energy, len(pts_A), rms)
    return {
        "species": species,
        "geometry_file": f"geometries/{pdb.name}",
        "geometry_sha256": hashlib.sha256(pdb.read_bytes()).hexdigest(),
        "level": level, "method": method, "xc_libxc": xc, "basis": basis,
        "program": f"PySCF {pyscf_version}",
        "scf_energy_hartree": round(float(energy), 8),
        "grid": {"scheme": "CHELPG", "spacing_angstrom": SPACING_ANGSTROM,
                 "extent_angstrom": EXTENT_ANGSTROM, "radii_angstrom": RADII_ANGSTROM,
                 "n_points": int(len(pts_A))},
        "fit": {"constraint_total_charge_e": 0.0, "symmetry_classes": classes,
                "rms_error_hartree_per_e": round(rms, 8)},
        "atoms": names,
        "charges_unrounded_e": [round(float(x), 6) for x in q],
        "charges_e": [float(x) for x in qr],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[1]
    data = root / "lib" / "mdbench" / "inputs" / "data"
    parser.add_argument("--geometries", type=Path, default=data / "geometries")
    parser.add_argument("--level", choices=sorted(LEVELS), default="RHF/6-31G*", help="level of theory")
    parser.add_argument("--out", type=Path, default=None,
                        help="output JSON (default: data/charge_candidates/<level>.json)")
    parser.add_argument("--species", nargs="+", default=["DMC", "TTE"])
    parser.add_argument("--freeze", choices=sorted(LEVELS), default=None,
                        help="copy the candidate of this level to data/derived_charges.json and stop")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.freeze:
        src = data / "charge_candidates" / f"{level_slug(args.freeze)}.json"
        (data / "derived_charges.json").write_bytes(src.read_bytes())
        return 0
    out = args.out or data / "charge_candidates" / f"{level_slug(args.level)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    derived = {s: derive(s, args.geometries / f"{s}.pdb", args.level) for s in args.species}
    write_record(out, args.level, sha, derived)
    return 0


def write_record(out: Path, level: str, script_sha256: str, derived: dict) -> None:
    """Write (or add species to) the record of one level; species can be derived in separate runs, which
    merge under a lock when the existing record has the same level and script checksum."""
    import fcntl

    with open(out.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        species = {}
        if out.is_file():
            old = json.loads(out.read_text())
            if old.get("level") == level and old.get("script_sha256") == script_sha256:
                species = old["species"]
        species.update(derived)
        result = {"script": "scripts/derive_charges.py", "script_sha256": script_sha256, "level": level,
                  "species": species}
        out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    out.with_suffix(".lock").unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
