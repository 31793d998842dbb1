"""Run a policy ("system") over frozen assignments and write traces and metrics to disk.

Layout written under ``out_dir``::

    <system>/<assignment_id>/adaptive.trace.json          branch traces (evaluator side; hash-chained log)
    <system>/<assignment_id>/random_control.trace.json
    <system>/<assignment_id>/no_evidence.trace.json
    <system>/<assignment_id>/metrics.json                 :func:`mdbench.sdl.metrics.campaign_metrics`
    <system>/run.json                                      system, seed, policy, assignment hashes, versions
"""

from __future__ import annotations

import json
import logging
import platform
import re
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from mdbench.errors import InputError
from mdbench.sdl.campaign import run_campaign
from mdbench.sdl.compiler import Assignment, check_against_ledger
from mdbench.sdl.environment import verify_chain
from mdbench.sdl.ledger import Ledger
from mdbench.sdl.metrics import campaign_metrics
from mdbench.sdl.policies import Policy

log = logging.getLogger(__name__)
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name(name: str) -> str:
    """A file-system-safe system name."""
    return _SAFE.sub("_", name).strip("_") or "system"


def run_system(ledger: Ledger, assignments: list[Assignment], policy_factory: Callable[[], Policy], system: str,
               out_dir: str | Path, *, seed: int = 0, controls: bool = True, verbose: bool = False,
               policy_spec: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run every assignment for one system; returns the list of campaign metrics.

    Every assignment's hash is verified against the ledger before the first campaign runs.
    """
    for a in assignments:
        check_against_ledger(a, ledger, a.assignment_id)
        if a.compute_sha256() != a.sha256:
            raise InputError(f"assignment {a.assignment_id} does not match its frozen sha256")
    root = Path(out_dir) / safe_name(system)
    root.mkdir(parents=True, exist_ok=True)
    versions = {}
    for pkg in ("mdbench", "numpy", "jsonschema"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    (root / "run.json").write_text(json.dumps({
        "system": system, "seed": seed, "controls": controls, "policy": policy_spec or {},
        "ledger": {"name": ledger.name, "sha256": ledger.sha256()},
        "assignments": {a.assignment_id: a.sha256 for a in assignments},
        "versions": versions, "python": platform.python_version()}, indent=1), encoding="utf-8")
    results = []
    for a in tqdm(assignments, desc=f"sdl {system}", disable=not verbose):
        run = run_campaign(ledger, a, policy_factory, seed=seed, controls=controls, policy_name=system)
        d = root / a.assignment_id
        d.mkdir(parents=True, exist_ok=True)
        for branch, tr in run.traces.items():
            if not verify_chain(tr["log"]):
                raise RuntimeError(f"hash chain of {branch} on {a.assignment_id} does not verify")
            (d / f"{branch}.trace.json").write_text(json.dumps(tr), encoding="utf-8")
        m = campaign_metrics(run.traces, ledger, a)
        m["system"] = system
        (d / "metrics.json").write_text(json.dumps(m, indent=1), encoding="utf-8")
        log.info("%s %s: AUC %.4f", system, a.assignment_id, m["branches"]["adaptive"]["adaptive_auc_nats"])
        results.append(m)
    return results
