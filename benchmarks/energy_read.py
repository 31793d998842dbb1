"""Energy-file reading: the numpy reader (:mod:`mdbench.analysis.edrfile`) against pyedr on a run's files.

Usage::

    .venv/bin/python benchmarks/energy_read.py [--run outputs/runs/demo] [--repeats 5] [--audit]

For every case of the run it times, interleaved round by round so that load drift hits both alike, the two
ways :func:`mdbench.analysis.thermo.read_energy_file` can parse (without its cache) the equilibration
``equil/npt.edr`` and the production ``prod/prod.edr`` — the files the SAEO audit and the analysis read:

* **pyedr** — ``pyedr.read_edr`` + ``get_unit_dictionary`` and one array conversion (the reader before);
* **numpy** — :func:`mdbench.analysis.edrfile.read_edr` and the same dict building.

It first checks that both give bit-identical times and terms, then prints per file the frames, the best time
of each and the median of the per-round ratios pyedr / numpy (with its quartiles), and the same for all files
together. With ``--audit`` it also times the SAEO audit of the run (without and with the canonical reanalysis),
each in a fresh process as ``mdbench audit`` runs — so that no energy file is in the reader's cache — once with
the numpy reader and once with it declining every file (pyedr reads them all, as before), interleaved.
Nothing here is a test: the times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))  # the sibling _timing module
from _timing import interleaved_times, round_ratio_quartiles  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="outputs/runs/demo", help="run directory with cases/<case>/{equil,prod}")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--audit", action="store_true", help="also time fresh-process audits with either reader")
    args = ap.parse_args(argv)

    from mdbench.analysis import thermo

    files = sorted(Path(args.run).glob("cases/*/equil/npt.edr")) + sorted(Path(args.run).glob("cases/*/prod/prod.edr"))
    if not files:
        print(f"no cases/*/equil/npt.edr or cases/*/prod/prod.edr under {args.run}: run `make demo` or pass --run",
              file=sys.stderr)
        return 2

    def numpy_read(p: Path):
        return thermo._read_energy_file(p)  # the numpy reader (it declines nothing on these files: checked below)

    def pyedr_read(p: Path):
        thermo._check_edr_header(p)
        return thermo._read_energy_file_pyedr(p)

    for p in files:  # the same numbers, bit for bit, before anything is timed
        a, b = numpy_read(p), pyedr_read(p)
        assert np.array_equal(a.time_ps.view(np.uint64), b.time_ps.view(np.uint64)) and list(a.terms) == list(b.terms)
        assert all(np.array_equal(a.terms[k].view(np.uint64), b.terms[k].view(np.uint64)) for k in a.terms), p
        assert a.units == b.units, p

    fns = {}
    for p in files:
        fns[f"pyedr {p}"] = lambda p=p: pyedr_read(p)
        fns[f"numpy {p}"] = lambda p=p: numpy_read(p)
    fns["pyedr all"] = lambda: [pyedr_read(p) for p in files]
    fns["numpy all"] = lambda: [numpy_read(p) for p in files]
    times = interleaved_times(fns, args.repeats)

    print(f"{'file':<44} {'frames':>7} {'pyedr [s]':>10} {'numpy [s]':>10} {'pyedr/numpy (q1–q3)':>24}")
    frames_all = 0
    for label in [str(p) for p in files] + ["all"]:
        if label == "all":
            frames, name = frames_all, f"all {len(files)} files"
        else:
            frames = numpy_read(Path(label)).time_ps.size
            frames_all += frames
            name = str(Path(label).relative_to(args.run))
        q1, q2, q3 = round_ratio_quartiles(times, f"pyedr {label}", f"numpy {label}")
        print(f"{name:<44} {frames:>7} {min(times[f'pyedr {label}']):>10.4f} {min(times[f'numpy {label}']):>10.4f} "
              f"{q2:>10.0f} ({q1:.0f}–{q3:.0f})")
    if args.audit:
        _audit_times(Path(args.run), args.repeats)
    return 0


#: One audit in a fresh process; argv: reader (numpy|pyedr), reanalysis (yes|no), run directory. Prints seconds.
_AUDIT_DRIVER = """
import logging, sys, tempfile, time
from pathlib import Path
logging.disable(logging.WARNING)
from mdbench.analysis import edrfile
if sys.argv[1] == "pyedr":
    def decline(path):
        raise edrfile.Unsupported("benchmark: every file read by pyedr")
    edrfile.read_edr = decline
from mdbench.audit import audit_run
out = Path(tempfile.mkdtemp(prefix="mdbench-energy-read-"))
t0 = time.perf_counter()
audit_run(Path(sys.argv[3]), None, out / "audit", reanalysis=sys.argv[2] == "yes")
print(time.perf_counter() - t0)
"""


def _audit_times(run: Path, repeats: int) -> None:
    """Fresh-process audits (imports excluded) with the numpy reader and with pyedr, interleaved."""
    for reanalysis in ("no", "yes"):
        times: dict[str, list[float]] = {"numpy": [], "pyedr": []}
        for _ in range(repeats):
            for reader in times:
                res = subprocess.run([sys.executable, "-c", _AUDIT_DRIVER, reader, reanalysis, str(run)],
                                     capture_output=True, text=True, check=True)
                times[reader].append(float(res.stdout.strip().splitlines()[-1]))
        q1, q2, q3 = round_ratio_quartiles(times, "pyedr", "numpy")
        print(f"audit (reanalysis {reanalysis:>3}): pyedr best {min(times['pyedr']):.2f} s, numpy best "
              f"{min(times['numpy']):.2f} s, saved {min(times['pyedr']) - min(times['numpy']):.2f} s; "
              f"ratio {q2:.2f} ({q1:.2f}–{q3:.2f})")


if __name__ == "__main__":
    raise SystemExit(main())
