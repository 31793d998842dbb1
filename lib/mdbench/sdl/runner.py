"""Run a policy ("system") over frozen assignments and write signed traces, signed manifests, states and metrics.

Layout written under ``out_dir``::

    <system>/run.json                                   what was started: system, seed, policy, compile folder
    <system>/run.manifest.json                          signed at the end of the run (see below)
    <system>/<assignment_id>/campaign.manifest.json     signed when the campaign ends
    <system>/<assignment_id>/<branch>.trace.json        branch traces: adaptive, random_control[_N], no_evidence —
                                                        hash-chained log, chain head signed (HMAC)
    <system>/<assignment_id>/states/<branch>/<label>.state.json.gz  saved states the evaluator calls were made from
    <system>/<assignment_id>/metrics.json               :func:`mdbench.sdl.metrics.campaign_metrics`

Runs are bound end to end. Every branch's first log entry names the branch, the assignment and the run id (a
fresh random id per run). The *campaign manifest* lists, per branch, its file, chain head, entry count and the
sha256 of the trace file, with the seeds (policy and random-control draws), the assignment sha256 and the wall
budget; the *run manifest* lists every campaign manifest by sha256, with the system, policy spec, seeds, session
limits and software versions. Both are signed with HMAC-SHA256 under the compile's evaluator key
(``evaluator/keys.json``, mode 0600, never in the results folder and never visible to a coordinator):
content hashes alone could be recomputed by whoever edits a results folder, a keyed signature cannot. So
:func:`mdbench.sdl.verify.verify_run` refuses a swapped, missing, duplicated or spliced trace and names the file
and the manifest entry. (The binding is as strong as the key is private: a results folder is trusted only
against the evaluator's own compile folder.)

A crash of the runner itself on one campaign (a bug, not a coordinator failure — those end branches as
did-not-finish inside :mod:`mdbench.sdl.campaign`) still leaves a signed did-not-finish adaptive trace for that
campaign and the run goes on. Records are append-only: an existing system folder is never overwritten.

``metrics.json`` is a convenience copy: ``mdbench sdl score`` and the leaderboard recompute every number
from the verified traces.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import re
import secrets
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from mdbench.errors import InputError
from mdbench.sdl.bundle import Compiled
from mdbench.sdl.campaign import RANDOM_DRAWS, StateStore, one_line, random_branch, random_seed, run_campaign
from mdbench.sdl.compiler import Assignment
from mdbench.sdl.environment import CampaignEnv
from mdbench.sdl.ledger import canonical_json
from mdbench.sdl.metrics import campaign_metrics
from mdbench.sdl.policies import Policy
from mdbench.sdl.verify import CAMPAIGN_MANIFEST, RUN_MANIFEST, expected_branches, sign_trace, verify_trace
from mdbench.untrusted import write_new

log = logging.getLogger(__name__)
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
RUN_MANIFEST_FORMAT = "mdbench-sdl-run-manifest/1"
CAMPAIGN_MANIFEST_FORMAT = "mdbench-sdl-campaign-manifest/1"


def safe_name(name: str) -> str:
    """A file-system-safe system name."""
    return _SAFE.sub("_", name).strip("_") or "system"


def trace_file(branch: str) -> str:
    """File name of a branch trace."""
    return f"{branch}.trace.json"


def _versions() -> dict[str, str | None]:
    out = {}
    for pkg in ("mdbench", "numpy", "jsonschema"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def runner_crash_traces(compiled: Compiled, asg: Assignment, reason: str, run_id: str,
                        wall_budget_s: float | None) -> dict[str, dict[str, Any]]:
    """A did-not-finish adaptive trace for a campaign on which the runner itself crashed."""
    env = CampaignEnv(compiled.ledger, asg, branch="adaptive", run_id=run_id, wall_budget_s=wall_budget_s,
                      policy={"name": None, "isolation": {}})
    env.record_checkpoint("pre", None, "", {}, f"runner error: {reason}")
    env.abort(f"runner error: {reason}")
    return {"adaptive": env.trace()}


def _write_json(path: Path, obj: Any, indent: int | None = None) -> bytes:
    data = json.dumps(obj, indent=indent).encode("utf-8")
    write_new(path, data)
    return data


def _write_campaign(compiled: Compiled, a: Assignment, d: Path, traces: dict[str, dict[str, Any]],
                    info: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Sign, verify and write the branch traces of one campaign and its signed campaign manifest; returns the
    signed traces and the run manifest's entry for the campaign."""
    entries, signed = {}, {}
    for branch, tr in traces.items():
        signed[branch] = sign_trace(tr, compiled.keys)
        path = d / trace_file(branch)
        verify_trace(signed[branch], a, compiled.keys, str(path))
        data = _write_json(path, signed[branch])
        entries[branch] = {"file": trace_file(branch), "chain_head": signed[branch]["chain_head"],
                           "n_entries": len(signed[branch]["log"]),
                           "trace_sha256": hashlib.sha256(data).hexdigest()}
    seed, draws = info["seed"], info["random_draws"]
    body = {"format": CAMPAIGN_MANIFEST_FORMAT, "run_id": info["run_id"], "system": info["system"],
            "assignment_id": a.assignment_id, "assignment_sha256": a.sha256, "seed": seed,
            "random_seeds": {random_branch(k): random_seed(seed, k) for k in range(draws)} if info["controls"]
            else {}, "expected_branches": info["branches"], "branches": entries,
            "wall_budget_s": info["wall_budget_s"], "wall_s": info["wall_s"], "runner_error": info["runner_error"]}
    body["hmac"] = compiled.keys.sign_manifest(body)
    data = _write_json(d / CAMPAIGN_MANIFEST, body, indent=1)
    return signed, {"manifest": f"{a.assignment_id}/{CAMPAIGN_MANIFEST}", "sha256": hashlib.sha256(data).hexdigest()}


