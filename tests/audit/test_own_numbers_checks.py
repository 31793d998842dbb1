"""Issue 37 (part B): a run's numbers against its own recorded evidence and the trajectory, by tests that do not
depend on the canonical interval's width — each defective run is built from the real tiny run, with planted
magnitudes drawn from ``MDBENCH_TEST_SEED``, and each lands on its item while the honest run keeps its score.

* CN against 4πρ∫g(r)r²dr of the run's own recorded RDF (A3, F);
* D against the trajectory's MSD and against the run's own recorded MSD, on a diffusive window re-derived from the
  trajectory whatever the run's ``found`` flag says (A3, F);
* σ without a recorded matrix, classified by the charges that reproduce it from the canonical Onsager matrix
  (A2, F; the ×1.93 formal-vs-±0.72 case on the tiny run's own matrix);
* a value that no artifact supports and the reanalysis does not reproduce (E1 ≤ ½, A3 = 0).
"""

from __future__ import annotations

import json
import math
import shutil

import _runbuilder as rb
import numpy as np
import pytest
from _audit_helpers import edit_results, judgment, reanalysed, saeo, state

from _testseed import seed_for
from mdbench.audit import audit_run
from mdbench.audit.consistency import charge_weightings, classify_sigma

CASE = rb.CASE
pytestmark = pytest.mark.gromacs
MINE = {"cn_inconsistent_with_own_rdf", "diffusion_off_trajectory_msd", "diffusion_off_recorded_msd",
        "charge_weighting_differs", "value_without_artifact", "production_force_field_not_bundle"}


def _rng(label: str) -> np.random.Generator:
    return np.random.default_rng(seed_for(f"audit-own-numbers-checks/{label}"))


def _far_factor(label: str) -> float:
    """A planted factor far outside any window-dependence of D on one trajectory: [2.2, 3.0] or [0.05, 0.3]
    (the issue's ×2.5 and ×0.08)."""
    r = _rng(label)
    return float(r.uniform(2.2, 3.0) if r.random() < 0.5 else r.uniform(0.05, 0.3))


def _na_ow_rdf(run, tmp) -> dict:
    """g(r) of Na–OW over the production after the guard, by MDAnalysis' InterRDF (an implementation independent
    of the audit's), recorded inline as a run would: r [nm], g."""
    import MDAnalysis as mda
    from MDAnalysis.analysis.rdf import InterRDF

    from mdbench.analysis.blocks import block_windows

    prod = run / "cases" / CASE / "prod"
    for ext in ("tpr", "xtc"):   # a copy: MDAnalysis' offset cache must not land in the run directory
        shutil.copy(prod / f"prod.{ext}", tmp / f"prod.{ext}")
    u = mda.Universe(str(tmp / "prod.tpr"), str(tmp / "prod.xtc"))
    times = np.array([ts.time for ts in u.trajectory])
    whole = block_windows(times, rb.GUARD_PS).whole
    rdf = InterRDF(u.select_atoms("resname NA"), u.select_atoms("name OW"), nbins=160, range=(0.0, 8.0))
    rdf.run(start=whole.start, stop=whole.stop)
    return {"r_nm": [float(x) / 10.0 for x in rdf.results.bins], "g_r": [float(x) for x in rdf.results.rdf]}


