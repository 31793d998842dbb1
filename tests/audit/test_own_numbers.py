"""Issue 37: defective runs written as buggy agents leave them (records consistent with what the agent believed,
checksums updated), each built from the real tiny run, each landing on its item; the honest run keeps its score.

Planted magnitudes are drawn from ``MDBENCH_TEST_SEED`` (:func:`_testseed.seed_for`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import _runbuilder as rb
import numpy as np
import pytest
from _audit_helpers import edit_results, judgment, reanalysed, saeo, state

from _testseed import seed_for
from mdbench.audit import NotARunDirectory, audit_run
from mdbench.errors import MdbenchError
from mdbench.record import RunRecord

CASE = rb.CASE
pytestmark = pytest.mark.gromacs


def _rng(label: str) -> np.random.Generator:
    return np.random.default_rng(seed_for(f"audit-own-numbers/{label}"))


def _factor(label: str) -> float:
    """A planted factor in [1.3, 1.9] ∪ [0.3, 0.7] (never a unit factor)."""
    r = _rng(label)
    return float(r.uniform(1.3, 1.9) if r.random() < 0.5 else r.uniform(0.3, 0.7))


def test_directory_without_run_record_is_refused(tmp_path):
    """`mdbench audit /etc` scored 17.5: a directory without run_record/ is refused by the library."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0\n")
    with pytest.raises(NotARunDirectory) as err:
        audit_run(tmp_path / "etc", None, tmp_path / "out", reanalysis=False)
    assert isinstance(err.value, MdbenchError) and "run_record" in str(err.value)
    assert not (tmp_path / "out" / "saeo.json").exists()
    (tmp_path / "etc" / "run_record").symlink_to(tmp_path)      # a link is no record either
    with pytest.raises(NotARunDirectory):
        audit_run(tmp_path / "etc", None, tmp_path / "out", reanalysis=False)


def test_blocks_copied_from_the_whole_value_are_caught_against_the_canonical_blocks(run_copy, bundle, tmp_path):
    """Four block values equal to the whole value (zero spread) while the canonical blocks of the same production
    scatter: A6 = 0, A3 = 0 and F for that observable, whatever the run said."""
    def flat(doc):
        e = doc["observables"]["thermodynamics"]["temperature"]
        e["blocks"] = [e["value"]] * 4
        e["uncertainty"]["half_width_95"] = 0.0
    edit_results(run_copy, flat)
    rb.declare_states(run_copy)
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    assert judgment(doc, "A6", CASE, "thermodynamics")["rating"] == 0.0
    assert judgment(doc, "A3", CASE, "thermodynamics")["rating"] == 0.0
    assert state(doc, CASE, "thermodynamics") == "F"
    assert any(f["code"] == "block_spread_implausible" for f in doc["findings"])


def test_fabricated_records_without_trajectory_fail_E1_and_contract_vocabulary_for_O1(run_copy, bundle, tmp_path):
    """The production files the ledger names are gone (fabricated JSON), the run calls its unresolved observables
    "estimated" and claims clean validity: E1 = 0, O1 < 1, and E5 < 1 because O5 finds the claim contradicted."""
    for ext in ("xtc", "edr", "cpt"):
        (run_copy / "cases" / CASE / "prod" / f"prod.{ext}").unlink()
    obs = json.loads((run_copy / "run_record/observables.json").read_text())
    for g, v in obs[CASE].items():
        if v["state"] != "C":
            v["state"] = "estimated"
    (run_copy / "run_record/observables.json").write_text(json.dumps(obs))
    rec = RunRecord(run_copy)
    t = rec.terminal()
    rec.write_terminal("clean_valid", final_stages=t["final_stages"], observables=t["observables"], unresolved=[])
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert doc["items"]["E1"]["final"] == 0.0, doc["items"]["E1"]
    assert "does not exist" in doc["items"]["E1"]["reason"]
    assert doc["items"]["O5"]["final"] < 1.0
    assert doc["items"]["E5"]["final"] < 1.0
    assert any(f["code"] == "claim_contradicted" for f in doc["findings"])


def test_estimated_is_not_detection(run_copy, bundle, tmp_path):
    """O1 counts only the contract's states: "estimated" for an SI observable is not "detected"."""
    obs = json.loads((run_copy / "run_record/observables.json").read_text())
    unresolved = [g for g, v in obs[CASE].items() if v["state"] != "C"]
    if not unresolved:
        pytest.skip("this trajectory leaves nothing unresolved")
    for g in unresolved:
        obs[CASE][g]["state"] = "estimated"
    (run_copy / "run_record/observables.json").write_text(json.dumps(obs))
    rec = RunRecord(run_copy)
    t = rec.terminal()
    rec.write_terminal("partial", final_stages=t["final_stages"], observables=t["observables"], unresolved=[])
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    assert saeo(tmp_path / "a")["items"]["O1"]["final"] == 0.0


