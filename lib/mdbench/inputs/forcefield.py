"""The frozen force field: definitions with provenance, and the writer of itp files and manifest.

The model (seed 000, section 3.1; decisions in ``data/sources/REFERENCE_DATA_README.md``):

* Li+ and FSI- from CL&P (``il.ff``), ionic charges scaled by 0.72;
* DMC: LJ and bonded terms of the GROMACS ``oplsaa.ff`` ester types (opls_465-469), the two carbonate
  terms that ``oplsaa.ff`` lacks from the OPLS carbonate block (fftool), CHELPG charges derived by
  ``scripts/derive_charges.py`` (RHF/6-31G*, PySCF);
* TTE: ``oplsaa.ff`` perfluoroalkane/ether types, OPLS-AA 2023 CF2H types (966/967), documented
  analogues for the three terms missing everywhere, CHELPG charges as for DMC.

Combination rule 3 (geometric sigma and epsilon), gen-pairs yes, fudgeLJ = fudgeQQ = 0.5.

Every bonded parameter is written explicitly on its interaction line (no type lookup), so the itp
files are self-contained and the manifest can be compared line by line with what ``grompp`` uses.
The written files live in ``data/forcefield/`` and are committed; :func:`write_forcefield`
regenerates them byte for byte (a test checks it).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from mdbench.inputs import units

DATA_DIR = Path(__file__).resolve().parent / "data"
FORCEFIELD_DIR = DATA_DIR / "forcefield"
GEOMETRY_DIR = DATA_DIR / "geometries"
DERIVED_CHARGES = DATA_DIR / "derived_charges.json"
CHARGE_CANDIDATES_DIR = DATA_DIR / "charge_candidates"

#: Version of the frozen model; bumped whenever a parameter or charge changes (history in docs/forcefield.md):
#: 1 = RHF/6-31G* CHELPG solvent charges; 2 = the level chosen by the validation rule (issue #24).
MODEL_VERSION = 2
#: Ionic charge scaling (Leontyev & Stuchebrukhov 2011), applied to Li+ and FSI-.
ION_CHARGE_SCALE = 0.72
#: Molecule order in every box and topology.
SPECIES_ORDER = ("Li", "FSI", "DMC", "TTE")
#: GROMACS molecule-type / residue name per species.
MOLNAME = {"Li": "LI", "FSI": "FSI", "DMC": "DMC", "TTE": "TTE"}

PUBLISHED, DERIVED, ANALOGUE = "published", "derived", "analogue"

_CLP = "sources/clandp_li_fsi.txt"
_DMC = "sources/dmc_candidates.txt"
_TTE = "sources/tte_candidates.txt"
_P23 = "sources/oplsaa2023.par"
_NB = "gromacs:oplsaa.ff/ffnonbonded.itp"
_BD = "gromacs:oplsaa.ff/ffbonded.itp"


@dataclass(frozen=True)
class Source:
    """Where a number comes from: a file and line (``gromacs:`` = GROMACS 2022.5 share/top), and how
    it was converted to GROMACS units."""

    file: str
    line: int
    conversion: str = "none (GROMACS units already)"


@dataclass(frozen=True)
class AtomType:
    """A non-bonded atom type: sigma [nm], epsilon [kJ/mol], mass [u]."""

    name: str
    bond_type: str
    atomic_number: int
    mass_u: float
    sigma_nm: float
    epsilon_kJ_mol: float
    source: Source
    flag: str
    note: str = ""


@dataclass(frozen=True)
class BondedTerm:
    """Parameters of one bonded type tuple (by bond-type classes), GROMACS units and function type."""

    kind: str  # bond | angle | dihedral | improper
    classes: tuple[str, ...]
    funct: int
    params: tuple[float, ...]
    source: Source
    flag: str
    note: str = ""


_CLP_CONV_BOND = "r0 [A] x 0.1 -> nm; k [kJ/mol/A^2] (E = k/2 dr^2) x 100 -> kJ/mol/nm^2"
_CLP_CONV_LJ = "sigma [A] x 0.1 -> nm; epsilon kJ/mol as is"
_CLP_CONV_ANGLE = "theta0 deg, k kJ/mol/rad^2 (E = k/2 dth^2) as is"
_CLP_CONV_DIH = "OPLS V1..V4 [kJ/mol] as is (GROMACS dihedral type 5)"
_P23_CONV_LJ = "sigma [A] x 0.1 -> nm; epsilon [kcal/mol] x 4.184 -> kJ/mol"
_P23_CONV_DIH = "OPLS V1..V4 [kcal/mol] x 4.184 -> kJ/mol (GROMACS dihedral type 5)"


def _lj_clp(sigma_A: float, eps_kJ: float) -> tuple[float, float]:
    return round(units.angstrom_to_nm(sigma_A), 6), eps_kJ


def _lj_p23(sigma_A: float, eps_kcal: float) -> tuple[float, float]:
    return round(units.angstrom_to_nm(sigma_A), 6), round(units.lj_epsilon_kcal_to_kj(eps_kcal), 6)


ATOMTYPES: dict[str, AtomType] = {
    t.name: t
    for t in [
        AtomType("li", "Li", 3, 6.941, *_lj_clp(2.126, 0.07648), Source(_CLP, 32, _CLP_CONV_LJ), PUBLISHED,
                 "CL&P Li (Aqvist)"),
        AtomType("fsi_S", "SB", 16, 32.066, *_lj_clp(3.55, 1.04600), Source(_CLP, 34, _CLP_CONV_LJ), PUBLISHED,
                 "CL&P SBT"),
        AtomType("fsi_N", "NB", 7, 14.000, *_lj_clp(3.25, 0.71128), Source(_CLP, 35, _CLP_CONV_LJ), PUBLISHED,
                 "CL&P NBT (mass 14.000 as in il.ff)"),
        AtomType("fsi_O", "OB", 8, 15.999, *_lj_clp(3.15, 0.83736), Source(_CLP, 36, _CLP_CONV_LJ), PUBLISHED,
                 "CL&P OBT (Gouveia 2017 update)"),
        AtomType("fsi_F", "FB", 9, 18.998, *_lj_clp(3.118, 0.25540), Source(_CLP, 38, _CLP_CONV_LJ), PUBLISHED,
                 "CL&P FSI fluorine (Gouveia 2017)"),
        AtomType("dmc_C", "C_2", 6, 12.011, 0.375, 0.43932, Source(_NB, 478), PUBLISHED, "opls_465 ester C=O carbon"),
        AtomType("dmc_O", "O_2", 8, 15.9994, 0.296, 0.87864, Source(_NB, 479), PUBLISHED, "opls_466 ester =O"),
        AtomType("dmc_OS", "OS", 8, 15.9994, 0.300, 0.71128, Source(_NB, 480), PUBLISHED, "opls_467 ester -OR"),
        AtomType("dmc_CT", "CT", 6, 12.011, 0.350, 0.276144, Source(_NB, 481), PUBLISHED, "opls_468 methoxy C"),
        AtomType("dmc_HC", "HC", 1, 1.008, 0.242, 0.06276, Source(_NB, 482), PUBLISHED, "opls_469 methoxy H"),
        AtomType("tte_CF2H", "CT", 6, 12.011, *_lj_p23(3.250, 0.062), Source(_P23, 865, _P23_CONV_LJ), PUBLISHED,
                 "OPLS-AA 2023 type 966 CF2H carbon"),
        AtomType("tte_HF", "HC", 1, 1.008, *_lj_p23(2.500, 0.030), Source(_P23, 866, _P23_CONV_LJ), PUBLISHED,
                 "OPLS-AA 2023 type 967 H in CF2H"),
        AtomType("tte_CF2", "CT", 6, 12.011, 0.350, 0.276144, Source(_NB, 816), PUBLISHED,
                 "opls_962 CF2 perfluoroalkane carbon"),
        AtomType("tte_F", "F", 9, 18.9984, 0.295, 0.221752, Source(_NB, 819), PUBLISHED, "opls_965 F perfluoroalkane"),
        AtomType("tte_OS", "OS", 8, 15.9994, 0.290, 0.58576, Source(_NB, 190), PUBLISHED, "opls_180 dialkyl ether O"),
        AtomType("tte_CH2", "CT", 6, 12.011, 0.350, 0.276144, Source(_NB, 192), PUBLISHED, "opls_182 C(H2OR) ether"),
        AtomType("tte_HC", "HC", 1, 1.008, 0.250, 0.12552, Source(_NB, 195), PUBLISHED, "opls_185 H alpha to ether O"),
    ]
}


def _clp_bond(a: str, b: str, r_A: float, k: float, line: int) -> BondedTerm:
    return BondedTerm("bond", (a, b), 1, (round(units.angstrom_to_nm(r_A), 6), round(units.half_k_bond_A_to_nm(k), 3)),
                      Source(_CLP, line, _CLP_CONV_BOND), PUBLISHED)


def _clp_angle(a: str, b: str, c: str, th: float, k: float, line: int) -> BondedTerm:
    return BondedTerm("angle", (a, b, c), 1, (th, k), Source(_CLP, line, _CLP_CONV_ANGLE), PUBLISHED)


BONDED: list[BondedTerm] = [
    # --- FSI- (CL&P bond classes FB, SB, NB, OB) ---
    _clp_bond("SB", "OB", 1.437, 5331.0, 44),
    _clp_bond("NB", "SB", 1.570, 3137.0, 45),
    _clp_bond("FB", "SB", 1.575, 1879.0, 47),
    _clp_angle("OB", "SB", "OB", 118.5, 969.0, 53),
    _clp_angle("NB", "SB", "OB", 113.6, 789.0, 54),
    _clp_angle("SB", "NB", "SB", 125.6, 671.0, 55),
    _clp_angle("FB", "SB", "OB", 104.1, 1077.0, 57),
    _clp_angle("FB", "SB", "NB", 103.0, 902.0, 58),
    BondedTerm("dihedral", ("OB", "SB", "NB", "SB"), 5, (0.0, 0.0, -0.015, 0.0), Source(_CLP, 64, _CLP_CONV_DIH),
               PUBLISHED),
    BondedTerm("dihedral", ("FB", "SB", "NB", "SB"), 5, (11.445, -15.186, -3.212, 0.0), Source(_CLP, 66, _CLP_CONV_DIH),
               PUBLISHED),
    # --- DMC and TTE: GROMACS oplsaa.ff ffbonded.itp (bond classes CT, OS, C_2, O_2, HC, F) ---
    BondedTerm("bond", ("C_2", "O_2"), 1, (0.12290, 476976.0), Source(_BD, 44), PUBLISHED),
    BondedTerm("bond", ("C_2", "OS"), 1, (0.13270, 179075.2), Source(_BD, 59), PUBLISHED),
    BondedTerm("bond", ("CT", "CT"), 1, (0.15290, 224262.4), Source(_BD, 192), PUBLISHED),
    BondedTerm("bond", ("CT", "HC"), 1, (0.10900, 284512.0), Source(_BD, 196), PUBLISHED),
    BondedTerm("bond", ("CT", "OS"), 1, (0.14100, 267776.0), Source(_BD, 218), PUBLISHED),
    BondedTerm("bond", ("CT", "F"), 1, (0.13320, 307105.6), Source(_BD, 276), PUBLISHED),
    BondedTerm("angle", ("CT", "CT", "CT"), 1, (112.700, 488.273), Source(_BD, 873), PUBLISHED),
    BondedTerm("angle", ("CT", "CT", "HC"), 1, (110.700, 313.800), Source(_BD, 881), PUBLISHED),
    BondedTerm("angle", ("CT", "CT", "OS"), 1, (109.500, 418.400), Source(_BD, 913), PUBLISHED),
    BondedTerm("angle", ("HC", "CT", "HC"), 1, (107.800, 276.144), Source(_BD, 929), PUBLISHED),
    BondedTerm("angle", ("HC", "CT", "OS"), 1, (109.500, 292.880), Source(_BD, 966), PUBLISHED),
    BondedTerm("angle", ("O_2", "C_2", "OS"), 1, (123.400, 694.544), Source(_BD, 1102), PUBLISHED),
    BondedTerm("angle", ("C_2", "OS", "CT"), 1, (116.900, 694.544), Source(_BD, 1104), PUBLISHED),
    BondedTerm("angle", ("CT", "OS", "CT"), 1, (109.500, 502.080), Source(_BD, 1131), PUBLISHED),
    BondedTerm("angle", ("CT", "CT", "F"), 1, (109.500, 418.400), Source(_BD, 1187), PUBLISHED),
    BondedTerm("angle", ("F", "CT", "F"), 1, (109.100, 644.336), Source(_BD, 1190), PUBLISHED),
    BondedTerm("angle", ("HC", "CT", "F"), 1, (107.000, 334.720), Source(_BD, 1191), PUBLISHED),
    BondedTerm("dihedral", ("C_2", "OS", "CT", "HC"), 3, (0.41421, 1.24265, 0.0, -1.65686, 0.0, 0.0),
               Source(_BD, 1513), PUBLISHED),
    BondedTerm("dihedral", ("CT", "CT", "CT", "F"), 3, (1.46440, 1.88280, 0.0, -3.34720, 0.0, 0.0),
               Source(_BD, 1593), PUBLISHED),
    BondedTerm("dihedral", ("CT", "CT", "CT", "HC"), 3, (0.62760, 1.88280, 0.0, -2.51040, 0.0, 0.0),
               Source(_BD, 1599), PUBLISHED),
    BondedTerm("dihedral", ("CT", "CT", "CT", "OS"), 3, (2.87441, 0.58158, 2.09200, -5.54799, 0.0, 0.0),
               Source(_BD, 1608), PUBLISHED),
    BondedTerm("dihedral", ("CT", "CT", "OS", "CT"), 3, (1.71544, 2.84512, 1.04600, -5.60656, 0.0, 0.0),
               Source(_BD, 1632), PUBLISHED),
    BondedTerm("dihedral", ("CT", "OS", "CT", "HC"), 3, (1.58992, 4.76976, 0.0, -6.35968, 0.0, 0.0),
               Source(_BD, 1674), PUBLISHED),
    BondedTerm("dihedral", ("CT", "OS", "C_2", "O_2"), 3, (21.43881, 0.0, -21.43881, 0.0, 0.0, 0.0),
               Source(_BD, 1679), PUBLISHED),
    BondedTerm("dihedral", ("F", "CT", "CT", "F"), 3, (-5.23000, 5.23000, 0.0, 0.0, 0.0, 0.0),
               Source(_BD, 1756), PUBLISHED),
    BondedTerm("dihedral", ("F", "CT", "CT", "HC"), 3, (0.83680, 2.51040, 0.0, -3.34720, 0.0, 0.0),
               Source(_BD, 1757), PUBLISHED),
    BondedTerm("dihedral", ("HC", "CT", "CT", "OS"), 3, (0.97905, 2.93716, 0.0, -3.91622, 0.0, 0.0),
               Source(_BD, 1832), PUBLISHED),
    BondedTerm("improper", ("OS", "O_2", "C_2", "OS"), 4, (180.0, 43.932, 2), Source(_BD, 2556),
               PUBLISHED, "oplsaa.ff improper_O_C_X_Y (carbonyl planarity; central atom third)"),
    # --- terms missing from oplsaa.ff: DMC carbonate block (fftool), TTE analogues ---
    BondedTerm("angle", ("OS", "C_2", "OS"), 1, (108.8, 694.5), Source(_DMC, 62, _CLP_CONV_ANGLE), ANALOGUE,
               "OPLS carbonate block (ethylene/propylene carbonate) applied to the acyclic carbonate DMC"),
    BondedTerm("dihedral", ("CT", "OS", "C_2", "OS"), 5, (0.0, 20.92, 0.0, 0.0), Source(_DMC, 82, _CLP_CONV_DIH),
               ANALOGUE, "OPLS carbonate block (cyclic carbonates) applied to DMC"),
    BondedTerm("angle", ("F", "CT", "OS"), 1, (109.500, 418.400), Source(_BD, 913), ANALOGUE,
               "analogue: CT-CT-OS bend (F in place of C); no F-CT-OS bend in any source"),
    BondedTerm("dihedral", ("F", "CT", "CT", "OS"), 5, (0.0, 0.0, round(units.kcal_to_kj(0.5401), 6), 0.0),
               Source(_P23, 1450, _P23_CONV_DIH), ANALOGUE,
               "analogue: OPLS torsion 137 F-CT-CT-OH (trifluoroethanol), OH read as ether OS"),
    BondedTerm("dihedral", ("F", "CT", "OS", "CT"), 3, (1.58992, 4.76976, 0.0, -6.35968, 0.0, 0.0),
               Source(_BD, 1674), ANALOGUE, "analogue: ether HC-CT-OS-CT torsion (F in place of H)"),
]


@dataclass(frozen=True)
class SpeciesAtom:
    """One atom of a molecule type: its name, atom type, bonded class and charge [e]."""

    name: str
    atomtype: str
    charge_e: float


#: atom names and types in the order of the geometry files (Li has a single atom).
_SPECIES_TYPES: dict[str, list[tuple[str, str]]] = {
    "Li": [("LI", "li")],
    "FSI": [("O1", "fsi_O"), ("S2", "fsi_S"), ("O3", "fsi_O"), ("F4", "fsi_F"), ("N5", "fsi_N"), ("S6", "fsi_S"),
            ("O7", "fsi_O"), ("O8", "fsi_O"), ("F9", "fsi_F")],
    "DMC": [("C1", "dmc_CT"), ("O2", "dmc_OS"), ("C3", "dmc_C"), ("O4", "dmc_O"), ("O5", "dmc_OS"),
            ("C6", "dmc_CT")] + [(f"H{i}", "dmc_HC") for i in range(7, 13)],
    "TTE": [("F1", "tte_F"), ("C2", "tte_CF2H"), ("F3", "tte_F"), ("C4", "tte_CF2"), ("F5", "tte_F"),
            ("F6", "tte_F"), ("O7", "tte_OS"), ("C8", "tte_CH2"), ("C9", "tte_CF2"), ("F10", "tte_F"),
            ("F11", "tte_F"), ("C12", "tte_CF2H"), ("F13", "tte_F"), ("F14", "tte_F"), ("H15", "tte_HF"),
            ("H16", "tte_HC"), ("H17", "tte_HC"), ("H18", "tte_HF")],
}
#: CL&P full (unscaled) ionic charges [e] and their source lines.
_ION_CHARGES = {"li": (1.00, 32), "fsi_S": (1.02, 34), "fsi_N": (-0.66, 35), "fsi_O": (-0.53, 36),
                "fsi_F": (-0.13, 38)}
#: improper dihedrals (atom names; central atom third) per species
_IMPROPERS = {"DMC": [("O2", "O4", "C3", "O5")]}


def read_pdb(path: Path) -> tuple[list[str], list[list[float]], list[tuple[int, int]]]:
    """Atom names, coordinates [Angstrom] and bonds (0-based index pairs) of a PDB with CONECT records."""
    names, xyz, bonds = [], [], set()
    for line in path.read_text().splitlines():
        if line.startswith(("ATOM", "HETATM")):
            names.append(line[12:16].strip())
            xyz.append([float(line[30:38]), float(line[38:46]), float(line[46:54])])
        elif line.startswith("CONECT"):
            ids = [int(x) for x in line[6:].split()]
            for j in ids[1:]:
                bonds.add(tuple(sorted((ids[0] - 1, j - 1))))
    return names, xyz, sorted(bonds)


def derived_charges() -> dict:
    """The frozen CHELPG derivation record (``data/derived_charges.json``)."""
    return json.loads(DERIVED_CHARGES.read_text())


def charge_candidate(level: str) -> dict:
    """The CHELPG derivation record of one candidate level (``data/charge_candidates/<level>.json``)."""
    path = CHARGE_CANDIDATES_DIR / f"{level.replace('/', '_').replace('*', 's')}.json"
    if not path.is_file():
        known = sorted(p.stem for p in CHARGE_CANDIDATES_DIR.glob("*.json"))
        raise FileNotFoundError(f"no charge candidate {level!r} ({path}); derived: {', '.join(known) or 'none'}")
    return json.loads(path.read_text())


def species_atoms(species: str, charges: dict | None = None) -> list[SpeciesAtom]:
    """Atoms of ``species`` with charges [e] (ions scaled by :data:`ION_CHARGE_SCALE`).

    ``charges``: a derivation record (as :func:`charge_candidate` returns) for DMC/TTE; default the
    frozen one (:func:`derived_charges`).
    """
    types = _SPECIES_TYPES[species]
    if species in ("Li", "FSI"):
        return [SpeciesAtom(n, t, round(_ION_CHARGES[t][0] * ION_CHARGE_SCALE, 6)) for n, t in types]
    rec = (charges or derived_charges())["species"][species]
    if rec["atoms"] != [n for n, _ in types]:
        raise ValueError(f"derived charges for {species} list atoms {rec['atoms']}, expected {[n for n, _ in types]}")
    return [SpeciesAtom(n, t, q) for (n, t), q in zip(types, rec["charges_e"])]


def species_bonds(species: str) -> list[tuple[int, int]]:
    """Bonds (0-based) of ``species`` from its geometry file (none for Li)."""
    if species == "Li":
        return []
    names, _, bonds = read_pdb(GEOMETRY_DIR / f"{species}.pdb")
    expected = [n for n, _ in _SPECIES_TYPES[species]]
    if names != expected:
        raise ValueError(f"{species}.pdb atom names {names} differ from the force field {expected}")
    return bonds


def _topology_tuples(n: int, bonds: list[tuple[int, int]]):
    nbr: list[set[int]] = [set() for _ in range(n)]
    for i, j in bonds:
        nbr[i].add(j)
        nbr[j].add(i)
    angles = sorted({(a, b, c) if a < c else (c, b, a) for b in range(n) for a, c in combinations(sorted(nbr[b]), 2)})
    dihedrals = set()
    for j, k in bonds:
        for i in nbr[j] - {k}:
            for m in nbr[k] - {j}:
                if i != m:
                    t = (i, j, k, m)
                    dihedrals.add(t if t <= t[::-1] else t[::-1])
    pairs = sorted({(min(d[0], d[3]), max(d[0], d[3])) for d in dihedrals})
    return angles, sorted(dihedrals), pairs


def _lookup(kind: str, classes: tuple[str, ...]) -> BondedTerm:
    for term in BONDED:
        if term.kind != kind:
            continue
        if term.classes == classes or (kind != "improper" and term.classes == classes[::-1]):
            return term
    raise KeyError(f"no {kind} parameters for {'-'.join(classes)}")


def _fmt(x: float) -> str:
    return repr(float(x)) if not float(x).is_integer() else f"{x:.1f}"


def molecule_itp(species: str, charges: dict | None = None) -> str:
    """The GROMACS ``[ moleculetype ]`` text of ``species`` with explicit bonded parameters.

    ``charges``: another derivation record than the frozen one (candidate validation only).
    """
    atoms = species_atoms(species, charges)
    bonds = species_bonds(species)
    cls = [ATOMTYPES[a.atomtype].bond_type for a in atoms]
    angles, dihedrals, pairs = _topology_tuples(len(atoms), bonds)
    name = MOLNAME[species]
    out = [f"; {name}: frozen mdbench model (generated by mdbench.inputs.forcefield; do not edit)",
           "; units: nm, kJ/mol, deg, e; parameters and sources: manifest.json", "",
           "[ moleculetype ]", "; name  nrexcl", f"{name}  3", "", "[ atoms ]",
           ";  nr  type        resnr  res   atom  cgnr  charge      mass"]
    for i, a in enumerate(atoms, 1):
        t = ATOMTYPES[a.atomtype]
        out.append(f"{i:5d}  {a.atomtype:<10s}  1      {name:<4s}  {a.name:<4s}  {i:4d}  {a.charge_e:10.6f}  {t.mass_u:.4f}")
    qtot = sum(a.charge_e for a in atoms)
    out.append(f"; total charge {qtot:+.6f}")

    def section(title: str, kind: str, tuples, header: str) -> None:
        if not tuples:
            return
        out.extend(["", f"[ {title} ]", header])
        for tup in tuples:
            term = _lookup(kind, tuple(cls[i] for i in tup))
            ids = "".join(f"{i + 1:5d}" for i in tup)
            par = "  ".join(_fmt(p) if not (kind == "improper" and k == 2) else str(int(p))
                            for k, p in enumerate(term.params))
            out.append(f"{ids}  {term.funct}  {par}  ; {'-'.join(term.classes)} {term.flag}")

    section("bonds", "bond", bonds, ";   ai   aj  funct  b0 [nm]  kb [kJ/mol/nm^2]")
    if pairs:
        out.extend(["", "[ pairs ]", ";   ai   aj  funct"] + [f"{i + 1:5d}{j + 1:5d}  1" for i, j in pairs])
    section("angles", "angle", angles, ";   ai   aj   ak  funct  theta0 [deg]  k [kJ/mol/rad^2]")
    section("dihedrals", "dihedral", dihedrals,
            ";   ai   aj   ak   al  funct  type 3: C0..C5 [kJ/mol]; type 5: V1..V4 [kJ/mol]")
    if species in _IMPROPERS:
        index = {a.name: i for i, a in enumerate(atoms)}
        imp = [tuple(index[n] for n in names) for names in _IMPROPERS[species]]
        section("dihedrals", "improper", imp, ";   ai   aj   ak   al  funct  phi_s [deg]  k [kJ/mol]  mult")
    return "\n".join(out) + "\n"


def forcefield_itp() -> str:
    """``[ defaults ]`` and ``[ atomtypes ]`` of the model."""
    out = ["; mdbench frozen model: defaults and atom types (generated; do not edit)",
           "; sigma [nm], epsilon [kJ/mol]; combination rule 3 (geometric), fudgeLJ = fudgeQQ = 0.5", "",
           "[ defaults ]", "; nbfunc  comb-rule  gen-pairs  fudgeLJ  fudgeQQ", "1  3  yes  0.5  0.5", "",
           "[ atomtypes ]", "; name      btype  at.num  mass      charge  ptype  sigma      epsilon"]
    for t in ATOMTYPES.values():
        out.append(f"{t.name:<10s}  {t.bond_type:<5s}  {t.atomic_number:3d}  {t.mass_u:8.4f}  0.000  A  "
                   f"{t.sigma_nm:.6e}  {t.epsilon_kJ_mol:.6e}")
    return "\n".join(out) + "\n"


def gromacs_top_dir() -> Path | None:
    """The GROMACS ``share/gromacs/top`` folder (``GMXDATA`` or the Debian location), if installed."""
    for cand in [os.environ.get("GMXDATA", ""), "/usr/share/gromacs", "/usr/local/gromacs/share/gromacs"]:
        if cand and (Path(cand) / "top" / "oplsaa.ff").is_dir():
            return Path(cand) / "top"
    return None


def source_text(src: Source) -> str:
    """The cited source line, verbatim (stripped)."""
    if src.file.startswith("gromacs:"):
        top = gromacs_top_dir()
        if top is None:
            raise FileNotFoundError("GROMACS share/top not found (set GMXDATA)")
        path = top / src.file.split(":", 1)[1]
    else:
        path = DATA_DIR / src.file
    return path.read_text(encoding="utf-8", errors="replace").splitlines()[src.line - 1].strip()


def _src(src: Source) -> dict:
    return {"file": src.file, "line": src.line, "text": source_text(src), "conversion": src.conversion}


def manifest() -> dict:
    """The machine-readable manifest: every atom type, charge, LJ pair rule and bonded term with its source."""
    der = derived_charges()
    charges_sha = hashlib.sha256(DERIVED_CHARGES.read_bytes()).hexdigest()
    used: dict[tuple, int] = {}
    species_out = {}
    for sp in SPECIES_ORDER:
        atoms = species_atoms(sp)
        cls = [ATOMTYPES[a.atomtype].bond_type for a in atoms]
        bonds = species_bonds(sp)
        angles, dihedrals, pairs = _topology_tuples(len(atoms), bonds)
        index = {a.name: i for i, a in enumerate(atoms)}
        imps = [tuple(index[n] for n in names) for names in _IMPROPERS.get(sp, [])]
        for kind, tuples in (("bond", bonds), ("angle", angles), ("dihedral", dihedrals), ("improper", imps)):
            for tup in tuples:
                term = _lookup(kind, tuple(cls[i] for i in tup))
                key = (term.kind, term.classes)
                used[key] = used.get(key, 0) + 1
        atom_rows = []
        for a in atoms:
            if sp in ("Li", "FSI"):
                q0, line = _ION_CHARGES[a.atomtype]
                csrc = {"flag": PUBLISHED, "source": _src(Source(_CLP, line, "full CL&P charge x 0.72")),
                        "unscaled_charge_e": q0, "scale": ION_CHARGE_SCALE}
            else:
                rec = der["species"][sp]
                csrc = {"flag": DERIVED, "source": {
                    "derivation": "scripts/derive_charges.py", "script_sha256": der["script_sha256"],
                    "record": "derived_charges.json", "record_sha256": charges_sha, "method": rec["method"],
                    "basis": rec["basis"], "program": rec["program"], "scheme": rec["grid"]["scheme"],
                    "geometry": rec["geometry_file"], "geometry_sha256": rec["geometry_sha256"]}}
            atom_rows.append({"name": a.name, "atomtype": a.atomtype, "charge_e": a.charge_e, **csrc})
        species_out[sp] = {
            "molecule": MOLNAME[sp], "itp": f"{MOLNAME[sp]}.itp", "n_atoms": len(atoms),
            "total_charge_e": round(sum(a.charge_e for a in atoms), 6) + 0.0, "mass_u": round(molar_mass_u(sp), 4),
            "geometry": f"geometries/{MOLNAME[sp]}.pdb", "atoms": atom_rows,
            "n_bonds": len(bonds), "n_pairs": len(pairs), "n_angles": len(angles), "n_dihedrals": len(dihedrals),
            "n_impropers": len(imps)}
    bonded = []
    for term in BONDED:
        n = used.get((term.kind, term.classes), 0)
        if n == 0:
            continue
        bonded.append({"kind": term.kind, "classes": list(term.classes), "funct": term.funct,
                       "params": list(term.params), "units": _PARAM_UNITS[(term.kind, term.funct)],
                       "flag": term.flag, "note": term.note, "source": _src(term.source), "n_instances": n})
    return {
        "model": "mdbench LiFSI/DMC/TTE frozen model",
        "model_version": MODEL_VERSION,
        "charge_level": derived_charges().get("level", "RHF/6-31G*"),
        "validation": "docs/forcefield.md (mdbench bundle validate-ff; rule fixed before the comparison)",
        "format": "GROMACS topology (itp); units nm, kJ/mol, deg, e, u",
        "defaults": {"nbfunc": 1, "comb_rule": 3, "gen_pairs": "yes", "fudgeLJ": 0.5, "fudgeQQ": 0.5,
                     "source": _src(Source("gromacs:oplsaa.ff/forcefield.itp", 20)),
                     "note": "CL&P il.ff (fftool) uses the same geometric mixing and 0.5 scaling of 1-4 terms"},
        "ion_charge_scale": ION_CHARGE_SCALE,
        "species_order": list(SPECIES_ORDER),
        "atomtypes": [{"name": t.name, "bond_type": t.bond_type, "atomic_number": t.atomic_number,
                       "mass_u": t.mass_u, "sigma_nm": t.sigma_nm, "epsilon_kJ_mol": t.epsilon_kJ_mol,
                       "flag": t.flag, "note": t.note, "source": _src(t.source)} for t in ATOMTYPES.values()],
        "lj_pairs": "all unlike pairs from comb-rule 3: sigma_ij = sqrt(sigma_i sigma_j), "
                    "epsilon_ij = sqrt(epsilon_i epsilon_j); 1-4 pairs scaled by fudgeLJ",
        "species": species_out,
        "bonded": bonded,
    }


_PARAM_UNITS = {
    ("bond", 1): ["b0 nm", "kb kJ/mol/nm^2"],
    ("angle", 1): ["theta0 deg", "k kJ/mol/rad^2"],
    ("dihedral", 3): ["C0 kJ/mol", "C1 kJ/mol", "C2 kJ/mol", "C3 kJ/mol", "C4 kJ/mol", "C5 kJ/mol"],
    ("dihedral", 5): ["V1 kJ/mol", "V2 kJ/mol", "V3 kJ/mol", "V4 kJ/mol"],
    ("improper", 4): ["phi_s deg", "k kJ/mol", "multiplicity"],
}


def molar_mass_u(species: str) -> float:
    """Molar mass [g/mol] of ``species`` from the atom-type masses."""
    return sum(ATOMTYPES[a.atomtype].mass_u for a in species_atoms(species))


def n_atoms(species: str) -> int:
    """Number of atoms in one molecule of ``species``."""
    return len(_SPECIES_TYPES[species])


def geometry_pdb(species: str) -> str:
    """The PDB text of one molecule of ``species`` (atom order equal to the itp)."""
    name = MOLNAME[species]
    if species == "Li":
        return ("HETATM    1 LI   LI      1       0.000   0.000   0.000  1.00  0.00          LI  \nEND\n")
    text = (GEOMETRY_DIR / f"{species}.pdb").read_text()
    if name != species:
        text = text.replace(f" {species} ", f" {name} ")
    return text


def write_forcefield(out_dir: Path = FORCEFIELD_DIR) -> dict[str, str]:
    """Write ``forcefield.itp``, one ``<MOL>.itp`` per species, ``manifest.json`` and ``geometries/``.

    Returns a mapping of relative path -> sha256. The output depends only on the definitions in this
    module and the committed data files, so it is byte-identical from run to run.
    """
    out_dir = Path(out_dir)
    (out_dir / "geometries").mkdir(parents=True, exist_ok=True)
    files = {"forcefield.itp": forcefield_itp()}
    for sp in SPECIES_ORDER:
        files[f"{MOLNAME[sp]}.itp"] = molecule_itp(sp)
        files[f"geometries/{MOLNAME[sp]}.pdb"] = geometry_pdb(sp)
    files["manifest.json"] = json.dumps(manifest(), indent=1, sort_keys=True) + "\n"
    sums = {}
    for rel, text in files.items():
        (out_dir / rel).write_text(text, encoding="utf-8")
        sums[rel] = hashlib.sha256(text.encode()).hexdigest()
    return sums


def forcefield_checksum(ff_dir: Path = FORCEFIELD_DIR) -> str:
    """sha256 of the force-field files in ``ff_dir`` (its top-level ``*.itp`` and ``manifest.json``).

    Computed as the sha256 of the ``sha256sum``-style listing (``<hex>  <name>\\n`` sorted by name), so
    the frozen model (default) and a bundle's ``forcefield/`` folder give the same value when the files
    are identical. Used by the Sim1 setup audit.
    """
    lines = []
    for path in sorted(p for p in Path(ff_dir).iterdir() if p.is_file() and p.suffix in (".itp", ".json")):
        lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


if __name__ == "__main__":  # pragma: no cover - regeneration entry point: python -m mdbench.inputs.forcefield
    write_forcefield()
