"""Helpers of the peer cross-checks."""

from __future__ import annotations

import json


def observable(doc: dict, name: str) -> dict:
    """One observable of results.json, with a clear failure when the interface changed."""
    obs = doc["observables"]
    assert name in obs, f"results.json lacks {name!r}; has {sorted(obs)}"
    return obs[name]


def dump(label: str, data: dict) -> None:
    """Print a peer comparison (shown with -s / in the CI log with -rA) for docs/validation.md."""
    print(f"\n[peer] {label}: " + json.dumps(data, default=float))
