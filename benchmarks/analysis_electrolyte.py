"""Benchmark of the whole case analysis on a real electrolyte production run (on demand; ratios in one run).

Usage::

    .venv/bin/python benchmarks/analysis_electrolyte.py [--prod-dir RUN/cases/LHCE/prod] [--tile 3] [--passes 4]
                                                        [--frames N] [--repeat 3] [--quick]

Input: the production folder of one case (``prod.tpr``, ``prod.xtc``, ``prod.edr``, and the case's
``../setup/topol.top``). Default: ``outputs/runs/demo/cases/LHCE/prod`` (written by ``make demo``); when it
is missing the micro LHCE case is simulated first with ``mdbench study run --preset micro --no-analysis``
(a few minutes, cached under ``outputs/benchmarks/``).

``--tile N`` replicates the periodic trajectory N × N × N. The replicated coordinates are an exact
trajectory of the supercell (every image moves like its original; atoms ordered by species blocks as in a
topology built for the big box; every atom put in the box on its own, as mdrun writes it, so molecules on a
face come out split as in a real production), so a tiny-preset run tiled 3 × 3 × 3
(56,160 atoms, 1,080 Li⁺) has the size of the paper preset (≈ 50,000 atoms, 960 Li⁺) for reading and
analysis cost without a week of MD on two cores. The energy file is the original one (its length, not the
atom count, sets its reading cost).

Measured in this one process, best of ``--repeat`` wall times:

1. reading the trajectory with MDAnalysis: open tpr + xtc and iterate every frame (the baseline);
2. reading every input of the analysis with MDAnalysis: (1) plus the energy file through
   ``MDAnalysis.auxiliary.EDR.EDRReader`` (pyedr);
3. the one-pass reduction (:func:`mdbench.analysis.reduce.reduce_files`), with its default worker
   processes and in one process (``workers=1``);
4. the whole case analysis without figures (:func:`mdbench.analysis.pipeline.analyze_files`), both ways;
4'. the same analysis with the trajectory pass already done (``reduce_files`` returns the reduction of (3)
   at once; the energy child, the estimators and the validated results.json as in (4)): the *floor* that
   no faster trajectory pass can go below — the fixed costs of a case;
5. peak traced memory (tracemalloc) of (3) in one process.

The measurements are interleaved (each round runs all of them in turn); printed are the best of
``--repeat`` rounds and the median of the ratios within each round, so that slow drifts of a shared
machine's load hit numerator and denominator alike.

Printed ratios: (3)/(1), (4)/(2), (4')/(2) and (4)/(1), with the quartiles of the per-round (4)/(2). The issue's
target is (4) ≤ 1.5 × reading. ``--quick`` times only (1), (2), (4) and (4'), so more rounds fit in the same time
(on the shared 2-core VM one round's ratio moves by ± 0.15: read the median and its quartiles).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))  # the sibling _timing module
from _timing import interleaved_times, round_ratio, round_ratio_quartiles  # noqa: E402
DEFAULT_PROD = ROOT / "outputs" / "runs" / "demo" / "cases" / "LHCE" / "prod"
BENCH = ROOT / "outputs" / "benchmarks"



def micro_case() -> Path:
    """Simulate (once) the micro LHCE case through production and return its production folder."""
    run = BENCH / "micro_lhce_run"
    prod = run / "cases" / "LHCE" / "prod"
    if not (prod / "prod.xtc").is_file():
        print(f"simulating the micro LHCE case into {run} (a few minutes) ...", flush=True)
        subprocess.run([sys.executable, "-m", "mdbench", "study", "run", "--preset", "micro", "--systems", "LHCE",
                        "--out", str(run), "--no-analysis"], check=True)
    return prod


def pass_order(n_frames: int, passes: int) -> list[int]:
    """Frame indices for ``passes`` back-and-forth sweeps of 0..n_frames-1 (turning frames not repeated)."""
    order = list(range(n_frames))
    for p in range(1, passes):
        sweep = list(range(n_frames - 2, -1, -1)) if p % 2 else list(range(1, n_frames))
        order += sweep
    return order


def tile_case(prod: Path, n: int, frames: int, passes: int = 1) -> Path:
    """Write (once) an N×N×N supercell tpr + xtc of the first ``frames`` frames; return its folder.

    ``passes`` > 1 lengthens the trajectory by sweeping the frames forth and back (every step stays a real
    MD step, run forwards or backwards): a long trajectory for reading and analysis cost.
    """
    import MDAnalysis as mda
    from MDAnalysis.coordinates.memory import MemoryReader

    tag = f"_{passes}passes" if passes > 1 else ""
    out = BENCH / f"tiled_{prod.parent.name}_{n}x{n}x{n}_{frames}f{tag}_wrapped"
    if (out / "DONE").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    setup = prod.parent / "setup"
    top = (setup / "topol.top").read_text()
    head, sep, mols = top.partition("[ molecules ]")
    if not sep:
        raise SystemExit(f"{setup / 'topol.top'} has no [ molecules ] section")
    lines = [ln.split() for ln in mols.splitlines() if ln.strip() and not ln.strip().startswith(";")]
    # species stay in consecutive blocks as in a topology built for the big box: LI ×27 count, FSI ×27, ...
    (out / "topol.top").write_text(head + sep + "\n" + "\n".join(f"{name} {int(count) * n ** 3}"
                                                                for name, count in lines) + "\n")
    for itp in setup.glob("*.itp"):
        shutil.copy(itp, out / itp.name)
    u = mda.Universe(str(prod / "prod.tpr"), str(prod / "prod.xtc"))
    n_frames = min(frames, len(u.trajectory))
    dims = np.array([ts.dimensions.copy() for ts in u.trajectory[:n_frames]])
    if not np.all(dims[:, 3:] == 90.0):
        raise SystemExit("tiling is implemented for orthorhombic boxes only")
    shifts = np.array([(i, j, k) for i in range(n) for j in range(n) for k in range(n)], dtype=np.float32)
    # atom order of the supercell: for each run of one residue name (one [ molecules ] line), every image
    resn = u.atoms.resnames
    starts = [0] + [a for a in range(1, resn.size) if resn[a] != resn[a - 1]] + [resn.size]
    if len(starts) - 1 != len(lines):
        raise SystemExit("tiling expects one consecutive block of atoms per [ molecules ] line")
    perm = np.concatenate([np.arange(a, b) for a, b in zip(starts[:-1], starts[1:]) for _ in range(n ** 3)])
    image = np.concatenate([np.full(b - a, i) for a, b in zip(starts[:-1], starts[1:]) for i in range(n ** 3)])
    offset = shifts[image]
    u.trajectory[0]
    whole = u.atoms.unwrap(compound="fragments")  # grompp checks excluded-atom distances: whole molecules
    merged = mda.Merge(*[u.atoms[a:b] for a, b in zip(starts[:-1], starts[1:]) for _ in range(n ** 3)])
    merged.atoms.positions = whole[perm] + offset * dims[0, :3]
    big_dims0 = dims[0].copy()
    big_dims0[:3] *= n
    merged.dimensions = big_dims0
    merged.atoms.write(str(out / "start.gro"))
    mdp = re.sub(r"(?m)^\s*(continuation|gen[-_]vel)\s*=.*$", "", (prod / "prod.mdp").read_text())
    (out / "prod.mdp").write_text(mdp + "\ngen-vel = no\n")
    subprocess.run(["gmx", "-quiet", "grompp", "-f", "prod.mdp", "-c", "start.gro", "-p", "topol.top", "-o",
                    "prod.tpr", "-maxwarn", "5"], cwd=out, check=True, capture_output=True)
    shutil.copy(prod / "prod.edr", out / "prod.edr")
    ut = mda.Universe(str(out / "prod.tpr"))
    ut.load_new(np.zeros((1, ut.atoms.n_atoms, 3), dtype=np.float32), format=MemoryReader)
    dt = float(u.trajectory.dt)
    # continuous atom paths: the stored frames wrap atoms into the small box, and a jump by one small-box
    # length is not a periodic image in the supercell, so atoms are unwrapped (minimum-image steps from
    # whole molecules at frame 0) before they are replicated
    path = whole.astype(np.float64)
    prev = u.trajectory[0].positions.astype(np.float64)
    with mda.Writer(str(out / "prod.xtc"), ut.atoms.n_atoms) as w:
        for k, f in enumerate(pass_order(n_frames, passes)):
            ts = u.trajectory[f]
            x = ts.positions.astype(np.float64)
            if k:
                step = x - prev
                path += step - ts.dimensions[:3] * np.round(step / ts.dimensions[:3])
            prev = x
            big = ts.dimensions.copy()
            big[:3] *= n
            x = path[perm] + offset * ts.dimensions[:3]
            # every atom put in the box on its own, as mdrun writes its output: molecules straddling a face
            # come out split, so the reduction pays for making them whole as on a real production run
            x -= big[:3] * np.floor(x / big[:3])
            ut.atoms.positions = x.astype(np.float32)
            ut.dimensions = big
            ut.trajectory.ts.time = k * dt
            w.write(ut.atoms)
    (out / "DONE").write_text("ok\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prod-dir", type=Path, default=None, help="production folder (prod.tpr/xtc/edr)")
    ap.add_argument("--tile", type=int, default=1, help="replicate the box N×N×N (1 = as simulated)")
    ap.add_argument("--frames", type=int, default=100_000, help="at most this many frames of the tiled trajectory")
    ap.add_argument("--passes", type=int, default=1,
                    help="with --tile: sweep the frames forth and back this many times (a longer trajectory)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--structure-every", type=int, default=None,
                    help="structure-frame stride to impose (default: the registered rule for this length); "
                         "e.g. 24 = what the paper preset's 60,000-frame production gets from the default "
                         "structure_max_frames = 2500")
    ap.add_argument("--quick", action="store_true",
                    help="time only the reads and the whole analysis (more rounds in the same time; no memory)")
    a = ap.parse_args(argv)

    prod = a.prod_dir or (DEFAULT_PROD if (DEFAULT_PROD / "prod.xtc").is_file() else micro_case())
    if a.tile > 1:
        prod = tile_case(prod, a.tile, a.frames, a.passes)
    tpr, xtc, edr = prod / "prod.tpr", prod / "prod.xtc", prod / "prod.edr"

    import warnings

    import MDAnalysis as mda
    from MDAnalysis.auxiliary.EDR import EDRReader

    import mdbench.analysis.reduce as reduce_module
    from mdbench.analysis.pipeline import AnalysisSettings, analyze_files
    from mdbench.analysis.reduce import reduce_files

    warnings.filterwarnings("ignore", message="Could not find unit type")

    def read_xtc() -> None:
        """Open tpr + xtc and iterate every frame."""
        uu = mda.Universe(str(tpr), str(xtc))
        for _ in uu.trajectory:
            pass

    def read_inputs() -> None:
        """Everything the analysis reads: tpr + xtc frames and the energy file."""
        read_xtc()
        EDRReader(str(edr))

    out = BENCH / "analysis_electrolyte_out"
    settings = AnalysisSettings()
    n_total = len(mda.Universe(str(tpr), str(xtc)).trajectory)
    if a.structure_every:
        settings.structure_max_frames = -(-n_total // a.structure_every)
    kw = {"structure_max_frames": settings.structure_max_frames}
    rd = reduce_files(tpr, xtc, **kw)  # warm-up: imports, page cache
    analyze_files(tpr, xtc, edr, out, figures=False, settings=settings)

    def floor() -> None:
        """(4'): the whole analysis with the trajectory pass already done (its result handed back at once)."""
        with mock.patch.object(reduce_module, "reduce_files", lambda *args, **kwargs: rd):
            analyze_files(tpr, xtc, edr, out, figures=False, settings=settings)

    measured = {"xtc": read_xtc, "inputs": read_inputs,
                "full": lambda: analyze_files(tpr, xtc, edr, out, figures=False, settings=settings),
                "floor": floor}
    if a.quick:
        times = interleaved_times(measured, a.repeat)
        q1, q2, q3 = round_ratio_quartiles(times, "full", "inputs")
        print(f"input: {prod}\nsystem: {rd.source['n_atoms']} atoms, {rd.n_frames} frames; structure on every "
              f"{rd.structure_every}. frame")
        print(f"(1) read tpr+xtc {min(times['xtc']):.3f} s; (2) read tpr+xtc+edr {min(times['inputs']):.3f} s; "
              f"(4) whole analysis {min(times['full']):.3f} s (best of {a.repeat})")
        print(f"    (4)/(2) over {a.repeat} rounds: median {q2:.2f}, quartiles {q1:.2f}-{q3:.2f}; best/best "
              f"{min(times['full']) / min(times['inputs']):.2f}   target <= 1.5")
        x1, x2, x3 = round_ratio_quartiles(times, "full", "xtc")
        print(f"    (4)/(1), against reading tpr + xtc only: median {x2:.2f}, quartiles {x1:.2f}-{x3:.2f}")
        print(floor_line(times, a.repeat))
        return 0
    times = interleaved_times({
        **measured,
        "reduce": lambda: reduce_files(tpr, xtc, **kw),
        "reduce_1": lambda: reduce_files(tpr, xtc, workers=1, **kw),
        "full_1": lambda: analyze_files(tpr, xtc, edr, out, figures=False, settings=settings, workers=1),
    }, a.repeat)
    t = {k: min(v) for k, v in times.items()}
    t_xtc, t_inputs, t_reduce, t_full = t["xtc"], t["inputs"], t["reduce"], t["full"]
    # memory of the one-process pass: tracemalloc sees numpy's allocations, not the shared-memory arrays
    # the worker processes fill (the same arrays, plus one chunk buffer per worker)
    tracemalloc.start()
    reduce_files(tpr, xtc, workers=1, **kw)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tracemalloc.start()
    reduce_files(tpr, xtc, stop=len(rd.time_ps) // 2, workers=1, **kw)
    _, peak_half = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    per_frame = (peak - peak_half) / (len(rd.time_ps) - len(rd.time_ps) // 2)
    n_atoms, n_frames = rd.source["n_atoms"], rd.n_frames
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    n_centres, n_sites = rd.centre_mol.size, sum(c.atom_indices.size for c in rd.channels)

    print(f"input: {prod}")
    print(f"system: {n_atoms} atoms, {rd.com_nm.shape[1]} molecules, {n_frames} frames, {n_centres} centres x "
          f"{n_sites} sites ({rd.source['pair_search']}); structure on every {rd.structure_every}. frame; "
          f"load average {load:.2f}")
    print(f"(1) read tpr+xtc (MDAnalysis)           {t_xtc:8.3f} s")
    print(f"(2) read tpr+xtc+edr (MDAnalysis)       {t_inputs:8.3f} s")
    print(f"(3) one-pass reduction, {rd.source['reduction_workers']} process(es)     {t_reduce:8.3f} s   "
          f"(3)/(1) {t_reduce / t_xtc:6.2f}   [1 process: {t['reduce_1']:.3f} s, {t['reduce_1'] / t_xtc:.2f}]")
    print(f"(4) whole analysis, no figures          {t_full:8.3f} s   (4)/(2) {t_full / t_inputs:6.2f}"
          f"   (4)/(1) {t_full / t_xtc:6.2f}   target <= 1.5   [1 process: {t['full_1']:.3f} s, (4)/(2) "
          f"{t['full_1'] / t_inputs:.2f}]")
    q1, _, q3 = round_ratio_quartiles(times, "full", "inputs")
    print(f"    median of the {a.repeat} rounds' own ratios: (3)/(1) {round_ratio(times, 'reduce', 'xtc'):.2f}, "
          f"(4)/(2) {round_ratio(times, 'full', 'inputs'):.2f} (quartiles {q1:.2f}-{q3:.2f}); 1 process: (3)/(1) "
          f"{round_ratio(times, 'reduce_1', 'xtc'):.2f}, (4)/(2) {round_ratio(times, 'full_1', 'inputs'):.2f}")
    print(floor_line(times, a.repeat))
    print(f"(5) peak traced memory of (3), 1 process {peak / 2 ** 20:7.1f} MiB  (atoms x frames float32 "
          f"coordinates: {n_atoms * n_frames * 12 / 2 ** 20:.1f} MiB)")
    print(f"    growth per frame (all frames vs half) {per_frame / 1024:8.1f} KiB   (atoms x 12 B = "
          f"{n_atoms * 12 / 1024:.1f} KiB; molecules x 24 B of float64 COMs = {rd.com_nm.shape[1] * 24 / 1024:.1f} KiB)")
    return 0


def floor_line(times: dict[str, list[float]], repeat: int) -> str:
    """The (4') line: the analysis with the trajectory pass already done, as a ratio to reading the inputs."""
    q1, q2, q3 = round_ratio_quartiles(times, "floor", "inputs")
    return (f"(4') same, trajectory pass already done {min(times['floor']):8.3f} s   (4')/(2) median of {repeat} "
            f"rounds {q2:.2f} (quartiles {q1:.2f}-{q3:.2f}): the fixed costs, which no faster pass goes below")


if __name__ == "__main__":
    sys.exit(main())
