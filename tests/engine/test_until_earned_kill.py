"""``mdbench study run --until earned`` killed during a production extension and run again (issue 46).

The micro DE study (from the shared equilibrated snapshot) runs to its end with ``--until earned`` and a small
MD cap; the whole process tree is SIGKILLed while the mdrun of the first extension segment runs (its log past
the first segment's last step), and the same command is run again. Whatever the trajectory, the resumed run
must satisfy: ``mdbench record validate`` passes, the recorded state graph agrees with the one recomputed from
the records, every production step is charged once (the ledger's steps tile the segment), and the
extend-or-stop decisions go on after the kill (the interrupted extension finished first, then a new decision),
none of them an O3 finding.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from mdbench.analysis.projection import judge_production_decisions
from mdbench.analysis.study_state import graph_findings
from mdbench.engine.stages import load_preset
from mdbench.record import RunRecord
from mdbench.record import state_graph as sg
from mdbench.record.steps import segment_accounts
from mdbench.record.validate import validate_run

import kill_helpers as K
from engine_helpers import needs_gmx

# a micro study (production, analysis templates, comparison), one extension killed and finished, the analysis
# again: several minutes on a shared 2-core machine — the long arm belongs to the slow suite
pytestmark = [needs_gmx, pytest.mark.gromacs, pytest.mark.slow, pytest.mark.timeout(3600)]

PROTO = load_preset("micro")["protocol"]
DT_PS = PROTO["dt_fs"] / 1000.0
FIRST_STEPS = round(PROTO["production_ps"] / DT_PS)
#: MD left for extensions [ns] under the study's cap: the cap is the equilibrated snapshot's MD (its gate may
#: have extended the NPT segment) plus the first production plus this. On micro DE the nearest SI results
#: (association, coordination) were projected earned at 0.044-0.14 ns of production; 0.15 ns leaves room for
#: the first extension whatever the trajectory, and a few (each at least half the production) in all.
EXTENSION_ROOM_NS = 0.15


def _decisions(run: Path) -> list[dict]:
    return [e for e in RunRecord(run).events() if e["type"] == "production_decision"]


def _extension_running(run: Path, procs: list[psutil.Process]) -> str | None:
    """The mdrun of an extension: an ``extend`` decision recorded, ``mdrun -deffnm prod`` alive and its log
    past the first segment's last step."""
    if not any(e["payload"].get("action") == "extend" for e in _decisions(run)):
        return None
    if K.named(procs, "gmx", "mdrun", "prod") is None:
        return None
    step = K.log_step(run / "cases" / "DE" / "prod" / "prod.log")
    if step is not None and step > FIRST_STEPS:
        return f"extension mdrun at step {step} (first segment {FIRST_STEPS})"
    return None


def test_until_earned_killed_during_an_extension_resumes(micro_de_equilibrated, tmp_path):
    run = tmp_path / "R"
    shutil.copytree(micro_de_equilibrated, run, symlinks=True)
    budget_ns = RunRecord(run).committed_ns() + PROTO["production_ps"] / 1000 + EXTENSION_ROOM_NS
    argv = K.study_argv(run, "--until", "earned", "--budget-ns", f"{budget_ns:.6f}")
    kill = K.run_and_kill(argv, run, K.KillPoint("study/40_production", _extension_running), signal.SIGKILL,
                          timeout_s=3000.0)
    assert "gmx" in kill.processes, kill
    before = _decisions(run)
    assert before and before[-1]["payload"]["action"] == "extend", [d["payload"]["reason"] for d in before]
    # right after the kill: the record is valid; the segment files mdrun was appending to are warnings naming
    # the open attempt (record.validate: a changed output of a segment whose attempt is still open)
    findings = validate_run(run)
    assert [str(f) for f in findings if f.severity == "error"] == []
    assert all("cases/DE/prod/prod." in str(f) and "is open" in str(f) for f in findings if f.severity == "warning")
    prod = [a for a in RunRecord(run).attempts() if a["stage"] == "production"]
    # the killed extension's reservation: the resume finds what it computed and records it as interrupted
    assert prod[-1]["status"] in ("reserved", "interrupted") and prod[-1]["start_step"] >= FIRST_STEPS, prod[-1]

    res = K.run_to_end(argv, run)
    assert res.returncode == 0, (tmp_path / "R.driver.log").read_text()[-3000:]
    cli = subprocess.run([sys.executable, "-m", "mdbench.cli", "record", "validate", str(run)], capture_output=True,
                         text=True)
    assert cli.returncode == 0 and "0 error(s)" in cli.stdout + cli.stderr, cli.stdout + cli.stderr
    # the recorded graph is the records' graph (and the terminal claim the graph's)
    assert graph_findings(run, ["DE"]) == []
    rec = RunRecord(run)
    # no step charged twice: the production segment's ledger rows tile it once, every computed step charged
    prod = [a for a in rec.attempts() if a["stage"] == "production"]
    acc = segment_accounts(rec.attempts())[prod[-1]["segment"]]
    assert acc.problems == [] and acc.charged_steps == acc.computed_steps, acc
    assert acc.kept_steps == acc.target_step == prod[-1]["target_step"] > FIRST_STEPS, acc
    assert math.isclose(sum(a["ns_charged"] for a in prod), sum(a["completed_steps"] for a in prod) * DT_PS / 1000)
    assert [a["status"] for a in prod].count("interrupted") == 1 and prod[-1]["status"] == "completed"
    killed = next(i for i, a in enumerate(prod) if a["status"] == "interrupted")
    assert prod[killed + 1]["parent"] == prod[killed]["id"]  # the killed extension continued, not redone
    # the decisions go on after the kill: the interrupted extension is finished first, then the rule decides
    # again from the records (its production the finished extension's); the last one stops (cap or nothing)
    after = _decisions(run)[len(before):]
    assert after and after[-1]["payload"]["action"] == "stop", [d["payload"]["reason"] for d in after]
    finished_ns = prod[killed + 1]["target_step"] * DT_PS / 1000
    assert after[0]["payload"]["production_ns"] == pytest.approx(finished_ns, abs=1e-9), after[0]["payload"]
    assert [d["id"] for d in _decisions(run)] == sorted(d["id"] for d in _decisions(run))
    # the cap held (the steps the kill made mdrun compute twice aside: the budget counts compute)
    assert rec.committed_ns() - acc.superseded_steps * DT_PS / 1000 <= budget_ns + 1e-6
    events = [json.loads(line) for line in (run / "run_record" / "events.jsonl").read_text().splitlines()]
    assert judge_production_decisions(events, sg.read_graph(run))["findings"] == []
