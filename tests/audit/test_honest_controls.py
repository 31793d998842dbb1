"""Honest controls: what the seed allows leaves every item where the honest run has it (composite equal).

* A clearly labelled *additional* Nernst–Einstein t+ (and σ_NE) next to the unchanged correlated t+ (seed: "may be
  reported as an additional result but must be explicitly labeled") is judged as what it claims to be, never
  against the required t+'s formula, and lowers nothing by existing.
* A guard revised after the first analysis (``revises``, the triggering evidence, the superseded results kept)
  with the sensitivity table the seed asks for in report.md: the report reader does not take the table's
  original-guard column for the case's value.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import _runbuilder as rb
import pytest
from _audit_helpers import edit_results, reanalysed

from _testseed import seed_for
from mdbench.audit import consistency, runread
from mdbench.record import RunRecord

CASE = rb.CASE
pytestmark = pytest.mark.gromacs
RNG = random.Random(seed_for("audit/honest-controls"))


def _items(doc: dict) -> dict[str, float]:
    return {i: s["final"] for i, s in doc["items"].items()}


@pytest.fixture(scope="module")
def honest(built, tmp_path_factory) -> dict:
    """saeo.json of the honest run, audited with the reanalysis (the base every control must equal)."""
    _res, doc = reanalysed(built[0], built[1], tmp_path_factory.mktemp("honest") / "a")
    return doc


def _ne_tplus(doc: dict, where: str) -> str:
    """Add a labelled additional Nernst–Einstein t+ = D+/(D+ + D−) of the run's own D (and σ_NE beside σ)."""
    obs = doc["observables"]
    dp, dm = obs["self_diffusion"]["D_na"]["value"], obs["self_diffusion"]["D_cl"]["value"]
    bp, bm = obs["self_diffusion"]["D_na"]["blocks"], obs["self_diffusion"]["D_cl"]["blocks"]
    t = dp / (dp + dm)
    extra = {"value": t, "blocks": [a / (a + b) for a, b in zip(bp, bm)],
             "definition": "t+_NE = D_Na / (D_Na + D_Cl) from the self-diffusion coefficients (self terms only)",
             "uncertainty": {"definition": "t(0.975, 3) s / 2 over the four blocks"}}
    if where == "label":
        extra["label"] = "Nernst-Einstein transference number (additional result; not the correlated t+)"
        key = "transference_number_nernst_einstein"
    else:
        extra["additional"] = True
        extra["note"] = RNG.choice(["supplementary, for comparison only", "ideal-solution estimate, labelled"])
        key = "transference_number_ne"
    obs[key] = extra
    return key


@pytest.mark.parametrize("where", ["label", "flag"])
def test_labelled_additional_nernst_einstein_tplus_leaves_every_item(honest, run_copy, bundle, tmp_path, where):
    key = {}
    edit_results(run_copy, lambda d: key.setdefault("k", _ne_tplus(d, where)))
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    about = [f for f in doc["findings"] if key["k"] in f["message"] or f["code"] == "tplus_inconsistent_with_own_matrix"]
    assert not about, about
    assert _items(doc) == _items(honest), {i: (v, _items(honest)[i]) for i, v in _items(doc).items()
                                           if v != _items(honest)[i]}
    assert doc["composite"]["final"] == honest["composite"]["final"]


def test_labelled_extras_in_our_pipelines_format_are_not_the_required_quantity(built, tmp_path):
    """Our pipeline's own results (σ with its matrix, the labelled σ_NE) plus a labelled NE t+ in the same format:
    no consistency check fires, and the labelled entries are not members of the required groups."""
    from types import SimpleNamespace

    _res, _doc = reanalysed(built[0], built[1], tmp_path / "a")
    canon = json.loads((tmp_path / "a" / "reanalysis" / CASE / "results.json").read_text())
    obs = canon["observables"]
    t = next(v for k, v in obs.items() if k.startswith("transference/"))
    ne = dict(t, value=0.5 * t["value"] + 0.25, label="Nernst-Einstein t+ (additional result, self terms only)")
    ne.pop("details", None)
    obs["transference/barycentric/nernst_einstein"] = ne
    assert consistency.checks(SimpleNamespace(results={CASE: canon}), CASE, None) == []
    assert runread.is_labelled_extra(ne) and not runread.is_labelled_extra(t)


def test_a_labelled_extra_does_not_hide_the_required_quantity(run_copy, bundle, tmp_path):
    """Labelling the *required* t+ as additional (and delivering nothing else) leaves it missing: A1 drops."""
    def relabel(doc):
        doc["observables"]["transference_number"]["label"] = "additional result"

    edit_results(run_copy, relabel)
    from mdbench.audit import audit_run

    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = json.loads((tmp_path / "a" / "saeo.json").read_text())
    a1 = next(j for j in doc["judgments"] if j["item"] == "A1" and j["case"] == CASE)
    assert a1["rating"] == 0.0 and "transference" in a1["reason"], a1


