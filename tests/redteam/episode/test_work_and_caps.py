"""Issue 48: an agent that brings a finished run, reads another episode, or feeds the evaluator sparse giants gains
nothing, and the evaluator's memory and time stay bounded.

The fast tests run confined agents (``attacker.py``) through the CLI; the replay tests need a finished honest run
(the oracle on the micro preset, real GROMACS: ``slow``). Every evaluator figure is measured on the runner's own
process tree (``wait4``), against the null agent's measured the same way in the same session.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mdbench.episode import work
from mdbench.episode.agents import share_readable
from mdbench.trajcheck import TrajectoryError, check_tpr, tpr_counts

from _episode_helpers import (AGENT_PY, needs_gmx, needs_namespaces, needs_root, prepare, run_measured, saeo)

HERE = Path(__file__).resolve().parent
ATTACKER = f"{AGENT_PY} {HERE / 'attacker.py'}"
EXPOSE = ("--expose", str(HERE / "attacker.py"))
#: The stated bound of the evaluator on a hostile workspace: at most this many times the null agent's episode
#: (peak memory of the runner's largest process; the runner's time after the agent ended), plus an allowance
#: for a loaded machine [s].
BOUND_FACTOR = 2.0
ALLOWANCE_S = 20.0
pytestmark = [needs_namespaces, pytest.mark.timeout(900)]


def attack(ep: Path, mode: str, *opts: str) -> dict:
    """``mdbench episode run`` of the attacker, measured: (result.json, the runner's measurement)."""
    m = run_measured(["episode", "run", str(ep), "--agent", f"{ATTACKER} {mode}", "--no-reanalysis", *EXPOSE, *opts])
    assert m["rc"] == 0, m["stdout"][-2000:] + m["stderr"][-3000:]
    assert "Traceback" not in m["stderr"], m["stderr"][-3000:]
    return {"result": json.loads((ep / "result.json").read_text()), **m}


def after_agent_s(result: dict) -> float:
    """The runner's own time once the agent ended: collection, work accounting and audit [s]."""
    h = result["harness_s"]
    return h["after_agent"] + h["audit"]


@pytest.fixture(scope="module")
def null_run(tmp_path_factory) -> dict:
    """The null agent's episode, measured as the attacks are (the baseline of the bound)."""
    ep = prepare(tmp_path_factory.mktemp("null") / "ep", "harness=reference", "model=null")
    m = run_measured(["episode", "run", str(ep), "--agent", "null", "--no-reanalysis"])
    assert m["rc"] == 0, m["stderr"][-3000:]
    return {"result": json.loads((ep / "result.json").read_text()), **m}


def within_bound(m: dict, baseline: dict) -> None:
    """The stated bound: peak memory ≤ 2 × the baseline's, the runner's time after the agent ≤ 2 × the baseline's
    plus the allowance (the baseline measured the same way: the null agent, or the same run unpatched)."""
    assert m["peak_mib"] <= BOUND_FACTOR * baseline["peak_mib"], (m["peak_mib"], baseline["peak_mib"])
    assert after_agent_s(m["result"]) <= BOUND_FACTOR * after_agent_s(baseline["result"]) + ALLOWANCE_S, (
        m["result"]["harness_s"], baseline["result"]["harness_s"])


# ----------------------------------------------------------------------- break 2: another episode's folder

@needs_root
def test_a_finished_episode_in_a_sibling_folder_elsewhere_is_invisible(tmp_path, null_run):
    base = Path("/var/lib") / f"mdbench-rt48-{uuid.uuid4().hex[:8]}"
    try:
        sibling = base / "cfgB" / "workspace"
        (sibling / "run_record").mkdir(parents=True)
        (sibling / "run_record" / "events.jsonl").write_text('{"id": 1}\n')
        (sibling / "report.md").write_text("a finished study\n")
        os.chmod(base, 0o755)
        ep = prepare(base / "cfgA", "harness=redteam", "model=sibling")
        m = attack(ep, f"replay {sibling}")
        report = json.loads((ep / "workspace" / "attack.json").read_text())
        assert report["visible"] is False, report
        assert not (ep / "workspace" / "report.md").exists()
        assert m["result"]["score"] <= null_run["result"]["score"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------- breaks 3, 4: sparse giants; names printed raw

@needs_root
def test_sparse_record_files_and_an_oversized_artifact_cost_the_evaluator_nothing(tmp_path, null_run):
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=sparse")
    m = attack(ep, "sparse 4", "--timeout", "3")
    report = json.loads((ep / "workspace" / "attack.json").read_text())
    result = m["result"]
    # written (sparse: no quota used) — the quota counts logical sizes: a 10 TiB file is refused at write time
    assert report["events.jsonl"] == "ok" and report["report_md"] == "ok", report
    assert report["huge"].startswith("refused") and "File too large" in report["huge"], report
    assert (ep / "workspace" / "run_record" / "events.jsonl").stat().st_size == 4 * 2**30
    assert not (ep / "workspace" / "huge.bin").exists() or (ep / "workspace" / "huge.bin").stat().st_size == 0
    # the evaluator read none of it whole: findings, bounded memory and time, no points
    findings = json.loads((ep / "audit" / "saeo.json").read_text())["findings"]
    codes = {(f["code"], f["path"]) for f in findings}
    assert ("file_too_large", "report.md") in codes, sorted(codes)[:40]
    assert any(c == "file_too_large" and p.endswith("events.jsonl") for c, p in codes), sorted(codes)[:40]
    assert result["score"] <= null_run["result"]["score"]
    within_bound(m, null_run)
    # a name with a newline is printed escaped, one line
    assert "\nINJECTED" not in m["stderr"] and "\\nINJECTED" in m["stderr"], m["stderr"][-2000:]


def test_a_record_file_is_read_line_by_line_within_its_caps(tmp_path):
    from mdbench.record.store import read_jsonl

    p = tmp_path / "events.jsonl"
    with open(p, "wb") as fh:
        fh.write(b'{"id": 1}\n' + b"x" * 5000 + b'\n{"id": 2}\n{"id": 3}')
        fh.truncate(fh.tell())
    got = read_jsonl(p, max_line_bytes=1000)
    assert [r["id"] for _, r in got.rows] == [1, 2] and got.truncated_tail_line == 4
    assert got.malformed == [(2, "line longer than 1000 bytes; not parsed")]
    os.truncate(p, 2**36)  # 64 GiB, sparse
    t0 = time.perf_counter()
    big = read_jsonl(p)
    assert big.rows == [] and big.capped and big.malformed[0][0] == 0
    assert time.perf_counter() - t0 < 1.0


# ---------------------------------------------------------------------- a tpr claiming 2,000,000 molecules

def _patch_molecules(src: Path, dest: Path, molecules: int) -> None:
    """``src`` with its first molecule block claiming ``molecules`` molecules (nothing else changed)."""
    counts = tpr_counts(src)
    _, n, a = counts.molblocks[0]
    raw = src.read_bytes()
    for t in range(16):
        pat = struct.pack(">iii", t, n, a)
        if raw.count(pat) == 1:
            dest.write_bytes(raw.replace(pat, struct.pack(">iii", t, molecules, a)))
            return
    raise AssertionError("molecule block not found")


@needs_gmx
def test_a_tpr_claiming_2000000_molecules_is_refused_before_anything_is_allocated(tmp_path):
    d = tmp_path
    (d / "md.mdp").write_text("integrator = md\nnsteps = 10\ncutoff-scheme = Verlet\nrcoulomb = 0.9\nrvdw = 0.9\n")
    (d / "topol.top").write_text('#include "oplsaa.ff/forcefield.itp"\n#include "oplsaa.ff/spc.itp"\n'
                                 "[ system ]\nwater\n[ molecules ]\nSOL 216\n")
    top = next(p for p in ("/usr/share/gromacs/top", "/usr/local/gromacs/share/gromacs/top")
               if os.path.isfile(p + "/spc216.gro"))
    p = subprocess.run(["gmx", "-quiet", "grompp", "-f", "md.mdp", "-c", f"{top}/spc216.gro", "-p", "topol.top",
                        "-o", "md.tpr"], cwd=d, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert check_tpr(d / "md.tpr").molecules() == {"SOL": 216}
    _patch_molecules(d / "md.tpr", d / "bad.tpr", 2_000_000)
    assert tpr_counts(d / "bad.tpr").molecules() == {"SOL": 2_000_000}  # the patch is what the issue describes
    code = ("import resource, time, sys\nfrom mdbench.analysis.reduce.topology import read_tpr_topology\n"
            f"t = time.perf_counter()\ntry:\n    read_tpr_topology({str(d / 'bad.tpr')!r})\nexcept Exception as e:\n"
            "    print(type(e).__name__, e)\nprint(time.perf_counter() - t, "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    first, last = out.strip().splitlines()[0], out.strip().splitlines()[-1]
    assert first.startswith("TrajectoryError") and "2000000 × SOL" in first, out
    seconds, peak_kib = map(float, last.split())
    assert seconds < 5.0 and peak_kib < 1024 * 1024, out  # refused in seconds, under 1 GiB (it was 8.5 GB)
    with pytest.raises(TrajectoryError, match="bundle's composition"):
        check_tpr(d / "md.tpr", expected_molecules={"SOL": 100})


# ------------------------------------------------------------------- honest resumed work is credited

@needs_gmx
def test_a_resumed_two_segment_production_is_credited_and_its_copy_is_not(tmp_path):
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=md-resume")
    m = attack(ep, "md-resume", "--timeout", "10", "--threads", "1")
    result = m["result"]
    report = json.loads((ep / "workspace" / "attack.json").read_text())
    assert report.get("mdrun") == 0 and "error" not in report, report
    ws = ep / "workspace"
    assert (ws / "cases/DE/40_production/prod.part0002.xtc").is_file()
    w = result["work"]
    assert w["verdict"] == work.CREDITED and not result["work_not_done_here"], w
    assert w["claimed"]["ns_on_disk_per_case"]["DE"] == pytest.approx(0.012, abs=0.0005)  # 2 × 3000 steps of 2 fs
    assert w["logs_before_episode"] == [] and w["required_core_s"] > 0
    # the comparison decides, not the allowance: the same workspace against a hundredth of the CPU it used
    started = time.time() - result["wall_s"] - 5
    honest = work.account(ws, cpu_s=result["cpu_s"], wall_s=result["wall_s"], threads=1, started_epoch=started,
                          floor_core_s=0.0)
    assert honest["verdict"] == work.CREDITED, honest["reason"]
    # the measured speed is this machine's: what the run needs is of the order of what its mdruns used
    assert 0.2 * result["cpu_s"] <= honest["required_core_s"] <= work.SLACK * result["cpu_s"]
    starved = work.account(ws, cpu_s=result["cpu_s"] / 100, wall_s=0.2, threads=1, started_epoch=started,
                           floor_core_s=0.0)
    assert starved["verdict"] == work.NOT_DONE_HERE and set(starved["items_lowered"]) >= {"Sim4", "E1"}
    # and a copy of it, replayed later, started before its episode did
    late = work.account(ws, cpu_s=result["cpu_s"], wall_s=result["wall_s"], threads=1, started_epoch=time.time()
                        + 3600)
    assert late["verdict"] == work.NOT_DONE_HERE and late["logs_before_episode"], late["reason"]


# --------------------------------------------------------------- break 1: a finished run brought along (slow)

@pytest.fixture(scope="module")
def replay_run(oracle_episode, tmp_path_factory) -> dict:
    """An agent that copies the honest oracle run from an exposed folder into its workspace, measured."""
    ep = prepare(tmp_path_factory.mktemp("replay") / "ep", "harness=redteam", "model=replay")
    src = oracle_episode / "workspace"
    return {**attack(ep, f"replay {src}", "--expose", str(src)), "ep": ep}


@pytest.mark.slow
@pytest.mark.gromacs
@pytest.mark.timeout(5400)
def test_replaying_an_honest_run_from_an_exposed_folder_gains_nothing(oracle_episode, replay_run, null_run):
    honest = json.loads((oracle_episode / "result.json").read_text())
    assert honest["work"]["verdict"] == work.CREDITED and not honest["work_not_done_here"], honest["work"]
    assert honest["audit"]["findings"] == 0 and honest["score"] > 90
    ep, result = replay_run["ep"], replay_run["result"]
    w = result["work"]
    assert json.loads((ep / "workspace" / "attack.json").read_text())["visible"] is True
    assert w["verdict"] == work.NOT_DONE_HERE and result["work_not_done_here"], w
    assert w["required_core_s"] > 10 * w["available_core_s"]
    items = saeo(ep)["items"]
    assert items["Sim4"]["final"] == 0 and items["E1"]["final"] == 0
    assert "core-s" in items["Sim4"]["reason"] and "work_not_done_here" in items["E1"]["reason"]
    assert result["score"] <= null_run["result"]["score"]
    # the evaluator's time on it: the honest episode's own evaluation, plus the benchmark mdruns
    assert after_agent_s(result) <= BOUND_FACTOR * after_agent_s(honest) + ALLOWANCE_S, (
        result["harness_s"], honest["harness_s"])


@pytest.mark.slow
@pytest.mark.gromacs
@pytest.mark.timeout(5400)
def test_a_replay_with_a_tpr_claiming_2000000_molecules_stays_bounded(oracle_episode, tmp_path, null_run,
                                                                      replay_run):
    src = tmp_path / "run"
    shutil.copytree(oracle_episode / "workspace", src, ignore=shutil.ignore_patterns("agent_input", "PROMPT.md"))
    prod = src / "cases" / "DE" / "prod" / "prod.tpr"
    _patch_molecules(prod, prod, 2_000_000)
    share_readable(src)
    os.chmod(tmp_path, 0o755)
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=tpr")
    m = attack(ep, f"replay {src}", "--expose", str(src))
    assert m["result"]["score"] <= null_run["result"]["score"]
    within_bound(m, replay_run)  # against the same run unpatched (the issue: 8.5 GB and 173 s, then MemoryError)