def test_production_after_a_failed_registered_gate_is_Sim3_zero_and_E5(run_copy, bundle, tmp_path):
    """The run's own equilibration gate, recorded in its gate_evaluated event, FAILED; its stage state says valid and
    production followed: Sim3 = 0 (our own looser tolerances would pass it) and E5 ≤ ½."""
    rec = RunRecord(run_copy)
    drift = float(_rng("gate").uniform(0.03, 0.08))
    reg = rec.register("equilibration_gate", {"gate": "equilibration", "density_drift_max": 0.02}, case=CASE)
    rec.append_event("gate_evaluated", {"case": CASE, "stage": "30_equilibrate", "registration_id": reg,
                                        "gate": "equilibration", "passed": False,
                                        "checks": [{"name": "density_drift", "value": drift, "threshold": 0.02,
                                                    "relation": "<=", "passed": False, "unit": ""}],
                                        "reason": f"density drift {drift:.3f} > 0.02"})
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert judgment(doc, "Sim3", CASE)["rating"] == 0.0
    assert doc["items"]["E5"]["final"] <= 0.5
    codes = {f["code"] for f in doc["findings"]}
    assert {"production_after_failed_gate", "stage_state_contradicts_gate"} <= codes


def test_sigma_off_its_own_matrix_is_A3_and_mixed_tplus_is_A2(run_copy, bundle, tmp_path):
    """σ scaled by a planted factor no longer follows Σ z_i z_j L_ij of the run's own matrix (A3 = 0, F); t+ is its
    own matrix in the mixed convention (A2 = 0, F) — whatever the sampling, and without the canonical interval."""
    k = _factor("sigma")

    def plant(doc):
        s = doc["observables"]["conductivity"]
        s["value"] *= k
        s["blocks"] = [b * k for b in s["blocks"]]
        t = doc["observables"]["transference_number"]
        L = t["onsager"]
        mixed = (L["L_pp"] + L["L_pm"]) / (L["L_pp"] + L["L_mm"] + 2 * L["L_pm"])
        shift = mixed - t["value"]
        t["value"] = mixed
        t["blocks"] = [b + shift for b in t["blocks"]]
        if abs(shift) < 0.01:
            pytest.skip("mixed and correct conventions coincide on this trajectory")
    edit_results(run_copy, plant)
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert judgment(doc, "A3", CASE, "conductivity")["rating"] == 0.0
    assert state(doc, CASE, "conductivity") == "F"
    assert judgment(doc, "A2", CASE, "transference_number")["rating"] == 0.0
    assert state(doc, CASE, "transference_number") == "F"
    codes = {f["code"] for f in doc["findings"]}
    assert {"sigma_inconsistent_with_own_matrix", "tplus_mixed_convention"} <= codes


def test_overlapping_blocks_cap_A6_and_A7(run_copy, bundle, tmp_path):
    """Blocks recorded as overlapping (block_ranges_ps and the guard/block registration): A6 ≤ ½ and A7 ≤ ½."""
    frac = float(_rng("overlap").uniform(0.2, 0.5))

    def overlap(doc):
        for e in doc["observables"]["self_diffusion"].values():
            r = e["block_ranges_ps"]
            n = r[1][1] - r[0][0]
            e["block_ranges_ps"] = [[a - frac * n * i / 4, b - frac * n * i / 4 + frac * n] for i, (a, b) in
                                    enumerate(r)]
            e["uncertainty"]["definition"] = "t(0.975,3) s/sqrt(4) over 4 overlapping blocks"
    edit_results(run_copy, overlap)
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert judgment(doc, "A6", CASE, "self_diffusion")["rating"] <= 0.5
    assert judgment(doc, "A7", CASE, "self_diffusion")["rating"] <= 0.5
    assert any(f["code"] == "block_layout_invalid" for f in doc["findings"])


