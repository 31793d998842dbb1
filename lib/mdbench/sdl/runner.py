"""Run a policy ("system") over frozen assignments and write signed traces, saved states and metrics.

Layout written under ``out_dir``::

    <system>/run.json                                      system, seed, policy, compile folder, assignment hashes
    <system>/<assignment_id>/adaptive.trace.json           branch traces: hash-chained log, chain head signed
    <system>/<assignment_id>/random_control.trace.json     with the compile's evaluator key, derived copies
    <system>/<assignment_id>/no_evidence.trace.json
    <system>/<assignment_id>/states/<branch>/<label>.state.json.gz  saved states the evaluator calls were made from
    <system>/<assignment_id>/metrics.json                  :func:`mdbench.sdl.metrics.campaign_metrics`

``metrics.json`` is a convenience copy: ``mdbench sdl score`` and the leaderboard recompute every number
from the verified traces.
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

from mdbench.sdl.bundle import Compiled
from mdbench.sdl.campaign import StateStore, run_campaign
from mdbench.sdl.compiler import Assignment
from mdbench.sdl.metrics import campaign_metrics
from mdbench.sdl.policies import Policy
from mdbench.sdl.verify import sign_trace, verify_trace

log = logging.getLogger(__name__)
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name(name: str) -> str:
    """A file-system-safe system name."""
    return _SAFE.sub("_", name).strip("_") or "system"


def _versions() -> dict[str, str | None]:
    out = {}
    for pkg in ("mdbench", "numpy", "jsonschema"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def run_system(compiled: Compiled, assignments: list[Assignment], policy_factory: Callable[[], Policy],
               system: str, out_dir: str | Path, *, seed: int = 0, controls: bool = True, verbose: bool = False,
               policy_spec: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run every assignment for one system; returns the list of campaign metrics.

    Every trace is signed with the compile's evaluator key and verified as it is written.
    """
    root = Path(out_dir) / safe_name(system)
    root.mkdir(parents=True, exist_ok=True)
    (root / "run.json").write_text(json.dumps({
        "system": system, "seed": seed, "controls": controls, "policy": policy_spec or {},
        "compile_dir": str(compiled.root),
        "ledger": {"name": compiled.ledger.name, "sha256": compiled.ledger.sha256()},
        "assignments": {a.assignment_id: a.sha256 for a in assignments},
        "versions": _versions(), "python": platform.python_version()}, indent=1), encoding="utf-8")
    results = []
    for a in tqdm(assignments, desc=f"sdl {system}", unit="campaign", disable=not verbose):
        d = root / a.assignment_id
        d.mkdir(parents=True, exist_ok=True)
        run = run_campaign(compiled.ledger, a, policy_factory, seed=seed, controls=controls, policy_name=system,
                           states=StateStore(d / "states"))
        signed = {}
        for branch, tr in run.traces.items():
            signed[branch] = sign_trace(tr, compiled.keys)
            verify_trace(signed[branch], a, compiled.keys, f"{d / branch}.trace.json")
            (d / f"{branch}.trace.json").write_text(json.dumps(signed[branch]), encoding="utf-8")
        m = campaign_metrics(signed, compiled.ledger, a)
        m["system"] = system
        (d / "metrics.json").write_text(json.dumps(m, indent=1), encoding="utf-8")
        log.info("%s %s: AUC %.4f", system, a.assignment_id, m["branches"]["adaptive"]["adaptive_auc_nats"])
        results.append(m)
    return results