def _codes(doc: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in doc["findings"]:
        out.setdefault(f["code"], []).append(f)
    return out


def test_cn_against_the_integral_of_its_own_recorded_rdf(run_copy, bundle, tmp_path):
    """The honest CN with its RDF recorded beside it is the integral of that RDF (no finding, same score); the CN
    multiplied by a planted factor while the recorded RDF stays as computed is A3 = 0, F, with both numbers."""
    rdf = _na_ow_rdf(run_copy, tmp_path)

    def record(doc):
        doc["observables"]["coordination"]["cn_na_o_sol"].update(rdf=rdf, selection="NA-OW")
    edit_results(run_copy, record)
    audit_run(run_copy, bundle, tmp_path / "honest", reanalysis=False)
    honest = saeo(tmp_path / "honest")
    assert "cn_inconsistent_with_own_rdf" not in _codes(honest)
    a3 = judgment(honest, "A3", CASE, "coordination")["rating"]

    factor = float(_rng("cn").uniform(1.3, 1.9) if _rng("cn-side").random() < 0.5 else _rng("cn").uniform(0.4, 0.75))
    doc = edit_results(run_copy, lambda d: d["observables"]["coordination"]["cn_na_o_sol"].__setitem__(
        "value", d["observables"]["coordination"]["cn_na_o_sol"]["value"] * factor))
    audit_run(run_copy, bundle, tmp_path / "bad", reanalysis=False)
    bad = saeo(tmp_path / "bad")
    hit = _codes(bad).get("cn_inconsistent_with_own_rdf")
    assert hit and hit[0]["item"] == "A3", _codes(bad).keys()
    assert f"{doc['observables']['coordination']['cn_na_o_sol']['value']:.4g}" in hit[0]["message"]
    assert "4πρ∫" in hit[0]["message"]
    assert judgment(bad, "A3", CASE, "coordination")["rating"] == 0.0 and state(bad, CASE, "coordination") == "F"
    assert a3 is None or a3 > 0.0


def test_d_sigma_and_unsupported_values_against_the_trajectory(run_copy, bundle, tmp_path):
    """One defective run with four plants, each landing on its own observable:

    * D(Cl) × a far factor with faked diffusive diagnostics (``found`` true, β = 1) → diffusion_off_trajectory_msd;
    * D(SOL) honest, but stated without a fit window and its inline MSD scaled → does not follow from its recorded
      MSD on the registered window;
    * σ with unsigned ion weights (cross terms added; the factor from the run's own L) and no matrix anywhere
      → charge_weighting_differs (A2 = 0, F);
    * the viscosity × a planted factor with its blocks and interval removed → value_without_artifact (E1 ≤ ½, A3 = 0);
      the density with its blocks removed but unchanged is reproduced: no finding.
    """
    f_cl, f_sol = _far_factor("d-cl"), _far_factor("d-sol-curve")
    f_eta = float(_rng("eta").uniform(2.0, 4.0))
    jitter = float(_rng("sigma-jitter").uniform(0.98, 1.02))
    planted = {}

    def plant(doc):
        obs = doc["observables"]
        d = obs["self_diffusion"]
        d["D_cl"]["value"] *= f_cl
        d["D_cl"]["blocks"] = [b * f_cl for b in d["D_cl"]["blocks"]]
        diag = d["D_cl"].setdefault("diagnostics", {})
        diag["sampling_checks"] = {k: True for k in diag.get("sampling_checks", {})}
        diag.update(beta=1.0, diffusive_window={"found": True, "beta_min": 0.97, "beta_max": 1.03})
        d["D_cl"].pop("msd_file", None)
        d["D_sol"].pop("fit_window_ps", None)
        cur = d["D_sol"]["curves"]
        cur["msd_nm2"] = [m / f_sol for m in cur["msd_nm2"]]
        tp = obs["transference_number"]
        L = tp.pop("onsager")
        pp, mm, pm = L["L_pp"], L["L_mm"], L["L_pm"]
        k_unsigned = (pp + mm + 2 * pm) / (pp + mm - 2 * pm)
        planted["k"] = k_unsigned
        obs["conductivity"]["value"] *= k_unsigned * jitter
        obs["conductivity"]["blocks"] = [b * k_unsigned * jitter for b in obs["conductivity"]["blocks"]]
        eta = obs["viscosity"]
        eta["value"] *= f_eta
        for k in ("blocks", "uncertainty"):
            eta.pop(k, None)
        dens = obs["thermodynamics"]["density"]
        for k in ("blocks", "uncertainty"):
            dens.pop(k, None)
    edit_results(run_copy, plant)
    rb.declare_states(run_copy)
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    codes = _codes(doc)
    where = {(f["code"], f.get("case")): f for f in doc["findings"]}

    d_cl = [f for f in codes.get("diffusion_off_trajectory_msd", []) if "D_cl" in f["message"]]
    assert d_cl and d_cl[0]["item"] == "A3", codes.keys()
    assert not any("D_na" in f["message"] for f in codes.get("diffusion_off_trajectory_msd", []))
    # no window of its own, so the one the run registered: re-fitted there, its recorded MSD does not give it
    # (with no registered window either, the band of every candidate window: diffusion_off_recorded_msd)
    sol = [f for c in ("diffusion_off_recorded_msd", "value_contradicts_reanalysis") for f in codes.get(c, [])
           if "D_sol" in f["message"] and "recorded MSD" in f["message"]]
    assert sol, codes.keys()
    assert judgment(doc, "A3", CASE, "self_diffusion")["rating"] == 0.0 and state(doc, CASE, "self_diffusion") == "F"

    if abs(math.log(planted["k"])) >= math.log(1.15) / (1 - 0.25):   # the tiny run's L+- tells unsigned apart
        assert ("charge_weighting_differs", CASE) in where, codes.keys()
        assert judgment(doc, "A2", CASE, "conductivity")["rating"] == 0.0 and state(doc, CASE, "conductivity") == "F"

    eta = [f for f in codes.get("value_without_artifact", []) if "viscosity" in f["message"]]
    assert eta and eta[0]["item"] == "E1", codes.keys()
    assert judgment(doc, "A3", CASE, "viscosity")["rating"] == 0.0
    assert judgment(doc, "E1")["rating"] <= 0.5
    assert not any("density" in f["message"] for f in codes.get("value_without_artifact", []))


def test_honest_run_keeps_its_score_and_raises_none_of_the_new_checks(run_copy, bundle, tmp_path):
    """The honest tiny run, audited with the reanalysis: none of the part-B checks fires."""
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    assert not MINE & set(_codes(doc)), sorted(MINE & set(_codes(doc)))


def test_sigma_at_formal_charges_under_a_scaled_model_is_classified_from_the_matrix(built):
    """The seed's ×1.93: σ computed with formal ±1 charges under the model's ±0.72 definition is classified as
    ``formal`` from the Onsager matrix (here the tiny run's own recorded one), whatever the sampling; σ at the
    model's charges (within a window-sized jitter) is not."""
    run, _ = built
    res = json.loads((run / "analysis" / CASE / "results.json").read_text())
    L = res["observables"]["transference_number"]["onsager"]
    mat = np.array([[L["L_pp"], L["L_pm"]], [L["L_pm"], L["L_mm"]]])
    scale = float(_rng("scale").uniform(0.7, 0.8))
    ks = charge_weightings(mat, ["LI", "FSI"], {"LI": scale, "FSI": -scale})
    assert ks["formal"] == pytest.approx(1 / scale ** 2, rel=1e-9)
    r = _rng("jitter")
    for _ in range(20):
        j = float(r.uniform(0.9, 1.1))
        assert classify_sigma(ks["formal"] * j, ks) == "formal"
        assert classify_sigma(j, ks) is None
    # at formal charges the model IS formal: nothing to tell apart
    assert "formal" not in {classify_sigma(x, charge_weightings(mat, ["NA", "CL"], {"NA": 1.0, "CL": -1.0}))
                            for x in (1.0, 1.93)}


@pytest.fixture(scope="module")
def scaled_built(tmp_path_factory) -> tuple:
    """(run, bundle, ion charge) of the tiny real run with the ions' charges scaled to ±q e, q drawn from the seed
    in [0.70, 0.80] (the seed's ±0.72 model): its own GROMACS run and bundle, results at the model's charges."""
    if shutil.which("gmx") is None:
        pytest.skip("needs gmx on PATH")
    q = round(float(_rng("scaled-model").uniform(0.70, 0.80)), 3)
    base = tmp_path_factory.mktemp("scaledrun")
    bundle = rb.build_bundle(base / "bundle", ion_q=q)
    return rb.build_run(base / "run", ion_q=q), bundle, q


def test_sigma_at_formal_charges_in_a_scaled_charge_run_is_a_definition_error(scaled_built, tmp_path):
    """End to end on a real run whose model carries ±q ions (q ≈ 0.72): the honest σ (at ±q) raises no charge
    finding; σ computed with formal ±1 charges (× 1/q², ≈ 1.93, within a small window jitter) under the
    model's definition, with no matrix recorded, is ``charge_weighting_differs``: A2 = 0 and the conductivity F,
    whatever its sampling state. The run's other numbers are untouched."""
    run0, bundle, q = scaled_built
    honest = tmp_path / "honest"
    shutil.copytree(run0, honest, symlinks=True)

    def no_matrix(doc):
        doc["observables"]["transference_number"].pop("onsager", None)
    edit_results(honest, no_matrix)
    _res, doc_h = reanalysed(honest, bundle, tmp_path / "a_honest")
    assert doc_h["reanalysis"]["cases"][CASE]["status"] == "ok"
    assert "charge_weighting_differs" not in _codes(doc_h), _codes(doc_h).keys()

    bad = tmp_path / "bad"
    shutil.copytree(honest, bad, symlinks=True)
    jitter = float(_rng("formal-jitter").uniform(0.97, 1.03))
    k = jitter / q ** 2

    def formal(doc):
        s = doc["observables"]["conductivity"]
        s["value"] *= k
        s["blocks"] = [b * k for b in s["blocks"]]
        if isinstance(s.get("uncertainty"), dict):
            s["uncertainty"] = {kk: (v * k if isinstance(v, (int, float)) and kk != "n_blocks" else v)
                                for kk, v in s["uncertainty"].items()}
    doc_b = edit_results(bad, formal)
    assert doc_b["observables"]["conductivity"]["charges_e"] == {"NA": q, "CL": -q}   # it still says ±q
    rb.declare_states(bad)
    _res, doc = reanalysed(bad, bundle, tmp_path / "a_bad")
    hit = [f for f in doc["findings"] if f["code"] == "charge_weighting_differs"]
    assert hit and hit[0]["item"] == "A2" and "formal" in hit[0]["message"], _codes(doc).keys()
    assert judgment(doc, "A2", CASE, "conductivity")["rating"] == 0.0
    assert state(doc, CASE, "conductivity") == "F"
    for group in ("coordination", "self_diffusion"):   # nothing else moved
        assert judgment(doc, "A3", CASE, group)["rating"] == judgment(doc_h, "A3", CASE, group)["rating"]
