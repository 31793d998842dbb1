"""Issue 45, class 2: the production protocol from the run input (``gmx dump``), parameter by parameter.

The tiny real run's bundle is given the frozen production protocol the run was made with
(``protocols/production.yaml``, the engine's format). A production whose ``.mdp`` was changed, whose ``.tpr``
was regenerated and rerun, and whose checksums were updated — the way an agent that believes its change
leaves them — lowers Sim1 (non-bonded cut-offs: the model) or Sim4 (thermostat τ: the dynamics) with both
values; an output interval finer than the protocol's leaves every item unchanged, and so does the honest run.
The study's own protocol (params/protocols + preset), rendered by the engine and put through grompp, has no
difference from itself.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest

import _runbuilder as rb
from _audit_helpers import saeo
from _testseed import seed_for
from mdbench.audit import audit_run
from mdbench.audit.gmx_dump import parse_inputrec
from mdbench.audit.production_protocol import differences, frozen_protocol
from mdbench.record import RunRecord

pytestmark = pytest.mark.gromacs

#: The production protocol of the tiny run (tests/audit/_runbuilder.py PROD_MDP), frozen in the engine's format.
W_PROTOCOL = """description: production of the tiny water + NaCl run
mdp:
  integrator: md
  cutoff-scheme: Verlet
  rcoulomb: 0.8
  rvdw: 0.8
  coulombtype: PME
  tcoupl: v-rescale
  tc-grps: System
  tau-t: 0.2
  ref-t: 298.15
  pcoupl: no
timing:
  dt_fs: 2.0
  length_ps: 4.0
  energy_interval_ps: 0.02
  log_interval_ps: 2.0
  xtc_interval_ps: 0.02
"""


def rechecksum(bundle: Path) -> None:
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(bundle).as_posix()}"
             for p in sorted(bundle.rglob("*")) if p.is_file() and p.name != "bundle_checksums.sha256"]
    (bundle / "bundle_checksums.sha256").write_text("\n".join(lines) + "\n")


@pytest.fixture
def frozen_bundle(bundle: Path, tmp_path: Path) -> Path:
    """The audit tests' bundle with the tiny run's production protocol frozen in it (checksums updated)."""
    dst = shutil.copytree(bundle, tmp_path / "bundle")
    (dst / "protocols").mkdir()
    (dst / "protocols" / "production.yaml").write_text(W_PROTOCOL)
    rechecksum(dst)
    return dst


def rerun_production(run: Path, **mdp: str) -> None:
    """Change the production .mdp, regenerate the .tpr, rerun it and record the new files' checksums."""
    prod = run / "cases" / rb.CASE / "prod"
    text = (prod / "prod.mdp").read_text()
    for key, value in mdp.items():
        key = key.replace("_", "-")
        text, n = re.subn(rf"^{key}\s*=.*$", f"{key} = {value}", text, flags=re.M)
        if n == 0:
            text += f"{key} = {value}\n"
    (prod / "prod.mdp").write_text(text)
    for f in ("prod.tpr", "prod.xtc", "prod.edr", "prod.log", "prod.cpt", "prod.gro"):
        (prod / f).unlink(missing_ok=True)
    rb.gmx("grompp", "-f", "prod.mdp", "-c", "../equil/npt.gro", "-t", "../equil/npt.cpt", "-p", "../setup/topol.top",
           "-o", "prod.tpr", cwd=prod)
    rb.gmx("mdrun", "-nt", "1", "-notunepme", "-deffnm", "prod", cwd=prod)
    for p in list(prod.glob("#*")) + [prod / "mdout.mdp"]:
        p.unlink(missing_ok=True)
    rec = RunRecord(run)
    for ext in ("mdp", "tpr", "xtc", "edr", "log", "cpt"):
        rec.add_artifact(f"cases/{rb.CASE}/prod/prod.{ext}")


def items(out: Path) -> dict[str, float]:
    return {k: v["final"] for k, v in saeo(out)["items"].items()}


def test_honest_run_and_finer_output_leave_every_item(built, frozen_bundle, run_copy, tmp_path):
    run, bundle = built
    base = audit_run(run, bundle, tmp_path / "plain", reanalysis=False)
    res = audit_run(run, frozen_bundle, tmp_path / "frozen", reanalysis=False)
    assert not [f for f in res.findings if f.code.startswith("protocol_")], res.findings
    assert items(tmp_path / "frozen") == items(tmp_path / "plain")
    assert res.composite_final == pytest.approx(base.composite_final)
    # energies every 5 steps instead of 10: finer than the protocol, allowed by the tolerance table
    rerun_production(run_copy, nstenergy="5", nstcalcenergy="5")
    res2 = audit_run(run_copy, frozen_bundle, tmp_path / "finer", reanalysis=False)
    assert not [f for f in res2.findings if f.code.startswith("protocol_")], res2.findings
    assert items(tmp_path / "finer")["Sim1"] == items(tmp_path / "plain")["Sim1"]
    assert items(tmp_path / "finer")["Sim4"] == items(tmp_path / "plain")["Sim4"]


