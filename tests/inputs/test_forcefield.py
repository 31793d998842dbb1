"""The frozen force field: neutrality, provenance of every number, and byte-stable regeneration."""

import hashlib
import json
import re

import pytest

from mdbench.inputs import forcefield, units

MANIFEST = json.loads((forcefield.FORCEFIELD_DIR / "manifest.json").read_text())
needs_gromacs = pytest.mark.skipif(forcefield.gromacs_top_dir() is None, reason="GROMACS share/top not installed")


def test_species_charges_and_ion_pair_neutral():
    q = {s: sum(a.charge_e for a in forcefield.species_atoms(s)) for s in forcefield.SPECIES_ORDER}
    assert q["Li"] == pytest.approx(0.72, abs=1e-12)
    assert q["FSI"] == pytest.approx(-0.72, abs=1e-9)
    assert abs(q["Li"] + q["FSI"]) <= 1e-6
    assert abs(q["DMC"]) <= 1e-6 and abs(q["TTE"]) <= 1e-6
    # scaled CL&P charges, by hand: S 1.02*0.72, N -0.66*0.72, O -0.53*0.72, F -0.13*0.72
    fsi = {a.atomtype: a.charge_e for a in forcefield.species_atoms("FSI")}
    assert fsi == pytest.approx({"fsi_S": 0.7344, "fsi_N": -0.4752, "fsi_O": -0.3816, "fsi_F": -0.0936})


def test_itp_charges_as_written_are_neutral():
    for s in forcefield.SPECIES_ORDER:
        text = (forcefield.FORCEFIELD_DIR / f"{forcefield.MOLNAME[s]}.itp").read_text()
        body = text.split("[ atoms ]")[1].split("[")[0]
        q = sum(float(ln.split()[6]) for ln in body.splitlines() if ln.strip() and not ln.startswith(";"))
        expected = {"Li": 0.72, "FSI": -0.72}.get(s, 0.0)
        assert abs(q - expected) <= 1e-6


def test_derived_charges_record():
    der = forcefield.derived_charges()
    for s in ("DMC", "TTE"):
        rec = der["species"][s]
        geo = forcefield.GEOMETRY_DIR / f"{s}.pdb"
        assert rec["geometry_sha256"] == hashlib.sha256(geo.read_bytes()).hexdigest()
        assert f"{rec['method']}/{rec['basis']}" == der.get("level", "RHF/6-31G*")
        assert rec["grid"]["scheme"] == "CHELPG"  # the seed fixes CHELPG charges
        assert abs(sum(rec["charges_e"])) <= 1e-6
        # symmetry-equivalent atoms carry one charge
        by_class = {}
        for cls, q in zip(rec["fit"]["symmetry_classes"], rec["charges_e"]):
            by_class.setdefault(cls, set()).add(q)
        assert all(len(v) == 1 for v in by_class.values())
        # rounding changed no charge by more than 1e-3 e
        assert max(abs(a - b) for a, b in zip(rec["charges_e"], rec["charges_unrounded_e"])) < 1e-3


def test_manifest_flags_and_analogues():
    flags = {t["flag"] for t in MANIFEST["atomtypes"]} | {b["flag"] for b in MANIFEST["bonded"]}
    flags |= {a["flag"] for sp in MANIFEST["species"].values() for a in sp["atoms"]}
    assert flags <= {"published", "derived", "analogue"}
    analogues = {(b["kind"], "-".join(b["classes"])) for b in MANIFEST["bonded"] if b["flag"] == "analogue"}
    assert analogues == {("angle", "OS-C_2-OS"), ("dihedral", "CT-OS-C_2-OS"), ("angle", "F-CT-OS"),
                         ("dihedral", "F-CT-CT-OS"), ("dihedral", "F-CT-OS-CT")}
    for sp in ("DMC", "TTE"):
        assert all(a["flag"] == "derived" and a["source"]["geometry_sha256"] for a in MANIFEST["species"][sp]["atoms"])


def _numbers(text):
    return [float(x) for x in re.findall(r"-?\d+\.\d+(?:[eE][-+]?\d+)?", text)]


