"""Stand-ins for what this machine lacks: a GPU build of GROMACS and an NVIDIA GPU (tests/engine/test_gpu.py).

``fake_gpu_tools`` writes two executables into a folder:

* ``gmx`` — answers ``--version`` with one of the ``data/gmx_version/*.txt`` texts; ``mdrun`` logs its
  command line and environment, writes a log in GROMACS' layout with the GPU task assignment it was asked
  for, and sleeps (so a lock test can see jobs overlap or not); every other subcommand (grompp, dump, …) is
  handed to the real ``gmx``;
* ``nvidia-smi`` — lists one GPU for ``--query-gpu``.

Only the GPU side is faked; everything else in the tests is the real runner, the real lock and real grompp.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path

DATA = Path(__file__).parent / "data" / "gmx_version"
FAKE_GPU = "0, NVIDIA H100 80GB HBM3, GPU-5a1c9f02-test-fake-0000-000000000000, 81559, 550.54.15"

_GMX = """#!/bin/sh
if [ "$1" = "--version" ]; then cat "{version}"; exit 0; fi
if [ "$1" = "mdrun" ]; then
  exec "{python}" "{script}" "$@"
fi
exec "{real_gmx}" "$@"
"""

_MDRUN = '''"""Fake GPU mdrun: record the call, write a log saying what GROMACS would report, hold the GPU a while."""
import json, os, sys, time
argv = sys.argv[1:]
def opt(name, default=""):
    return argv[argv.index(name) + 1] if name in argv else default
deffnm = opt("-deffnm", "md")
start = time.time()
with open({calls!r}, "a") as fh:
    fh.write(json.dumps({{"argv": argv, "cwd": os.getcwd(), "start": start, "pid": os.getpid(),
                          "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}}) + "\\n")
tasks = [t.upper() for t in ("nb", "pme") if opt("-" + t) == "gpu"]
with open(deffnm + ".log", "w") as log:
    log.write("Command line:\\n  gmx " + " ".join(argv) + "\\n\\n")
    if tasks:
        log.write("1 GPU selected for this run.\\nMapping of GPU IDs to the %d GPU tasks in the 1 rank on this node:\\n"
                  "  %s\\n" % (len(tasks), ",".join(t.replace("NB", "PP") + ":0" for t in tasks)))
        if opt("-update") == "gpu":
            log.write("Update task on the GPU was required\\n")
    log.write("Started mdrun on rank 0\\n")
time.sleep(float(os.environ.get("FAKE_MDRUN_SECONDS", "0.05")))
with open({calls!r}, "a") as fh:
    fh.write(json.dumps({{"end": time.time(), "pid": os.getpid()}}) + "\\n")
'''

_SMI = """#!/bin/sh
echo "{line}"
"""


def fake_gpu_tools(folder: Path, version: str, *, gpu: bool = True) -> dict[str, Path]:
    """Write the fake ``gmx`` (``version``: a file name in ``data/gmx_version``) and, with ``gpu``, ``nvidia-smi``."""
    import sys  # noqa: PLC0415

    folder.mkdir(parents=True, exist_ok=True)
    calls = folder / "mdrun_calls.jsonl"
    script = folder / "fake_mdrun.py"
    script.write_text(_MDRUN.format(calls=str(calls)))
    gmx = folder / "gmx"
    gmx.write_text(_GMX.format(version=DATA / version, python=sys.executable, script=script,
                               real_gmx=shutil.which("gmx") or "/bin/false"))
    tools = {"gmx": gmx, "calls": calls}
    if gpu:
        smi = folder / "nvidia-smi"
        smi.write_text(_SMI.format(line=FAKE_GPU))
        tools["nvidia-smi"] = smi
    for path in (gmx, *( [tools["nvidia-smi"]] if gpu else [])):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return tools


def read_calls(path: Path) -> list[dict]:
    """The fake mdrun's calls, each with ``start`` and ``end`` times [s since the epoch]."""
    starts, ends = {}, {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        (ends if "end" in row else starts)[row["pid"]] = row
    return [dict(starts[pid], end=ends.get(pid, {}).get("end")) for pid in starts]


def run_mdrun_job(env: dict, tpr: str, deffnm: str, threads: int = 1) -> None:
    """Run ``CliRunner.mdrun`` once in this (spawned) process under ``env`` — a worker of the lock test."""
    os.environ.update(env)
    from mdbench.engine.runner import CliRunner  # noqa: PLC0415

    res = CliRunner().mdrun(Path(tpr), deffnm, threads=threads)
    assert res.ok, res.console_path
    time.sleep(0.01)