def test_changed_cutoffs_lower_sim1_with_both_values(frozen_bundle, run_copy, tmp_path):
    rc = (0.7, 0.75, 0.85)[seed_for("audit45/cutoff") % 3]  # below half the box (1.86 nm) with its buffer
    rerun_production(run_copy, rcoulomb=f"{rc}", rvdw=f"{rc}", rlist=f"{rc}")
    res = audit_run(run_copy, frozen_bundle, tmp_path / "a", reanalysis=False)
    found = [f for f in res.findings if f.code == "protocol_model_differs"]
    assert {f.item for f in found} == {"Sim1"}
    msg = " ".join(f.message for f in found)
    assert f"rcoulomb = {rc:g}" in msg and f"rvdw = {rc:g}" in msg and "0.8 in the frozen protocol" in msg
    assert items(tmp_path / "a")["Sim1"] == 0.0


def test_changed_thermostat_tau_lowers_sim4_with_both_values(frozen_bundle, run_copy, tmp_path):
    tau = (0.5, 1.0, 2.0)[seed_for("audit45/tau-t") % 3]
    rerun_production(run_copy, tau_t=f"{tau}")
    res = audit_run(run_copy, frozen_bundle, tmp_path / "a", reanalysis=False)
    found = [f for f in res.findings if f.code == "protocol_state_point_differs"]
    assert [f.item for f in found] == ["Sim4"] and f"tau-t = {tau:g}" in found[0].message
    assert "0.2 in the frozen protocol" in found[0].message
    assert items(tmp_path / "a")["Sim4"] == 0.0


def test_study_protocol_through_grompp_has_no_difference(tmp_path):
    """params/protocols/production.yaml with the micro preset, as the engine renders it, through grompp: the
    run input agrees with the frozen protocol; a changed van der Waals cut-off is named."""
    from mdbench.audit.bundle import load_bundle
    from mdbench.engine.protocols import render_mdp

    if shutil.which("gmx") is None:
        pytest.skip("needs gmx")
    b = tmp_path / "bundle"
    (b / "cases").mkdir(parents=True)
    (b / "cases" / "DE.yaml").write_text("case: DE\npreset: micro\nmolecules:\n  SOL: 900\n")
    sets, source = frozen_protocol(load_bundle(b), "DE")
    assert "preset micro" in source and len(sets) == 2  # NVT, and the NPT the protocol offers
    work = tmp_path / "w"
    work.mkdir()
    rb.gmx("solvate", "-cs", "spc216.gro", "-box", "3.0", "3.0", "3.0", "-o", "box.gro", cwd=work)
    n = sum(1 for ln in (work / "box.gro").read_text().splitlines()[2:-1]) // 3
    (work / "topol.top").write_text('#include "oplsaa.ff/forcefield.itp"\n#include "oplsaa.ff/spce.itp"\n'
                                    f"[ system ]\nwater\n[ molecules ]\nSOL {n}\n")
    (work / "prod.mdp").write_text(render_mdp(sets[0]))
    rb.gmx("grompp", "-f", "prod.mdp", "-c", "box.gro", "-p", "topol.top", "-o", "prod.tpr", "-maxwarn", "2", cwd=work)
    import subprocess

    dump = subprocess.run(["gmx", "-quiet", "dump", "-s", "prod.tpr"], cwd=work, capture_output=True, text=True).stdout
    got = parse_inputrec(dump)
    assert differences(got, sets[0]) == []
    changed = dict(got, rvdw="0.9")
    assert [(c, p) for c, p, _m in differences(changed, sets[0])] == [("protocol_model_differs", "rvdw")]
    # the NPT production the protocol offers (its npt_mdp) is admissible too, and is not the NVT one
    (work / "npt.mdp").write_text(render_mdp(sets[1]))
    rb.gmx("grompp", "-f", "npt.mdp", "-c", "box.gro", "-p", "topol.top", "-o", "npt.tpr", "-maxwarn", "2", cwd=work)
    npt = parse_inputrec(subprocess.run(["gmx", "-quiet", "dump", "-s", "npt.tpr"], cwd=work, capture_output=True,
                                        text=True).stdout)
    assert differences(npt, sets[1]) == []
    assert ("protocol_state_point_differs", "pcoupl") in [(c, p) for c, p, _m in differences(npt, sets[0])]


def test_coarser_trajectory_output_caps_sim4_at_half(frozen_bundle, run_copy, tmp_path):
    every = (20, 40)[seed_for("audit45/nstxout") % 2]
    rerun_production(run_copy, nstxout_compressed=f"{every}")
    res = audit_run(run_copy, frozen_bundle, tmp_path / "a", reanalysis=False)
    found = [f for f in res.findings if f.code == "protocol_output_coarser"]
    assert [f.item for f in found] == ["Sim4"] and f"every {every * 0.002:g} ps in the production" in found[0].message
    assert items(tmp_path / "a")["Sim4"] <= 0.5
