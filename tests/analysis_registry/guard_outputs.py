"""Before/after guard of a refactor: the numbers the pipeline and the audit write must not change.

``python tests/analysis_registry/guard_outputs.py write OUT`` writes, with the checkout it runs from:

* ``OUT/tiny/saeo.json`` and the canonical reanalysis' ``results.json`` of the audit tests' tiny real run
  (water + 4 NaCl, built by ``tests/audit/_runbuilder.py``, ~10 s of GROMACS);
* ``OUT/tiny/files/results.json`` and its figures: ``analyze_files`` of the same tiny run (figure names in
  ``results.json`` ``figures``), and ``OUT/definitions.json``, the registered definitions of the default
  settings (compared as documents: the order of keys within a kind is not a difference);
* ``OUT/micro/results.json`` of the peers' micro DE production (``tests/peers/conftest.py``, built once into
  ``CACHE`` — give the same folder to both checkouts, ~3 min of GROMACS the first time).

``python tests/analysis_registry/guard_outputs.py compare BEFORE AFTER`` prints every difference of the two
trees' JSON documents, ignoring entries that exist only AFTER (new observables, new checks) and the fields
that change from run to run (times, durations, absolute paths, versions); exit 1 when any remains.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VOLATILE = ("time", "utc", "duration", "elapsed", "seconds", "_s", "path", "dir", "version", "digest", "sha256",
            "hostname", "pid", "created", "started", "finished", "wall", "id", "cpu")


def write(out: Path, cache: Path) -> None:
    import importlib.util

    sys.path[:0] = [str(HERE.parent), str(HERE.parent / "audit")]
    import _runbuilder as rb

    spec = importlib.util.spec_from_file_location("peers_conftest", HERE.parent / "peers" / "conftest.py")
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)

    from mdbench.analysis.pipeline import AnalysisSettings, analyze_files, registration_definitions
    from mdbench.audit import audit_run

    tiny = out / "tiny"
    bundle = rb.build_bundle(tiny / "bundle")
    run = cache / "tiny" / "run"
    if not run.is_dir():  # built once, then audited by every checkout
        rb.build_run(run)
    audit_run(run, bundle, tiny / "audit", reanalysis=True)
    prod = run / "cases" / rb.CASE / "prod"
    analyze_files(prod / "prod.tpr", prod / "prod.xtc", prod / "prod.edr", tiny / "files", guard_ps=rb.GUARD_PS,
                  case=rb.CASE, workers=1, settings=AnalysisSettings(guard_ps=rb.GUARD_PS))
    (out / "definitions.json").write_text(json.dumps(registration_definitions(AnalysisSettings()), indent=1))
    md = cache / "micro" / "md"
    if not (md / "prod.gro").is_file():
        peers._produce(cache / "micro")
    settings = AnalysisSettings(diffusion_beta_range=(0.5, 1.5), diffusion_min_decades=0.5)
    analyze_files(md / "prod.tpr", md / "prod.xtc", md / "prod.edr", out / "micro", guard_ps=0.0, case=peers.CASE,
                  figures=False, workers=1, settings=settings)


def _volatile(key: str) -> bool:
    k = key.lower()
    return any(w in k for w in VOLATILE)


ROOTS: list[tuple[str, str]] = []


def diff(a: Any, b: Any, where: str = "") -> list[str]:
    """Differences of ``a`` (before) and ``b`` (after); keys only in ``b`` are new entries, not differences."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in a:
            if _volatile(str(k)):
                continue
            if k not in b:
                out.append(f"{where}/{k}: removed")
            else:
                out += diff(a[k], b[k], f"{where}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b) and not (len(b) > len(a) and all(isinstance(x, dict) for x in b)):
            return [f"{where}: {len(a)} items before, {len(b)} after"]
        if len(b) > len(a):  # lists of records (observables, judgments, checks): match by content
            keyed = {json.dumps(x, sort_keys=True) for x in b}
            return [f"{where}: item {json.dumps(x)[:200]} gone" for x in a
                    if json.dumps(x, sort_keys=True) not in keyed and not _similar(x, b)]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{where}[{i}]")]
    if isinstance(a, str) and isinstance(b, str):
        for x, y in ROOTS:
            a = a.replace(x, y)
    if a != b and not (isinstance(a, float) and isinstance(b, float) and a != a and b != b):
        return [f"{where}: {json.dumps(a)[:160]} -> {json.dumps(b)[:160]}"]
    return []


def _similar(x: Any, b: list) -> bool:
    return any(not diff(x, y) for y in b)


def compare(before: Path, after: Path) -> int:
    found = 0
    ROOTS.append((str(before), str(after)))
    for p in sorted(before.rglob("*.json")):
        rel = p.relative_to(before)
        q = after / rel
        if not q.is_file():
            print(f"{rel}: missing after")
            found += 1
            continue
        d = diff(json.loads(p.read_text()), json.loads(q.read_text()))
        for line in d:
            print(f"{rel}{line}")
        found += len(d)
    print(f"{found} difference(s)")
    return 1 if found else 0


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(Path(sys.argv[2]), Path(sys.argv[3] if len(sys.argv) > 3 else os.environ.get("GUARD_CACHE",
                                                                                          "/tmp/mdbench-guard")))
    else:
        raise SystemExit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
