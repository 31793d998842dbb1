"""Benchmark of the analysis room's one-pass reduction (run on demand, prints ratios measured in one run).

Usage::

    .venv/bin/python benchmarks/analysis_structure.py [--box-nm 4.0] [--ions 20] [--repeat 3]

Builds (once, cached under ``outputs/benchmarks/``) a real GROMACS trajectory of SPC/E water + NaCl with
the test fixture's protocol, then measures in this one process:

1. reading the trajectory with MDAnalysis (open tpr+xtc, ``for ts in u.trajectory: pass``) — the floor;
2. the whole one-pass reduction (:func:`mdbench.analysis.reduce.reduce_files`: molecular COMs, NPT-safe
   unwrapping, every RDF channel, neighbour table) — target ≤ 1.5 × (1);
3. the full case analysis without figures (:func:`mdbench.analysis.pipeline.analyze_files`), which adds
   the energy file, every estimator, states and results.json;
4. MDAnalysis ``InterRDF`` for the same channels on the same frames — target: (2) at least as fast;
5. peak traced memory (tracemalloc) of (2) against the size of the atoms × frames float32 coordinates.

Timings are best-of-``repeat`` wall times; the machine load is printed with them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))  # the sibling _timing module
from _timing import best_of  # noqa: E402


def _builder():
    spec = importlib.util.spec_from_file_location("_fixture", ROOT / "tests" / "analysis_structure" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_water_nacl



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--box-nm", type=float, default=4.0, help="cubic box edge [nm]")
    ap.add_argument("--ions", type=int, default=20, help="Na+ and Cl- each")
    ap.add_argument("--nsteps", type=int, default=2500, help="MD steps of 2 fs")
    ap.add_argument("--nstxtc", type=int, default=25, help="steps between frames")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="mdrun threads when building")
    a = ap.parse_args(argv)

    work = ROOT / "outputs" / "benchmarks" / f"analysis_water_{a.box_nm:g}nm_{a.ions}ions_{a.nsteps}_{a.nstxtc}"
    if not (work / "DONE").is_file():
        print(f"building the benchmark trajectory in {work} ...", flush=True)
        _builder()(work, box_nm=a.box_nm, n_ions=a.ions, nsteps=a.nsteps, nstxtc=a.nstxtc, threads=a.threads)
        (work / "DONE").write_text("ok\n")
    tpr, xtc, edr = work / "md.tpr", work / "md.xtc", work / "md.edr"

    import MDAnalysis as mda
    from MDAnalysis.analysis.rdf import InterRDF

    from mdbench.analysis.pipeline import analyze_files
    from mdbench.analysis.reduce import reduce_files

    u = mda.Universe(str(tpr), str(xtc))
    n_atoms, n_frames = u.atoms.n_atoms, len(u.trajectory)

    def read_only():
        """Open the tpr+xtc and iterate every frame (what reduce_files must do at least)."""
        uu = mda.Universe(str(tpr), str(xtc))
        for _ in uu.trajectory:
            pass

    rd = reduce_files(tpr, xtc)  # warm-up (imports, page cache)
    t_read = best_of(read_only, a.repeat)
    t_reduce = best_of(lambda: reduce_files(tpr, xtc), a.repeat)
    t_reduce_1 = best_of(lambda: reduce_files(tpr, xtc, workers=1), a.repeat)
    edges = rd.rdf_edges_nm
    nbins, rmax_A = edges.size - 1, float(edges[-1]) * 10.0
    na, sol_o, cl = (u.select_atoms(s) for s in ("resname NA", "resname SOL and element O", "resname CL"))

    def interrdf_all():
        InterRDF(na, sol_o, nbins=nbins, range=(0.0, rmax_A)).run()
        InterRDF(na, cl, nbins=nbins, range=(0.0, rmax_A)).run()
        InterRDF(na, na, nbins=nbins, range=(0.0, rmax_A), exclusion_block=(1, 1)).run()

    t_interrdf = best_of(interrdf_all, a.repeat)
    out = ROOT / "outputs" / "benchmarks" / "analysis_out"
    analyze_files(tpr, xtc, edr, out, guard_ps=0.0, figures=False)  # warm-up: jsonschema/pymbar imports
    t_full = best_of(lambda: analyze_files(tpr, xtc, edr, out, guard_ps=0.0, figures=False), a.repeat)

    tracemalloc.start()  # one process: tracemalloc does not see the workers' shared-memory arrays
    reduce_files(tpr, xtc, workers=1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    coords_bytes = n_atoms * n_frames * 3 * 4
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

    print(f"system: {n_atoms} atoms, {rd.com_nm.shape[1]} molecules, {n_frames} frames; load average {load:.2f}")
    print(f"read only (MDAnalysis)          {t_read:8.3f} s")
    print(f"one-pass reduction (ours), {rd.source['reduction_workers']} process(es) {t_reduce:6.3f} s   ratio to read "
          f"{t_reduce / t_read:6.2f}  (target <= 1.5)")
    print(f"one-pass reduction, 1 process   {t_reduce_1:8.3f} s   ratio to read {t_reduce_1 / t_read:6.2f}")
    print(f"full analyze_files, no figures  {t_full:8.3f} s   ratio to read {t_full / t_read:6.2f}")
    print(f"InterRDF, same 3 channels       {t_interrdf:8.3f} s   reduction / InterRDF {t_reduce / t_interrdf:6.2f}"
          f"  (1 process: {t_reduce_1 / t_interrdf:.2f}; target <= 1)")
    print(f"peak traced memory of reduction {peak / 2**20:8.1f} MiB  (atoms x frames float32 coords would be "
          f"{coords_bytes / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