# ------------------------------------------------------------------------------- a justified guard revision
def test_revised_guard_with_its_sensitivity_table_leaves_every_item(honest, run_copy, bundle, tmp_path):
    """The guard is revised after the first analysis with ``revises`` and its evidence; the superseded results are
    kept; report.md carries the seed's sensitivity table (original guard | revised guard) for the case."""
    rec = RunRecord(run_copy)
    old = next(r for r in rec.registrations() if r["kind"] == "guard_block_policy")
    res_path = run_copy / "analysis" / CASE / "results.json"
    doc = json.loads(res_path.read_text())
    shutil.copy(res_path, res_path.with_name("results_superseded_guard.json"))
    rec.add_artifact(f"analysis/{CASE}/results_superseded_guard.json")
    rec.register(old["kind"], old["definition"], case=CASE, revises=old["id"],
                 evidence={"reason": "density drift in the first block: guard re-examined", "changed_keys": []})
    eta = doc["observables"]["viscosity"]
    f = RNG.uniform(1.05, 1.3)
    row = (f"| viscosity | {eta['value'] * f:.3g} ± {0.3 * eta['value']:.2g} (original guard) | "
           f"{eta['value']:.4g} ± {0.1 * eta['value']:.2g} (revised guard) |")
    report = run_copy / "report.md"
    text = report.read_text() if report.exists() else "# Report\n"
    report.write_text(text + f"\n## Guard sensitivity ({CASE})\n\n| result | original guard | revised guard |\n"
                             f"|---|---|---|\n{row}\n")
    rec.add_artifact("report.md")
    _res, got = reanalysed(run_copy, bundle, tmp_path / "a")
    assert not [f for f in got["findings"] if f["code"] == "report_number_differs"], got["findings"]
    assert _items(got) == _items(honest), got["items"]["E5"]


def test_a_sensitivity_table_that_gives_neither_value_is_still_E5(run_copy, bundle, tmp_path):
    """The comparison rule reads every column of the row, and still catches a row none of whose numbers is the
    case's value (a revised column that was not recomputed)."""
    eta = json.loads((run_copy / "analysis" / CASE / "results.json").read_text())["observables"]["viscosity"]
    f1, f2 = RNG.uniform(1.2, 1.5), RNG.uniform(1.6, 2.0)
    report = run_copy / "report.md"
    text = report.read_text() if report.exists() else "# Report\n"
    report.write_text(text + f"\n## Guard sensitivity ({CASE})\n\n| result | original guard | revised guard |\n"
                             f"|---|---|---|\n| viscosity | {eta['value'] * f1:.4g} | {eta['value'] * f2:.4g} |\n")
    RunRecord(run_copy).add_artifact("report.md")
    from mdbench.audit import audit_run

    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = json.loads((tmp_path / "a" / "saeo.json").read_text())
    assert [f for f in doc["findings"] if f["code"] == "report_number_differs"], doc["findings"]
    assert doc["items"]["E5"]["final"] <= 0.5


def test_only_a_comparison_tables_rows_may_give_the_value_in_another_column():
    from mdbench.audit.evidence import comparison_lines, report_number_mismatches

    plain = "## Results\n\n| result | value | other |\n|---|---|---|\n| density | 1234.5 | 1007.9 |\n"
    assert report_number_mismatches(plain, {"density": 1007.9}), "a value table's first number is the value"
    compared = "## Results\n\n| result | original guard | revised guard |\n|---|---|---|\n| density | 1234.5 | 1007.9 |\n"
    assert comparison_lines(compared) == {3, 4, 5}
    assert report_number_mismatches(compared, {"density": 1007.9}) == []
    assert report_number_mismatches("density 1234.5 (previous draft) / 1007.9\n", {"density": 1007.9})


def test_a_labelled_ne_tplus_off_its_own_formula_is_A3(run_copy, bundle, tmp_path):
    """The labelled extra is judged for what it claims: an NE t+ that is not D+/(D+ + D−) of the run's own D (a
    factor drawn from the seed) is labelled_extra_off_its_formula, A3 = 0 for the transference group."""
    f = RNG.uniform(1.15, 1.4)

    def plant(doc):
        key = _ne_tplus(doc, "label")
        doc["observables"][key]["value"] *= f

    edit_results(run_copy, plant)
    from mdbench.audit import audit_run

    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = json.loads((tmp_path / "a" / "saeo.json").read_text())
    hits = [x for x in doc["findings"] if x["code"] == "labelled_extra_off_its_formula"]
    assert hits and "D+/(D+ + D−)" in hits[0]["message"], doc["findings"]
    a3 = next(j for j in doc["judgments"] if j["item"] == "A3" and j["observable"] == "transference_number")
    assert a3["rating"] == 0.0


def test_rounded_report_numbers_and_a_recorded_extra_file_leave_every_item(honest, run_copy, bundle, tmp_path):
    """The report gives the case's values rounded to 4 significant digits, and the run records an extra notes
    file as an artifact: neither is a defect (issue 45's honest controls)."""
    obs = json.loads((run_copy / "analysis" / CASE / "results.json").read_text())["observables"]
    rows = [("viscosity", obs["viscosity"]["value"]), ("D_na", obs["self_diffusion"]["D_na"]["value"]),
            ("density", obs["thermodynamics"]["density"]["value"])]
    RNG.shuffle(rows)
    report = run_copy / "report.md"
    text = report.read_text() if report.exists() else "# Report\n"
    report.write_text(text + f"\n## Results ({CASE})\n\n| result | value |\n|---|---|\n"
                      + "".join(f"| {name} | {value:.4g} |\n" for name, value in rows))
    notes = run_copy / "notes" / "lab_notebook.md"
    notes.parent.mkdir()
    notes.write_text("Checked the density series by eye; nothing unusual. " * RNG.randint(1, 5) + "\n")
    rec = RunRecord(run_copy)
    rec.add_artifact("report.md")
    rec.add_artifact("notes/lab_notebook.md")
    _res, got = reanalysed(run_copy, bundle, tmp_path / "a")
    assert not [f for f in got["findings"] if f["code"] == "report_number_differs"], got["findings"]
    assert _items(got) == _items(honest), {i: (got["items"][i]["final"], s) for i, s in _items(honest).items()
                                           if got["items"][i]["final"] != s}
