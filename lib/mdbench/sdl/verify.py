"""Verify saved branch traces before anything is scored from them.

A trace file carries the hash-chained log of its branch, the chain head signed with the compile's evaluator
key (HMAC-SHA256, :meth:`~mdbench.sdl.compiler.EvaluatorKeys.sign`) and convenience copies of what the log
implies (experiments, forecasts, checkpoints, counters). :func:`verify_trace` accepts a trace only when

1. the log is an intact hash chain (every entry hashes to its ``sha256`` and links to the previous one),
2. the chain head is signed by the key of the compile the assignment belongs to (a rewritten chain cannot be
   re-signed without ``evaluator/keys.json``),
3. the log's start entry names this assignment and its sha256, and
4. every convenience copy equals what :func:`~mdbench.sdl.environment.derive` recomputes from the log,

and otherwise raises :class:`TraceError` naming the first bad row. Scores are then computed from the log
alone (:func:`mdbench.sdl.metrics.campaign_metrics`), so an edited copy can never change a number.

:func:`verify_run` checks a whole system folder against its signed run and campaign manifests
(:mod:`mdbench.sdl.runner`): which trace sits in which slot, that none is missing, added, duplicated or
spliced from another run. Every file is read through :mod:`mdbench.untrusted` (no links followed, size and
nesting capped).
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

from mdbench.errors import InputError
from mdbench.sdl.campaign import random_branch
from mdbench.sdl.compiler import Assignment, EvaluatorKeys
from mdbench.sdl.environment import DERIVED_FIELDS, TRACE_FORMAT, chain_problem, derive


#: File names of the signed manifests of a system folder and of each of its campaigns (:mod:`mdbench.sdl.runner`).
RUN_MANIFEST = "run.manifest.json"
CAMPAIGN_MANIFEST = "campaign.manifest.json"


def expected_branches(controls: bool, random_draws: int) -> list[str]:
    """Branch labels a campaign of a run with these settings must have."""
    if not controls:
        return ["adaptive"]
    return ["adaptive"] + [random_branch(d) for d in range(random_draws)] + ["no_evidence"]


class TraceError(InputError):
    """A trace does not match its hash chain, signature or assignment; the message names the first bad row."""


def sign_trace(trace: dict[str, Any], keys: EvaluatorKeys) -> dict[str, Any]:
    """The trace with ``chain_hmac`` set (the runner signs every trace it writes)."""
    return {**trace, "chain_hmac": keys.sign(trace["log"][-1]["sha256"])}


def _first_difference(name: str, saved: Any, derived: Any) -> str:
    if isinstance(saved, list) and isinstance(derived, list):
        for i, (a, b) in enumerate(zip(saved, derived)):
            if a != b:
                seq = b.get("seq") if isinstance(b, dict) else None
                label = f" ({b.get('label') or b.get('experiment_id')})" if isinstance(b, dict) else ""
                inner = ""
                if isinstance(a, dict) and isinstance(b, dict):
                    for k in b:
                        if a.get(k) != b[k]:
                            inner = f", field '{k}'"
                            sub_a, sub_b = a.get(k), b[k]
                            if isinstance(sub_a, list) and isinstance(sub_b, list):
                                j = next((j for j, (x, y) in enumerate(zip(sub_a, sub_b)) if x != y),
                                         min(len(sub_a), len(sub_b)))
                                inner += f"[{j}]"
                                if j < len(sub_b) and isinstance(sub_b[j], dict) and "seq" in sub_b[j]:
                                    seq = sub_b[j]["seq"]
                            break
                where = f" does not match the hash-chained log entry seq {seq}" if seq is not None else \
                    " does not match the hash-chained log"
                return f"{name}[{i}]{label}{inner}{where}"
        return f"{name}: {len(saved)} rows, but the hash-chained log has {len(derived)}"
    return f"{name}: {saved!r} does not match the hash-chained log ({derived!r})"


def verify_trace(trace: Any, asg: Assignment, keys: EvaluatorKeys, where: str = "<trace>") -> dict[str, Any]:
    """Check a trace (see module docstring); returns what :func:`derive` recomputes from its log."""
    if not isinstance(trace, dict) or trace.get("format") != TRACE_FORMAT or not isinstance(trace.get("log"), list) \
            or not trace["log"]:
        raise TraceError(f"not an SDL branch trace of format {TRACE_FORMAT}", where)
    problem = chain_problem(trace["log"])
    if problem:
        raise TraceError(f"hash chain broken at {problem}", where)
    head = trace["log"][-1]["sha256"]
    if trace.get("chain_head") != head:
        raise TraceError(f"chain_head does not match the last log entry (log[{len(trace['log']) - 1}])", where)
    sig = trace.get("chain_hmac")
    if not isinstance(sig, str) or not hmac.compare_digest(sig, keys.sign(head)):
        raise TraceError(f"chain head (log[{len(trace['log']) - 1}]) is not signed with this compile's evaluator "
                         "key: the log was rewritten or comes from another compile", where)
    start = trace["log"][0]
    if start.get("kind") != "start" or start.get("assignment_sha256") != asg.sha256 or \
            start.get("assignment_id") != asg.assignment_id:
        raise TraceError(f"log[0] (seq 0, start) is not a start of assignment {asg.assignment_id} "
                         f"({asg.sha256[:12]}…)", where)
    try:
        derived = derive(trace["log"])
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(f"log cannot be replayed: {exc}", where) from exc
    for name in DERIVED_FIELDS:
        if trace.get(name) != derived[name]:
            raise TraceError(_first_difference(name, trace.get(name), derived[name]), where)
    return derived


# ------------------------------------------------------------------------------------------------ whole runs
#: Largest trace / manifest file read [bytes].
MAX_TRACE_BYTES = 512 * 1024 * 1024


def _read(path: Path, what: str, entry: str) -> tuple[Any, bytes]:
    from mdbench.untrusted import Refused, loads, read_bytes

    try:
        data = read_bytes(path, max_bytes=MAX_TRACE_BYTES)
        return loads(data, max_bytes=MAX_TRACE_BYTES, max_depth=256, path=str(path)), data
    except Refused as exc:
        if exc.reason == "missing":
            raise TraceError(f"{what} listed in {entry} is missing", str(path)) from None
        raise TraceError(f"{what} listed in {entry} is unreadable ({exc.reason}{': ' + exc.detail if exc.detail else ''})",
                         str(path)) from None


def _check_sig(body: Any, keys: EvaluatorKeys, path: Path, what: str) -> None:
    if not isinstance(body, dict) or not isinstance(body.get("hmac"), str) or \
            not hmac.compare_digest(body["hmac"], keys.sign_manifest(body)):
        raise TraceError(f"{what} is not signed with this compile's evaluator key (edited, or from another run or "
                         "compile)", str(path))


def verify_run(system_dir: str | Path, assignments: dict[str, Assignment],
               keys: EvaluatorKeys) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]]:
    """Verify a system folder end to end against its signed manifests; returns ``(run manifest, traces)`` with
    ``traces[assignment_id][branch]`` verified.

    Refused (:class:`TraceError`, naming the file and the manifest entry): a run or campaign manifest that is
    missing or not signed with the compile's key; a campaign manifest whose sha256 differs from its entry in the
    run manifest (swapped in from another run); a campaign folder or trace file not listed in a manifest (added
    or duplicated); a listed trace that is missing (deleted); a trace whose file sha256, chain head, branch
    label, run id or assignment differs from its manifest entry (swapped between slots, spliced from another
    run); a campaign without every branch the run's settings require.
    """
    d = Path(system_dir)
    if not (d / RUN_MANIFEST).exists() and not (d / RUN_MANIFEST).is_symlink():
        raise TraceError(f"no {RUN_MANIFEST}: the run did not end, or predates signed manifests; rerun "
                         "`mdbench sdl run` into a new --out folder", str(d))
    run, _ = _read(d / RUN_MANIFEST, RUN_MANIFEST, "the system folder")
    _check_sig(run, keys, d / RUN_MANIFEST, RUN_MANIFEST)
    camps = run.get("campaigns")
    if not isinstance(camps, dict) or not isinstance(run.get("assignments"), dict) or \
            set(camps) != set(run["assignments"]):
        raise TraceError("campaigns and assignments of the run manifest disagree", str(d / RUN_MANIFEST))
    listed = set(camps)
    for p in sorted(d.iterdir()):
        if p.is_dir() and not p.is_symlink() and p.name not in listed:
            if any(p.glob("*.trace.json")) or (p / CAMPAIGN_MANIFEST).exists():
                raise TraceError(f"campaign folder {p.name} is not listed in {RUN_MANIFEST} campaigns", str(p))
    want = expected_branches(bool(run.get("controls")), int(run.get("random_draws") or 0))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for aid, entry in sorted(camps.items()):
        out[aid] = _verify_campaign(d, aid, entry, run, assignments.get(aid), keys, want)
    return run, out


def _verify_campaign(d: Path, aid: str, entry: Any, run: dict[str, Any], asg: Assignment | None,
                     keys: EvaluatorKeys, want: list[str]) -> dict[str, dict[str, Any]]:
    """One campaign of :func:`verify_run`: its manifest against the run manifest, its traces against it."""
    run_id = run.get("run_id")
    where = f"{RUN_MANIFEST} campaigns[{aid!r}]"
    if asg is None or asg.sha256 != run["assignments"][aid]:
        raise TraceError(f"assignment {aid} of {RUN_MANIFEST} is not in the compile folder", str(d / RUN_MANIFEST))
    cdir = d / aid
    mpath = cdir / CAMPAIGN_MANIFEST
    cm, raw = _read(mpath, CAMPAIGN_MANIFEST, where)
    if not isinstance(entry, dict) or hashlib.sha256(raw).hexdigest() != entry.get("sha256"):
        raise TraceError(f"campaign manifest does not match its sha256 in {where} (swapped in from another run)",
                         str(mpath))
    _check_sig(cm, keys, mpath, CAMPAIGN_MANIFEST)
    if cm.get("run_id") != run_id or cm.get("assignment_id") != aid or cm.get("assignment_sha256") != asg.sha256 \
            or cm.get("seed") != run.get("seed"):
        raise TraceError(f"campaign manifest belongs to another run or assignment than {where}", str(mpath))
    branches = cm.get("branches")
    if not isinstance(branches, dict):
        raise TraceError("campaign manifest lists no branches", str(mpath))
    if cm.get("runner_error") is None and sorted(branches) != sorted(want):
        missing = sorted(set(want) - set(branches))
        raise TraceError(f"campaign manifest lists branches {sorted(branches)}, the run requires {want}"
                         f"{' (missing ' + ', '.join(missing) + ')' if missing else ''}", str(mpath))
    files = {f"{b}.trace.json" for b in branches}
    for p in sorted(cdir.glob("*.trace.json")):
        if p.name not in files:
            raise TraceError(f"trace file not listed in {CAMPAIGN_MANIFEST} branches (added or duplicated)",
                             str(p))
    heads: dict[str, str] = {}
    found: dict[str, dict[str, Any]] = {}
    for b, be in sorted(branches.items()):
        bwhere = f"{CAMPAIGN_MANIFEST} branches[{b!r}] of {aid}"
        tpath = cdir / f"{b}.trace.json"
        if not isinstance(be, dict) or be.get("file") != tpath.name:
            raise TraceError(f"{bwhere} names another file than {tpath.name}", str(mpath))
        tr, traw = _read(tpath, f"trace of branch {b}", bwhere)
        verify_trace(tr, asg, keys, str(tpath))
        start = tr["log"][0]
        if start.get("branch") != b:
            raise TraceError(f"trace is of branch {start.get('branch')!r} but sits in slot {b!r} ({bwhere})",
                             str(tpath))
        if start.get("run_id") != run_id:
            raise TraceError(f"trace belongs to run {str(start.get('run_id'))[:12]}…, not to this run "
                             f"{str(run_id)[:12]}… ({bwhere}): spliced from another run", str(tpath))
        if tr["chain_head"] != be.get("chain_head") or len(tr["log"]) != be.get("n_entries"):
            raise TraceError(f"chain head or length differs from {bwhere}", str(tpath))
        if hashlib.sha256(traw).hexdigest() != be.get("trace_sha256"):
            raise TraceError(f"trace file differs from its sha256 in {bwhere} (swapped, replaced or spliced)",
                             str(tpath))
        if tr["chain_head"] in heads:
            raise TraceError(f"the same trace as branch {heads[tr['chain_head']]!r} ({bwhere}): duplicated",
                             str(tpath))
        heads[tr["chain_head"]] = b
        found[b] = tr
    return found
