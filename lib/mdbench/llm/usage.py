"""The one reading of an endpoint's ``usage`` object (chat and Responses APIs), for the client and the proxy."""

from __future__ import annotations

from typing import Any


def _nonneg_int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**15 else 0


def usage_of(api: str, usage: Any) -> tuple[int, int, int, float | None] | None:
    """(tokens_in, tokens_cached, tokens_out, provider_usd) from an endpoint's ``usage`` object, or ``None``.

    Chat: ``prompt_tokens`` (cached included), ``prompt_tokens_details.cached_tokens`` (or DeepSeek's
    ``prompt_cache_hit_tokens``), ``completion_tokens``. Responses: ``input_tokens``,
    ``input_tokens_details.cached_tokens``, ``output_tokens``. ``cost`` (OpenRouter style) when present.
    """
    if not isinstance(usage, dict):
        return None
    if api == "chat":
        tin, tout = _nonneg_int(usage.get("prompt_tokens")), _nonneg_int(usage.get("completion_tokens"))
        det = usage.get("prompt_tokens_details")
        cached = _nonneg_int(det.get("cached_tokens")) if isinstance(det, dict) else 0
        cached = cached or _nonneg_int(usage.get("prompt_cache_hit_tokens"))
    else:
        tin, tout = _nonneg_int(usage.get("input_tokens")), _nonneg_int(usage.get("output_tokens"))
        det = usage.get("input_tokens_details")
        cached = _nonneg_int(det.get("cached_tokens")) if isinstance(det, dict) else 0
    cost = usage.get("cost")
    ok_cost = isinstance(cost, (int, float)) and not isinstance(cost, bool) and 0 <= cost < 1e6
    return tin, min(cached, tin), tout, (float(cost) if ok_cost else None)
