"""Records that survive kills: atomic writes, files set aside with the inventory kept true, torn ledger lines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from mdbench.record import RunRecord, RecordError, sha256_file
from mdbench.record.atomic import atomic_write_text
from mdbench.record.validate import validate_run


def _errors(run) -> list[str]:
    return [str(f) for f in validate_run(run) if f.severity == "error"]


def test_atomic_write_replaces_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out" / "saeo.json"
    atomic_write_text(target, "first\n")
    atomic_write_text(target, "second\n")
    assert target.read_text() == "second\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["saeo.json"]


def test_atomic_write_killed_mid_write_keeps_the_previous_version(tmp_path):
    """SIGKILL while the new bytes are being written: the reader still finds the old file, whole."""
    target = tmp_path / "report.html"
    target.write_text("<html>old</html>\n")
    writer = textwrap.dedent(f"""
        import sys, time
        from mdbench.record.atomic import atomic_path
        with atomic_path({str(target)!r}) as tmp:
            with open(tmp, "w") as fh:
                fh.write("<html>" + "x" * 100000)
                fh.flush()
                print("writing", flush=True)
                time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)  # the writer this test started, by its pid
    proc.wait(10)
    assert target.read_text() == "<html>old</html>\n"
    strays = [p.name for p in tmp_path.iterdir() if p.name != "report.html"]
    assert len(strays) == 1 and strays[0].startswith(".report.html.") and strays[0].endswith(".partial")


def test_atomic_write_failure_leaves_target_untouched(tmp_path):
    from mdbench.record.atomic import atomic_path

    target = tmp_path / "a.json"
    target.write_text("keep")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("writer failed")
    assert target.read_text() == "keep" and [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_set_aside_repoints_listed_files_and_records_unlisted_ones(tmp_path):
    rec = RunRecord(tmp_path)
    seg = tmp_path / "cases" / "W" / "prod"
    seg.mkdir(parents=True)
    (seg / "prod_start.gro").write_text("listed\n")
    (seg / "prod.log").write_text("never listed\n")
    digest = rec.add_artifact(seg / "prod_start.gro")
    producer = rec.artifacts()["cases/W/prod/prod_start.gro"]["producer_event"]
    event = rec.set_aside([seg / "prod_start.gro", seg / "prod.log", seg / "absent.xtc"], seg / "discarded" / "p_01",
                          "restart without a checkpoint", case="W")
    inv = rec.artifacts()
    assert "cases/W/prod/prod_start.gro" not in inv
    moved = inv["cases/W/prod/discarded/p_01/prod_start.gro"]
    assert moved["sha256"] == digest and moved["producer_event"] == producer
    assert moved["moved_from"] == "cases/W/prod/prod_start.gro"
    assert inv["cases/W/prod/discarded/p_01/prod.log"]["sha256"] == sha256_file(seg / "discarded/p_01/prod.log")
    assert [(m["from"], m["listed"]) for m in event["payload"]["moved"]] == [
        ("cases/W/prod/prod_start.gro", True), ("cases/W/prod/prod.log", False)]
    assert event["payload"]["case"] == "W" and _errors(tmp_path) == []


def test_set_aside_moves_a_folder_and_never_overwrites_earlier_evidence(tmp_path):
    rec = RunRecord(tmp_path)
    case = tmp_path / "cases" / "W"
    for round_ in (1, 2):
        (case / "setup").mkdir(parents=True)
        (case / "setup" / "topol.top").write_text(f"round {round_}\n")
        rec.add_artifact(case / "setup" / "topol.top")
        rec.set_aside([case / "setup"], case / "discarded", "interrupted setup")
    inv = rec.artifacts()
    assert (case / "discarded" / "setup" / "topol.top").read_text() == "round 1\n"
    assert (case / "discarded" / "setup.1" / "topol.top").read_text() == "round 2\n"
    assert {"cases/W/discarded/setup/topol.top", "cases/W/discarded/setup.1/topol.top"} <= set(inv)
    assert not any(k.startswith("cases/W/setup/") for k in inv) and _errors(tmp_path) == []


def test_set_aside_refuses_a_folder_outside_the_run(tmp_path):
    rec = RunRecord(tmp_path / "run")
    (tmp_path / "run" / "f.txt").write_text("x")
    with pytest.raises(RecordError, match="outside the run directory"):
        rec.set_aside([tmp_path / "run" / "f.txt"], tmp_path / "elsewhere", "no")
    assert (tmp_path / "run" / "f.txt").is_file()


def test_torn_ledger_line_is_ended_reported_and_never_fused_with_the_next_row(tmp_path):
    """A writer killed mid-line in attempts.jsonl: the next reservation starts a fresh line; validate warns."""
    rec = RunRecord(tmp_path)
    first = rec.reserve("W", planned_steps=100, dt_ps=0.002, kind="nvt", stage="equilibration")
    with open(tmp_path / "run_record" / "attempts.jsonl", "ab") as fh:
        fh.write(b'{"id": "W-0002", "case": "W", "status": "reser')  # the torn bytes a SIGKILL can leave
    assert any("truncated last line" in m for m in _errors(tmp_path))
    second = rec.reserve("W", planned_steps=100, dt_ps=0.002, kind="nvt", stage="equilibration")
    rec.complete(second, completed_steps=100, status="completed")
    assert [a["id"] for a in rec.attempts()] == [first, second]
    torn = [e for e in rec.events() if e["type"] == "record_tail_truncated"]
    assert len(torn) == 1 and torn[0]["payload"]["file"] == "attempts.jsonl" and torn[0]["payload"]["line"] == 2
    findings = validate_run(tmp_path)
    assert _errors(tmp_path) == []
    assert [f.severity for f in findings if "attempts.jsonl:2" in str(f)] == ["warning"]
