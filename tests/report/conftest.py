"""Fixtures of the report tests: audits of a tiny REAL run (built once), one of them carrying hostile text."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "audit"))
sys.path.insert(0, str(Path(__file__).parent))
import _runbuilder as rb  # noqa: E402

from _report_payloads import IMG_PAYLOAD, PAYLOAD  # noqa: E402


@pytest.fixture(scope="session")
def audits(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(honest audit dir, hostile audit dir) — the hostile run carries HTML/JS in its own text."""
    if shutil.which("gmx") is None:
        pytest.skip("needs gmx on PATH")
    from mdbench.audit import audit_run

    base = tmp_path_factory.mktemp("report")
    shared_run, shared_bundle = rb.shared_run(tmp_path_factory)  # the audit tests' run, built once per session
    run = shutil.copytree(shared_run, base / "run", symlinks=True)  # base/run, base/bundle: test_report_page
    bundle = shutil.copytree(shared_bundle, base / "bundle")        # audits them by relative paths from base
    honest = base / "audit_honest"
    audit_run(run, bundle, honest, reanalysis=False)
    bad = base / "run_bad"
    shutil.copytree(run, bad)
    res = bad / "analysis" / rb.CASE / "results.json"
    doc = json.loads(res.read_text())
    doc["observables"]["self_diffusion"][PAYLOAD] = {"value": None, "blocks": [1, 2, 3, 4]}
    res.write_text(json.dumps(doc))
    obs = bad / "run_record" / "observables.json"
    o = json.loads(obs.read_text())
    o[rb.CASE]["viscosity"]["state"] = PAYLOAD
    obs.write_text(json.dumps(o))
    adj = base / "adjudication.yaml"
    adj.write_text(f"- item: E5\n  rating: 0.5\n  reviewer: \"{IMG_PAYLOAD}\"\n  reason: \"{PAYLOAD}\"\n")
    hostile = base / "audit_hostile"
    audit_run(bad, bundle, hostile, reanalysis=False, adjudication=adj)
    return honest, hostile
