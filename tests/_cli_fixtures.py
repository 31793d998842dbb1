"""The micro fixture of the newcomer tests (CLI bad inputs, quiet paths, README examples): a tiny REAL run
(water + NaCl, case W, the audit tests' builder), its bundle, an audit of it, and a water-only xtc. Built once
per session whichever test module asks first."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "audit"))
import _runbuilder as rb  # noqa: E402

_BUILT: dict[str, Path] = {}


def micro_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"base", "run", "bundle", "prod", "water_xtc", "audit"}; do not modify — copy what you change."""
    if _BUILT:
        return _BUILT
    if shutil.which("gmx") is None:
        pytest.skip("needs gmx on PATH")
    base = tmp_path_factory.mktemp("micro_cli")
    run, bundle = rb.shared_run(tmp_path_factory)  # the audit tests' run, built once per session (read-only)
    prod = run / "cases" / rb.CASE / "prod"
    sub = base / "water_only.xtc"  # an xtc with fewer atoms than the tpr: the water only
    rb.gmx("trjconv", "-f", str(prod / "prod.xtc"), "-s", str(prod / "prod.tpr"), "-o", str(sub),
           cwd=base, stdin="SOL\n")
    from mdbench.audit import audit_run

    audit = base / "audit"
    audit_run(run, bundle, audit, reanalysis=False)
    _BUILT.update(base=base, run=run, bundle=bundle, prod=prod, water_xtc=sub, audit=audit)
    return _BUILT
