"""Bounded, read-only access to hostile run directories."""

from __future__ import annotations

import os

from mdbench.audit.safeio import RunFS


def test_malformed_jsonl_reports_line_numbers(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": 1}\n{"id": 2,\n\n[1, 2]\n{"id": NaN}\n')
    fs = RunFS(tmp_path)
    rows = fs.read_jsonl("a.jsonl")
    assert [n for n, _ in rows] == [1, 5]
    codes = {(f.code, f.line) for f in fs.findings}
    assert ("malformed_jsonl", 2) in codes and ("malformed_jsonl", 4) in codes and ("non_finite", 5) in codes


def test_malformed_json_line_and_nonfinite(tmp_path):
    (tmp_path / "x.json").write_text('{\n "a": 1,\n "b": \n}\n')
    (tmp_path / "y.json").write_text('{"v": Infinity, "w": [1, -Infinity]}')
    fs = RunFS(tmp_path)
    assert fs.read_json("x.json") is None
    assert any(f.code == "malformed_json" and f.line == 4 for f in fs.findings)
    assert fs.read_json("y.json") is not None
    assert sorted(f.message for f in fs.findings if f.code == "non_finite") == [
        "non-finite number at v", "non-finite number at w[1]"]


def test_symlink_leaving_run_is_reported_not_followed(tmp_path):
    outside = tmp_path / "secret.json"
    outside.write_text('{"secret": 1}')
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(outside, run / "results.json")
    os.symlink(run / "results.json", run / "inner.json")  # inside link to an escaping link
    fs = RunFS(run)
    fs.scan_symlinks()
    assert fs.read_json("results.json") is None
    assert fs.read_json("inner.json") is None
    assert fs.read_text("../secret.json") is None
    assert {f.code for f in fs.findings} >= {"symlink_escape", "path_outside_run"}


def test_huge_file_refused_with_finding(tmp_path):
    (tmp_path / "big.json").write_text("[" + "1," * 5000 + "1]")
    fs = RunFS(tmp_path, max_parse_bytes=1000)
    assert fs.read_json("big.json") is None
    assert fs.findings[0].code == "file_too_large"
    assert len(fs.sha256("big.json")) == 64  # checksums are streamed, not refused


def test_checksums_stop_at_the_audit_total_and_say_so(tmp_path, monkeypatch):
    """Past ``MAX_HASH_TOTAL_BYTES`` of checksummed files (logical sizes), an artifact gets a
    ``hash_budget_exhausted`` finding instead of a hash; the files before it keep theirs."""
    from mdbench.audit import safeio

    monkeypatch.setattr(safeio, "MAX_HASH_TOTAL_BYTES", 1000)
    (tmp_path / "a.dat").write_bytes(b"x" * 600)
    with open(tmp_path / "b.dat", "wb") as fh:  # sparse: as big as it says
        fh.truncate(600)
    fs = RunFS(tmp_path)
    assert fs.sha256("a.dat") is not None
    assert fs.sha256("b.dat") is None
    assert [(f.code, f.path) for f in fs.findings] == [("hash_budget_exhausted", "b.dat")]
