"""events.jsonl: append-only, unique increasing ids across processes, truncated tails reported."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mdbench.record import RecordError, RunRecord, read_jsonl
from mdbench.record.validate import validate_run


def _append_many(run_dir: str, tag: str, n: int) -> None:
    rec = RunRecord(run_dir)
    for i in range(n):
        rec.append_event("concurrency_test", {"writer": tag, "i": i})


def test_two_processes_append_1000_each(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    writers = [ctx.Process(target=_append_many, args=(str(tmp_path), tag, 1000)) for tag in "ab"]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
        assert w.exitcode == 0
    read = read_jsonl(tmp_path / "run_record" / "events.jsonl")
    assert read.malformed == [] and read.truncated_tail_line is None
    ids = [row["id"] for _, row in read.rows]
    assert len(ids) == 2000
    assert ids == sorted(ids) and len(set(ids)) == 2000 and ids == list(range(1, 2001))
    for tag in "ab":
        assert sorted(row["payload"]["i"] for _, row in read.rows if row["payload"]["writer"] == tag) == list(range(1000))
    assert validate_run(tmp_path) == []


def test_event_fields_and_correction(tmp_path):
    rec = RunRecord(tmp_path)
    first = rec.append_event("density_reported", {"density_g_cm3": 1.10})
    fix = rec.append_event("density_reported", {"density_g_cm3": 1.07}, corrects=first["id"])
    assert fix["corrects"] == first["id"] and fix["id"] == first["id"] + 1
    assert first["time_utc"].endswith("Z")
    with pytest.raises(RecordError, match="does not exist"):
        rec.append_event("bad", {}, corrects=99)
    # the original line is never rewritten
    lines = (tmp_path / "run_record" / "events.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["payload"]["density_g_cm3"] == 1.10


WRITER = textwrap.dedent("""
    import os, sys, time
    from mdbench.record import RunRecord
    rec = RunRecord(sys.argv[1])
    for i in range(50):
        rec.append_event("step", {"i": i})
    # a large event killed half-way through its write: emulate the partial write the kernel can leave
    fd = os.open(os.path.join(sys.argv[1], "run_record", "events.jsonl"), os.O_WRONLY | os.O_APPEND)
    os.write(fd, b'{"id": 51, "time_utc": "2026-11-29T00:00:00Z", "type": "step", "payload": {"i": 5')
    print("ready", flush=True)
    time.sleep(60)
""")


def test_sigkill_mid_write_is_reported_not_repaired(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    findings = validate_run(tmp_path)
    assert [str(f) for f in findings] == [
        "run_record/events.jsonl:51: truncated last line (a writer stopped mid-write); record valid up to the line before"
    ]
    rec = RunRecord(tmp_path)
    assert [e["id"] for e in rec.events()] == list(range(1, 51))
    # a resumed writer keeps the bytes, records the truncation, and continues the ids
    raw_before = (tmp_path / "run_record" / "events.jsonl").read_bytes()
    new = rec.append_event("resumed", {})
    raw_after = (tmp_path / "run_record" / "events.jsonl").read_bytes()
    assert raw_after.startswith(raw_before)
    types = [e["type"] for e in rec.events()]
    assert types[-2:] == ["record_tail_truncated", "resumed"] and new["id"] == 52
    messages = [str(f) for f in validate_run(tmp_path)]
    assert any("events.jsonl:51: not valid JSON" in m for m in messages)


def test_sigkill_during_appends_keeps_record_valid(tmp_path):
    code = ("import sys\nfrom mdbench.record import RunRecord\nrec = RunRecord(sys.argv[1])\n"
            "print('go', flush=True)\nwhile True:\n    rec.append_event('tick', {'x': 'y' * 2000})\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "go"
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    read = read_jsonl(tmp_path / "run_record" / "events.jsonl")
    assert len(read.rows) > 0 and read.malformed == []
    findings = validate_run(tmp_path)
    # either the kill fell between writes (no finding) or inside one (exactly the truncated tail)
    assert all("truncated last line" in str(f) for f in findings) and len(findings) <= 1
    assert [row["id"] for _, row in read.rows] == list(range(1, len(read.rows) + 1))
