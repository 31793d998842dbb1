"""Peak memory of the whole case analysis on long paper-size trajectories (on demand; not a timed test).

Usage::

    .venv/bin/python benchmarks/analysis_memory.py [--prod-dir RUN/cases/DE/prod] [--frames 10000 30000 60000]
                                                   [--tile 3] [--max-gib 14] [--label after]
                                                   [--extrapolate-to 60000]

Input: a real production of the tiny preset (``prod.tpr``/``prod.xtc``/``prod.edr`` and ``../setup``; default
``outputs/runs/demo/cases/DE/prod``, written by ``make demo``), tiled 3 × 3 × 3 in space to paper size and in
time by sweeping its frames forth and back (``analysis_electrolyte.tile_case``: every frame a real MD frame,
every atom put in the box on its own as mdrun writes it). One forth-and-back sweep of the 401 frames is a
period of 800 frames, so it is written once and repeated, with each frame's step and time fields set to its
place in the long run (the XTC frame header: magic, atoms, step, time), up to the longest length asked for;
the shorter lengths are byte prefixes of that xtc (whole frames), so all lengths share one ~14 GB file.

For each length the analysis (:func:`mdbench.analysis.pipeline.analyze_files`, figures off, default workers)
runs in a fresh process; this script samples the proportional set size (PSS, ``/proc/PID/smaps_rollup``) of
that process and all its children every 0.25 s. PSS counts shared memory once, split among the processes
mapping it, so the sum is the machine's memory the analysis holds — workers' shared arrays included, which
tracemalloc and ``ru_maxrss`` miss or count twice. Printed per length: frames, wall time, peak PSS, the
per-molecule time series the analysis must keep (COMs of every molecule: frames × molecules × 3 × the
element size; since issue 23 a float32 scratch file on disk, not in memory — the header line says which),
peak ÷ time series and peak − time series where the series is in memory (the part that must not grow with
frames), and the ratio of each peak to the shortest length's peak (the baseline measured in the same run).

A straight-line fit of the peak over the measured lengths (two or more) prints the per-frame growth, split
into the COM series' own bytes and the rest, and the peak it predicts at ``--extrapolate-to`` frames (default
60,000): the figure to quote where the longest length is too slow for the machine (say that it is one).

``--max-gib`` caps each analysis' address space (``RLIMIT_AS``), so a code that would exhaust the shared
machine fails with a MemoryError (reported) instead of waking the out-of-memory killer.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from analysis_electrolyte import BENCH, tile_case  # noqa: E402

DEFAULT_PROD = ROOT / "outputs" / "runs" / "demo" / "cases" / "DE" / "prod"
SOURCE_FRAMES = 401  # a tiny-preset production: 400 ps written every 1 ps

_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from mdbench.analysis.pipeline import analyze_files
tpr, xtc, edr, out = sys.argv[1:5]
t0 = time.monotonic()
doc = analyze_files(tpr, xtc, edr, out, figures=False)
wall = time.monotonic() - t0
print(json.dumps({"wall_s": wall, "maxrss_GiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "children_maxrss_GiB": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20}))
"""


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _tree(root: int) -> list[int]:
    """``root`` and all its descendants (from /proc/*/stat)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, ppid in parent.items() if ppid in frontier]
        found += frontier
    return found


def long_xtc(period_xtc: Path, period: int, frames: int, dt_ps: float, dst: Path) -> Path:
    """Repeat the first ``period`` frames of ``period_xtc`` up to ``frames`` frames, renumbering each frame's
    step and time (big-endian XDR: int magic, int atoms, int step, float time at bytes 0, 4, 8, 12)."""
    import struct  # noqa: PLC0415

    import MDAnalysis as mda  # noqa: PLC0415

    if dst.is_file():
        return dst
    reader = mda.coordinates.XTC.XTCReader(str(period_xtc))
    offsets = [int(o) for o in reader._xdr.offsets] + [period_xtc.stat().st_size]
    reader.close()
    if len(offsets) - 1 < period:
        raise SystemExit(f"{period_xtc} has {len(offsets) - 1} frames, fewer than the period {period}")
    data = period_xtc.read_bytes()
    template = [bytearray(data[offsets[i]:offsets[i + 1]]) for i in range(period)]
    tmp = dst.with_suffix(".part")
    with open(tmp, "wb") as out:
        for k in range(frames):
            frame = template[k % period]
            frame[8:16] = struct.pack(">if", k, k * dt_ps)
            out.write(frame)
    tmp.replace(dst)
    return dst


def xtc_prefix(src: Path, frames: int) -> Path:
    """A copy of the first ``frames`` whole frames of ``src`` (next to it), made once."""
    import MDAnalysis as mda  # noqa: PLC0415

    dst = src.with_name(f"prod_{frames}f_prefix.xtc")
    if dst.is_file():
        return dst
    reader = mda.coordinates.XTC.XTCReader(str(src))
    offsets = reader._xdr.offsets
    if frames > len(offsets):
        raise SystemExit(f"{src} has {len(offsets)} frames, fewer than {frames}")
    end = int(offsets[frames]) if frames < len(offsets) else src.stat().st_size
    reader.close()
    tmp = dst.with_suffix(".part")
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        remaining = end
        while remaining:
            chunk = fin.read(min(remaining, 1 << 24))
            fout.write(chunk)
            remaining -= len(chunk)
    tmp.replace(dst)
    return dst


def measure(tpr: Path, xtc: Path, edr: Path, out: Path, max_gib: float) -> dict:
    """Run the analysis in a fresh process; sample the process tree's PSS; return the figures."""
    def limit() -> None:  # pragma: no cover - in the child
        cap = int(max_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(tpr), str(xtc), str(edr), str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit)
    peak = 0
    start = time.monotonic()
    while proc.poll() is None:
        peak = max(peak, sum(_pss_kib(pid) for pid in _tree(proc.pid)))
        time.sleep(0.25)
    stdout, stderr = proc.communicate()
    row = {"peak_pss_GiB": peak / 2**20, "returncode": proc.returncode, "elapsed_s": time.monotonic() - start}
    if proc.returncode == 0:
        row.update(json.loads(stdout.strip().splitlines()[-1]))
    else:
        row["error"] = (stderr.strip().splitlines() or ["?"])[-1]
    return row