@pytest.mark.skipif(shutil.which("gmx") is None, reason="needs gmx")
def test_production_at_another_temperature_and_hidden_md_attempt(run_copy, bundle, tmp_path):
    """The production tpr regenerated at a planted temperature (checksums updated) is Sim4 = 0; an earlier MD
    attempt whose files are on disk but absent from the ledger is E1 ≤ ½ and E5 ≤ ½."""
    temp = 298.15 + float(_rng("temp").uniform(5.0, 20.0))
    prod = run_copy / "cases" / CASE / "prod"
    mdp = (prod / "prod.mdp").read_text().replace("ref-t = 298.15", f"ref-t = {temp:.2f}")
    (prod / "prod.mdp").write_text(mdp)
    proc = subprocess.run(["gmx", "-quiet", "grompp", "-f", "prod.mdp", "-c", "../equil/npt.gro", "-t",
                           "../equil/npt.cpt", "-p", "../setup/topol.top", "-o", "prod.tpr", "-po", "/dev/null"],
                          cwd=prod, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-800:]
    for p in prod.glob("#*"):
        p.unlink()
    hidden = run_copy / "cases" / CASE / "prod_try1"
    hidden.mkdir()
    for ext in ("xtc", "edr"):
        shutil.copy(prod / f"prod.{ext}", hidden / f"prod.{ext}")
    rec = RunRecord(run_copy)
    rec.add_artifact(f"cases/{CASE}/prod/prod.tpr")
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert judgment(doc, "Sim4", CASE)["rating"] == 0.0
    assert f"{temp:g}"[:5] in judgment(doc, "Sim4", CASE)["reason"]
    assert doc["items"]["E1"]["final"] <= 0.5 and doc["items"]["E5"]["final"] <= 0.5
    hidden = next(f for f in doc["findings"] if f["code"] == "md_files_unclaimed" and "prod_try1" in f["message"])
    assert f"{rb.PROD_STEPS * 0.002 / 1000:.4g} ns of MD not charged" in hidden["message"]   # its time is counted


def test_report_per_case_number_unlike_results_is_E5(run_copy, bundle, tmp_path):
    """A per-case table in report.md whose number disagrees with results.json: E5 ≤ ½ with both numbers; the
    same table with the true numbers is no finding."""
    res = json.loads((run_copy / "analysis" / CASE / "results.json").read_text())
    d = res["observables"]["self_diffusion"]["D_na"]["value"]
    k = _factor("report")
    base = (run_copy / "report.md").read_text()
    (run_copy / "report.md").write_text(base + f"\n## Case {CASE}\n\n| quantity | value |\n|---|---|\n"
                                        f"| D_na | {d:.4e} |\n")
    from mdbench.audit.model import ObservableAssessment
    from mdbench.audit.report_numbers import report_case_mismatches
    from mdbench.audit.runread import load_run
    from mdbench.audit.safeio import RunFS

    fake = [ObservableAssessment(CASE, "self_diffusion", "C", "", values={"observables.self_diffusion.D_na": d})]
    assert report_case_mismatches(load_run(RunFS(run_copy), [CASE]), fake) == []
    (run_copy / "report.md").write_text(base + f"\n## Case {CASE}\n\n| quantity | value |\n|---|---|\n"
                                        f"| D_na | {d * k:.4e} |\n")
    RunRecord(run_copy).add_artifact("report.md")
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert doc["items"]["E5"]["final"] <= 0.5
    f = next(f for f in doc["findings"] if f["code"] == "report_number_differs")
    assert f"{d * k:.4e}" in f["message"]


#: Check codes of this issue's modules (none may fire on the honest run).
OWN_CODES = {"block_spread_implausible", "sigma_inconsistent_with_own_matrix", "tplus_inconsistent_with_own_matrix",
             "ionicity_inconsistent", "whole_outside_blocks", "block_layout_invalid", "production_after_failed_gate",
             "gate_record_inconsistent", "stage_state_contradicts_gate", "production_state_point_differs",
             "production_length_disagrees", "md_files_unclaimed", "lineage_artifact_missing", "report_number_differs",
             "claim_contradicted", "terminal_reference_unresolved"}


