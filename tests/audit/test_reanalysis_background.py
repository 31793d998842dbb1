"""The canonical reanalysis in a child process beside the audit's checks (issue 18's speed target) gives the
audit the serial path gives; a child that dies is replaced by the serial path; Sim4's frame-header reading
(with a reanalysis) judges a trajectory as decoding every frame does."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from _audit_helpers import judgment, saeo

from mdbench.audit import audit_run, reanalysis
from mdbench.audit.runread import load_run
from mdbench.audit.safeio import RunFS
from mdbench.audit.simulation import check_production
from mdbench.trajcheck import scan_xtc

CASE = "W"
pytestmark = pytest.mark.gromacs


def _verdicts(doc: dict) -> tuple:
    """What an audit concludes, without its timings: every judgment, observable state and finding."""
    judg = sorted((j["item"], j["case"] or "", j["observable"] or "", j["rating"], j["reason"])
                  for j in doc["judgments"])
    obs = sorted((o["case"], o["observable"], o["state"]) for o in doc["observables"])
    finds = sorted((f["code"], f.get("path") or "", f.get("case") or "", f.get("count", 1)) for f in doc["findings"])
    return judg, obs, finds, doc["composite"]


def test_child_process_reanalysis_gives_the_serial_audit(built, tmp_path, monkeypatch):
    run, bundle = built
    monkeypatch.setenv(reanalysis.SERIAL_ENV, "1")
    serial = audit_run(run, bundle, tmp_path / "serial", reanalysis=True)
    monkeypatch.delenv(reanalysis.SERIAL_ENV)
    started = []
    real_start = reanalysis.Reanalyses._start_child

    def start(self, *args):
        started.append(os.getpid())
        real_start(self, *args)

    monkeypatch.setattr(reanalysis, "_can_fork", lambda: True)
    monkeypatch.setattr(reanalysis.Reanalyses, "_start_child", start)
    child = audit_run(run, bundle, tmp_path / "child", reanalysis=True)
    assert started == [os.getpid()]                                   # the child path ran
    assert serial.reanalysis["cases"][CASE]["status"] == child.reanalysis["cases"][CASE]["status"] == "ok"
    assert _verdicts(saeo(tmp_path / "serial")) == _verdicts(saeo(tmp_path / "child"))
    assert (tmp_path / "child/reanalysis" / CASE / "results.json").is_file()


def test_a_child_that_dies_is_replaced_by_the_serial_reanalysis(built, tmp_path, monkeypatch):
    run, bundle = built
    monkeypatch.setenv(reanalysis.SERIAL_ENV, "1")
    audit_run(run, bundle, tmp_path / "serial", reanalysis=True)
    monkeypatch.delenv(reanalysis.SERIAL_ENV)
    parent = os.getpid()
    real = reanalysis._reanalyse

    def dies_in_the_child(*args, **kwargs):
        if os.getpid() != parent:
            os._exit(3)                                               # killed mid-analysis, no line written
        return real(*args, **kwargs)

    monkeypatch.setattr(reanalysis, "_can_fork", lambda: True)
    monkeypatch.setattr(reanalysis, "_reanalyse", dies_in_the_child)
    res = audit_run(run, bundle, tmp_path / "child", reanalysis=True)
    assert res.reanalysis["cases"][CASE]["status"] == "ok"
    assert _verdicts(saeo(tmp_path / "serial")) == _verdicts(saeo(tmp_path / "child"))


def test_reanalyses_close_kills_a_child_still_working(built, tmp_path, monkeypatch):
    """An interrupted audit leaves no analysing child behind."""
    run, _bundle = built
    monkeypatch.setattr(reanalysis, "_reanalyse", lambda *a, **k: __import__("time").sleep(60))
    jobs = {CASE: (("cases/W/prod/prod.tpr", "cases/W/prod/prod.xtc", "cases/W/prod/prod.edr"), None)}
    r = reanalysis.Reanalyses(RunFS(run), jobs, tmp_path, background=True)
    pid = r._pid
    assert pid is not None
    r.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)                                   # reaped, not a zombie


def _poison_precision(xtc: Path, frame: int) -> None:
    """Write NaN into the coordinate precision of one frame's header (the frame still decompresses)."""
    data = bytearray(xtc.read_bytes())
    offset = 0
    for _ in range(frame):
        (n_bytes,) = struct.unpack_from(">i", data, offset + 88)
        offset += 92 + 4 * ((n_bytes + 3) // 4)
    struct.pack_into(">f", data, offset + 56, float("nan"))
    xtc.write_bytes(bytes(data))


def test_frame_headers_and_decoded_frames_give_one_sim4_verdict(run_copy, bundle, tmp_path):
    fs = RunFS(run_copy)
    run = load_run(fs, bundle_cases=[CASE])
    honest = [check_production(run, CASE, decode=d) for d in (True, False)]
    assert [j.rating for j, _pf in honest] == [1.0, 1.0]
    (a, pa), (b, pb) = honest
    assert (pa.n_frames, pa.t_first_ps, pa.t_last_ps) == (pb.n_frames, pb.t_first_ps, pb.t_last_ps)
    assert pa.extra == pb.extra
    xtc = run_copy / "cases/W/prod/prod.xtc"
    info = scan_xtc(xtc)
    assert info.bad_precision_frames == 0 and info.non_finite_box_frames == 0 and info.first_box_nm is not None
    frame = info.n_frames // 2
    _poison_precision(xtc, frame)
    assert scan_xtc(xtc).bad_precision_frames == 1
    run = load_run(RunFS(run_copy), bundle_cases=[CASE])
    verdicts = [check_production(run, CASE, decode=d)[0] for d in (True, False)]
    assert [j.rating for j in verdicts] == [0.0, 0.0], [j.reason for j in verdicts]
    assert all("non-finite" in j.reason for j in verdicts)
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=True)
    assert judgment(saeo(tmp_path / "a"), "Sim4", CASE)["rating"] == 0
    assert {o.state for o in res.observables} == {"invalid_upstream"}


