"""Precursor Genome loader on a hand-written format fixture; it never unpickles anything."""

from __future__ import annotations

import json
import math
import pickle
import zipfile
from pathlib import Path

import pytest

from mdbench.errors import InputError
from mdbench.sdl.precursor_genome import CATEGORIES, load_precursor_genome

PG_FIXTURE = Path(__file__).parent / "data" / "ledger_precursor_genome.json"


def test_fixture_maps_onto_the_generic_ledger(pg_ledger):
    L = pg_ledger
    assert L.categories == CATEGORIES and L.validity_axis and L.n_outcomes == 5
    assert len(L.experiments) == 12
    by = L.by_id()
    failed = [e for e in L.experiments if not e.outcome.valid]
    assert [e.experiment_id for e in failed] == ["PG_0005", "PG_0203"]
    assert all(e.outcome.category is None for e in failed)
    # a failed sample has one *missing* scan carrying the recorded reason; missing stays missing
    (scan,) = failed[0].evidence
    assert scan.payload is None and scan.missing_reason == "crucible spill during heating"
    e = by["PG_0001"]
    assert e.descriptors == {"precursor_1": "Li2CO3", "precursor_2": "MnO2", "target": "Li2CO3-MnO2",
                             "heating_temperature_C": 700.0, "heating_time_h": 4.0,
                             "reaction_energy_eV_per_atom": -0.01}
    tiers = [x.tier for x in e.evidence]
    assert tiers == ["xrd_scan", "automated_refinement"]
    assert e.evidence[0].payload_ref == "raw_scans.zip:PG_0001_scan1.xrdml"
    assert e.evidence[1].payload["phase_weights"] == {"Li2CO3": 0.6, "MnO2": 0.4} and e.evidence[1].supports == ()
    (rev,) = e.reviews
    assert rev.quality_tier == "3" and rev.payload["is_accepted"] and rev.supports == ("category",)
    assert rev.payload["reaction_category"] == "completely_reacted"
    rejected = by["PG_0004"].reviews[0]
    assert not rejected.payload["is_accepted"] and "reaction_category" not in rejected.payload
    assert L.review_quality_tiers == ("2", "3")
    # no pre-result descriptor leaks the outcome
    for x in L.experiments:
        assert not set(map(str, x.descriptors.values())) & set(CATEGORIES)


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


def test_refuses_pickles_and_names_bad_samples(tmp_path):
    pkl = tmp_path / "PG_0001.pkl"
    pkl.write_bytes(b"\x80\x04.")
    with pytest.raises(InputError, match="never unpickles"):
        load_precursor_genome(pkl)
    d = json.loads(PG_FIXTURE.read_text())
    d["samples"][2]["outcome"]["reaction_category"] = "exploded"
    bad = tmp_path / "ledger_precursor_genome.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(InputError, match=r"PG_0003.*'exploded'") as exc:
        load_precursor_genome(bad)
    assert str(bad) in str(exc.value)
    bad.write_text('{"samples": [')
    with pytest.raises(InputError, match="malformed JSON"):
        load_precursor_genome(bad)
    with pytest.raises(InputError, match="download"):
        load_precursor_genome(tmp_path / "missing.json")


def test_pg_campaign_runs_with_reviews(pg_ledger, pg_assignments):
    from mdbench.sdl.campaign import run_campaign
    from mdbench.sdl.metrics import campaign_metrics
    from mdbench.sdl.policies import make_policy

    asg = pg_assignments[0]
    run = run_campaign(pg_ledger, asg, lambda: make_policy("uniform", 0), seed=0)
    m = campaign_metrics(run.traces, pg_ledger, asg)
    assert m["branches"]["adaptive"]["loss_pre_nats"] == pytest.approx(math.log(5))
    assert m["branches"]["adaptive"]["reviews_used"] >= 1
    assert len(m["branches"]["adaptive"]["reviews"]) == m["branches"]["adaptive"]["reviews_used"]
