"""A client for OpenAI-compatible chat-completion endpoints (``POST {base_url}/chat/completions``).

Standard library only (:mod:`urllib.request`): the request and response are the documented Chat Completions
JSON (``model``, ``messages``, optional ``temperature``, ``max_tokens``, ``response_format``; ``choices[0]
.message.content``, ``finish_reason``, ``usage``), which every OpenAI-compatible server speaks.

* **Retries.** HTTP 408, 409, 429, 500, 502, 503, 504, timeouts, refused or dropped connections and replies
  that are not chat-completion JSON are retried up to ``max_retries`` times by the llm room's one retry rule
  (:class:`mdbench.llm.retry.RetryPolicy`: ``backoff_s · 2^k``, at most ``max_backoff_s``; a ``Retry-After``
  header in seconds wins). Other HTTP
  errors (400, 401, 403, 404, …) fail at once. Failures raise :class:`EndpointError` with the status and
  the start of the response body — never the API key.
* **Timeouts.** ``timeout_s`` per HTTP request [s].
* **Accounting.** :class:`Usage` per call and accumulated in :attr:`ChatClient.totals`: calls, attempts,
  prompt / completion / total tokens (as the endpoint reports them), wall time, and cost — the
  provider-reported ``usage.cost`` when present, else the declared :class:`Prices` (the llm room's one price
  rule, :class:`mdbench.llm.prices.ModelPrice`, per million tokens), else unknown (``None``; never an invented
  zero). The ``usage`` object is read as the metering proxy reads it (:func:`mdbench.llm.usage.usage_of`).
* **Transcript.** With ``transcript=PATH`` every exchange is appended as one JSON line: time, session label,
  model, the messages the caller asks to log (by default all), the sha256 of the full message list, the
  reply, usage, cost, latency and every failed attempt. Headers are never logged.

The API key comes from ``api_key`` or the environment variable ``api_key_env`` (default ``OPENAI_API_KEY``);
without one no ``Authorization`` header is sent (local servers).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from mdbench.errors import MdbenchError
from mdbench.llm.prices import ModelPrice
from mdbench.llm.retry import RETRY_STATUS, RetryPolicy
from mdbench.llm.usage import meter

#: Declared prices of the client: the llm room's one price record (input, output[, cached input] in USD per
#: 1,000,000 tokens).
Prices = ModelPrice


class EndpointError(MdbenchError):
    """The endpoint failed (after retries where the failure is transient); the message says how."""


@dataclass
class Usage:
    """Token, time and cost accounting of the client's calls, one or many (``+=``): the sum of their
    :class:`mdbench.llm.usage.CallUsage` records with latency and attempts (the metering proxy sums the same
    records into its episode totals)."""

    calls: int = 0
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    latency_s: float = 0.0
    cost: float | None = None
    cost_source: str | None = None    # "provider" | "declared_prices" | None (unknown)
    cost_unknown_calls: int = 0

    def __iadd__(self, other: "Usage") -> "Usage":
        self.calls += other.calls
        self.attempts += other.attempts
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.total_tokens += other.total_tokens
        self.latency_s += other.latency_s
        self.cost_unknown_calls += other.cost_unknown_calls
        if other.cost is not None:
            self.cost = (self.cost or 0.0) + other.cost
            self.cost_source = other.cost_source if self.cost_source in (None, other.cost_source) else "mixed"
        return self

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["latency_s"] = round(self.latency_s, 3)
        return d


@dataclass
class ChatResult:
    """One completed call: the reply text, why it stopped, usage, and the attempts it took."""

    text: str
    finish_reason: str | None
    usage: Usage
    model: str | None
    response_id: str | None
    failed_attempts: list[dict[str, Any]] = field(default_factory=list)


def parse_json_reply(text: str) -> Any:
    """The JSON value in a model reply: the whole text, a fenced ```json block, or the outermost ``{…}``.

    Raises :class:`ValueError` when there is none.
    """
    t = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", t, re.S)
    for candidate in ([t] + ([fence.group(1)] if fence else [])):
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    i, j = t.find("{"), t.rfind("}")
    if 0 <= i < j:
        try:
            return json.loads(t[i:j + 1])
        except ValueError:
            pass
    raise ValueError(f"no JSON object in the reply: {t[:120]!r}")


class ChatClient:
    """An OpenAI-compatible chat endpoint (see module docstring). Thread-safe; one per endpoint and model.

    Parameters
    ----------
    base_url : str
        e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended
        unless already there).
    model : str
    api_key, api_key_env : str, optional
        The key, or the environment variable holding it.
    timeout_s : float
        Per-request timeout [s].
    max_retries : int
        Retries of a transient failure (total attempts = ``max_retries + 1``).
    prices : Prices, optional
        Declared prices for the cost when the provider reports none.
    transcript : path, optional
        JSON-lines transcript file (appended).
    params : dict, optional
        Default request parameters (``temperature``, ``max_tokens``, ``seed``, …).
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 120.0, max_retries: int = 4,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0, prices: Prices | None = None,
                 transcript: str | Path | None = None, params: dict[str, Any] | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        url = base_url.rstrip("/")
        self.url = url if url.endswith("/chat/completions") else url + "/chat/completions"
        self.base_url = base_url
        self.model = model
        self._key = api_key if api_key is not None else os.environ.get(api_key_env) or None
        self.api_key_env = api_key_env
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.retry = RetryPolicy(max_retries=max_retries, backoff_s=backoff_s, max_backoff_s=max_backoff_s)
        self.prices = prices
        self.transcript = Path(transcript) if transcript is not None else None
        self.params = dict(params or {})
        self.totals = Usage()
        self._sleep = sleep
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        """Endpoint, model and settings (no key) — for traces and reports."""
        return {"endpoint": self.url, "model": self.model, "api_key_env": self.api_key_env,
                "api_key_set": self._key is not None, "timeout_s": self.timeout_s, "max_retries": self.max_retries,
                "params": self.params, "prices": asdict(self.prices) if self.prices else None}

    # ------------------------------------------------------------------------------------------------ HTTP
    def _post(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 — URL from the user
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers or {}), exc.read() or b""

    def _usage(self, data: dict[str, Any], latency: float, attempts: int) -> Usage:
        m = meter("chat", data.get("usage"), self.prices, "declared_prices")
        raw = data.get("usage")
        total = raw.get("total_tokens") if isinstance(raw, dict) else None
        return Usage(calls=1, attempts=attempts, prompt_tokens=m.tokens_in, completion_tokens=m.tokens_out,
                     total_tokens=total if isinstance(total, int) and not isinstance(total, bool) and total >= 0
                     else m.tokens_in + m.tokens_out, latency_s=latency, cost=m.usd, cost_source=m.usd_source,
                     cost_unknown_calls=int(m.usd is None))

    def chat(self, messages: list[dict[str, Any]], *, session: str | None = None, log_from: int = 0,
             **params: Any) -> ChatResult:
        """Send ``messages``; return the assistant reply (see module docstring for retries and accounting).

        ``log_from`` — only ``messages[log_from:]`` go into the transcript (earlier ones were logged by an
        earlier call of the same conversation); the sha256 of the full list is always logged.
        """
        body = json.dumps({"model": self.model, "messages": messages, **self.params, **params}).encode("utf-8")
        failed: list[dict[str, Any]] = []
        t0 = time.monotonic()
        for attempt in range(self.max_retries + 1):
            headers: dict[str, str] = {}
            try:
                status, headers, raw = self._post(body)
            except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                failed.append({"attempt": attempt + 1, "error": f"{type(exc).__name__}: {reason}"[:300]})
            else:
                if status == 200:
                    try:
                        data = json.loads(raw)
                        choice = data["choices"][0]
                        text = choice["message"].get("content") or ""
                    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                        failed.append({"attempt": attempt + 1, "status": 200,
                                       "error": f"not a chat completion: {raw[:200]!r}"})
                    else:
                        usage = self._usage(data, time.monotonic() - t0, attempt + 1)
                        res = ChatResult(text, choice.get("finish_reason"), usage, data.get("model"), data.get("id"),
                                         failed)
                        self._record(messages, log_from, session, res, params)
                        return res
                else:
                    failed.append({"attempt": attempt + 1, "status": status,
                                   "error": raw[:300].decode("utf-8", "replace")})
                    if status not in RETRY_STATUS:
                        break
            if attempt < self.max_retries:
                self._sleep(self.retry.delay_s(attempt, {k.lower(): v for k, v in headers.items()}
                                                    .get("retry-after")))
        err = EndpointError(f"chat endpoint {self.url} failed after {len(failed)} attempt(s): "
                            f"{failed[-1].get('status', '')} {failed[-1]['error'][:200]}".replace("  ", " "))
        self._record(messages, log_from, session, None, params, failed, str(err))
        raise err

    def complete_json(self, messages: list[dict[str, Any]], **kw: Any) -> tuple[Any, ChatResult]:
        """:meth:`chat`, then :func:`parse_json_reply` of the reply (raises :class:`ValueError` if none)."""
        res = self.chat(messages, **kw)
        return parse_json_reply(res.text), res

    # ---------------------------------------------------------------------------------------- transcript
    def _record(self, messages: list[dict[str, Any]], log_from: int, session: str | None, res: ChatResult | None,
                params: dict[str, Any], failed: list[dict[str, Any]] | None = None, error: str | None = None) -> None:
        with self._lock:
            if res is not None:
                self.totals += res.usage
            else:
                self.totals += Usage(attempts=len(failed or []))
            if self.transcript is None:
                return
            line = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "session": session,
                    "endpoint": self.url, "model": self.model, "params": {**self.params, **params},
                    "n_messages": len(messages),
                    "messages_sha256": hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest(),
                    "messages": messages[log_from:]}
            if res is not None:
                line.update(reply=res.text, finish_reason=res.finish_reason, usage=res.usage.to_dict(),
                            response_model=res.model, response_id=res.response_id, failed_attempts=res.failed_attempts)
            else:
                line.update(error=error, failed_attempts=failed)
            self.transcript.parent.mkdir(parents=True, exist_ok=True)
            with self.transcript.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