def test_every_cited_line_holds_the_cited_numbers():
    """Convert the manifest value back to the source's units and find it on the cited line."""
    for t in MANIFEST["atomtypes"]:
        nums = _numbers(t["source"]["text"])
        conv = t["source"]["conversion"]
        sigma = t["sigma_nm"] * 10 if "A]" in conv else t["sigma_nm"]
        eps = t["epsilon_kJ_mol"] / 4.184 if "kcal" in conv else t["epsilon_kJ_mol"]
        assert any(abs(n - sigma) < 1e-6 for n in nums), t["name"]
        assert any(abs(n - eps) < 1e-5 for n in nums), t["name"]
    for b in MANIFEST["bonded"]:
        nums = _numbers(b["source"]["text"])
        conv = b["source"]["conversion"]
        params = list(b["params"])
        if conv.startswith("r0 [A]"):
            params = [params[0] * 10, params[1] / 100]
        elif "kcal" in conv:
            params = [p / 4.184 for p in params]
        for p in params:
            if p != 0 and not (b["kind"] == "improper" and p == 2):
                assert any(abs(n - p) < 1e-4 for n in nums), (b["classes"], p, b["source"]["text"])


@needs_gromacs
def test_regeneration_is_byte_identical(tmp_path):
    sums = forcefield.write_forcefield(tmp_path)
    for rel, digest in sums.items():
        assert hashlib.sha256((forcefield.FORCEFIELD_DIR / rel).read_bytes()).hexdigest() == digest, rel
    committed = {p.relative_to(forcefield.FORCEFIELD_DIR).as_posix()
                 for p in forcefield.FORCEFIELD_DIR.rglob("*") if p.is_file()}
    assert committed == set(sums)


def test_geometry_atom_order_equals_itp():
    for s in ("FSI", "DMC", "TTE"):
        names, _, _ = forcefield.read_pdb(forcefield.FORCEFIELD_DIR / "geometries" / f"{s}.pdb")
        assert names == [a.name for a in forcefield.species_atoms(s)]


def test_tte_and_dmc_units_example():
    # the F-CT-CT-OS analogue: OPLS torsion 137, V3 = 0.5401 kcal/mol -> kJ/mol
    b = next(b for b in MANIFEST["bonded"] if b["classes"] == ["F", "CT", "CT", "OS"])
    assert b["params"][2] == pytest.approx(units.kcal_to_kj(0.5401))


def test_derivation_script_is_the_one_recorded():
    from mdbench.paths import PROJECT_ROOT

    script = PROJECT_ROOT / "scripts" / "derive_charges.py"
    if not script.is_file():
        pytest.skip("scripts/ not shipped")
    assert hashlib.sha256(script.read_bytes()).hexdigest() == forcefield.derived_charges()["script_sha256"]


def test_frozen_charges_are_one_of_the_candidates_with_the_same_geometry_and_grid():
    """Every candidate level used the frozen geometries and one CHELPG grid; the frozen record is the chosen
    candidate byte for byte (``derive_charges.py --freeze``), and the manifest names its level."""
    frozen = forcefield.DERIVED_CHARGES.read_bytes()
    cands = sorted(forcefield.CHARGE_CANDIDATES_DIR.glob("*.json"))
    assert len(cands) >= 2 and frozen in [c.read_bytes() for c in cands]
    der = forcefield.derived_charges()
    assert set(der["species"]) == {"DMC", "TTE"}
    for path in cands:
        rec = json.loads(path.read_text())
        assert "DMC" in rec["species"] and set(rec["species"]) <= {"DMC", "TTE"}, path.name
        for sp, r in rec["species"].items():
            assert r["geometry_sha256"] == der["species"][sp]["geometry_sha256"], (path.name, sp)
            assert r["grid"] == {**der["species"][sp]["grid"], "n_points": r["grid"]["n_points"]}, (path.name, sp)
            assert r["grid"]["n_points"] == der["species"][sp]["grid"]["n_points"]
            assert abs(sum(r["charges_e"])) <= 1e-6
    assert MANIFEST["charge_level"] == der["level"] and MANIFEST["model_version"] == forcefield.MODEL_VERSION