def test_no_fork_beside_a_foreign_thread_or_when_disabled(monkeypatch):
    import threading

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    monkeypatch.delenv(reanalysis.SERIAL_ENV, raising=False)
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="someone-else")
    worker.start()
    try:
        assert not reanalysis._can_fork()                             # its locks could be copied held
    finally:
        stop.set()
        worker.join()
    monkeypatch.setenv(reanalysis.SERIAL_ENV, "1")
    assert not reanalysis._can_fork()
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0})
    monkeypatch.delenv(reanalysis.SERIAL_ENV)
    assert not reanalysis._can_fork()                                 # one CPU: nothing to run beside


def test_hashes_taken_beside_the_child_report_what_the_serial_audit_reports(run_copy, bundle, tmp_path,
                                                                            monkeypatch):
    """Inventory entries that escape, climb out or are missing give the same E2 and findings, counted once,
    when the audit checksums the inventory while its reanalysis runs."""
    import json

    outside = tmp_path / "outside.txt"
    outside.write_text("not part of the run")
    os.symlink(outside, run_copy / "cases/W/prod/extra.log")
    inv_path = run_copy / "run_record/artifacts.json"
    inv = json.loads(inv_path.read_text())
    some = next(iter(inv.values()))
    for rel in ("cases/W/prod/extra.log", "../outside.txt", "cases/W/prod/gone.trr"):
        inv[rel] = dict(some)
    inv_path.write_text(json.dumps(inv, indent=2))
    monkeypatch.setenv(reanalysis.SERIAL_ENV, "1")
    audit_run(run_copy, bundle, tmp_path / "serial", reanalysis=True)
    monkeypatch.delenv(reanalysis.SERIAL_ENV)
    monkeypatch.setattr(reanalysis, "_can_fork", lambda: True)
    res = audit_run(run_copy, bundle, tmp_path / "child", reanalysis=True)
    serial, child = saeo(tmp_path / "serial"), saeo(tmp_path / "child")
    assert _verdicts(serial) == _verdicts(child)
    assert child["items"]["E2"]["final"] == 0
    escapes = [f for f in res.findings if f.code == "symlink_escape" and f.path == "cases/W/prod/extra.log"]
    assert len(escapes) == 1 and escapes[0].count == 1
    assert [f.count for f in res.findings if f.code == "path_outside_run"] == [1]


