#!/usr/bin/env python
"""The study's MD phase on this machine, old thread policy vs new, in one run (issue 47).

Both arms start from the same minimised cases (one ``mdbench study run --through minimization``, copied) and
run equilibration and production with the CLI a user types:

* **old** — ``--threads 1 --workers cores``: each case one thread, ``cores`` cases at a time, each to its end;
* **new** — ``--threads auto``: every case at once, each mdrun the fair share of the free cores, re-balanced at
  a checkpoint when a case finishes.

Printed per arm: the wall time of the MD phase, the MD done (ns; gate extensions differ between arms, since
trajectories differ with the thread count), the machine's CPU use sampled from ``/proc/stat`` while any mdrun
ran (% of one core; 200 % = both cores of a 2-core machine), and each mdrun slice's threads. Then the ratios
new ÷ old of the wall time and of the wall time per ns. The dry-run estimate of the new arm is printed beside
its measured time.

``--md-scale F`` shortens every MD stage of the preset by ``F`` (a scaled copy of ``params/`` under a temporary
``MDBENCH_ROOT``), so the comparison fits a shorter session; the policy's gain does not depend on the length
as long as each stage is long against a restart (~1 s).

``--scale-plan`` prints, without running anything, the simulated schedule of four paper-size cases on 16 cores
(DE, HCE, LHCE and a second LHCE; speeds of this machine's tiny history scaled by the atom count): both policies,
their wall time and the cores' busy share while MD runs — whether the policy keeps every core busy at scale.

Usage::

    python benchmarks/study_throughput.py --preset tiny --out /tmp/throughput [--md-scale 0.5] [--json F]
    python benchmarks/study_throughput.py --scale-plan [--cores 16]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MD_KEYS = ("equilibration_nvt_ps", "equilibration_npt_ps", "production_ps")


def _mdbench() -> str:
    return shutil.which("mdbench", path=str(Path(sys.executable).parent)) or "mdbench"


def scaled_root(preset: str, factor: float) -> Path:
    """A temporary project root whose ``params/presets/<preset>.yaml`` has every MD length × ``factor``."""
    import yaml

    root = Path(tempfile.mkdtemp(prefix="mdbench-throughput-root-"))
    for name in ("templates", "notebooks"):
        (root / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "params", root / "params")
    path = root / "params" / "presets" / f"{preset}.yaml"
    data = yaml.safe_load(path.read_text())
    for key in MD_KEYS:
        data["protocol"][key] = round(float(data["protocol"][key]) * factor, 3)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


class CpuSampler:
    """Busy CPUs of the whole machine, sampled from ``/proc/stat`` every ``interval_s`` (time, busy CPUs)."""

    def __init__(self, interval_s: float = 1.0):
        self.interval_s, self.samples = interval_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _read() -> tuple[float, float]:
        values = [float(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        return values[3] + values[4], sum(values)

    def _run(self) -> None:
        last = self._read()
        ncpu = os.cpu_count() or 1
        while not self._stop.wait(self.interval_s):
            now = self._read()
            if now[1] > last[1]:
                self.samples.append((time.time(), ncpu * (1 - (now[0] - last[0]) / (now[1] - last[1]))))
            last = now

    def __enter__(self) -> "CpuSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def mean_between(self, t0: float, t1: float) -> float:
        inside = [busy for t, busy in self.samples if t0 <= t <= t1]
        return sum(inside) / len(inside) if inside else float("nan")


def md_window(run: Path) -> tuple[float, float, float, list]:
    """(first mdrun start, last mdrun end [unix s], ns charged, slices) of a run, from its record."""
    events = [json.loads(line) for line in (run / "run_record" / "events.jsonl").read_text().splitlines()]
    attempts = [json.loads(line) for line in (run / "run_record" / "attempts.jsonl").read_text().splitlines()]
    ends, starts, slices = [], [], []
    for e in events:
        if e["type"] == "mdrun_finished":
            end = datetime.fromisoformat(e["time_utc"].replace("Z", "+00:00")).timestamp()
            ends.append(end)
            starts.append(end - float(e["payload"]["wall_s"]))
            slices.append((e["payload"]["case"], e["payload"]["threads"], round(e["payload"]["wall_s"], 1)))
    latest = {}
    for a in attempts:
        latest[a["id"]] = a
    ns = sum(float(a.get("ns_charged", 0.0)) for a in latest.values())
    return min(starts), max(ends), ns, slices


def run_arm(name: str, base: Path, out: Path, preset: str, systems: list[str], threads: str, workers: int | None,
            env: dict) -> dict:
    run = out / name
    if run.exists():
        shutil.rmtree(run)
    shutil.copytree(base, run, symlinks=True)
    cmd = [_mdbench(), "study", "run", "--preset", preset, "--systems", *systems, "--out", str(run),
           "--through", "production", "--threads", threads, "--quiet"]
    if workers:
        cmd += ["--workers", str(workers)]
    print(f"[{name}] $ {' '.join(cmd)}", flush=True)
    with CpuSampler() as cpu:
        t0 = time.time()
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        t1 = time.time()
    if res.returncode != 0:
        print(res.stdout[-3000:], res.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"[{name}] study run failed (exit {res.returncode})")
    md0, md1, ns, slices = md_window(run)
    row = {"arm": name, "threads": threads, "workers": workers, "wall_s": round(t1 - t0, 1),
           "md_phase_s": round(md1 - t0, 1), "md_ns": round(ns, 4),
           "cpu_busy_pct_while_md": round(100 * cpu.mean_between(max(md0, t0), md1), 1),
           "cpu_busy_pct_all": round(100 * cpu.mean_between(t0, t1), 1), "slices": slices}
    print(f"[{name}] MD phase {row['md_phase_s']:.0f} s, {ns:.3f} ns, CPU {row['cpu_busy_pct_while_md']:.0f} % "
          f"while MD runs (whole arm {row['wall_s']:.0f} s)", flush=True)
    return row


#: Atoms per molecule of the force field (Li⁺, FSI⁻ N S2 O4 F2, DMC C3H6O3, TTE C5H4F8O).
ATOMS = {"Li": 1, "FSI": 9, "DMC": 12, "TTE": 18}


def scale_plan(cores: int) -> None:
    """Four paper-size cases on ``cores`` cores, both policies simulated (speeds from the tiny history)."""
    from dataclasses import replace

    from mdbench.engine import estimate as E
    from mdbench.engine.runner import find_gmx
    from mdbench.engine.stages import load_preset

    history = E.read_history(E.machine_key(find_gmx()), "tiny")
    if not all(E._complete(history.get(c)) for c in ("DE", "HCE", "LHCE")):
        raise SystemExit("no tiny history on this machine yet: run `mdbench study run --preset tiny --dry-run` first")
    tiny = {c.case: c for c in E.plan_costs(["DE", "HCE", "LHCE"], "tiny", cores, history=history)}
    paper = load_preset("paper")
    costs = []
    for name, case in (("DE", "DE"), ("HCE", "HCE"), ("LHCE", "LHCE"), ("LHCE-2", "LHCE")):
        natoms = sum(ATOMS[m] * n for m, n in paper["counts"][case].items())
        small = tiny[case]
        factor = small.natoms / natoms
        steps = {k: round(v * paper["protocol"][key] / load_preset("tiny")["protocol"][key])
                 for (k, key) in (("nvt", "equilibration_nvt_ps"), ("npt", "equilibration_npt_ps"),
                                  ("production", "production_ps")) for v in [small.md_steps[k]]}
        costs.append(replace(small, case=name, natoms=natoms, md_steps=steps,
                             steps_per_s={"1": small.speed(1) * factor},
                             setup_s=small.setup_s / factor, minimize_s=small.minimize_s / factor,
                             analysis_s=small.analysis_s / factor))
    print(f"four paper-size cases on {cores} cores (speeds: this machine's tiny history × atoms ratio; "
          f"{E.DEFAULT_EFFICIENCY} per thread doubling):")
    for label, sched in (("threads follow the work", E.simulate(costs, cores, policy="follow")),
                         ("--threads 1 (the old default)", E.simulate(costs, cores, policy="fixed", threads=1)),
                         (f"--threads {cores // 4}", E.simulate(costs, cores, policy="fixed", threads=cores // 4))):
        print(f"  {label:30s} {sched.total_s / 86400:6.2f} days; MD ends after {sched.md_end_s / 86400:6.2f} days; "
              f"cores busy {100 * sched.busy_fraction_during_md:5.1f} % while MD runs; threads "
              f"{ {c: v for c, v in sched.threads_used.items()} }")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--systems", nargs="+", default=["DE", "HCE", "LHCE"])
    parser.add_argument("--out", type=Path, help="Scratch folder for the base run and both arms.")
    parser.add_argument("--md-scale", type=float, default=1.0, help="Factor on every MD length of the preset.")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--json", type=Path, default=None, help="Write the result here.")
    parser.add_argument("--scale-plan", action="store_true", help="Only print the simulated paper-size plan.")
    parser.add_argument("--cores", type=int, default=16, help="Cores of the --scale-plan machine.")
    args = parser.parse_args()
    if args.scale_plan:
        scale_plan(args.cores)
        return 0
    if args.out is None:
        parser.error("--out is required (a scratch folder for the base run and both arms)")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    env = dict(os.environ)
    root = None
    if args.md_scale != 1.0:
        root = scaled_root(args.preset, args.md_scale)
        env["MDBENCH_ROOT"] = str(root)
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.out / "base"
    try:
        if not (base / "run_record").is_dir():
            cmd = [_mdbench(), "study", "run", "--preset", args.preset, "--systems", *args.systems, "--out",
                   str(base), "--through", "minimization", "--seed", str(args.seed), "--quiet"]
            print("$ " + " ".join(cmd), flush=True)
            subprocess.run(cmd, env=env, check=True, capture_output=True)
        plan = subprocess.run([_mdbench(), "study", "run", "--preset", args.preset, "--systems", *args.systems,
                               "--out", str(args.out / "plan"), "--dry-run", "--through", "production"],
                              env=env, capture_output=True, text=True)
        print(plan.stdout, flush=True)
        print(f"machine: {cores} cores, load average before {os.getloadavg()}", flush=True)
        old = run_arm("old", base, args.out, args.preset, args.systems, "1", cores, env)
        new = run_arm("new", base, args.out, args.preset, args.systems, "auto", None, env)
    finally:
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
    ratio = new["md_phase_s"] / old["md_phase_s"]
    per_ns = (new["md_phase_s"] / new["md_ns"]) / (old["md_phase_s"] / old["md_ns"])
    summary = {"preset": args.preset, "md_scale": args.md_scale, "cores": cores, "old": old, "new": new,
               "wall_ratio_new_over_old": round(ratio, 3), "wall_per_ns_ratio_new_over_old": round(per_ns, 3),
               "plan": plan.stdout}
    print(f"\nMD phase new ÷ old: {ratio:.3f} (target ≤ 0.8); per ns of MD: {per_ns:.3f}; CPU while MD runs: "
          f"old {old['cpu_busy_pct_while_md']:.0f} %, new {new['cpu_busy_pct_while_md']:.0f} % "
          f"(target ≥ {95 * cores:.0f} %)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