def test_honest_run_and_pipeline_format_pass_every_own_number_check_and_planted_faults_land(built, tmp_path):
    """The honest run with the reanalysis raises none of this issue's findings; its canonical results (our
    pipeline's format: σ with its Onsager matrix and σ_ij, σ_NE, ionicity, t+ in two frames) pass every internal
    consistency check; planted into that format, a mixed-convention t+ is A2 F, σ off its own σ_ij A3 F, an
    ionicity unlike σ/σ_NE A3 F — from the run's own numbers, in every case, whatever the sampling."""
    from types import SimpleNamespace

    from mdbench.analysis.onsager import transference_conventions
    from mdbench.audit import consistency

    run, bundle = built
    _res, doc = reanalysed(run, bundle, tmp_path / "a")
    assert not OWN_CODES & {f["code"] for f in doc["findings"]}, [f for f in doc["findings"] if f["code"] in OWN_CODES]
    assert "agree with the canonical" in judgment(doc, "A3", CASE, "association")["reason"]  # compared, as registered
    canon = json.loads((tmp_path / "a" / "reanalysis" / CASE / "results.json").read_text())

    def extras(results):
        return consistency.checks(SimpleNamespace(results={CASE: results}), CASE, None)

    assert extras(canon) == []
    obs = canon["observables"]
    sig = obs["conductivity/sigma"]
    L = sig["details"]["L"]["whole"]
    species, charges = canon["system"]["species"], canon["system"]["charges_e"]
    chk = transference_conventions(L, species, charges).as_dict()
    if abs(chk["mixed_L_in_weighted"] - chk["unweighted_L"]) < 0.02:
        pytest.skip("mixed and correct conventions coincide on this trajectory")
    bad = json.loads(json.dumps(canon))
    bad["observables"]["transference/barycentric/unweighted_L"]["value"] = chk["mixed_L_in_weighted"]
    k = _factor("pipeline-sigma")
    bad["observables"]["conductivity/sigma"]["value"] *= k
    bad["observables"]["conductivity/sigma"]["blocks"] = [b * k for b in sig["blocks"]]
    bad["observables"]["conductivity/ionicity"]["value"] *= _factor("pipeline-ionicity")
    got = {(x.group, x.check.code): x.caps for x in extras(bad)}
    assert got[("transference_number", "tplus_mixed_convention")] == {"A2": 0.0}
    assert got[("conductivity", "sigma_inconsistent_with_own_matrix")] == {"A3": 0.0}
    assert ("conductivity", "ionicity_inconsistent") in got


@pytest.mark.skipif(shutil.which("gmx") is None, reason="needs gmx")
def test_production_with_a_changed_lj_sigma_is_Sim1_zero(run_copy, bundle, tmp_path):
    """The Na⁺ Lennard-Jones σ changed (planted factor) in the production topology only, the tpr regenerated and
    its checksum updated: the production run input is not the force field the run equilibrated (and the bundle
    froze): Sim1 = 0."""
    setup = run_copy / "cases" / CASE / "setup"
    rb.with_changed_na_sigma(setup / "topol.top", setup / "topol_prod.top", float(_rng("lj").uniform(1.05, 1.25)))
    prod = run_copy / "cases" / CASE / "prod"
    proc = subprocess.run(["gmx", "-quiet", "grompp", "-f", "prod.mdp", "-c", "../equil/npt.gro", "-t",
                           "../equil/npt.cpt", "-p", "../setup/topol_prod.top", "-o", "prod.tpr", "-po", "/dev/null",
                           "-maxwarn", "2"], cwd=prod, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-800:]
    for p in list(prod.glob("#*")) + list(setup.glob("#*")):
        p.unlink()
    RunRecord(run_copy).add_artifact(f"cases/{CASE}/prod/prod.tpr")
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    sim1 = judgment(doc, "Sim1", CASE)
    assert sim1["rating"] == 0.0 and "Lennard-Jones" in sim1["reason"], sim1
    assert any(f["code"] == "production_force_field_differs" for f in doc["findings"])


def test_registered_gate_reevaluated_on_the_energy_file(run_copy, bundle, tmp_path):
    """A run registers an equilibration gate whose temperature tolerance its own NPT energy file cannot meet
    (planted tolerance far below the file's fluctuation) and records no evaluation: Sim3 re-evaluates the
    registered gate and rates 0 (our own 5 K backstop would pass it)."""
    tol = float(_rng("gate-tol").uniform(1e-6, 1e-5))
    RunRecord(run_copy).register("equilibration_gate", {
        "gate": "equilibration", "stage": "30_equilibrate", "target_temperature_K": 298.15,
        "observables": ["Density"], "nskip": 1, "min_effective_samples": 1.0, "max_t0_fraction": 1.0,
        "temperature_tolerance_K": tol, "max_density_drift_rel": 1.0}, case=CASE)
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    sim3 = judgment(doc, "Sim3", CASE)
    assert sim3["rating"] == 0.0 and "re-evaluated" in sim3["reason"], sim3
    assert "registered_gate_fails" in {f["code"] for f in doc["findings"]}


