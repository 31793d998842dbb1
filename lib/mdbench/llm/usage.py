"""What one model call used: the one reading of an endpoint's ``usage`` object (chat and Responses APIs) and the
one cost rule, shared by the chat client (:mod:`mdbench.llm.client`) and the metering proxy
(:mod:`mdbench.llm.proxy`), whose running totals are sums of :class:`CallUsage` records.

>>> from mdbench.llm.prices import ModelPrice
>>> m = meter("chat", {"prompt_tokens": 1000, "completion_tokens": 10}, ModelPrice(2.0, 8.0), "declared_prices")
>>> m.tokens_in, m.tokens_out, round(m.usd, 6), m.usd_source
(1000, 10, 0.00208, 'declared_prices')
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mdbench.llm.prices import ModelPrice


@dataclass(frozen=True)
class CallUsage:
    """The token-usage record of one answered call.

    Attributes
    ----------
    tokens_in, tokens_cached, tokens_out : int
        Input tokens (cached ones included), of which cached, output tokens, as the endpoint reported them.
    usd : float or None
        Cost [USD]: the provider's own ``usage.cost`` when reported, else from the price, else unknown (None;
        never an invented zero).
    usd_source : str or None
        ``"provider"``, the price's source label (``"price_table"``, ``"declared_prices"``), or None.
    usage_missing : bool
        The endpoint's answer had no ``usage`` object.
    """

    tokens_in: int = 0
    tokens_cached: int = 0
    tokens_out: int = 0
    usd: float | None = None
    usd_source: str | None = None
    usage_missing: bool = False

    def to_log(self) -> dict[str, Any]:
        """The record as a log line's ``metered`` field (``usage_missing`` only when true)."""
        d = asdict(self)
        if not self.usage_missing:
            del d["usage_missing"]
        return d


def meter(api: str, usage: Any, price: ModelPrice | None, price_source: str) -> CallUsage:
    """The :class:`CallUsage` of one answer: its ``usage`` object read by :func:`usage_of`, priced by the
    provider's own cost, else by ``price`` (labelled ``price_source``), else unknown."""
    u = usage_of(api, usage)
    if u is None:
        return CallUsage(usage_missing=True)
    tin, cached, tout, provider_usd = u
    if provider_usd is not None:
        return CallUsage(tin, cached, tout, provider_usd, "provider")
    if price is not None:
        return CallUsage(tin, cached, tout, price.usd(tin, cached, tout), price_source)
    return CallUsage(tin, cached, tout)


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
