"""Issue 37 class 7: the production run input against the FROZEN force field of the bundle (Sim1), not against the
run's own equilibration input — an agent that changes the force field of both stages passes that comparison.

Planted magnitudes are drawn from ``MDBENCH_TEST_SEED`` (:func:`_testseed.seed_for`).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import _runbuilder as rb
import numpy as np
import pytest
from _audit_helpers import judgment, saeo

from _testseed import seed_for
from mdbench.audit import audit_run
from mdbench.audit.frozen_ff import bundle_force_field, differences
from mdbench.audit.gmx_dump import parse_dump_topology
from mdbench.record import RunRecord

CASE = rb.CASE
pytestmark = [pytest.mark.gromacs, pytest.mark.skipif(shutil.which("gmx") is None, reason="needs gmx")]


def _rng(label: str) -> np.random.Generator:
    return np.random.default_rng(seed_for(f"audit-own-numbers-frozen/{label}"))


def _bundle_with_atomtypes(bundle: Path, dst: Path) -> Path:
    """The test bundle with the force field's [ atomtypes ] and [ defaults ] frozen in it too (a real study
    bundle freezes its non-bonded parameters; the tiny bundle only holds the molecule itps)."""
    shutil.copytree(bundle, dst)
    for name in ("ffnonbonded.itp", "forcefield.itp"):
        shutil.copy(rb.GMX_TOP / "oplsaa.ff" / name, dst / "forcefield" / name)
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(dst).as_posix()}"
             for p in sorted(dst.rglob("*")) if p.is_file() and p.name != "bundle_checksums.sha256"]
    (dst / "bundle_checksums.sha256").write_text("\n".join(lines) + "\n")
    return dst


def _dump_topology(tpr: Path) -> str:
    out = subprocess.run(["gmx", "-quiet", "dump", "-s", str(tpr)], capture_output=True, text=True, check=True).stdout
    return out.partition("topology:")[2]

def _regenerate_run_inputs(run_copy) -> None:
    """grompp the equilibration and production run inputs again from the (edited) ``setup/topol.top``, as an agent
    that regenerated its tpr files would, and remove GROMACS' backups."""
    case = run_copy / "cases" / CASE
    eq, prod, setup = case / "equil", case / "prod", case / "setup"
    for cwd, args in ((eq, ["-f", "npt.mdp", "-c", "../em/em.gro", "-o", "npt.tpr"]),
                      (prod, ["-f", "prod.mdp", "-c", "../equil/npt.gro", "-t", "../equil/npt.cpt", "-o", "prod.tpr"])):
        proc = subprocess.run(["gmx", "-quiet", "grompp", *args, "-p", "../setup/topol.top", "-po", "/dev/null",
                               "-maxwarn", "2"], cwd=cwd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-800:]
    for d in (eq, prod, setup):
        for p in d.glob("#*"):
            p.unlink()



