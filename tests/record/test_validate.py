"""`mdbench record validate`: schemas and cross-references, findings as file:line: message."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from mdbench.record import RunRecord
from mdbench.record.validate import validate_run


def make_valid(run_dir):
    rec = RunRecord(run_dir)
    a = rec.reserve("DE", planned_steps=1000, dt_ps=0.002, kind="production", stage="40_production")
    (run_dir / "cases").mkdir()
    (run_dir / "cases" / "prod.log").write_text("log\n")
    event = rec.append_event("mdrun_finished", {"attempt_id": a})
    rec.add_artifact("cases/prod.log", producer_event=event["id"])
    rec.complete(a, completed_steps=1000, status="completed", artifacts={"log": "cases/prod.log"})
    reg = rec.register("guard", {"guard_ps": 10.0})
    rec.register("guard", {"guard_ps": 20.0}, revises=reg, evidence={"why": "drift"})
    rec.set_stage_state("DE", "40_production", "valid", "gates passed")
    rec.set_observable_state("DE", "density", "C", "block spread small", registration_id=reg)
    rec.write_terminal("partial", final_stages={"DE": {"40_production": "stage_states.json#/DE/40_production"}},
                       observables={"DE": {"density": "observables.json#/DE/density"}}, unresolved=[])
    return rec


def test_valid_record_has_no_findings(tmp_path):
    make_valid(tmp_path)
    assert validate_run(tmp_path) == []


def test_cli_prints_file_line_message(tmp_path):
    make_valid(tmp_path)
    events = tmp_path / "run_record" / "events.jsonl"
    with open(events, "a") as handle:
        handle.write('{"id": 3, "time_utc": "2026-11-29T00:00:00Z", "type": "x", "payload": {}}\n')
        handle.write('{"id": 400, "time_utc": "yesterday", "type": "x", "payload": {}, "corrects": 399}\n')
    n = len(events.read_text().splitlines())
    out = subprocess.run([sys.executable, "-m", "mdbench.cli", "record", "validate", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert f"run_record/events.jsonl:{n - 1}: id 3 does not increase" in out.stdout
    assert f"run_record/events.jsonl:{n}: schema: time_utc" in out.stdout
    assert f"run_record/events.jsonl:{n}: corrects event 399" in out.stdout


def test_cross_references(tmp_path):
    make_valid(tmp_path)
    (tmp_path / "cases" / "prod.log").write_text("tampered\n")
    with open(tmp_path / "run_record" / "attempts.jsonl", "a") as handle:
        handle.write(json.dumps({"id": "DE-0009", "case": "DE", "stage": "s", "kind": "k", "parent": "DE-0042",
                                 "planned_steps": 1, "completed_steps": 0, "dt_ps": 0.002, "ns_charged": 0.0,
                                 "status": "reserved"}) + "\n")
    with open(tmp_path / "run_record" / "events.jsonl", "a") as handle:
        handle.write(json.dumps({"id": 999, "time_utc": "2026-11-29T00:00:00Z", "type": "x",
                                 "payload": {"attempt_id": "DE-0777", "value": "nan"}}) + "\n")
    messages = [str(f) for f in validate_run(tmp_path)]
    assert any("prod.log: sha256 mismatch" in m for m in messages)
    assert any("names parent DE-0042" in m for m in messages)
    assert any("names attempt 'DE-0777'" in m for m in messages)
    assert any("non-finite value at /payload/value" in m for m in messages)


def test_symlink_out_of_run_dir_not_followed(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    make_valid(run)
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    os.symlink(secret, run / "cases" / "leak.txt")
    inventory = json.loads((run / "run_record" / "artifacts.json").read_text())
    inventory["cases/leak.txt"] = {"sha256": "0" * 64, "bytes": 7}
    inventory["../secret.txt"] = {"sha256": "0" * 64, "bytes": 7}
    (run / "run_record" / "artifacts.json").write_text(json.dumps(inventory))
    messages = [str(f) for f in validate_run(run)]
    assert any("cases/leak.txt: path leaves the run directory" in m for m in messages)
    assert any("../secret.txt: path leaves the run directory" in m for m in messages)


def test_malformed_snapshot_named_with_line(tmp_path):
    make_valid(tmp_path)
    (tmp_path / "run_record" / "observables.json").write_text('{\n  "DE": {\n    "density": {"state": "X",\n')
    messages = [str(f) for f in validate_run(tmp_path)]
    assert any(m.startswith("run_record/observables.json:4: not valid JSON") for m in messages)


def test_missing_record(tmp_path):
    assert [str(f) for f in validate_run(tmp_path)] == ["run_record:0: missing: no run_record/ directory in the run directory"]


def test_a_segment_file_changed_under_an_open_attempt_is_a_warning_naming_it(tmp_path):
    """An extension killed while mdrun appended to the segment's recorded files: its attempt is still open, so
    the changed hash is expected (the rerun closes the attempt and records the files again) — a warning. The
    same change with every attempt closed is an error, and so is a changed file of another segment."""
    rec = RunRecord(tmp_path)
    seg = tmp_path / "cases" / "DE" / "prod"
    seg.mkdir(parents=True)
    for name in ("prod.xtc", "other.xtc"):
        (seg / name).write_bytes(b"frames")
    first = rec.reserve("DE", planned_steps=10, dt_ps=0.002, kind="production", stage="40_production",
                        segment="cases/DE/prod/prod", start_step=0, target_step=10)
    event = rec.append_event("mdrun_finished", {"attempt_id": first})
    for name in ("prod.xtc", "other.xtc"):
        rec.add_artifact(f"cases/DE/prod/{name}", producer_event=event["id"])
    rec.complete(first, completed_steps=10, status="completed", end_step=10)
    for name in ("prod.xtc", "other.xtc"):
        (seg / name).write_bytes(b"frames and more")  # mdrun appending
    closed = [str(f) for f in validate_run(tmp_path) if f.severity == "error"]
    assert any("prod.xtc: sha256 mismatch" in m for m in closed) and any("other.xtc" in m for m in closed)
    extension = rec.reserve("DE", planned_steps=10, dt_ps=0.002, kind="production", stage="40_production",
                            parent=first, relation="extension", segment="cases/DE/prod/prod", start_step=10,
                            target_step=20)
    findings = validate_run(tmp_path)
    errors = [str(f) for f in findings if f.severity == "error"]
    warnings = [str(f) for f in findings if f.severity == "warning"]
    assert [m for m in errors if "prod.xtc" in m and "other" not in m] == []
    assert any("other.xtc: sha256 mismatch" in m for m in errors)  # not an output of the open segment
    assert any("prod.xtc" in m and extension in m and "is open" in m for m in warnings), warnings
