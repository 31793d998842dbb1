"""Issue 45, class 1: A1 judged from the task's specification (the required results of each case).

* The list is derived from the registry and the bundle, never from the run: LHCE requires the RDF and the CN
  of each of its three Li–O channels, D of each of its four species, σ with cross-correlations, the
  correlated t+, η; a bundle's ``required_targets`` replace a group's targets.
* The reference pipeline's own results (``analyze_files`` on the tiny real run) deliver every required entry.
* Planted, records consistent with the defect (observable states, terminal claim and report rewritten from
  the results): a required channel's CN dropped while a residence time of the same channel stays; a species'
  D dropped while its labelled Yeh–Hummer corrected D stays; LHCE's Li⁺–TTE ether-oxygen RDF and CN dropped
  from a pipeline-shaped results document. Each leaves the entry missing: the group is M and A1 ≤ ½ naming it.
* Honest controls: the honest run and a labelled extra (a Yeh–Hummer D beside the required D) change nothing.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import _runbuilder as rb
from _audit_helpers import edit_results, saeo, state
from mdbench.audit import audit_run
from mdbench.audit.bundle import load_bundle
from mdbench.audit.required_results import missing_results, required_results

CASE = rb.CASE


@pytest.fixture(scope="module")
def pipeline_results(built, tmp_path_factory) -> dict:
    """The reference pipeline's results.json of the tiny run's production."""
    from mdbench.analysis import pipeline

    run, _ = built
    prod = run / "cases" / CASE / "prod"
    out = tmp_path_factory.mktemp("pipeline")
    pipeline.analyze_files(prod / "prod.tpr", prod / "prod.xtc", prod / "prod.edr", out, figures=False)
    return json.loads((out / "results.json").read_text())


def lhce_shaped(doc: dict) -> dict:
    """The pipeline's entries of the tiny run relabelled as LHCE's (same entries, LHCE's channels and species)."""
    obs = doc["observables"]
    out = {k: v for k, v in obs.items() if not k.startswith(("rdf/", "coordination/", "self_diffusion",
                                                             "residence_time/"))}
    for ch in ("DMC:O_carbonyl", "DMC:O_ether", "FSI:O", "TTE:O_ether"):
        out[f"rdf/{ch}"] = copy.deepcopy(obs["rdf/SOL:O"])
        out[f"coordination/{ch}@first_min"] = copy.deepcopy(obs["coordination/SOL:O@first_min"])
        out[f"residence_time/{ch}/intermittent"] = copy.deepcopy(obs["residence_time/SOL:O/intermittent"])
    for sp in ("LI", "FSI", "DMC", "TTE"):
        out[f"self_diffusion/{sp}"] = copy.deepcopy(obs["self_diffusion/SOL"])
        out[f"self_diffusion_yeh_hummer/{sp}"] = copy.deepcopy(obs["self_diffusion_yeh_hummer/SOL"])
    return {**doc, "case": "LHCE", "observables": out}


def test_required_list_comes_from_the_spec(bundle):
    labels = [r.label() for r in required_results("LHCE")]
    for ch in ("li_o_dmc_carbonyl", "li_o_fsi", "li_o_tte_ether"):
        assert f"rdf/{ch}" in labels and f"coordination/{ch}" in labels
    assert {f"self_diffusion/{s}" for s in ("li", "fsi", "dmc", "tte")} <= set(labels)
    assert {"conductivity/sigma", "transference", "viscosity", "association/cip", "association/agg"} <= set(labels)
    assert "rdf/li_o_tte_ether" not in [r.label() for r in required_results("DE")]
    w = [r.label() for r in required_results(CASE, load_bundle(bundle))]
    assert "coordination/na_o_sol" in w and {"self_diffusion/na", "self_diffusion/cl", "self_diffusion/sol"} <= set(w)


def test_reference_pipeline_output_satisfies_the_list(bundle, pipeline_results):
    assert missing_results(CASE, load_bundle(bundle), pipeline_results) == []
    assert missing_results("LHCE", None, lhce_shaped(pipeline_results)) == []


def test_lhce_without_its_tte_ether_channel_is_missing(pipeline_results):
    doc = lhce_shaped(pipeline_results)
    del doc["observables"]["rdf/TTE:O_ether"], doc["observables"]["coordination/TTE:O_ether@first_min"]
    got = sorted(r.label() for r, _why in missing_results("LHCE", None, doc))
    assert got == ["coordination/li_o_tte_ether", "rdf/li_o_tte_ether"]   # its residence time delivers neither
    doc = lhce_shaped(pipeline_results)
    del doc["observables"]["self_diffusion/TTE"]
    assert [r.label() for r, _ in missing_results("LHCE", None, doc)] == ["self_diffusion/tte"]


def _audit(run: Path, bundle: Path, out: Path) -> tuple:
    rb.declare_states(run)   # records, terminal claim and report follow the edited results
    res = audit_run(run, bundle, out, reanalysis=False)
    return res, saeo(out)


@pytest.mark.gromacs
@pytest.mark.parametrize("defect", ["cn_channel_only_residence_left", "d_species_only_yeh_hummer_left"])
def test_dropped_required_entry_lowers_A1(run_copy, bundle, tmp_path, defect):
    def drop(doc):
        obs = doc["observables"]
        if defect == "cn_channel_only_residence_left":
            cn = obs["coordination"].pop("cn_na_o_sol")
            obs["coordination"]["residence_time_na_o_sol"] = dict(cn, unit="ps")
        else:
            d = obs["self_diffusion"].pop("D_cl")
            obs["self_diffusion"]["D_cl_yeh_hummer"] = d

    edit_results(run_copy, drop)
    res, doc = _audit(run_copy, bundle, tmp_path / "a")
    want = "coordination/na_o_sol" if defect.startswith("cn") else "self_diffusion/cl"
    found = [f for f in res.findings if f.code == "required_result_missing"]
    assert found and all(f.item == "A1" for f in found) and want in found[0].message
    assert doc["items"]["A1"]["final"] <= 0.5 and want in doc["items"]["A1"]["reason"]
    assert state(doc, CASE, "coordination" if defect.startswith("cn") else "self_diffusion") == "M"


@pytest.mark.gromacs
def test_honest_run_and_labelled_extra_leave_every_item(built, run_copy, bundle, tmp_path):
    run, _ = built
    base = audit_run(run, bundle, tmp_path / "base", reanalysis=False)
    assert not [f for f in base.findings if f.code == "required_result_missing"]
    assert saeo(tmp_path / "base")["items"]["A1"]["final"] == 1.0

    def extra(doc):
        d = copy.deepcopy(doc["observables"]["self_diffusion"]["D_cl"])
        d["label"] = "additional: Yeh-Hummer finite-size corrected D (labelled; not the required D)"
        doc["observables"]["self_diffusion"]["D_cl_yeh_hummer"] = d

    edit_results(run_copy, extra)
    res = audit_run(run_copy, bundle, tmp_path / "extra", reanalysis=False)
    assert not [f for f in res.findings if f.code == "required_result_missing"]
    items = {k: v["final"] for k, v in saeo(tmp_path / "extra")["items"].items()}
    assert items == {k: v["final"] for k, v in saeo(tmp_path / "base")["items"].items()}
