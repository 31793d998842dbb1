"""The one retry rule of the llm room: which answers are transient, and how long to wait before the next try.

Used by the chat client (:mod:`mdbench.llm.client`) and the metering proxy (:mod:`mdbench.llm.proxy`):
exponential back-off ``backoff_s · 2^k`` capped at ``max_backoff_s``; a ``Retry-After`` header in seconds
wins (clamped to [0, ``max_backoff_s``]).

>>> RetryPolicy(backoff_s=1.0, max_backoff_s=30.0).delay_s(3, None)
8.0
>>> RetryPolicy(max_backoff_s=30.0).delay_s(0, "120")
30.0
"""

from __future__ import annotations

from dataclasses import dataclass

#: HTTP statuses retried as transient (timeouts, conflicts, rate limits, server errors).
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of transient failures before any byte reaches the agent."""

    max_retries: int = 4
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    connect_timeout_s: float = 30.0
    read_timeout_s: float = 600.0       # between two bytes of the endpoint's answer [s]

    def delay_s(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (0-based): ``Retry-After`` when it is a number of
        seconds, else the exponential back-off."""
        if retry_after is not None:
            try:
                return max(0.0, min(float(retry_after), self.max_backoff_s))
            except ValueError:
                pass
        return min(self.backoff_s * 2 ** attempt, self.max_backoff_s)
