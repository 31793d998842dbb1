"""Agent-reported usage (tokens, cost) checked before it enters a trial's ``result.json`` or an aggregate.

A command agent may write ``/logs/agent/usage.json`` — ``{n_input_tokens, n_output_tokens, n_cache_tokens,
cost_usd}`` — and Harbor sums whatever lands in ``AgentContext`` into the job's totals. The file is the agent's
own claim: a negative cost would lower a leaderboard's cost column, a ``NaN`` would poison every mean. Each
figure must be a finite number ≥ 0 (token counts: integers, at most :data:`MAX_TOKENS`; cost at most
:data:`MAX_COST_USD`); a figure that is not is left out (``None``) and named in the findings, which the trial
records (``agent_result.metadata.mdbench_usage_findings``) and the aggregate flags.

The same rule (:func:`check_context`) is applied again by the aggregate to any ``result.json`` (a trial written
by another Harbor agent or edited afterwards).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mdbench import untrusted

#: Token fields of Harbor's ``AgentContext`` (counts).
TOKEN_KEYS = ("n_input_tokens", "n_cache_tokens", "n_output_tokens")
#: Cost field of Harbor's ``AgentContext`` [USD].
COST_KEY = "cost_usd"
#: Largest plausible token count of one trial (10 trillion).
MAX_TOKENS = 10**13
#: Largest plausible cost of one trial [USD].
MAX_COST_USD = 1.0e6
#: Key under ``AgentContext.metadata`` that lists rejected figures.
FINDINGS_KEY = "mdbench_usage_findings"


def check_value(key: str, value: Any) -> tuple[int | float | None, str | None]:
    """``(value, None)`` for an acceptable figure (``None`` stays ``None``), else ``(None, finding)``."""
    if value is None:
        return None, None
    if key in TOKEN_KEYS:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and math.isfinite(value) and value.is_integer() and 0 <= value <= MAX_TOKENS:
                return int(value), None
            return None, f"{key} = {value!r} is not a whole number of tokens"
        if not 0 <= value <= MAX_TOKENS:
            return None, f"{key} = {value} is outside [0, {MAX_TOKENS}]"
        return value, None
    x, why = untrusted.try_number(value, name=key, minimum=0.0, maximum=MAX_COST_USD)
    if x is None:
        return None, f"{key} = {value!r} rejected: {why} (must be finite and within [0, {MAX_COST_USD:g}] USD)"
    return x, None


def check_context(ctx: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The usage fields of an ``AgentContext`` document with every unacceptable figure set to ``None``."""
    out: dict[str, Any] = {}
    findings: list[str] = []
    for key in (*TOKEN_KEYS, COST_KEY):
        value, finding = check_value(key, ctx.get(key))
        out[key] = value
        if finding:
            findings.append(finding)
    return out, findings


def read_usage(path: str | Path) -> tuple[dict[str, Any], list[str]]:
    """Checked usage from an agent's ``usage.json``: ``(fields, findings)``; a missing file gives no findings.

    The file is read through :mod:`mdbench.untrusted` (no link followed, 1 MiB at most, finite JSON only).
    """
    empty = dict.fromkeys((*TOKEN_KEYS, COST_KEY))
    data, refused = untrusted.try_read_json(path, max_bytes=1 << 20)
    if refused is not None:
        return empty, ([] if refused.reason == "missing" else [f"usage.json refused: {refused.reason}"])
    if not isinstance(data, dict):
        return empty, [f"usage.json is a {type(data).__name__}, not an object"]
    return check_context(data)


__all__ = ["TOKEN_KEYS", "COST_KEY", "FINDINGS_KEY", "MAX_TOKENS", "MAX_COST_USD", "check_value", "check_context",
           "read_usage"]
