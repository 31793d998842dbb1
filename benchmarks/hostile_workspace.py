"""The evaluator's peak memory and time on the worst hostile workspaces of issue 48, against the honest run.

Usage::

    .venv/bin/python benchmarks/hostile_workspace.py --episode EP [--reanalysis] [--workdir DIR]

``EP`` is a finished oracle episode (``mdbench episode prepare --preset micro`` + ``mdbench episode run EP --agent
oracle``). Each variant below is a copy of its workspace, evaluated as the runner evaluates an episode — the work
accounting (:func:`mdbench.episode.work.account`, with the benchmark ``mdrun``) and the SAEO audit
(:func:`mdbench.episode.runner.audit_workspace`) — in a fresh process whose peak resident memory (``wait4``) and
wall time are measured:

* ``honest`` — the workspace as the oracle left it, with the CPU seconds its episode measured (so are the
  variants below but ``replay``: their scores show what the caps alone do);
* ``replay`` — the same files claimed by an episode that used 0.1 CPU s (a replay brought from elsewhere);
* ``sparse-records-4GiB`` — ``run_record/{events,attempts,registrations}.jsonl`` each a sparse 4 GiB file;
* ``sparse-artifact-50GiB`` — ``report.md`` a sparse 50 GiB file, listed in the artifact inventory (the audit of a
  workspace without a quota, e.g. a Harbor verifier: an episode's quota refuses it at write time);
* ``tpr-2M-molecules`` — every production ``.tpr`` patched to claim 2,000,000 molecules in its first block.

It prints each variant's peak memory and time and their ratio to ``honest``; the stated bound is ≤ 2 × honest.
Numbers depend on the machine and its load; nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BOUND = 2.0

_EVALUATE = r"""
import json, sys, time
from pathlib import Path
from mdbench.episode import work
from mdbench.episode.runner import audit_workspace
ws, bundle, out, cpu_s, wall_s, started, reanalysis = sys.argv[1:8]
w = work.account(Path(ws), cpu_s=float(cpu_s), wall_s=float(wall_s), threads=2, started_epoch=float(started),
                 bundle=Path(bundle))
entries = work.adjudication_entries(w)
integrity = {"intact": True, "findings": []}
a = audit_workspace(Path(ws), Path(bundle), Path(out) / "audit", integrity, reanalysis=reanalysis == "1",
                    work_dir=Path(out) / "integrity", entries=entries)
print(json.dumps({"verdict": w["verdict"], "score": a.get("composite"), "findings": a.get("findings"),
                  "error": a.get("error")}))
"""


def _patch_tpr(path: Path, molecules: int) -> bool:
    from mdbench.trajcheck import tpr_counts

    _, n, a = tpr_counts(path).molblocks[0]
    raw = path.read_bytes()
    for t in range(16):
        pat = struct.pack(">iii", t, n, a)
        if raw.count(pat) == 1:
            path.write_bytes(raw.replace(pat, struct.pack(">iii", t, molecules, a)))
            return True
    return False


def _variant(name: str, src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    if name == "sparse-records-4GiB":
        for f in ("events.jsonl", "attempts.jsonl", "registrations.jsonl"):
            p = dest / "run_record" / f
            p.unlink(missing_ok=True)
            os.truncate(os.open(p, os.O_WRONLY | os.O_CREAT), 4 * 2**30)
    elif name == "sparse-artifact-50GiB":
        (dest / "report.md").unlink(missing_ok=True)
        os.truncate(os.open(dest / "report.md", os.O_WRONLY | os.O_CREAT), 50 * 2**30)
        inv = json.loads((dest / "run_record" / "artifacts.json").read_text())
        inv["report.md"] = {"sha256": "0" * 64, "bytes": 50 * 2**30}
        (dest / "run_record" / "artifacts.json").write_text(json.dumps(inv))
    elif name == "tpr-2M-molecules":
        for tpr in dest.glob("cases/*/prod*/*.tpr"):
            _patch_tpr(tpr, 2_000_000)
    return dest


def _measure(ws: Path, bundle: Path, out: Path, cpu_s: float, wall_s: float, started: float,
             reanalysis: bool) -> dict:
    out.mkdir(parents=True)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", _EVALUATE, str(ws), str(bundle), str(out), str(cpu_s),
                             str(wall_s), str(started), "1" if reanalysis else "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    doc = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {"error": f"exit {proc.returncode}"}
    return {"seconds": wall, "peak_mib": usage.ru_maxrss / 1024.0, **doc}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episode", type=Path, required=True, help="a finished oracle episode folder")
    ap.add_argument("--reanalysis", action="store_true", help="audit with the reanalysis (slower)")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args(argv)
    ep = args.episode.resolve()
    result = json.loads((ep / "result.json").read_text())
    from datetime import datetime

    started = datetime.fromisoformat(result["started_at"]).timestamp()
    work_dir = Path(tempfile.mkdtemp(prefix="mdbench-hostile-", dir=args.workdir))
    try:
        rows = {}
        for name in ("honest", "replay", "sparse-records-4GiB", "sparse-artifact-50GiB", "tpr-2M-molecules"):
            ws = _variant(name, ep / "workspace", work_dir / name / "workspace")
            cpu, wall, t_start = ((0.1, 0.2, time.time()) if name == "replay"   # the others: what the caps do
                                  else (result["cpu_s"], result["wall_s"], started))
            rows[name] = _measure(ws, ep / "bundle", work_dir / name / "eval", cpu, wall, t_start, args.reanalysis)
            r = rows[name]
            print(f"{name:24s} {r['seconds']:7.2f} s  {r['peak_mib']:8.1f} MiB  score {r.get('score')}  "
                  f"findings {r.get('findings')}  work {r.get('verdict')}  {r.get('error') or ''}", flush=True)
            shutil.rmtree(work_dir / name)
        base = rows["honest"]
        print(f"\nratios to the honest run (bound ≤ {BOUND:g} ×):")
        worst = 1.0
        for name, r in rows.items():
            t, m = r["seconds"] / base["seconds"], r["peak_mib"] / base["peak_mib"]
            worst = max(worst, t, m)
            print(f"  {name:24s} time {t:5.2f} ×   peak memory {m:5.2f} ×")
        print(f"worst ratio {worst:.2f} × — {'within' if worst <= BOUND else 'OUTSIDE'} the stated bound")
        return 0 if worst <= BOUND else 1
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