def _fractions_at(run: Path, cutoff_nm: float) -> dict[str, dict]:
    """CIP/AGG fractions of the honest run's production at ``cutoff_nm`` (what an agent with another cutoff would
    write), blocked as the run blocks them."""
    import MDAnalysis as mda
    from MDAnalysis.lib.distances import capped_distance

    from mdbench.analysis.blocks import block_estimate, block_windows

    prod = run / "cases" / CASE / "prod"
    u = mda.Universe(str(prod / "prod.tpr"), str(prod / "prod.xtc"))
    na, cl = u.select_atoms("resname NA"), u.select_atoms("resname CL")
    times, cip, agg = [], [], []
    for ts in u.trajectory:
        times.append(ts.time)
        pc = capped_distance(cl.positions, na.positions, cutoff_nm * 10.0, box=ts.dimensions, return_distances=False)
        per = np.bincount(pc[:, 0], minlength=len(cl)) if len(pc) else np.zeros(len(cl), int)
        cip.append(float(np.mean(per == 1)))
        agg.append(float(np.mean(per >= 2)))
    win = block_windows(np.asarray(times), rb.GUARD_PS)
    out = {}
    for name, x in (("cip", np.asarray(cip)), ("agg", np.asarray(agg))):
        out[name] = block_estimate(float(x[win.whole].mean()), [float(x[b].mean()) for b in win.blocks], "fraction",
                                   block_ranges_ps=win.block_ranges_ps).to_dict()
    return out


def test_contact_cutoff_unlike_the_registered_one_is_caught_at_the_registered_definition(run_copy, bundle, tmp_path):
    """The honest run's CIP/AGG are compared with the reanalysis at its registered contact cutoff (not "not
    compared"); fractions computed at a planted other cutoff while the entry and the registration say 0.35 nm
    disagree with the reanalysis at 0.35 nm: A3 = 0 and F."""
    cut = float(_rng("contact-cutoff").uniform(0.55, 0.75))
    planted = _fractions_at(run_copy, cut)
    if all(planted[k]["value"] == 0.0 for k in planted):
        pytest.skip("no cation–anion contact even at the planted cutoff on this trajectory")

    def plant(doc):
        for k, est in planted.items():
            e = doc["observables"]["association"][k]
            e.update({kk: est[kk] for kk in ("value", "blocks", "uncertainty", "block_ranges_ps")})
    edit_results(run_copy, plant)
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    a3 = judgment(doc, "A3", CASE, "association")
    assert a3["rating"] == 0.0, a3
    assert state(doc, CASE, "association") == "F"
    assert doc["reanalysis"]["cases"][CASE]["registered_settings"]["contact_cutoffs_nm"]["CL:ion"] == 0.35


@pytest.mark.skipif(shutil.which("gmx") is None, reason="needs gmx")
def test_trajectory_and_energy_file_cut_short_while_log_and_ledger_say_full_length(run_copy, bundle, tmp_path):
    """Trajectory and energy file cut cleanly to a planted fraction (they agree with each other; checksums updated)
    while the log and the ledger still say the full length: Sim4 = 0 and E5 ≤ ½."""
    frac = float(_rng("cut").uniform(0.6, 0.85))
    prod = run_copy / "cases" / CASE / "prod"
    end = round(frac * rb.PROD_STEPS * 0.002, 2)
    for argv, stdin in ((["trjconv", "-f", "prod.xtc", "-s", "prod.tpr", "-e", f"{end}", "-o", "cut.xtc"], "System\n"),
                        (["eneconv", "-f", "prod.edr", "-e", f"{end}", "-o", "cut.edr"], None)):
        proc = subprocess.run(["gmx", "-quiet", *argv], cwd=prod, input=stdin, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-800:]
    (prod / "cut.xtc").replace(prod / "prod.xtc")
    (prod / "cut.edr").replace(prod / "prod.edr")
    for p in prod.glob("#*"):
        p.unlink()
    rec = RunRecord(run_copy)
    for ext in ("xtc", "edr"):
        rec.add_artifact(f"cases/{CASE}/prod/prod.{ext}")
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    sim4 = judgment(doc, "Sim4", CASE)
    assert sim4["rating"] == 0.0 and "log" in sim4["reason"] and "checkpoint" in sim4["reason"], sim4
    assert doc["items"]["E5"]["final"] <= 0.5
    assert any(f["code"] == "production_length_disagrees" for f in doc["findings"])


