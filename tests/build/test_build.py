"""Building micro boxes with real packmol and GROMACS: audits, grompp warnings, manifest coverage."""

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from _testseed import seed_for
from mdbench.build import PackingError, build_system
from mdbench.build.audits import min_intermolecular_distance_nm
from mdbench.errors import InputError
from mdbench.inputs import forcefield

SEED = seed_for("build/micro/packmol")
pytestmark = [pytest.mark.skipif(shutil.which("gmx") is None or shutil.which("packmol") is None,
                                 reason="needs gmx and packmol on PATH"), pytest.mark.gromacs]


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    root = tmp_path_factory.mktemp("micro")
    return {c: build_system(c, "micro", root / c, seed=SEED) for c in ("DE", "HCE", "LHCE")}


@pytest.mark.parametrize("case, n_atoms", [("DE", 1040), ("HCE", 1020), ("LHCE", 1040)])
def test_micro_boxes_pass_all_audits(micro, case, n_atoms):
    res = micro[case]
    audits = {a.name: a for a in res.audits}
    assert res.passed, [a for a in res.audits if not a.passed]
    assert res.n_atoms == n_atoms
    assert audits["grompp_zero_warnings"].value == {"returncode": 0, "warnings": 0, "notes": 0}
    assert abs(audits["total_charge"].value) <= 1e-6
    assert audits["min_intermolecular_distance"].value >= 0.15
    log = (res.gro_path.parent / "grompp_audit.log").read_text()
    assert "-maxwarn" not in log and "WARNING" not in log
    top = res.top_path.read_text()
    order = re.findall(r"^(LI|FSI|DMC|TTE)\s+\d+$", top, flags=re.M)
    assert order == [forcefield.MOLNAME[s] for s in forcefield.SPECIES_ORDER if res.counts[s]]
    assert json.loads((res.gro_path.parent / "build.json").read_text())["seed"] == SEED


def test_same_seed_same_box(micro, tmp_path):
    again = build_system("DE", "micro", tmp_path / "DE", seed=SEED)
    assert again.gro_path.read_bytes() == micro["DE"].gro_path.read_bytes()


def test_impossible_density_is_refused_and_nothing_written(tmp_path):
    out = tmp_path / "setup"
    with pytest.raises(PackingError, match=r"density 3 g/cm\^3") as err:
        build_system("HCE", "micro", out, density_g_cm3=3.0)
    assert err.value.density_g_cm3 == 3.0
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_non_empty_out_dir_is_refused(micro):
    with pytest.raises(InputError, match="not empty"):
        build_system("DE", "micro", micro["DE"].gro_path.parent)


def test_min_distance_hand_placed_atoms():
    # two molecules whose closest atoms are 0.1 nm apart across the periodic boundary
    xyz = np.array([[0.05, 1.0, 1.0], [0.5, 1.0, 1.0], [1.95, 1.0, 1.0]])
    mol = np.array([0, 0, 1])
    assert min_intermolecular_distance_nm(xyz, mol, np.array([2.0, 2.0, 2.0])) == pytest.approx(0.1)
    # intramolecular pairs do not count
    assert min_intermolecular_distance_nm(xyz[:2], mol[:2], np.array([2.0, 2.0, 2.0])) == pytest.approx(0.4)


def _dump(tpr: Path) -> str:
    return subprocess.run(["gmx", "dump", "-s", str(tpr)], capture_output=True, text=True, check=True).stdout


def _close(a, b, rel=2e-6, abs_=2e-6):
    return all(math.isclose(x, y, rel_tol=rel, abs_tol=abs_) for x, y in zip(a, b))


def test_manifest_covers_every_parameter_grompp_uses(micro):
    """Every interaction parameter set in the micro LHCE tpr (all four species) is in the manifest and back."""
    man = json.loads((forcefield.FORCEFIELD_DIR / "manifest.json").read_text())
    text = _dump(micro["LHCE"].gro_path.parent / "audit.tpr")
    fparams = re.findall(r"functype\[\d+\]=(\w+), (.*)", text)
    vals = {k: [] for k in ("BONDS", "ANGLES", "RBDIHS", "FOURDIHS", "PIDIHS", "LJ_SR", "LJ14")}
    for ftype, rest in fparams:
        assert ftype in vals, f"grompp uses {ftype}, not described by the manifest"
        vals[ftype].append([float(x) for x in re.findall(r"=\s*(-?[\d.]+e[-+]\d+|-?\d+)", rest)])
    bonded = {k: [b["params"] for b in man["bonded"] if (b["kind"], b["funct"]) == k]
              for k in [("bond", 1), ("angle", 1), ("dihedral", 3), ("dihedral", 5), ("improper", 4)]}
    pairs = [("BONDS", ("bond", 1), 2), ("ANGLES", ("angle", 1), 2), ("RBDIHS", ("dihedral", 3), 6),
             ("FOURDIHS", ("dihedral", 5), 4), ("PIDIHS", ("improper", 4), 3)]
    for ftype, key, n in pairs:
        used = [v[:2] + v[-1:] if ftype == "PIDIHS" else v[:n] for v in vals[ftype]]  # phiA, cpA, mult
        for v in used:  # tpr -> manifest
            assert any(_close(v, m) for m in bonded[key]), (ftype, v)
        for m in bonded[key]:  # manifest -> tpr
            assert any(_close(v, m) for v in used), (ftype, m)
    # LJ: c6 = 4 eps sig^6, c12 = 4 eps sig^12 with geometric mixing of the manifest types
    types = {t["name"]: t for t in man["atomtypes"]}
    expected = set()
    for a in types.values():
        for b in types.values():
            s, e = math.sqrt(a["sigma_nm"] * b["sigma_nm"]), math.sqrt(a["epsilon_kJ_mol"] * b["epsilon_kJ_mol"])
            expected.add((4 * e * s**6, 4 * e * s**12))
    for c6, c12 in (v[:2] for v in vals["LJ_SR"]):
        assert any(_close((c6, c12), x, rel=1e-5) for x in expected), (c6, c12)
    for c6, c12 in (v[:2] for v in vals["LJ14"]):
        assert any(_close((c6, c12), (0.5 * x[0], 0.5 * x[1]), rel=1e-5) for x in expected), (c6, c12)
    # charges: every atom charge in the tpr belongs to the manifest of its molecule type
    qs = {round(float(q), 6) for q in re.findall(r"q=\s*(-?[\d.]+e[-+]\d+)", text)}
    man_q = {round(a["charge_e"], 6) for sp in man["species"].values() for a in sp["atoms"]}
    assert qs == man_q
