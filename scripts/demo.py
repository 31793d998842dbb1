#!/usr/bin/env python
"""`make demo`: the tiny study of DE, HCE and LHCE, its SAEO audit, and the HTML report.

Each step is an `mdbench` CLI call, so the demo shows exactly what a user would type. A step whose
room is not built yet (exit status 2) is reported plainly and skipped; any other failure stops the demo.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


#: The dry run's line with the study's expected wall time ("expected wall time 23 min 10 s" / "1 h 05 min").
_EXPECTED = re.compile(r"expected wall time (?:(\d+) h )?(\d+) min(?: (\d+) s)?")
ELAPSED_S: dict[str, float] = {}
#: The demo's steps after the study (bundle, record validation, audit, HTML report) [s]: 18-22 s on the tiny
#: demo of 2026-12-05 (report 13-15 s, audit 4-5 s, validation 1-2 s).
AFTER_STUDY_S = 25.0


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def step(title: str, args: list[str], capture: list[str] | None = None) -> int:
    exe = shutil.which("mdbench", path=str(Path(sys.executable).parent)) or "mdbench"
    print(f"\n=== {title}\n$ mdbench {' '.join(args)}", flush=True)
    started = time.monotonic()
    if capture is None:
        code = subprocess.call([exe, *args], cwd=ROOT)
    else:  # shown as it comes and kept for the summary
        proc = subprocess.Popen([exe, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:
            print(line, end="", flush=True)
            capture.append(line)
        code = proc.wait()
    elapsed = ELAPSED_S[title] = time.monotonic() - started
    if code == 2:
        print(f"--- {title}: not built yet (skipped)", flush=True)
    elif code != 0:
        print(f"--- {title}: FAILED (exit {code}) after {elapsed:.0f} s", flush=True)
    else:
        print(f"--- {title}: done in {elapsed:.0f} s", flush=True)
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--run", default="outputs/runs/demo")
    parser.add_argument("--systems", nargs="+", default=["DE", "HCE", "LHCE"])
    args = parser.parse_args()
    run = args.run
    bundle = f"outputs/bundles/{args.preset}"
    audit = f"outputs/audits/{Path(run).name}"
    report = f"outputs/reports/{Path(run).name}.html"
    study = ["--preset", args.preset, "--systems", *args.systems, "--out", run]
    estimate: list[str] = []
    # first: what the study will cost on this machine (measured once per machine, then from its history)
    if step("Plan: ns per case and expected wall time on this machine", ["study", "run", *study, "--dry-run"],
            capture=estimate) != 0:
        return 1
    expected = next((m for m in map(_EXPECTED.search, estimate) if m), None)
    planned = None
    if expected:
        hours, minutes, seconds = (int(g or 0) for g in expected.groups())
        planned = 3600 * hours + 60 * minutes + seconds
        done_by = time.time() + planned + AFTER_STUDY_S
        print(f"\nThe demo from here: the study and ~{AFTER_STUDY_S:.0f} s of audit and report: expected to end by "
              f"{_clock(done_by)} (in {(planned + AFTER_STUDY_S) / 60:.1f} min)", flush=True)
    plan = [
        # rebuilt every time: the bundle is a pure function of the preset and the project's files, and one left by
        # an older checkout (another force-field model) would make the audit's Sim1 compare against stale files
        ("Agent input bundle", ["bundle", "build", "--preset", args.preset, "--out", bundle, "--overwrite"]),
        ("Study: setup → minimisation → equilibration → production → analysis → comparison",
         ["study", "run", *study]),
        ("Run-record validation", ["record", "validate", run]),
        ("SAEO audit", ["audit", run, "--bundle", bundle, "--out", audit]),
        ("HTML report", ["report", audit, "--out", report]),
    ]
    for title, cmd in plan:
        code = step(title, cmd)
        if code not in (0, 2):
            return code
    took = next((v for k, v in ELAPSED_S.items() if k.startswith("Study")), None)
    if planned and took:
        print(f"\nStudy: {took / 60:.1f} min against the estimate of {planned / 60:.1f} min "
              f"(measured ÷ estimated = {took / planned:.2f})")
        print(f"The demo ended at {_clock(time.time())}, expected by {_clock(done_by)} "
              f"({abs(time.time() - done_by):.0f} s {'early' if time.time() <= done_by else 'late'})")
    print(f"\nRun directory: {run}\nAudit:         {audit}/saeo.json, {audit}/findings.md\nReport:        {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