def test_a_failed_reanalysis_makes_sim4_decode_and_report_once(run_copy, bundle, tmp_path, monkeypatch):
    """A trajectory cut mid-frame whose reanalysis fails: Sim4 decodes the frames itself, and what it notes
    about the file is one finding, not one per pass."""
    xtc = run_copy / "cases/W/prod/prod.xtc"
    data = xtc.read_bytes()
    xtc.write_bytes(data[:-100])                                      # the last frame torn: one frame less
    real = reanalysis._reanalyse

    def fails(run_fs, case, files, out, guard, findings, *registered):
        findings.append(reanalysis.Finding("reanalysis_failed", "planted", item="A3", case=case))
        return None, {"case": case, "status": "failed", "error": "planted"}, False

    monkeypatch.setenv(reanalysis.SERIAL_ENV, "1")
    monkeypatch.setattr(reanalysis, "_reanalyse", fails)
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=True)
    monkeypatch.setattr(reanalysis, "_reanalyse", real)
    cut = [f for f in res.findings if f.code == "trajectory_truncated"]
    assert len(cut) == 1 and cut[0].count == 1
    assert res.reanalysis["cases"][CASE]["status"] == "failed"
    assert judgment(saeo(tmp_path / "a"), "Sim4", CASE)["rating"] == 0.5   # partial: cut, frames decoded


def test_the_child_ends_with_a_killed_audit(built, tmp_path):
    """An audit killed while its child analyses leaves no analysis running (the child dies with its parent)."""
    import signal
    import subprocess
    import sys
    import time

    run, _bundle = built
    pid_file = tmp_path / "child.pid"
    script = f"""
import os, time, pathlib
from mdbench.audit import reanalysis
from mdbench.audit.safeio import RunFS
def slow(*a, **k):
    pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))
    time.sleep(120)
reanalysis._reanalyse = slow
jobs = {{"W": (("cases/W/prod/prod.tpr", "cases/W/prod/prod.xtc", "cases/W/prod/prod.edr"), None)}}
r = reanalysis.Reanalyses(RunFS({str(run)!r}), jobs, __import__("pathlib").Path({str(tmp_path)!r}), background=True)
time.sleep(120)
"""
    audit = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    audit.send_signal(signal.SIGKILL)
    audit.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] if \
            Path(f"/proc/{child}/stat").exists() else "X"
        if state in ("Z", "X"):
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the reanalysis child outlived its killed parent")


# ------------------------------------------------------------------ the child's speculative start (issue 37)
W_FILES = ("cases/W/prod/prod.tpr", "cases/W/prod/prod.xtc", "cases/W/prod/prod.edr")


def test_a_child_working_for_a_case_the_audit_leaves_out_is_replaced(built, tmp_path, monkeypatch):
    """The child starts before Sim4 on every case with production files. A case Sim4 then excludes (here "X",
    queued first and slow) would hold up the others: ``restrict`` replaces the child by one with the remaining
    job, whose result is the serial one."""
    import time

    run, _bundle = built
    monkeypatch.setattr(reanalysis, "_can_fork", lambda: True)

    def slow_x():                                                     # only ever runs in the (first) child
        part = reanalysis.case_dir(tmp_path / "child", "X")
        part.mkdir(parents=True)
        (part / "results.json.part").write_text("{")                  # an analysis cut short leaves this
        time.sleep(120)
        return (W_FILES, None)
    serial = reanalysis.Reanalyses(RunFS(run), {CASE: (W_FILES, None)}, tmp_path / "serial", background=False)
    want = serial.result(CASE)
    t0 = time.monotonic()
    r = reanalysis.Reanalyses(RunFS(run), {"X": slow_x, CASE: lambda: (W_FILES, None)}, tmp_path / "child",
                              background=True)
    first = r._pid
    while not (tmp_path / "child/reanalysis/.claims/1.0").exists():  # the child took X
        time.sleep(0.01)
    r.restrict({CASE: (W_FILES, None)})
    assert r._pid is not None and r._pid != first                     # replaced, not waited for
    assert not reanalysis.case_dir(tmp_path / "child", "X").exists()  # nothing kept of a case left out
    got = r.result(CASE)
    r.close()
    assert time.monotonic() - t0 < 60
    assert got[1]["status"] == want[1]["status"] == "ok"
    assert json.dumps(got[0]["observables"], sort_keys=True) == json.dumps(want[0]["observables"], sort_keys=True)
    with pytest.raises(ChildProcessError):
        os.waitpid(first, os.WNOHANG)                                 # the first child was reaped