def run_system(compiled: Compiled, assignments: list[Assignment], policy_factory: Callable[[], Policy],
               system: str, out_dir: str | Path, *, seed: int = 0, controls: bool = True, verbose: bool = False,
               policy_spec: dict[str, Any] | None = None, random_draws: int = RANDOM_DRAWS,
               wall_budget_s: float | None = None,
               factory_for: Callable[[Assignment], Callable[[], Policy]] | None = None,
               session_limits: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run every assignment for one system; returns the list of campaign metrics.

    Parameters
    ----------
    policy_factory : callable
        Fresh session factory (used when ``factory_for`` is not given).
    factory_for : callable, optional
        ``assignment -> session factory``: per-assignment sessions (an external coordinator's view holds only
        that assignment's file).
    random_draws : int
        Schedule-matched random-control draws per assignment.
    wall_budget_s : float, optional
        Wall-clock budget per campaign [s] (all branches and evaluator calls).

    Every trace is signed with the compile's evaluator key and verified as it is written; a campaign manifest
    is signed when each campaign ends, the run manifest when the run ends (see module docstring).
    """
    from tqdm.auto import tqdm    # here, not at import: the leaderboard page imports this module for its names

    root = Path(out_dir) / safe_name(system)
    if root.exists() and any(root.iterdir()):
        raise InputError(f"results of system {system!r} already exist here (records are append-only); use another "
                         "--out folder or --system name", str(root))
    root.mkdir(parents=True, exist_ok=True)
    run_id = secrets.token_hex(12)
    branches = expected_branches(controls, random_draws)
    spec = {"system": system, "run_id": run_id, "seed": seed, "controls": controls, "random_draws": random_draws,
            "wall_budget_s": wall_budget_s, "policy": policy_spec or {}, "session_limits": session_limits,
            "compile_dir": str(compiled.root), "evaluator_key_sha256": compiled.keys.key_sha256,
            "ledger": {"name": compiled.ledger.name, "sha256": compiled.ledger.sha256()},
            "assignments": {a.assignment_id: a.sha256 for a in assignments},
            "versions": _versions(), "python": platform.python_version()}
    _write_json(root / "run.json", spec, indent=1)
    results, campaigns = [], {}
    for a in tqdm(assignments, desc=f"sdl {system}", unit="campaign", disable=not verbose):
        d = root / a.assignment_id
        d.mkdir(parents=True, exist_ok=True)
        factory = factory_for(a) if factory_for is not None else policy_factory
        t0 = time.monotonic()
        crash = None
        try:
            traces = run_campaign(compiled.ledger, a, factory, seed=seed, controls=controls, policy_name=system,
                                  states=StateStore(d / "states"), random_draws=random_draws, run_id=run_id,
                                  wall_budget_s=wall_budget_s).traces
        except Exception as exc:  # noqa: BLE001 — the runner's own failure: keep a DNF record, go on
            crash = one_line(f"{type(exc).__name__}: {exc}")
            log.exception("sdl runner crashed on %s; writing a did-not-finish trace", a.assignment_id)
            traces = runner_crash_traces(compiled, a, crash, run_id, wall_budget_s)
        signed, campaigns[a.assignment_id] = _write_campaign(
            compiled, a, d, traces, {"run_id": run_id, "system": system, "seed": seed, "controls": controls,
                                     "random_draws": random_draws, "branches": branches,
                                     "wall_budget_s": wall_budget_s, "wall_s": round(time.monotonic() - t0, 3),
                                     "runner_error": crash})
        m = campaign_metrics(signed, compiled.ledger, a)
        m["system"] = system
        write_new(d / "metrics.json", json.dumps(m, indent=1))
        log.info("%s %s: AUC %.4f", system, a.assignment_id, m["branches"]["adaptive"]["adaptive_auc_nats"])
        results.append(m)
    manifest = {"format": RUN_MANIFEST_FORMAT, **{k: spec[k] for k in (
        "run_id", "system", "seed", "controls", "random_draws", "wall_budget_s", "policy", "session_limits",
        "evaluator_key_sha256", "ledger", "assignments", "versions", "python")},
                "run_json_sha256": hashlib.sha256(canonical_json(spec).encode()).hexdigest(),
                "campaigns": campaigns}
    manifest["hmac"] = compiled.keys.sign_manifest(manifest)
    _write_json(root / RUN_MANIFEST, manifest, indent=1)
    return results
