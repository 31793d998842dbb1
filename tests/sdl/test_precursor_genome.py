"""Precursor Genome loader: the published layout (hand-written fixture and a full-size file with the published
counts), validity from the recorded validity, reviews that never reveal the scored category, strict errors,
and it never unpickles anything."""

from __future__ import annotations

import json
import math
import pickle
import zipfile

import numpy as np
import pytest
from sdl_helpers import PG_FIXTURE
from sdl_pg_layout import COUNTS, N_FAIL, N_SCANS, write_pg_record

from mdbench.errors import InputError
from mdbench.sdl.ledger import Outcome
from mdbench.sdl.policies import visible_labels
from mdbench.sdl.precursor_genome import CATEGORIES, layout_summary, load_precursor_genome
from mdbench.sdl.scoring import joint_log_loss, validate_row


def test_fixture_maps_onto_the_generic_ledger(pg_ledger):
    L = pg_ledger
    assert L.categories == CATEGORIES and L.validity_axis and L.n_outcomes == 5
    assert len(L.experiments) == 12
    by = L.by_id()
    failed = [e for e in L.experiments if not e.outcome.valid]
    assert [e.experiment_id for e in failed] == ["PG_0005", "PG_0203"]
    assert all(e.outcome.category is None for e in failed)
    e = by["PG_0001"]
    assert e.descriptors == {"precursor_1": "Li2CO3", "precursor_2": "MnO2", "target_compound": "Li2CO3-MnO2",
                             "heating_temperature": 700.0, "heating_time": 4.0,
                             "reaction_energy_eV_per_atom": -0.01}
    assert [x.tier for x in e.evidence] == ["execution_record", "xrd_scan", "automated_refinement"]
    assert e.evidence[1].payload_ref == "raw_scans.zip:PG_0001_scan1.xrdml"
    assert "PG_0001" not in json.dumps(e.evidence[1].payload)             # the file name stays evaluator-side
    assert e.evidence[2].payload["phase_weights"] == {"Li2CO3": 0.6, "MnO2": 0.4} and e.evidence[2].supports == ()
    (rev,) = e.reviews
    assert rev.quality_tier == "3" and rev.payload["is_accepted"] and rev.supports == ("category",)
    rejected = by["PG_0004"].reviews[0]
    assert not rejected.payload["is_accepted"] and rejected.supports == ()
    assert L.review_quality_tiers == ("2", "3")
    # no pre-result descriptor and no review leaks the scored category
    for x in L.experiments:
        assert not set(map(str, x.descriptors.values())) & set(CATEGORIES)
        for r in x.reviews:
            assert "reaction_category" not in r.payload and not set(map(str, r.payload.values())) & set(CATEGORIES)


def test_validity_support_comes_from_the_recorded_validity_not_from_a_scan(pg_ledger):
    """Failed samples have scans too; only the execution record supports the validity axis, and it says invalid."""
    failed = pg_ledger.by_id()["PG_0005"]
    scan = next(x for x in failed.evidence if x.tier == "xrd_scan")
    assert scan.payload is not None and scan.supports == ()
    ex = next(x for x in failed.evidence if x.tier == "execution_record")
    assert ex.supports == ("validity",) and ex.payload["valid"] is False
    assert ex.payload["failure_record"] == {"stage": "heating", "description": "crucible spill during heating"}

    def state(reveals):
        return {"initial_context": [], "experiments": [{"experiment_id": "X1", "reveals": reveals}]}

    def reveal(item):
        return {"kind": "evidence", "status": "revealed", "payload": item.payload, "supports": list(item.supports)}

    assert visible_labels(state([reveal(scan)])) == {}                     # a scan proves nothing by itself
    assert visible_labels(state([reveal(ex)])) == {"X1": {"valid": False, "category": None}}
    # a supported reveal that does not state validity leaves it unknown: nothing defaults to valid
    odd = {"kind": "evidence", "status": "revealed", "payload": {"status": "ok"}, "supports": ["validity"]}
    assert visible_labels(state([odd])) == {}


def test_full_size_file_in_the_published_layout(tmp_path):
    """1,035 samples, 46 precursors, the published category counts, 26 physical failures with scans,
    1,351 scans: the loader reads all of it, and the class prior scores the quoted ≈ 1.343 nats."""
    L = load_precursor_genome(write_pg_record(tmp_path / "ledger_precursor_genome.json"))
    s = layout_summary(L)
    assert s["samples"] == 1035 and s["precursors"] == 46
    assert s["categories"] == COUNTS and s["physical_failures"] == N_FAIL and s["scans"] == N_SCANS
    assert all(any(x.tier == "xrd_scan" and x.payload for x in e.evidence) for e in L.experiments)
    n = np.array([COUNTS[c] for c in CATEGORIES])
    row = validate_row({"experiment_id": "X", "p_valid": (1035 - N_FAIL) / 1035,
                        "p_category": dict(zip(CATEGORIES, n / n.sum()))}, CATEGORIES, True)
    loss = np.mean([joint_log_loss(row, e.outcome, CATEGORIES, True) for e in L.experiments])
    assert loss == pytest.approx(1.343, abs=5e-4)
    assert joint_log_loss(row, Outcome(False, None), CATEGORIES, True) == pytest.approx(-math.log(N_FAIL / 1035))