def test_the_parent_takes_cases_from_the_back_of_the_childs_queue_while_it_waits(built, tmp_path, monkeypatch):
    """Two jobs: while the child analyses the first, the parent (asked for the first) analyses the last one
    itself; each case is analysed once, by one process, and both results are the serial ones."""
    import time

    run, _bundle = built
    serial = reanalysis.Reanalyses(RunFS(run), {CASE: (W_FILES, None)}, tmp_path / "serial", background=False)
    want = serial.result(CASE)[0]["observables"]
    parent, where = os.getpid(), tmp_path / "where"
    where.mkdir()
    real = reanalysis._reanalyse

    def tagged(run_fs, case, *a, **k):
        (where / f"{case}.{'parent' if os.getpid() == parent else 'child'}").touch()
        return real(run_fs, case, *a, **k)
    monkeypatch.setattr(reanalysis, "_reanalyse", tagged)
    r = reanalysis.Reanalyses(RunFS(run), {"A": (W_FILES, None), CASE: (W_FILES, None)}, tmp_path / "shared",
                              background=True)
    t0 = time.monotonic()
    while not (tmp_path / "shared/reanalysis/.claims/1.0").exists() and time.monotonic() - t0 < 30:
        time.sleep(0.005)                                             # the child took A
    got_a = r.result("A")
    got_w = r.result(CASE)
    r.close()
    assert sorted(p.name for p in where.iterdir()) == ["A.child", f"{CASE}.parent"]
    assert not (tmp_path / "shared/reanalysis/.claims").exists()       # the audit folder keeps results only
    for got in (got_a, got_w):
        assert got[1]["status"] == "ok"
        assert json.dumps(got[0]["observables"], sort_keys=True) == json.dumps(want, sort_keys=True)


def test_a_child_result_for_another_job_than_the_audits_is_not_taken(built, tmp_path, monkeypatch):
    """Should the child form another job than the parent after Sim4 (other files, guard or definitions), its
    result is set aside and the case analysed again with the parent's job: the audit is the serial one."""
    run, bundle = built
    monkeypatch.setenv(reanalysis.SERIAL_ENV, "1")
    audit_run(run, bundle, tmp_path / "serial", reanalysis=True)
    monkeypatch.delenv(reanalysis.SERIAL_ENV)
    from mdbench.audit import core
    real = core._reanalysis_job
    monkeypatch.setattr(core, "_reanalysis_job", lambda r, c: (lambda j: (j[0], 1.0, *j[2:]))(real(r, c)))
    monkeypatch.setattr(reanalysis, "_can_fork", lambda: True)
    calls = []
    real_re = reanalysis._reanalyse
    parent = os.getpid()

    def counted(run_fs, case, files, out, guard, *a, **k):
        if os.getpid() == parent:
            calls.append(guard)
        return real_re(run_fs, case, files, out, guard, *a, **k)
    monkeypatch.setattr(reanalysis, "_reanalyse", counted)
    audit_run(run, bundle, tmp_path / "child", reanalysis=True)
    assert calls and calls[0] != 1.0                                  # analysed again here, at the parent's guard
    assert _verdicts(saeo(tmp_path / "serial")) == _verdicts(saeo(tmp_path / "child"))


