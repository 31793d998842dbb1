"""References of the terminal record and observables.json that do not resolve
(``terminal_reference_unresolved``, E3 ≤ ½): results paths and pointers, event ids, attempt ids."""

from __future__ import annotations

from typing import Any

from mdbench.audit.evidence import resolve_ref
from mdbench.audit.runread import RunData

_REF_KEYS = ("results_ref", "ref", "results", "results_path", "path", "file", "evidence")
_EVENT_KEYS = ("event_id", "gate_event", "producer_event", "event")
_ATTEMPT_KEYS = ("attempt", "attempt_id", "canonical_attempt", "production_attempt")


def unresolved_references(run: RunData) -> list[str]:
    """Every results path, event id and attempt id named anywhere in the terminal record and observables.json
    that does not resolve (depth ≤ 8, at most 2,000 values read)."""
    event_ids = {ev.get("id") for _line, ev in run.events if isinstance(ev, dict)}
    out: list[str] = []
    budget = [2000]

    def walk(obj: Any, where: str, depth: int) -> None:
        if depth > 8 or budget[0] <= 0:
            return
        items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
        for k, v in items:
            budget[0] -= 1
            here = f"{where}.{k}"
            key = str(k).lower()
            if isinstance(v, (dict, list)):
                walk(v, here, depth + 1)
            elif isinstance(v, str) and (key in _REF_KEYS or key.endswith("_ref") or "#/" in v or
                                         v.endswith("results.json")) and not key.endswith("reason"):
                if (v.endswith(".json") or "#/" in v) and not resolve_ref(run, v)[0]:
                    out.append(f"{here} → {v!r} does not resolve")
            elif key in _EVENT_KEYS and isinstance(v, int) and not isinstance(v, bool) and v not in event_ids:
                out.append(f"{here} names event {v}, which does not exist")
            elif key in _ATTEMPT_KEYS and isinstance(v, str) and v not in run.attempts:
                out.append(f"{here} names attempt {v!r}, which is not in the ledger")

    if isinstance(run.terminal, dict):
        walk(run.terminal, "episode_terminal", 0)
    if isinstance(run.observables, dict):
        walk(run.observables, "observables", 0)
    return out[:20]