def test_reads_from_zip_and_folder_without_unpickling(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("pickle must never be used")

    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    monkeypatch.setattr(pickle, "Unpickler", boom)
    inner = tmp_path / "refinement_pkls.zip"
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("PG_0001.pkl", b"\x80\x04not really a pickle")
    archive = tmp_path / "precursor_genome.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(PG_FIXTURE, "pg/ledger_precursor_genome.json")
        z.write(inner, "pg/refinement_pkls.zip")
    assert len(load_precursor_genome(archive).experiments) == 12
    folder = tmp_path / "unpacked"
    folder.mkdir()
    (folder / "ledger_precursor_genome.json").write_text(PG_FIXTURE.read_text())
    assert load_precursor_genome(folder).sha256() == load_precursor_genome(PG_FIXTURE).sha256()


@pytest.mark.parametrize("edit,match", [
    (lambda s: s["outcome"].update(reaction_category="exploded"), r"PG_0003\)\.outcome\.reaction_category: 'exploded'"),
    (lambda s: s.pop("outcome"), r"PG_0003\)\.outcome\.reaction_category: required"),
    (lambda s: s.update(precursors=[{"formula": "Li2CO3"}]), r"PG_0003\)\.precursors: must be a list of exactly 2"),
    (lambda s: s["synthesis"].update(heating_temperature="hot"), r"synthesis\.heating_temperature: expected a number"),
    (lambda s: s.update(physical_failure={"stage": "heating"}), r"reaction_category: 'partially_reacted' given for "
                                                                r"a physical failure"),
    (lambda s: s["characterization"]["xrd"].pop("scans"), r"characterization\.xrd\.scans: required list"),
    (lambda s: s["characterization"]["xrd"]["scans"][0]["refinement_cases"][0].pop("phase_weights"),
     r"scans\[0\]\.refinement_cases\[0\]: needs 'phase_weights'"),
    (lambda s: s.update(active_scan_index=4), r"active_scan_index: 4 does not index"),
    (lambda s: s.update(target_compound=7), r"target_compound: expected a string"),
])
def test_strict_errors_name_the_sample_and_key_path(tmp_path, edit, match):
    d = json.loads(PG_FIXTURE.read_text())
    edit(d["samples"][2])
    bad = tmp_path / "ledger_precursor_genome.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(InputError, match=match) as exc:
        load_precursor_genome(bad)
    assert str(bad) in str(exc.value)


def test_refuses_pickles_and_bad_files(tmp_path):
    pkl = tmp_path / "PG_0001.pkl"
    pkl.write_bytes(b"\x80\x04.")
    with pytest.raises(InputError, match="never unpickles"):
        load_precursor_genome(pkl)
    bad = tmp_path / "ledger_precursor_genome.json"
    bad.write_text('{"samples": [')
    with pytest.raises(InputError, match="malformed JSON"):
        load_precursor_genome(bad)
    with pytest.raises(InputError, match="download"):
        load_precursor_genome(tmp_path / "missing.json")


def test_pg_campaign_runs_with_reviews(pg_ledger, pg_assignments):
    from mdbench.sdl.campaign import run_campaign
    from mdbench.sdl.metrics import campaign_metrics
    from mdbench.sdl.policies import make_policy

    asg = next(a for a in pg_assignments if any(pg_ledger.by_id()[c].reviews for c in a.roles["candidates"]))
    run = run_campaign(pg_ledger, asg, lambda: make_policy("uniform", 0), seed=0)
    m = campaign_metrics(run.traces, pg_ledger, asg)
    assert m["branches"]["adaptive"]["loss_pre_nats"] == pytest.approx(math.log(5))
    assert m["branches"]["adaptive"]["reviews_used"] >= 1
    assert len(m["branches"]["adaptive"]["reviews"]) == m["branches"]["adaptive"]["reviews_used"]
    revealed = [r for e in run.traces["adaptive"]["experiments"] for r in e["reveals"] if r["kind"] == "review"]
    assert revealed and all("reaction_category" not in json.dumps(r) for r in revealed)