def test_a_fifo_in_place_of_the_trajectory_blocks_neither_the_child_nor_the_audit(run_copy, bundle, tmp_path):
    """The child reads production files before Sim4 has judged them: a FIFO (or any non-regular file) is not
    opened there (and a child blocked on one would be replaced once Sim4 leaves the case out); the audit ends
    with Sim4 = 0 (the case invalid upstream) instead of hanging."""
    import subprocess
    import sys

    xtc = run_copy / "cases/W/prod/prod.xtc"
    xtc.unlink()
    os.mkfifo(xtc)
    script = (f"from mdbench.audit import audit_run, reanalysis; reanalysis._can_fork = lambda: True; "
              f"audit_run({str(run_copy)!r}, {str(bundle)!r}, {str(tmp_path / 'a')!r}, reanalysis=True)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = saeo(tmp_path / "a")
    assert judgment(doc, "Sim4", CASE)["rating"] == 0
    assert {o["state"] for o in doc["observables"] if o["case"] == CASE} == {"invalid_upstream"}


def test_the_record_validator_run_by_the_child_reports_what_the_serial_audit_reports(run_copy, bundle, tmp_path,
                                                                                     monkeypatch):
    """The record validator is the child's task once its cases are done: a record with a line that does not
    parse and a row its schema refuses gives the same E3 and findings as the serial audit, and the child (not
    the parent) validated it; a child that dies while validating leaves it to the parent, with the same
    verdicts."""
    from mdbench.audit import core

    with open(run_copy / "run_record/events.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"not json\n{"event": 17, "t": "yesterday"}\n')
    monkeypatch.setenv(reanalysis.SERIAL_ENV, "1")
    audit_run(run_copy, bundle, tmp_path / "serial", reanalysis=True)
    monkeypatch.delenv(reanalysis.SERIAL_ENV)
    who = tmp_path / "validated_by"
    real = core._record_findings

    def record_findings(run_path):
        who.write_text(str(os.getpid()))
        return real(run_path)

    monkeypatch.setattr(core, "_record_findings", record_findings)
    monkeypatch.setattr(reanalysis, "_can_fork", lambda: True)
    audit_run(run_copy, bundle, tmp_path / "child", reanalysis=True)
    serial, child = saeo(tmp_path / "serial"), saeo(tmp_path / "child")
    assert int(who.read_text()) != os.getpid()                        # the child validated the record
    assert _verdicts(serial) == _verdicts(child)
    codes = {f["code"] for f in child["findings"]}
    assert any(c.startswith("record_") and c != "record_malformed" for c in codes), codes
    assert child["items"]["E3"]["final"] < 1

    def dies_in_the_child(run_path):
        if os.getpid() != parent:
            os._exit(3)                                               # killed while validating, no line written
        who.write_text(str(os.getpid()))
        return real(run_path)

    parent = os.getpid()
    monkeypatch.setattr(core, "_record_findings", dies_in_the_child)
    audit_run(run_copy, bundle, tmp_path / "died", reanalysis=True)
    assert int(who.read_text()) == parent                             # the parent validated instead
    assert _verdicts(serial) == _verdicts(saeo(tmp_path / "died"))


def test_a_reanalysis_whose_tpr_is_not_in_the_topology_cache_reads_the_run_file(built, tmp_path):
    """The reanalysis links the case's files into the audit folder; a run input .tpr is never read through a link,
    so the tpr it analyses is the run's own file — also when the process-wide topology cache (4 entries) no longer
    holds it (a fifth case, or the parent analysing a case Sim4 did not read)."""
    from mdbench.analysis.reduce import topology

    topology._TOPOLOGY_CACHE.clear()
    findings: list = []
    files = tuple(f"cases/{CASE}/prod/prod.{ext}" for ext in ("tpr", "xtc", "edr"))
    canon, info, _ = reanalysis._reanalyse(RunFS(built[0]), CASE, files, tmp_path, None, findings)
    assert info["status"] == "ok" and findings == [] and canon is not None, (info, findings)
    assert (tmp_path / "reanalysis" / CASE / "inputs" / "prod.tpr").is_symlink()  # kept for the window re-fits
