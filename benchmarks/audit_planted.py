"""Issue 45's planted defects on a finished three-case run: does the audit lower the item each names, and do the
honest controls leave every item where the honest run has it?

Usage::

    .venv/bin/python benchmarks/audit_planted.py RUN_DIR [--bundle BUNDLE] [--seed N] [--keep DIR]

``RUN_DIR`` is only read: each instance of :func:`mdbench.episode.spec_defects.planted_defects` (two per class:
coverage, protocol, trajectory, next actions) and each honest control is planted in its own copy, and every copy
is audited with the canonical reanalysis (``mdbench.audit.audit_run``). The cases, observables and magnitudes
are drawn from ``MDBENCH_TEST_SEED`` (``--seed N`` sets it; tests/_testseed.py ``seed_for``), as in
tests/episode/test_oracle_spec_defects.py. The bundle defaults to the one the demo builds beside the run
(``<outputs>/bundles/<preset>`` for ``<outputs>/runs/<name>``), else the project's frozen cases.

Prints one row per instance (class, instance, case, observable, what was planted, named item, the finding codes
on it, item honest → planted, composite honest → planted, caught) and per control (every item and the composite
equal). Exit status 1 when an instance is missed or a control moves an item.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _seed_for(purpose: str) -> int:
    spec = importlib.util.spec_from_file_location("_testseed", ROOT / "tests" / "_testseed.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.seed_for(purpose)


def _bundle_for(run_dir: Path) -> Path | None:
    """``<outputs>/bundles/<preset>`` of a demo run ``<outputs>/runs/<name>`` (its cases' preset), if present."""
    bundles = run_dir.parent.parent / "bundles"
    for case in ("DE", "HCE", "LHCE"):
        build = run_dir / "cases" / case / "setup" / "build.json"
        try:
            preset = json.loads(build.read_text()).get("preset")
        except (OSError, ValueError):
            continue
        if isinstance(preset, str) and (bundles / preset).is_dir():
            return bundles / preset
    found = sorted(p for p in bundles.glob("*") if (p / "bundle_checksums.sha256").is_file())
    return found[0] if len(found) == 1 else None


def _items(out: Path) -> tuple[dict[str, float], float]:
    doc = json.loads((out / "saeo.json").read_text())
    return {i: v["final"] for i, v in doc["items"].items()}, float(doc["composite"]["final"])


def _codes(out: Path, items: tuple[str, ...]) -> str:
    """The finding codes on ``items``, in order, without repeats."""
    doc = json.loads((out / "saeo.json").read_text())
    return ", ".join(dict.fromkeys(f["code"] for f in doc["findings"] if f.get("item") in items)) or "none"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--bundle", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=None, help="MDBENCH_TEST_SEED for the draws (default: as set)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the planted copies and audits here")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    if args.seed is not None:
        os.environ["MDBENCH_TEST_SEED"] = str(args.seed)
    from mdbench.audit import audit_run
    from mdbench.episode.spec_defects import plant, planted_defects

    run_dir = args.run.resolve()
    if not (run_dir / "run_record").is_dir():
        print(f"{run_dir}: not a run directory (no run_record/); run `make demo` or pass a run", file=sys.stderr)
        return 2
    bundle = args.bundle or _bundle_for(run_dir)
    work = args.keep or Path(tempfile.mkdtemp(prefix="mdbench-audit-planted-"))
    work.mkdir(parents=True, exist_ok=True)
    seed = _seed_for("audit45/planted")
    print(f"run {run_dir}\nbundle {bundle}\nMDBENCH_TEST_SEED={os.environ.get('MDBENCH_TEST_SEED', '(default)')} "
          f"-> draw seed {seed}\n")
    audit_run(run_dir, bundle, work / "honest" / "audit", reanalysis=True)
    base, base_c = _items(work / "honest" / "audit")
    rows, bad = [], 0
    for p in planted_defects(seed, run_dir):
        t0 = time.perf_counter()
        copy = plant(run_dir, p, work / p.name / "run")
        audit_run(copy, bundle, work / p.name / "audit", reanalysis=True)
        got, comp = _items(work / p.name / "audit")
        wall = time.perf_counter() - t0
        if p.honest:
            moved = {i: (base[i], v) for i, v in got.items() if v != base[i]}
            ok = not moved and comp == base_c
            rows.append(("control", p.name, p.case or "all", p.observable, p.summary, "every item",
                         _codes(work / p.name / "audit", tuple(got)),
                         "unchanged" if not moved else ", ".join(f"{i} {a:g}→{b:g}" for i, (a, b) in moved.items()),
                         f"{base_c:.1f} → {comp:.1f}", "equal" if ok else "MOVED", f"{wall:.0f}"))
        else:
            ok = all(got[i] < base[i] for i in p.items) and comp < base_c
            rows.append((p.kind, p.name, p.case or "all", p.observable, p.summary, "/".join(p.items),
                         _codes(work / p.name / "audit", p.items),
                         ", ".join(f"{base[i]:g} → {got[i]:g}" for i in p.items), f"{base_c:.1f} → {comp:.1f}",
                         "yes" if ok else "MISSED", f"{wall:.0f}"))
        bad += not ok
        print(" | ".join(rows[-1]), flush=True)
    head = ("class", "instance", "case", "observable", "planted", "named item", "findings on it",
            "item honest → planted", "composite honest → planted", "caught / equal", "wall s")
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    where = f"copies under {work}" if args.keep else "copies removed (--keep DIR keeps them)"
    print(f"\n{len(rows) - bad}/{len(rows)} as expected (honest composite {base_c:.1f}); {where}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)  # ~0.6 GB for a tiny run's twelve copies
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
