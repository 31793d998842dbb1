"""Paper-size cases on one machine: setup and minimisation times from a run record, and an NVT smoke run.

Usage::

    mdbench study run --preset paper --systems DE HCE LHCE --through minimization --threads 2 --out RUN
    .venv/bin/python benchmarks/paper_size.py RUN [--smoke-ps 2] [--threads 2] [--systems DE HCE LHCE]

For every case whose minimisation is valid, prints what the run record and the setup folder say (atoms, box,
setup audits, packmol wall time, setup stage wall time, minimisation steps, Fmax and wall time, the load
average when each stage ran), then runs a short NVT smoke (the study's ``nvt`` protocol with the paper
cut-off, velocities at 298.15 K, ≤ 10 ps) from the minimised structure in ``RUN/../paper_smoke/<case>/`` —
outside the run directory, so the study's budget and record are untouched. The smoke proves the topology
runs (no LINCS warning, finite energies, every step done, T within 298.15 ± 15 K over its second half) and
gives GROMACS' own CPU ns/day. A JSON summary goes beside the smoke folders.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np


def _events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "run_record" / "events.jsonl").read_text().splitlines() if line]


def _load_at(samples: list[tuple[float, float]], start: float, end: float) -> str:
    inside = [v for t, v in samples if start <= t <= end]
    return f"{min(inside):.1f}-{max(inside):.1f}" if inside else "n/a"


def _load_samples(path: Path | None) -> list[tuple[float, float]]:
    """(epoch seconds, 1-min load) from a log of ``date -u +%FT%TZ`` + ``/proc/loadavg`` lines, if given."""
    out = []
    if path and path.is_file():
        for line in path.read_text().splitlines():
            parts = line.split()
            try:
                out.append((datetime.fromisoformat(parts[0].replace("Z", "+00:00")).timestamp(), float(parts[1])))
            except (ValueError, IndexError):
                continue
    return out


def case_facts(run: Path, case: str, loads: list[tuple[float, float]]) -> dict:
    """Setup and minimisation facts of one case from its files and the run record."""
    setup = run / "cases" / case / "setup"
    build = json.loads((setup / "build.json").read_text())
    audits = {a["name"]: a["passed"] for a in build["audits"]}
    packmol_s = (setup / "packed.pdb").stat().st_mtime - (setup / "packmol.inp").stat().st_mtime
    facts = {"case": case, "atoms": build["n_atoms"], "box_nm": round(build["box_nm"][0], 3), "audits": audits,
             "audits_passed": all(audits.values()), "packmol_wall_s": round(packmol_s, 1)}
    for ev in _events(run):
        p = ev["payload"]
        t = datetime.fromisoformat(ev["time_utc"].replace("Z", "+00:00")).timestamp()
        if ev["type"] == "stage_finished" and p.get("system") == case:
            key = {"study/10_setup": "setup", "study/20_minimize": "minimize"}.get(p.get("stage"))
            if key:
                facts[f"{key}_stage_wall_s"] = round(p["duration_s"], 1)
                facts[f"{key}_load"] = _load_at(loads, t - p["duration_s"], t)
        if ev["type"] == "minimization_run" and p.get("case") == case:
            facts.update(em_steps=p.get("steps"), em_mdrun_wall_s=round(p["wall_s"], 1), em_threads=p.get("threads"))
        if ev["type"] == "gate_evaluated" and p.get("case") == case and p.get("stage") == "minimization":
            facts.update(em_gate_passed=p.get("passed"), em_fmax_kJ_mol_nm=(p.get("evidence") or {}).get("fmax_kJ_mol_nm"),
                         em_min_distance_nm=next((c["value"] for c in p.get("checks", [])
                                                  if c["name"] == "min_intermolecular_distance_nm"), None))
    return facts


def smoke(run: Path, case: str, length_ps: float, threads: int) -> dict:
    """NVT smoke from the minimised structure; GROMACS' ns/day and the topology checks."""
    import pyedr  # noqa: PLC0415

    from mdbench.engine import protocols as P  # noqa: PLC0415
    from mdbench.engine.runner import get_runner  # noqa: PLC0415
    from mdbench.engine.stages import load_preset  # noqa: PLC0415

    wd = run.parent / "paper_smoke" / case
    wd.mkdir(parents=True, exist_ok=True)
    cutoff = float(load_preset("paper")["cutoff_nm"])
    timing = P.Timing(dt_fs=2.0, length_ps=length_ps, energy_interval_ps=0.1, log_interval_ps=0.5,
                      xtc_interval_ps=1.0)
    P.write_mdp(P.load_protocol("nvt"), wd / "smoke.mdp", {"rcoulomb": cutoff, "rvdw": cutoff}, timing=timing,
                seed=2026)
    runner = get_runner("cli")
    em = run / "cases" / case / "em" / "em.gro"
    runner.grompp(wd / "smoke.mdp", em, run / "cases" / case / "setup" / "topol.top", wd / "smoke.tpr")
    res = runner.mdrun(wd / "smoke.tpr", "smoke", threads=threads)
    log = (wd / "smoke.log").read_text(errors="replace")
    perf = re.findall(r"Performance:\s+([0-9.]+)\s+([0-9.]+)", log)
    edr = pyedr.edr_to_dict(str(wd / "smoke.edr"))
    temp, epot = np.asarray(edr["Temperature"]), np.asarray(edr["Potential"])
    half = temp[temp.size // 2:]
    checks = {"mdrun_ok": res.ok, "finished": "Finished mdrun" in log, "no_lincs_warning": "LINCS WARNING" not in log,
              "energies_finite": bool(np.all(np.isfinite(epot))),
              "temperature_298_15pm15": bool(abs(float(half.mean()) - 298.15) <= 15.0)}
    return {"smoke_ps": length_ps, "smoke_threads": threads, "smoke_wall_s": round(res.wall_s, 1),
            "ns_per_day": float(perf[-1][0]) if perf else float("nan"),
            "smoke_T_second_half_K": round(float(half.mean()), 2), "smoke_checks": checks,
            "smoke_passed": all(checks.values()), "smoke_load_1min": round(os.getloadavg()[0], 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="run directory of a paper-preset study")
    ap.add_argument("--systems", nargs="+", default=["DE", "HCE", "LHCE"])
    ap.add_argument("--smoke-ps", type=float, default=2.0, help="NVT smoke length [ps] (<= 10)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-smoke", action="store_true")
    ap.add_argument("--load-log", type=Path, default=None, help="load-average log to quote per stage")
    a = ap.parse_args(argv)
    a.run = a.run.resolve()  # grompp and mdrun run in the smoke folder
    if not 0 < a.smoke_ps <= 10:
        raise SystemExit("--smoke-ps must be in (0, 10] ps")
    loads = _load_samples(a.load_log)
    rows = []
    for case in a.systems:
        if not (a.run / "cases" / case / "em" / "em.gro").is_file():
            print(f"{case}: not minimised yet; skipped", flush=True)
            continue
        row = case_facts(a.run, case, loads)
        if not a.no_smoke:
            t0 = time.monotonic()
            row.update(smoke(a.run, case, a.smoke_ps, a.threads))
            row["smoke_total_s"] = round(time.monotonic() - t0, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = a.run.parent / "paper_smoke" / "summary.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"written {out}")
    return 0 if all(r.get("audits_passed") and r.get("smoke_passed", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