def test_lj_sigma_changed_in_equilibration_and_production_is_Sim1_zero_against_the_bundle(run_copy, bundle, tmp_path):
    """The Na⁺ σ changed (planted factor) in the topology of BOTH equilibration and production, both run inputs
    regenerated, checksums updated: production and equilibration agree with each other, so only the bundle can
    say the production is not the frozen force field. Sim1 = 0 with both σ; the honest run keeps Sim1 = 1."""
    fb = _bundle_with_atomtypes(bundle, tmp_path / "bundle")
    setup = run_copy / "cases" / CASE / "setup"
    line, f = rb.with_changed_na_sigma(setup / "topol.top", setup / "topol.top", float(_rng("lj").uniform(1.05, 1.25)))
    _regenerate_run_inputs(run_copy)
    rec = RunRecord(run_copy)
    for rel in (f"cases/{CASE}/prod/prod.tpr", f"cases/{CASE}/equil/npt.tpr", f"cases/{CASE}/setup/topol.top"):
        rec.add_artifact(rel)
    audit_run(run_copy, fb, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    codes = {x["code"] for x in doc["findings"]}
    assert "production_force_field_differs" not in codes  # equilibration and production agree with each other
    sim1 = judgment(doc, "Sim1", CASE)
    assert sim1["rating"] == 0.0 and "opls_407" in sim1["reason"], sim1
    hit = next(x for x in doc["findings"] if x["code"] == "production_force_field_not_bundle")
    sig_bundle, sig_run = float(line.split()[6]), float(f[6])
    assert f"{sig_run:.5g}" in hit["message"] and f"{sig_bundle:.5g}" in hit["message"], hit


def test_honest_run_matches_the_bundle_force_field_and_a_changed_charge_is_named(run_copy, bundle, tmp_path):
    """The honest production run input is the bundle's force field (no finding, Sim1 = 1); the same comparison
    names a charge that differs (planted in the bundle's view, drawn from the seed) with both numbers."""
    run = run_copy
    fb = _bundle_with_atomtypes(bundle, tmp_path / "bundle")
    ff = parse_dump_topology(_dump_topology(run / "cases" / CASE / "prod" / "prod.tpr"))
    types, mols = bundle_force_field(fb)
    assert ff is not None and {"opls_407", "opls_401", "opls_116"} <= set(ff["lj"]) <= set(types)
    assert differences(ff, types, mols) == []
    dq = float(_rng("q").uniform(0.02, 0.2))
    mols = dict(mols, SOL=[(t, q + (dq if i == 0 else -dq / 2)) for i, (t, q) in enumerate(mols["SOL"])])
    diffs = differences(ff, types, mols)
    assert len(diffs) == 1 and "SOL" in diffs[0] and f"{mols['SOL'][0][1]:+.5g}" in diffs[0], diffs
    audit_run(run, fb, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert judgment(doc, "Sim1", CASE)["rating"] == 1.0
    assert not any(x["code"].startswith("production_force_field") for x in doc["findings"])


def test_water_charges_changed_in_a_renamed_itp_is_Sim1_zero_against_the_bundle(run_copy, bundle, tmp_path):
    """The water model's charges scaled (planted, neutral) in a copy of spce.itp under another name, which the
    topology now includes — the bundle's spce.itp itself is untouched, so the checksum comparison of setup/ finds
    nothing — and both run inputs regenerated: the production's SOL charges are not the bundle's, Sim1 = 0."""
    s = float(_rng("q-water").uniform(1.03, 1.12))
    setup = run_copy / "cases" / CASE / "setup"
    rows = []
    for line in (setup / "spce.itp").read_text().splitlines():
        f = line.split()
        if len(f) == 7 and f[1] in ("opls_116", "opls_117") and f[0].isdigit():
            f[6] = f"{float(f[6]) * s:.6f}"
            line = "  ".join(f)
        rows.append(line)
    (setup / "spce_tuned.itp").write_text("\n".join(rows) + "\n")
    top = (setup / "topol.top").read_text().replace('#include "spce.itp"', '#include "spce_tuned.itp"')
    assert "spce_tuned.itp" in top
    (setup / "topol.top").write_text(top)
    _regenerate_run_inputs(run_copy)
    rec = RunRecord(run_copy)
    for rel in (f"cases/{CASE}/prod/prod.tpr", f"cases/{CASE}/equil/npt.tpr", f"cases/{CASE}/setup/topol.top",
                f"cases/{CASE}/setup/spce_tuned.itp"):
        rec.add_artifact(rel)
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert "production_force_field_differs" not in {x["code"] for x in doc["findings"]}
    hit = next(x for x in doc["findings"] if x["code"] == "production_force_field_not_bundle")
    m = re.search(r"molecule type SOL, atom 1: the production run input has type opls_116, charge ([-+0-9.e]+) e; "
                  r"the bundle type opls_116, charge ([-+0-9.e]+) e", hit["message"])
    assert m and float(m.group(1)) == pytest.approx(-0.8476 * s, abs=2e-5) and float(m.group(2)) == -0.8476, hit
    assert judgment(doc, "Sim1", CASE)["rating"] == 0.0