def test_hostile_production_run_input_neither_hangs_nor_crashes_the_new_checks(run_copy, bundle, tmp_path):
    """The production .tpr replaced by seeded garbage, and a FIFO planted where an equilibration .tpr would be:
    `gmx dump` is never pointed at the FIFO, the audit completes and rates Sim1/Sim4 0."""
    import os

    rng = _rng("garbage-tpr")
    (run_copy / "cases" / CASE / "prod" / "prod.tpr").write_bytes(rng.bytes(4096))
    os.mkfifo(run_copy / "cases" / CASE / "equil" / "zz_hang.tpr")
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert judgment(doc, "Sim4", CASE)["rating"] == 0.0


def test_terminal_references_inside_dict_entries_resolve_or_E3(run_copy, bundle, tmp_path):
    """Terminal references inside dict entries — a results file never written, an event id and an attempt id that
    do not exist — each a finding, E3 ≤ ½."""
    path = run_copy / "run_record" / "episode_terminal.json"
    t = json.loads(path.read_text())
    n = int(_rng("refs").integers(1000, 9000))
    t["observables"][CASE]["viscosity"] = {"state": "SI", "results_ref": f"analysis/{CASE}/results_v{n}.json#/eta",
                                           "event_id": n, "attempt": f"{CASE}-{n:04d}"}
    path.write_text(json.dumps(t))
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert doc["items"]["E3"]["final"] <= 0.5
    msgs = [f["message"] for f in doc["findings"] if f["code"] == "terminal_reference_unresolved"]
    assert any(f"results_v{n}.json" in m for m in msgs) and any(f"event {n}" in m for m in msgs)
    assert any(f"{CASE}-{n:04d}" in m for m in msgs)


def test_consistency_rules_on_hand_written_entries():
    """Pure rules (no GROMACS): σ is compared with an Onsager block only when its unit is already divided by
    k_B T V (a foreign run's raw displacement slopes are not second-guessed); a block layout measured from the
    production's first frame is accepted; overlap, unequal lengths and a block before the guard are not."""
    from types import SimpleNamespace

    from mdbench.analysis.units import E_CHARGE_C
    from mdbench.audit import consistency
    from mdbench.audit.blocklayout import layout_problems

    rng = _rng("pure")
    pp, mm, pm = (float(x) for x in rng.uniform([2.0, 1.0, 0.1], [3.0, 2.0, 0.5]))
    e2 = E_CHARGE_C ** 2
    sigma = e2 * (pp + mm - 2 * pm) * 1e20

    def doc(unit, value):
        return {"observables": {
            "conductivity": {"value": value, "blocks": [value] * 3 + [value * 1.01], "charges_e": {"NA": 1, "CL": -1}},
            "transference_number": {"value": (pp - pm) / (pp + mm - 2 * pm), "blocks": [0.5] * 4,
                                    "onsager": {"L_pp": pp * 1e20, "L_mm": mm * 1e20, "L_pm": pm * 1e20,
                                                "unit": unit}}}}

    def codes(d):
        return {x.check.code for x in consistency.checks(SimpleNamespace(results={"W": d}), "W", None)}

    assert "sigma_inconsistent_with_own_matrix" not in codes(doc("1/(J m s)", sigma))
    assert "sigma_inconsistent_with_own_matrix" in codes(doc("1/(J m s)", sigma * _factor("pure-sigma")))
    assert "sigma_inconsistent_with_own_matrix" not in codes(doc("nm^2/ps", sigma * _factor("pure-sigma")))
    assert "conductivity_without_cross_terms" in codes(doc("mol/(J m s)", e2 * (pp + mm) * 1e20))
    ok = [[0.4, 1.28], [1.3, 2.18], [2.2, 3.08], [3.1, 3.98]]
    assert layout_problems(ok, 4, 0.4, 4.0, 0.02, 0.0) == []
    assert layout_problems(ok, 4, 100.4, 104.0, 0.02, 100.0) == []                # relative to the first frame
    assert any("overlap" in p for p in layout_problems([[0.4, 1.5], [1.0, 2.18], [2.2, 3.08], [3.1, 3.98]], 4, 0.4,
                                                        4.0, 0.02, 0.0))
    assert any("guard" in p for p in layout_problems([[0.0, 0.98], [1.0, 1.98], [2.0, 2.98], [3.0, 3.98]], 4, 0.4,
                                                      4.0, 0.02, 0.0))
    assert any("registered" in p for p in layout_problems(ok, 8, 0.4, 4.0, 0.02, 0.0))
