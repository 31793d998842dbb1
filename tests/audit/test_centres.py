"""The audit's window re-fits read the molecular centres of mass the canonical reanalysis' one pass kept
(``centres.npz``, :mod:`mdbench.analysis.reduce.centres`) instead of reading the trajectory a second time; they
give the re-fits that pass over the trajectory gives, and the audit without the file is the audit with it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _audit_helpers import saeo

from mdbench.analysis.pipeline import analyze_files
from mdbench.analysis.reduce.centres import CENTRES_FILE, load_centres, save_centres
from mdbench.audit import audit_run
from mdbench.audit.transport import WindowRefit, reduce_for_refit

CASE = "W"
pytestmark = pytest.mark.gromacs


def _prod(run):
    d = run / "cases" / CASE / "prod"
    return d / "prod.tpr", d / "prod.xtc", d / "prod.edr"


def test_kept_centres_give_the_refits_of_a_second_pass(built, tmp_path):
    run, _bundle = built
    tpr, xtc, edr = _prod(run)
    canon = analyze_files(tpr, xtc, edr, tmp_path / "a", figures=False, keep_centres=tmp_path / "a" / CENTRES_FILE)
    centres = load_centres(tmp_path / "a" / CENTRES_FILE)
    assert centres is not None
    kept = WindowRefit.for_case(tpr, xtc, canon, centres)
    again = WindowRefit.for_case(tpr, xtc, canon)
    rd = again.trajectory()
    assert rd is not None and centres.species == list(rd.species) and centres.n_frames == rd.n_frames
    window = (0.1, 0.4)
    for sp in rd.species:
        a, b = kept.diffusion(sp, window), again.diffusion(sp, window)
        assert (a is None) == (b is None), sp
        if a is not None:
            assert math.isclose(a.value, b.value, rel_tol=1e-6), (sp, a.value, b.value)
            np.testing.assert_allclose(a.blocks, b.blocks, rtol=1e-6)
    sa, sb = kept.collective("conductivity/sigma", window), again.collective("conductivity/sigma", window)
    assert (sa is None) == (sb is None)
    if sa is not None:
        assert math.isclose(sa.value, sb.value, rel_tol=1e-6, abs_tol=1e-12)


def test_centres_over_the_size_cap_are_not_written_and_a_bad_file_is_not_read(built, tmp_path):
    run, _bundle = built
    tpr, xtc, _edr = _prod(run)
    rd, err = reduce_for_refit(tpr, xtc)
    assert err is None
    assert not save_centres(rd, tmp_path / "c.npz", max_bytes=1000) and not (tmp_path / "c.npz").exists()
    assert save_centres(rd, tmp_path / "c.npz") and load_centres(tmp_path / "c.npz") is not None
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 not a zip")
    assert load_centres(tmp_path / "bad.npz") is None and load_centres(tmp_path / "missing.npz") is None


def test_the_audit_without_kept_centres_is_the_audit_with_them(built, tmp_path, monkeypatch):
    run, bundle = built
    audit_run(run, bundle, tmp_path / "with", reanalysis=True)
    with_file = saeo(tmp_path / "with")
    assert (tmp_path / "with" / "reanalysis" / CASE / CENTRES_FILE).is_file()
    from mdbench.audit import core

    monkeypatch.setattr(core, "load_centres", lambda path: None)  # every re-fit reads the trajectory itself
    audit_run(run, bundle, tmp_path / "without", reanalysis=True)
    without = saeo(tmp_path / "without")
    assert _verdicts(with_file) == _verdicts(without)


def _verdicts(doc: dict) -> tuple:
    return (sorted((j["item"], j["case"] or "", j["observable"] or "", j["rating"]) for j in doc["judgments"]),
            sorted((f["code"], f.get("case") or "") for f in doc["findings"]), doc["composite"])
