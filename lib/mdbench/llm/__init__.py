"""The ``llm`` room: one client for OpenAI-compatible chat endpoints, shared by every model-backed part of
mdbench (the SDL LLM coordinator, the audit's judge, the arena's process judge).

:class:`~mdbench.llm.client.ChatClient` does retries with backoff (429, 5xx, timeouts, dropped
connections; ``Retry-After`` honoured), per-request timeouts, token and cost accounting (provider-reported
cost when the endpoint returns one, else from declared prices), and an append-only JSON-lines transcript of
every exchange (never the API key). :mod:`~mdbench.llm.fake_server` is a loopback fake endpoint for tests.

For evaluated coding agents (Codex, OpenCode: :mod:`mdbench.episode.harnesses`), :mod:`~mdbench.llm.proxy` is the
metering proxy the agent reaches instead of the endpoint (chat completions and Responses API, streamed or not;
log, tokens, USD from :mod:`~mdbench.llm.prices`, caps, retries), :mod:`~mdbench.llm.trajectory` turns its log into
an ATIF ``trajectory.json``, and :mod:`~mdbench.llm.scripted` is a scripted model that drives the real CLIs in tests.

Client and proxy share one record of what a call used (:class:`~mdbench.llm.usage.CallUsage`, made by
:func:`~mdbench.llm.usage.meter`), one price rule (:class:`~mdbench.llm.prices.ModelPrice`) and one retry rule
(:class:`~mdbench.llm.retry.RetryPolicy`).
"""

from mdbench.llm.client import ChatClient, ChatResult, EndpointError, Prices, Usage, parse_json_reply

__all__ = ["ChatClient", "ChatResult", "EndpointError", "Prices", "Usage", "parse_json_reply"]
