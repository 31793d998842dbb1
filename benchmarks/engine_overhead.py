"""Overhead of the engine's production stage against bare ``gmx mdrun`` on the same tpr and threads.

Usage::

    .venv/bin/python benchmarks/engine_overhead.py [--preset micro] [--system DE] [--production-ps 100]
                                                   [--threads 1] [--repeats 3] [--workdir DIR]

The script builds, minimises and equilibrates one case (library calls, real GROMACS), then times, in
alternation so that machine-load drift hits both sides alike:

* **stage** — :func:`mdbench.engine.stages.produce` in a fresh copy of the equilibrated run directory
  (grompp, box scaling, budget reservation, thread-cap lock, mdrun, step accounting, artifact hashing and the
  consistency check all included);
* **bare** — the very ``gmx mdrun`` command line the stage ran (``-nt T -ntomp T``, and on a GPU machine
  the stage's offload and pinning options), on the tpr the stage produced, in an empty folder.

On a GPU machine (CUDA GROMACS on PATH) the paper preset is measured with a short, relaxed equilibration —
the production stage's overhead does not depend on how well the box was equilibrated::

    .venv/bin/python benchmarks/engine_overhead.py --preset paper --system HCE --threads 8 \
        --equilibration-ps 10 20 --relaxed-gate --production-ps 100 --repeats 2

It prints ns/day for both (wall-clock based, ``length / wall``), GROMACS' own ns/day from each log, the
ratio stage / bare (target ≥ 0.97), and the time the stage spends outside ``mdrun`` with the share of the
stage's wall time that is ``mdrun`` — the ratio the stage would reach if its mdrun ran exactly as fast as the
bare one, which does not depend on how loaded a shared machine happens to be during each run. Nothing here
is a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _log_ns_day(log: Path) -> float:
    m = re.findall(r"Performance:\s+([0-9.]+)", log.read_text(errors="replace"))
    return float(m[-1]) if m else float("nan")


def relaxed_protocols(work: Path) -> Path:
    """A copy of params/protocols whose equilibration gate accepts a short run (benchmark only)."""
    from mdbench.paths import PARAMS_DIR

    dest = work / "protocols_relaxed"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(PARAMS_DIR / "protocols", dest)
    text = (dest / "gates.yaml").read_text()
    for old, new in (("min_effective_samples: 10", "min_effective_samples: 2"),
                     ("temperature_tolerance_K: 1.0", "temperature_tolerance_K: 10.0"),
                     ("max_density_drift_rel: 0.02", "max_density_drift_rel: 0.2"),
                     ("max_t0_fraction: 0.75", "max_t0_fraction: 0.95")):
        text = text.replace(old, new)
    (dest / "gates.yaml").write_text(text)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="micro")
    ap.add_argument("--system", default="DE")
    ap.add_argument("--production-ps", type=float, default=100.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--equilibration-ps", type=float, nargs=2, metavar=("NVT", "NPT"), default=None,
                    help="shorter equilibration [ps] (no extensions), for large presets")
    ap.add_argument("--relaxed-gate", action="store_true",
                    help="accept a short equilibration (gate thresholds of the engine tests' relaxed protocols)")
    args = ap.parse_args(argv)

    from mdbench.build import build_system
    from mdbench.engine import stages
    from mdbench.engine.runner import find_gmx

    gmx = find_gmx()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="mdbench-bench-"))
    base = work / "equilibrated"
    t0 = time.monotonic()
    if not (base / "cases" / args.system / "setup" / "build.json").is_file():
        build_system(args.system, args.preset, base / "cases" / args.system / "setup", overwrite=True)
    # both stages are idempotent: a finished stage returns at once, an unfinished one resumes
    protocols = relaxed_protocols(work) if args.relaxed_gate else None
    stages.minimize(base, args.system, preset=args.preset, engine="cli", threads=args.threads).raise_if_invalid()
    short = ({"nvt_ps": args.equilibration_ps[0], "npt_ps": args.equilibration_ps[1], "max_extensions": 0}
             if args.equilibration_ps else {})
    stages.equilibrate(base, args.system, preset=args.preset, engine="cli", threads=args.threads,
                       protocols_dir=protocols, **short).raise_if_invalid()
    print(f"prepared {args.preset}/{args.system} in {time.monotonic() - t0:.1f} s ({base})", flush=True)

    stage_wall, bare_wall, stage_log, bare_log, mdrun_wall = [], [], [], [], []
    def run_stage(i: int) -> Path:
        run = work / f"stage_{i}"
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(base, run)
        t0 = time.monotonic()
        rep = stages.produce(run, args.system, preset=args.preset, engine="cli", threads=args.threads,
                             production_ps=args.production_ps, protocols_dir=protocols)
        stage_wall.append(time.monotonic() - t0)
        rep.raise_if_invalid()
        prod = run / "cases" / args.system / "prod"
        stage_log.append(_log_ns_day(prod / "prod.log"))
        mdrun_wall.append(sum(json.loads(line)["wall_s"] for line in
                              (prod / "prod.mdrun.cmd.json").read_text().splitlines() if line.strip()))
        return prod / "prod.tpr"

    def run_bare(i: int, tpr: Path) -> None:
        bare = work / f"bare_{i}"
        shutil.rmtree(bare, ignore_errors=True)
        bare.mkdir()
        shutil.copy(tpr, bare / "prod.tpr")
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        # the stage's own mdrun command line (threads, GPU offload, pinning), run on the same tpr
        argv = json.loads((tpr.parent / "prod.mdrun.cmd.json").read_text().splitlines()[-1])["argv"]
        t0 = time.monotonic()
        subprocess.run([gmx, *argv[1:]], cwd=bare, check=True, capture_output=True, env=env)
        bare_wall.append(time.monotonic() - t0)
        bare_log.append(_log_ns_day(bare / "prod.log"))

    tpr = run_stage(-1)  # the tpr both sides run; also warms the file cache
    stage_wall.clear(), stage_log.clear(), mdrun_wall.clear()
    for i in range(args.repeats):
        # alternate which side goes first, so a load trend on a shared machine favours neither
        if i % 2 == 0:
            run_stage(i)
            run_bare(i, tpr)
        else:
            run_bare(i, tpr)
            run_stage(i)
        print(f"repeat {i}: stage {stage_wall[-1]:.2f} s, bare {bare_wall[-1]:.2f} s", flush=True)

    ns = args.production_ps / 1000.0
    day = 86400.0
    s_nsday = statistics.median(ns / w * day for w in stage_wall)
    b_nsday = statistics.median(ns / w * day for w in bare_wall)
    print(f"\n{args.preset}/{args.system}, {args.production_ps:g} ps production, {args.threads} thread(s), "
          f"{args.repeats} repeats (medians)")
    print(f"  stage (whole produce())  : {s_nsday:8.2f} ns/day wall   mdrun log {statistics.median(stage_log):8.2f} ns/day")
    print(f"  bare gmx mdrun           : {b_nsday:8.2f} ns/day wall   mdrun log {statistics.median(bare_log):8.2f} ns/day")
    print(f"  ratio stage/bare (wall)  : {s_nsday / b_nsday:.3f}   (target >= 0.97)")
    print(f"  ratio stage/bare (log)   : {statistics.median(stage_log) / statistics.median(bare_log):.3f}")
    pair = [b / s for s, b in zip(stage_wall, bare_wall)]
    print(f"  per-pair ratios (wall)   : {', '.join(f'{r:.3f}' for r in pair)}   median {statistics.median(pair):.3f}")
    overhead = [s - m for s, m in zip(stage_wall, mdrun_wall)]
    frac = statistics.median(m / s for s, m in zip(stage_wall, mdrun_wall))
    print(f"  stage time outside mdrun : {statistics.median(overhead):8.2f} s (grompp, box scaling, record, checks)")
    print(f"  mdrun share of stage wall: {frac:.3f}   (the ratio if mdrun ran at bare speed; load-insensitive)")
    print(f"  load average now         : {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