def com_dtype_size() -> int:
    """Bytes per coordinate of the COM time series the current code keeps."""
    from mdbench.analysis import reduce as R  # noqa: PLC0415

    return int(getattr(R, "COM_DTYPE", __import__("numpy").float64)().itemsize)


def series_on_disk() -> bool:
    """Whether the shipped analysis keeps the COM series in a scratch file (``series_dir``, issue 23) rather
    than in memory."""
    import inspect  # noqa: PLC0415

    from mdbench.analysis import pipeline  # noqa: PLC0415

    return "series_dir=" in inspect.getsource(pipeline.analyze_files)


def extrapolate(rows: list[dict], frames: int, n_mol: int, size: int, in_memory: bool = True) -> dict | None:
    """Straight-line fit of peak PSS against frames (needs two lengths): the per-frame growth, split into the
    COM series' own ``n_mol × 3 × size`` bytes and the rest, and the peak it predicts at ``frames``."""
    import numpy as np  # noqa: PLC0415

    if len({r["frames"] for r in rows}) < 2:
        return None
    f = np.array([r["frames"] for r in rows], dtype=float)
    peak = np.array([r["peak_pss_GiB"] for r in rows])
    slope, intercept = np.polyfit(f, peak, 1)
    series = n_mol * 3 * size / 2**10 if in_memory else 0.0
    return {"lengths": len(rows), "intercept_GiB": float(intercept), "slope_KiB_per_frame": float(slope * 2**20),
            "series_KiB_per_frame": series, "rest_KiB_per_frame": float(slope * 2**20 - series),
            "frames": frames, "peak_GiB": float(intercept + slope * frames)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prod-dir", type=Path, default=DEFAULT_PROD, help="tiny-preset production folder")
    ap.add_argument("--frames", type=int, nargs="+", default=[10000, 30000, 60000], help="trajectory lengths")
    ap.add_argument("--total-frames", type=int, default=60000,
                    help="length of the one long xtc the lengths are prefixes of (written once)")
    ap.add_argument("--tile", type=int, default=3, help="N for the N x N x N supercell (3: paper size)")
    ap.add_argument("--max-gib", type=float, default=14.0, help="address-space cap of each analysis [GiB]")
    ap.add_argument("--label", default="current", help="name of the JSON written to outputs/benchmarks/")
    ap.add_argument("--prepare-only", action="store_true", help="write the trajectories and stop")
    ap.add_argument("--extrapolate-to", type=int, default=60000,
                    help="frames to extrapolate the peak to from a straight-line fit of the measured lengths")
    a = ap.parse_args(argv)
    if not (a.prod_dir / "prod.xtc").is_file():
        raise SystemExit(f"{a.prod_dir / 'prod.xtc'} not found: run `make demo` or give --prod-dir")
    longest = max(max(a.frames), a.total_frames)
    period = 2 * (SOURCE_FRAMES - 1)
    print(f"tiling {a.prod_dir} {a.tile}^3, one forth-and-back sweep ({period} frames), repeated to {longest} frames "
          "(cached)", flush=True)
    case = tile_case(a.prod_dir, a.tile, SOURCE_FRAMES, passes=2)
    tpr, edr = case / "prod.tpr", case / "prod.edr"
    import MDAnalysis as mda  # noqa: PLC0415

    dt_ps = float(mda.Universe(str(case / "prod.tpr"), str(case / "prod.xtc")).trajectory.dt)
    full = long_xtc(case / "prod.xtc", period, longest, dt_ps, case / f"prod_{longest}f.xtc")
    xtcs = {n: (full if n == longest else xtc_prefix(full, n)) for n in sorted(a.frames)}
    if a.prepare_only:
        return 0
    import MDAnalysis as mda  # noqa: PLC0415

    u = mda.Universe(str(tpr))
    n_atoms, n_mol = u.atoms.n_atoms, len(u.atoms.fragments)
    size = com_dtype_size()
    on_disk = series_on_disk()
    where = "in a scratch file (not in memory)" if on_disk else "in memory"
    rows = []
    print(f"{n_atoms:,} atoms, {n_mol:,} molecules; COM series {n_mol:,} x 3 x {size} B = "
          f"{n_mol * 3 * size / 2**10:.1f} KiB per frame, {where}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'frames':>7s} {'wall [s]':>9s} {'peak PSS [GiB]':>15s} {'COM series [GiB]':>17s} {'peak/series':>12s} "
          f"{'peak-series* [GiB]':>18s} {'peak/peak(first)':>17s} {'load':>5s}   (*series only if in memory)")
    for n in sorted(a.frames):
        load = os.getloadavg()[0]
        row = measure(tpr, xtcs[n], edr, BENCH / f"memory_{a.label}_{n}f", a.max_gib)
        series = n * n_mol * 3 * size / 2**30
        row.update({"frames": n, "atoms": n_atoms, "molecules": n_mol, "com_series_GiB": series,
                    "com_element_bytes": size, "com_series_on_disk": on_disk,
                    "com_series_bytes_per_frame": n_mol * 3 * size, "load_average_1min": load})
        rows.append(row)
        first = rows[0]["peak_pss_GiB"]
        if row["returncode"] == 0:
            print(f"{n:7d} {row['wall_s']:9.0f} {row['peak_pss_GiB']:15.2f} {series:17.2f} "
                  f"{row['peak_pss_GiB'] / series:12.2f} {row['peak_pss_GiB'] - (0 if on_disk else series):18.2f} "
                  f"{row['peak_pss_GiB'] / first:17.2f} {load:5.1f}", flush=True)
        else:
            print(f"{n:7d} failed (exit {row['returncode']}: {row['error']}); peak PSS before it "
                  f"{row['peak_pss_GiB']:.2f} GiB; COM series {series:.2f} GiB", flush=True)
    fit = extrapolate([r for r in rows if r["returncode"] == 0], a.extrapolate_to, n_mol, size, not on_disk)
    if fit:
        print(f"fit over {fit['lengths']} lengths: peak = {fit['intercept_GiB']:.2f} GiB + "
              f"{fit['slope_KiB_per_frame']:.1f} KiB/frame (COM series in memory {fit['series_KiB_per_frame']:.1f} KiB/frame, "
              f"the rest {fit['rest_KiB_per_frame']:.1f} KiB/frame); at {a.extrapolate_to} frames "
              f"{fit['peak_GiB']:.2f} GiB (extrapolated)", flush=True)
        rows.append({"extrapolation": fit})
    out = BENCH / f"analysis_memory_{a.label}.json"
    out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
