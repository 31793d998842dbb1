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
"""

from __future__ import annotations

import hmac
from typing import Any

from mdbench.errors import InputError
from mdbench.sdl.compiler import Assignment, EvaluatorKeys
from mdbench.sdl.environment import DERIVED_FIELDS, TRACE_FORMAT, chain_problem, derive


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
