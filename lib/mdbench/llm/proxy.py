"""The metering model proxy: the one network peer an evaluated coding agent may reach.

:class:`MeteringProxy` is an OpenAI-compatible HTTP server the evaluator runs for the length of an episode. It
forwards ``POST …/chat/completions`` and ``POST …/responses`` (streaming server-sent events and not, tool calls
included) and ``GET …/models`` to the maintainer's endpoint, with the API key from the evaluator's environment
(the agent holds only a per-episode token for the proxy itself; the key never enters the sandbox).

* **Where it listens.** On listening sockets handed to :meth:`MeteringProxy.serve_socket` — the sandbox's
  ``loopback_listen`` sockets, bound to ``127.0.0.1:PORT`` *inside* the agent's network namespace, so the agent
  reaches the proxy and nothing else — or, for development and tests, on a host loopback port
  (:meth:`MeteringProxy.serve_loopback`).
* **Log.** Every call is one JSON line in ``LOG_DIR/calls.jsonl`` (append-only, written by the evaluator): time,
  route, API, model, streaming, the request body, the response (text, reasoning, tool calls, as assembled from the
  stream), token usage as the endpoint reported it, USD, latency, every failed attempt, and refusals (caps,
  unknown routes, a wrong token). ``LOG_DIR/summary.json`` holds the totals when the proxy stops.
* **Metering.** Tokens in (cached included), cached, out; USD from :class:`~mdbench.llm.prices.PriceTable`
  (``params/llm_prices.yaml``), or the provider's own ``usage.cost`` when it reports one; unknown prices stay
  unknown (``usd_unknown_calls``), never zero.
* **Caps.** Per-episode token (in + out), USD and call caps: once one is spent every further call is refused
  with HTTP 403 and a message naming the cap (``capped`` in the totals). Calls in flight when the cap is
  reached finish (their tokens are counted), so a cap can be overshot by at most the calls running at once.
* **Retries.** Refused or dropped connections, timeouts, HTTP 408/409/429/5xx and malformed answers (a body that
  is not the API's JSON; a stream whose first event is not JSON) are retried up to ``max_retries`` times with
  exponential backoff (``Retry-After`` honoured, at most ``max_backoff_s``) before any byte reaches the agent.
  After that the agent gets HTTP 502 with the cause. A stream that breaks after it started is passed on as it
  is (the agent sees the break; the CLI's own retry is a new, metered call) and logged ``complete: false``.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import logging
import os
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mdbench import untrusted
from mdbench.errors import InputError, MdbenchError
from mdbench.llm.prices import PriceTable
from mdbench.llm.retry import RETRY_STATUS, RetryPolicy
from mdbench.llm.scripted import encode_responses, sse_responses
from mdbench.llm.translate import chat_to_reply, responses_to_chat
from mdbench.llm.usage import meter

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
#: A logged request body longer than this is replaced by its size, sha256 and head.
MAX_LOGGED_REQUEST_BYTES = 8 * 1024 * 1024
#: Nesting depth of a request or answer (the CLIs' requests nest < 20 deep); deeper is refused before parsing.
MAX_JSON_DEPTH = 256
_NOT_JSON = object()


def _json(data: bytes | str, max_bytes: int = MAX_REQUEST_BYTES) -> Any:
    """Parsed JSON, or ``_NOT_JSON`` (malformed, too deep, non-finite numbers, too large) — never raises."""
    try:
        return untrusted.loads(data, max_bytes=max_bytes, max_depth=MAX_JSON_DEPTH)
    except (untrusted.Refused, ValueError, RecursionError):
        return _NOT_JSON


class ProxyError(MdbenchError):
    """The proxy cannot start as asked (bad endpoint URL, unusable log folder)."""


@dataclass(frozen=True)
class Caps:
    """Per-episode limits; ``None`` = no limit."""

    max_tokens: int | None = None       # tokens in (cached included) + tokens out
    max_usd: float | None = None        # USD (calls with unknown price add nothing: see PriceTable)
    max_calls: int | None = None        # completed upstream calls
    max_inflight: int = 8               # calls forwarded at once (bounds how far a cap can be overshot)


@dataclass
class Totals:
    """What the episode's model calls used, as the endpoint reported it."""

    calls: int = 0                      # upstream answers with status 200
    incomplete: int = 0                 # of which streams that broke before their end
    failed: int = 0                     # calls answered 502 after retries, or passed-on HTTP errors
    refused: int = 0                    # refused by the proxy (cap, route, token)
    attempts: int = 0
    tokens_in: int = 0
    tokens_cached: int = 0
    tokens_out: int = 0
    usd: float = 0.0
    usd_unknown_calls: int = 0
    capped: str | None = None
    last_error: str | None = None       # the last failure (endpoint down, HTTP error, broken stream)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["usd"] = round(self.usd, 8)
        return d


# ------------------------------------------------------------------------------------------ assembling

class _Assembler:
    """Builds the logged response (text, reasoning, tool calls, usage) from a body or from stream events."""

    def __init__(self, api: str):
        self.api = api
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.usage: Any = None
        self.finish: str | None = None
        self.complete = False
        self.model: str | None = None
        self.error: str | None = None
        self.events = 0

    def body(self, data: Any) -> bool:
        """A non-streamed answer; False when it is not the API's JSON."""
        if not isinstance(data, dict):
            return False
        if self.api == "chat":
            ch = data.get("choices")
            if not isinstance(ch, list) or not ch or not isinstance(ch[0], dict):
                return False
            msg = ch[0].get("message") if isinstance(ch[0].get("message"), dict) else {}
            if isinstance(msg.get("content"), str):
                self.text.append(msg["content"])
            for key in ("reasoning_content", "reasoning"):
                if isinstance(msg.get(key), str):
                    self.reasoning.append(msg[key])
            for k, tc in enumerate(msg.get("tool_calls") or []):
                fn = tc.get("function") if isinstance(tc, dict) and isinstance(tc.get("function"), dict) else {}
                self.calls[k] = {"id": str(tc.get("id", "")), "name": str(fn.get("name", "")),
                                 "arguments": str(fn.get("arguments", ""))}
            self.finish = ch[0].get("finish_reason")
        else:
            if not isinstance(data.get("output"), list):
                return False
            self._response(data)
        self.usage = data.get("usage")
        self.model = data.get("model") if isinstance(data.get("model"), str) else None
        self.complete = True
        return True

    def compact(self, data: Any) -> bool:
        """A compaction answer (``/responses/compact``): any JSON object; its usage when it has one."""
        if not isinstance(data, dict):
            return False
        self.usage = data.get("usage")
        self.model = data.get("model") if isinstance(data.get("model"), str) else None
        self.complete = True
        self.finish = "compacted"
        return True

    def _response(self, resp: dict[str, Any]) -> None:
        self.text, self.reasoning, self.calls = [], [], {}
        for item in resp.get("output") or []:
            if not isinstance(item, dict):
                continue
            t = item.get("type")
            if t == "message":
                for part in item.get("content") or []:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        self.text.append(part["text"])
            elif t == "reasoning":
                for part in (item.get("summary") or []) + (item.get("content") or []):
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        self.reasoning.append(part["text"])
            elif t in ("function_call", "custom_tool_call", "local_shell_call", "web_search_call"):
                args = item.get("arguments", item.get("input", item.get("action", "")))
                self.calls[len(self.calls)] = {
                    "id": str(item.get("call_id") or item.get("id") or ""), "name": str(item.get("name") or t),
                    "arguments": args if isinstance(args, str) else json.dumps(args)}
        self.finish = resp.get("status") if isinstance(resp.get("status"), str) else None

    def event(self, data: str) -> bool:
        """One streamed event's data; False when it is not JSON (a malformed stream)."""
        self.events += 1
        if data.strip() == "[DONE]":
            self.complete = self.api == "chat" or self.complete
            return True
        ev = _json(data)
        if not isinstance(ev, dict):
            return False
        if self.api == "chat":
            if isinstance(ev.get("model"), str):
                self.model = ev["model"]
            if ev.get("usage") is not None:
                self.usage = ev["usage"]
            if isinstance(ev.get("error"), dict):
                self.error = str(ev["error"].get("message", ev["error"]))[:500]
            for ch in ev.get("choices") or []:
                d = ch.get("delta") if isinstance(ch, dict) and isinstance(ch.get("delta"), dict) else {}
                if isinstance(d.get("content"), str):
                    self.text.append(d["content"])
                for key in ("reasoning_content", "reasoning"):
                    if isinstance(d.get(key), str):
                        self.reasoning.append(d[key])
                for tc in d.get("tool_calls") or []:
                    if not isinstance(tc, dict):
                        continue
                    k = tc.get("index", 0) if isinstance(tc.get("index"), int) else 0
                    cur = self.calls.setdefault(k, {"id": "", "name": "", "arguments": ""})
                    fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
                    cur["id"] = cur["id"] or str(tc.get("id") or "")
                    cur["name"] += str(fn.get("name") or "")
                    cur["arguments"] += str(fn.get("arguments") or "")
                if isinstance(ch, dict) and ch.get("finish_reason"):
                    self.finish = ch["finish_reason"]
        else:
            t = ev.get("type")
            if t == "response.output_text.delta" and isinstance(ev.get("delta"), str):
                self.text.append(ev["delta"])
            elif t in ("response.completed", "response.incomplete", "response.failed") and isinstance(
                    ev.get("response"), dict):
                resp = ev["response"]
                self._response(resp)
                self.usage = resp.get("usage")
                self.model = resp.get("model") if isinstance(resp.get("model"), str) else self.model
                self.complete = True
                if t == "response.failed":
                    err = resp.get("error")
                    self.error = str(err.get("message") if isinstance(err, dict) else err)[:500]
            elif t == "error":
                self.error = str(ev.get("message") or ev.get("error") or ev)[:500]
        return True

    def to_json(self) -> dict[str, Any]:
        return {"text": "".join(self.text), "reasoning": "".join(self.reasoning) or None,
                "tool_calls": [self.calls[k] for k in sorted(self.calls)], "finish_reason": self.finish,
                "model": self.model, "usage": self.usage, "complete": self.complete, "error": self.error,
                "events": self.events or None}


# ------------------------------------------------------------------------------------------------ proxy

class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class MeteringProxy:
    """See the module docstring.

    Parameters
    ----------
    endpoint : str
        The maintainer's OpenAI-compatible base URL, e.g. ``https://api.openai.com/v1``; the agent's route after
        its ``/v1`` is appended (``/responses``, ``/chat/completions``, ``/models``).
    log_dir : path
        ``EP/llm``: ``calls.jsonl`` and ``summary.json`` (created; must be the evaluator's).
    api_key : str, optional
        The key; else the environment variable ``api_key_env`` (default: ``MDBENCH_LLM_API_KEY``, then
        ``OPENAI_API_KEY``). No key: no ``Authorization`` header upstream (local servers).
    client_token : str, optional
        The token the agent must present (``Authorization: Bearer …``); ``None`` accepts any.
    prices : PriceTable, optional
    caps : Caps
    retry : RetryPolicy
    on_cap : callable, optional
        Called once, with the cap message, when a cap is first reached.
    endpoint_api : {"native", "chat"}
        ``chat``: the endpoint serves Chat Completions only; Responses requests are translated
        (:mod:`mdbench.llm.translate`), answered as the client asked (JSON or events) once the whole chat answer
        is in.
    allowed_models : collection of str, optional
        The models the episode may call (its configuration); a request for another is refused (HTTP 403) —
        an agent cannot swap in a stronger or cheaper model than the one it is evaluated with.
    """

    def __init__(self, endpoint: str, *, log_dir: str | Path, api_key: str | None = None,
                 api_key_env: str | None = None, client_token: str | None = None, prices: PriceTable | None = None,
                 caps: Caps = Caps(), retry: RetryPolicy = RetryPolicy(),
                 on_cap: Callable[[str], None] | None = None, allowed_models: Any = None,
                 endpoint_api: str = "native",
                 sleep: Callable[[float], None] = time.sleep):
        u = urllib.parse.urlsplit(endpoint)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ProxyError(f"--endpoint {endpoint!r} is not an http(s) URL (e.g. https://api.openai.com/v1)")
        self.endpoint = endpoint.rstrip("/")
        self._scheme, self._host = u.scheme, u.hostname
        self._port = u.port or (443 if u.scheme == "https" else 80)
        self._base_path = u.path.rstrip("/")
        if api_key is None:
            names = [api_key_env] if api_key_env else ["MDBENCH_LLM_API_KEY", "OPENAI_API_KEY"]
            api_key = next((os.environ[n] for n in names if os.environ.get(n)), None)
            self.api_key_env = next((n for n in names if os.environ.get(n)), names[0])
        else:
            self.api_key_env = None
        self._key = api_key or None
        self.client_token = client_token
        self.prices = prices
        self.caps, self.retry = caps, retry
        self.on_cap = on_cap
        self.allowed_models = frozenset(allowed_models) if allowed_models is not None else None
        if endpoint_api not in ("native", "chat"):
            raise ProxyError(f"endpoint API {endpoint_api!r} is not native or chat")
        self.endpoint_api = endpoint_api
        self._inflight = threading.BoundedSemaphore(max(1, caps.max_inflight))
        self._sleep = sleep
        self.log_dir = Path(log_dir)
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.log_dir / "calls.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ProxyError(f"cannot write the proxy log in {self.log_dir}: {exc}") from None
        self._log = os.fdopen(fd, "a", encoding="utf-8")
        self.totals = Totals()
        #: Every log line carries it: an episode run again appends to the same log, its trajectory reads its own.
        self.session = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.urandom(4).hex()}"
        self._lock = threading.Lock()
        self._seq = 0
        self._servers: list[tuple[_Server, threading.Thread]] = []
        self._ssl = ssl.create_default_context() if self._scheme == "https" else None
        self.ports: list[int] = []

    # ---------------------------------------------------------------------------------------- life cycle
    def describe(self) -> dict[str, Any]:
        """Endpoint, caps, retries and where the key comes from (never the key)."""
        return {"endpoint": self.endpoint, "api_key_env": self.api_key_env, "api_key_set": self._key is not None,
                "allowed_models": sorted(self.allowed_models) if self.allowed_models is not None else None,
                "caps": asdict(self.caps), "retry": asdict(self.retry), "log": str(self.log_dir / "calls.jsonl"),
                "prices": self.prices.source if self.prices else None}

    def serve_socket(self, sock: socket.socket) -> None:
        """Serve on an already listening TCP socket (e.g. a sandbox's ``loopback_listen`` socket)."""
        srv = _Server(sock.getsockname()[:2], self._handler(), bind_and_activate=False)
        srv.socket.close()
        srv.socket = sock
        srv.server_address = sock.getsockname()[:2]
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, name="mdbench-llm-proxy",
                             daemon=True)
        t.start()
        self._servers.append((srv, t))
        self.ports.append(int(srv.server_address[1]))

    def serve_loopback(self, port: int = 0) -> int:
        """Listen on ``127.0.0.1:port`` of this host (0: a free port); returns the port."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        self.serve_socket(s)
        return self.ports[-1]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` of the first socket served."""
        return f"http://127.0.0.1:{self.ports[0]}/v1"

    def stop(self) -> Totals:
        """Stop serving, close the sockets, write ``summary.json``; returns the totals."""
        for srv, t in self._servers:
            srv.shutdown()
            srv.server_close()
            t.join(timeout=10)
        self._servers = []
        with self._lock:
            if not self._log.closed:
                self._log.close()
            summary = {"endpoint": self.endpoint, "session": self.session, **self.totals.to_json(),
                       "caps": asdict(self.caps)}
        try:
            untrusted.write_new(self.log_dir / "summary.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
        except (OSError, untrusted.Refused) as exc:
            log.warning("cannot write %s: %s", self.log_dir / "summary.json", exc)
        return self.totals

    def __enter__(self) -> MeteringProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --------------------------------------------------------------------------------------- accounting
    def _cap_reached(self) -> str | None:
        t, c = self.totals, self.caps
        if t.capped:
            return t.capped
        msg = None
        if c.max_tokens is not None and t.tokens_in + t.tokens_out >= c.max_tokens:
            msg = f"token cap reached: {t.tokens_in + t.tokens_out} tokens used of {c.max_tokens}"
        elif c.max_usd is not None and t.usd >= c.max_usd:
            msg = f"USD cap reached: {t.usd:.4f} USD used of {c.max_usd:g}"
        elif c.max_calls is not None and t.calls >= c.max_calls:
            msg = f"call cap reached: {t.calls} calls of {c.max_calls}"
        if msg:
            t.capped = msg
            if self.on_cap is not None:
                try:
                    self.on_cap(msg)
                except Exception:
                    log.exception("on_cap callback failed")
        return msg

    def _record(self, rec: dict[str, Any], asm: _Assembler | None) -> dict[str, Any]:
        """Meter one finished call and append its log line."""
        with self._lock:
            self._seq += 1
            rec = {"seq": self._seq, "session": self.session, **rec}
            t = self.totals
            t.attempts += len(rec.get("attempts") or [])
            kind = rec.get("outcome")
            if kind == "refused":
                t.refused += 1
            elif kind == "failed":
                t.failed += 1
            if kind in ("failed", "incomplete") and rec.get("error"):
                t.last_error = str(rec["error"])[:500]
            if asm is not None and rec.get("status") == 200:
                t.calls += 1
                t.incomplete += 0 if asm.complete else 1
                price = self.prices.get(rec.get("model")) if self.prices else None
                m = meter(rec["api"], asm.usage, price, "price_table")
                rec["metered"] = m.to_log()
                t.tokens_in += m.tokens_in
                t.tokens_cached += m.tokens_cached
                t.tokens_out += m.tokens_out
                if m.usd is None:
                    t.usd_unknown_calls += 1
                else:
                    t.usd += m.usd
                self._cap_reached()
            if not self._log.closed:
                self._log.write(json.dumps(rec, default=str) + "\n")
                self._log.flush()
        return rec

    # ------------------------------------------------------------------------------------------ handler
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class of this proxy (:class:`_ProxyHandler` bound to it)."""
        return type("Handler", (_ProxyHandler,), {"proxy": self})

    # ------------------------------------------------------------------------------------------ upstream
    def _conn(self) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.retry.connect_timeout_s,
                                               context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.retry.connect_timeout_s)

    def _headers(self, accept: str) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": accept, "Accept-Encoding": "identity",
             "User-Agent": "mdbench-llm-proxy"}
        if self._key:
            h["Authorization"] = f"Bearer {self._key}"
        return h

    def _get(self, route: str) -> tuple[int, dict[str, str], bytes, list[dict[str, Any]]]:
        attempts: list[dict[str, Any]] = []
        for attempt in range(self.retry.max_retries + 1):
            conn = self._conn()
            try:
                conn.request("GET", self._base_path + route, headers=self._headers("application/json"))
                resp = conn.getresponse()
                conn.sock.settimeout(self.retry.read_timeout_s) if conn.sock else None
                body = resp.read(MAX_RESPONSE_BYTES)
                if resp.status not in RETRY_STATUS:
                    return resp.status, dict(resp.getheaders()), body, attempts
                attempts.append({"status": resp.status, "error": body[:300].decode("utf-8", "replace")})
                ra = resp.getheader("Retry-After")
            except (OSError, http.client.HTTPException) as exc:
                attempts.append({"error": f"{type(exc).__name__}: {exc}"[:300]})
                ra = None
            finally:
                conn.close()
            if attempt < self.retry.max_retries:
                self._sleep(self.retry.delay_s(attempt, ra))
        return 502, {}, json.dumps({"error": {"message": f"mdbench proxy: {attempts[-1]}"}}).encode(), attempts

    def _retrying(self, h: BaseHTTPRequestHandler, base: dict[str, Any], t0: float,
                  once: Callable[[http.client.HTTPConnection, list[dict[str, Any]]], None]) -> None:
        """Call ``once(conn, attempts)`` until it has answered the agent, at most ``1 + max_retries`` times.

        ``once`` returns once it has answered (and logged) the call, raises :class:`_Retry` (after noting the
        failed attempt in ``attempts``) for a transient failure; a dropped connection or a timeout is one too.
        After the last attempt the agent gets HTTP 502 with the cause, and the call is logged ``failed``.
        """
        attempts: list[dict[str, Any]] = []
        for attempt in range(self.retry.max_retries + 1):
            conn = self._conn()
            retry_after = None
            try:
                once(conn, attempts)
                return
            except _Retry as r:
                retry_after = r.retry_after
            except (OSError, http.client.HTTPException) as exc:
                attempts.append({"error": f"{type(exc).__name__}: {exc}"[:300]})
            finally:
                conn.close()
            if attempt < self.retry.max_retries:
                self._sleep(self.retry.delay_s(attempt, retry_after))
        last = attempts[-1] if attempts else {"error": "no attempt"}
        cause = f"{last.get('status', '')} {last.get('error', '')}".strip()[:300]
        msg = f"mdbench proxy: the model endpoint {self.endpoint} failed after {len(attempts)} attempt(s): {cause}"
        self._record({**base, "outcome": "failed", "status": 502, "attempts": attempts,
                      "latency_s": round(time.monotonic() - t0, 4), "error": msg}, None)
        h._error(502, msg, "upstream_failed")  # type: ignore[attr-defined]

    def _post_upstream(self, conn: http.client.HTTPConnection, path: str, raw: bytes,
                       accept: str) -> http.client.HTTPResponse:
        conn.request("POST", path, body=raw, headers=self._headers(accept))
        if conn.sock is not None:
            conn.sock.settimeout(self.retry.read_timeout_s)
        return conn.getresponse()

    def _pass_error(self, h: BaseHTTPRequestHandler, resp: http.client.HTTPResponse, base: dict[str, Any],
                    attempts: list[dict[str, Any]], t0: float) -> None:
        """A non-200 answer: a transient one raises :class:`_Retry`; any other (400, 401, 404, …) is logged and
        passed on as the endpoint said it."""
        body = resp.read(MAX_RESPONSE_BYTES)
        attempts.append({"status": resp.status, "error": body[:300].decode("utf-8", "replace")})
        if resp.status in RETRY_STATUS:
            raise _Retry(resp.getheader("Retry-After"))
        self._record({**base, "outcome": "failed", "status": resp.status, "attempts": attempts,
                      "latency_s": round(time.monotonic() - t0, 4),
                      "error": f"endpoint answered {resp.status}: {attempts[-1]['error']}"}, None)
        h._reply(resp.status, body, resp.getheader("Content-Type") or "application/json")  # type: ignore[attr-defined]

    def _forward_translated(self, h: BaseHTTPRequestHandler, req: dict[str, Any], stream: bool,
                            base: dict[str, Any], t0: float) -> None:
        """A Responses call answered by a chat endpoint (:mod:`mdbench.llm.translate`), with the same retries."""
        raw = json.dumps(responses_to_chat(req)).encode()
        base = {**base, "api": "chat", "translated_from": "responses"}

        def once(conn: http.client.HTTPConnection, attempts: list[dict[str, Any]]) -> None:
            resp = self._post_upstream(conn, self._base_path + "/chat/completions", raw, "application/json")
            if resp.status != 200:
                return self._pass_error(h, resp, base, attempts, t0)
            body = resp.read(MAX_RESPONSE_BYTES + 1)
            data = _json(body, MAX_RESPONSE_BYTES)
            asm = _Assembler("chat")
            reply = chat_to_reply(data) if isinstance(data, dict) else None
            if reply is None or not asm.body(data):
                attempts.append({"status": 200, "error": f"not a chat answer: {body[:200]!r}"})
                raise _Retry
            model = str(req.get("model") or "")
            rid = f"mdbench-{self._seq + 1}-{int(time.time() * 1000)}"
            if stream:
                events = b"".join(sse_responses(reply, model, rid))
                try:
                    h.send_response(200)
                    h.send_header("Content-Type", "text/event-stream")
                    h.send_header("Connection", "close")
                    h.end_headers()
                    h.wfile.write(events)
                except OSError:
                    pass
            else:
                h._reply(200, encode_responses(reply, model, rid))  # type: ignore[attr-defined]
            self._record({**base, "outcome": "ok", "status": 200, "attempts": attempts + [{"status": 200}],
                          "latency_s": round(time.monotonic() - t0, 4), "response": asm.to_json()}, asm)
            return None

        self._retrying(h, base, t0, once)

    def _forward(self, h: BaseHTTPRequestHandler, api: str, route: str, raw: bytes, stream: bool,
                 base: dict[str, Any], t0: float) -> None:
        """Send the call upstream with retries and pass the answer on (see the module docstring)."""
        accept = "text/event-stream" if stream else "application/json"

        def once(conn: http.client.HTTPConnection, attempts: list[dict[str, Any]]) -> None:
            resp = self._post_upstream(conn, self._base_path + route, raw, accept)
            if resp.status != 200:
                return self._pass_error(h, resp, base, attempts, t0)
            ctype = (resp.getheader("Content-Type") or "").lower()
            if stream and "text/event-stream" in ctype:
                if self._pipe_stream(h, api, resp, base, attempts, t0):
                    return None
                raise _Retry
            body = resp.read(MAX_RESPONSE_BYTES + 1)
            asm = _Assembler(api)
            data = _json(body, MAX_RESPONSE_BYTES)
            ok = len(body) <= MAX_RESPONSE_BYTES and (asm.body(data) if api != "compact" else asm.compact(data))
            if not ok:
                attempts.append({"status": 200, "error": f"not a {api} answer: {body[:200]!r}"})
                raise _Retry
            h._reply(200, body)  # type: ignore[attr-defined]
            self._record({**base, "outcome": "ok", "status": 200, "attempts": attempts + [{"status": 200}],
                          "latency_s": round(time.monotonic() - t0, 4), "response": asm.to_json()}, asm)
            return None

        self._retrying(h, base, t0, once)

    def _pipe_stream(self, h: BaseHTTPRequestHandler, api: str, resp: http.client.HTTPResponse,
                     base: dict[str, Any], attempts: list[dict[str, Any]], t0: float) -> bool:
        """Pass an event stream on while assembling it; False (nothing sent) when its first event is malformed."""
        asm = _Assembler(api)
        pending: list[bytes] = []      # lines of the first event, held until it parsed
        data: list[str] = []
        started = False
        client_ok = True
        error: str | None = None
        total = 0

        def send(chunk: bytes) -> None:
            nonlocal client_ok
            if not client_ok:
                return
            try:
                h.wfile.write(chunk)
                h.wfile.flush()
            except OSError:
                client_ok = False   # the agent went away: keep reading, the endpoint bills the whole answer

        try:
            while True:
                line = resp.readline(MAX_RESPONSE_BYTES + 1)   # one event may carry a whole long answer
                if not line:
                    break
                total += len(line)
                if total > MAX_RESPONSE_BYTES:
                    error = "stream larger than the proxy's limit"
                    break
                stripped = line.rstrip(b"\r\n")
                if stripped.startswith(b"data:"):
                    data.append(stripped[5:].lstrip().decode("utf-8", "replace"))
                if not started:
                    pending.append(line)
                    if stripped == b"" and data:
                        if not asm.event("\n".join(data)):
                            attempts.append({"status": 200, "error": f"malformed stream: {data[0][:200]!r}"})
                            return False
                        data = []
                        started = True
                        try:
                            h.send_response(200)
                            h.send_header("Content-Type", "text/event-stream")
                            h.send_header("Cache-Control", "no-cache")
                            h.send_header("Connection", "close")
                            h.end_headers()
                        except OSError:
                            client_ok = False
                        send(b"".join(pending))
                    continue
                send(line)
                if stripped == b"" and data:
                    if not asm.event("\n".join(data)) and error is None:
                        error = f"malformed event in stream: {data[0][:200]!r}"
                    data = []
        except (OSError, http.client.HTTPException) as exc:
            error = f"stream broke: {type(exc).__name__}: {exc}"[:300]
        if not started:
            attempts.append({"status": 200, "error": error or "stream ended before its first event"})
            return False
        if data:
            asm.event("\n".join(data))
        if not asm.complete and error is None:
            error = "stream ended without its final event"
        self._record({**base, "outcome": "ok" if asm.complete else "incomplete", "status": 200,
                      "attempts": attempts + [{"status": 200}], "latency_s": round(time.monotonic() - t0, 4),
                      "response": asm.to_json(), "error": error or asm.error, "client_disconnected": not client_ok},
                     asm)
        return True


class _ProxyHandler(BaseHTTPRequestHandler):
    """One agent connection to :class:`MeteringProxy` (``proxy`` is set per proxy by ``MeteringProxy._handler``)."""

    proxy: MeteringProxy
    server_version = "mdbench-llm-proxy"
    timeout = 300   # [s] a client that stops sending its request holds a thread at most this long

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: dict[str, Any] | bytes, ctype: str = "application/json") -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(raw)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(raw)
        except OSError:
            pass

    def _error(self, status: int, message: str, code: str) -> None:
        self._reply(status, {"error": {"message": message, "type": "mdbench_proxy", "code": code}})

    def _body(self) -> bytes | None:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline(100).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline(100)
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline(100)
                if len(out) > MAX_REQUEST_BYTES:
                    return None
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return None
        return None if n < 0 or n > MAX_REQUEST_BYTES else self.rfile.read(n)

    def _decoded(self, raw: bytes) -> bytes | str:
        """The body without its Content-Encoding (gzip, deflate), or why not (a short reason)."""
        enc = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if enc in ("", "identity"):
            return raw
        if enc not in ("gzip", "deflate"):
            return f"Content-Encoding {enc} is not supported (send identity, gzip or deflate)"
        try:
            d = zlib.decompressobj(zlib.MAX_WBITS | 32)    # gzip or zlib header
            out = d.decompress(raw, MAX_REQUEST_BYTES + 1)
        except zlib.error as exc:
            return f"bad {enc} body: {exc}"
        return out if len(out) <= MAX_REQUEST_BYTES else "request body too large once decompressed"

    def _route(self) -> str:
        path = self.path.split("?", 1)[0]
        return path[3:] if path.startswith("/v1/") else path

    def _authorised(self, base: dict[str, Any]) -> bool:
        if self.proxy.client_token is None or self.headers.get("Authorization") == f"Bearer {self.proxy.client_token}":
            return True
        self.proxy._record({**base, "outcome": "refused", "status": 401, "error": "wrong proxy token"}, None)
        self._error(401, "mdbench proxy: wrong token", "invalid_api_key")
        return False

    def do_GET(self) -> None:
        base = {"time": _now(), "method": "GET", "path": self.path, "api": None}
        if not self._authorised(base):
            return
        if self._route().rstrip("/") != "/models":
            self.proxy._record({**base, "outcome": "refused", "status": 404, "error": "route not served"}, None)
            return self._error(404, f"mdbench proxy: {self.path} is not served", "not_found")
        query = self.path.partition("?")[2]
        status, _h, raw, attempts = self.proxy._get("/models" + (f"?{query}" if query else ""))
        self.proxy._record({**base, "outcome": "ok" if status == 200 else "failed", "status": status,
                       "attempts": attempts}, None)
        self._reply(status, raw)

    def do_POST(self) -> None:
        try:
            self._post()
        except Exception as exc:  # a proxy bug must not drop the agent's call silently nor stop serving
            log.exception("proxy failed on %s", self.path)
            self.proxy._record({"time": _now(), "method": "POST", "path": self.path, "outcome": "failed",
                           "status": 500, "error": f"proxy error: {type(exc).__name__}: {exc}"[:500]}, None)
            self._error(500, f"mdbench proxy error: {type(exc).__name__}", "proxy_error")

    def _post(self) -> None:
        t0 = time.monotonic()
        route = self._route().rstrip("/")
        api = ("chat" if route == "/chat/completions" else "responses" if route == "/responses" else
               "compact" if route == "/responses/compact" else None)   # Codex's remote context compaction
        base: dict[str, Any] = {"time": _now(), "method": "POST", "path": self.path, "api": api}
        raw = self._body()
        if not self._authorised(base):
            return
        if api is None:
            self.proxy._record({**base, "outcome": "refused", "status": 404, "error": "route not served"}, None)
            return self._error(404, f"mdbench proxy: {self.path} is not served (only /v1/chat/completions,"
                                    " /v1/responses, /v1/responses/compact, /v1/models)", "not_found")
        if raw is None:
            self.proxy._record({**base, "outcome": "refused", "status": 413, "error": "request too large"}, None)
            return self._error(413, "mdbench proxy: request body too large", "request_too_large")
        raw = self._decoded(raw)
        if isinstance(raw, str):
            self.proxy._record({**base, "outcome": "refused", "status": 415, "error": raw}, None)
            return self._error(415, f"mdbench proxy: {raw}", "unsupported_encoding")
        req = _json(raw)
        if not isinstance(req, dict):
            self.proxy._record({**base, "outcome": "refused", "status": 400, "error": "body not a JSON object",
                           "request": _loggable(raw, None)}, None)
            return self._error(400, "mdbench proxy: request body is not a JSON object (or nests too deep)",
                               "invalid_request")
        model = req.get("model") if isinstance(req.get("model"), str) else None
        stream = req.get("stream") is True
        base.update(model=model, stream=stream, request=_loggable(raw, req))
        if self.proxy.allowed_models is not None and model not in self.proxy.allowed_models:
            msg = (f"model {model!r} is not this episode's model "
                   f"({', '.join(sorted(self.proxy.allowed_models))})")
            self.proxy._record({**base, "outcome": "refused", "status": 403, "error": msg, "refused": "model"},
                          None)
            return self._error(403, f"mdbench proxy: {msg}", "mdbench_model_not_allowed")
        if api == "chat" and stream:
            so = req.get("stream_options") if isinstance(req.get("stream_options"), dict) else {}
            if so.get("include_usage") is not True:
                req["stream_options"] = {**so, "include_usage": True}   # metering needs the usage chunk
                raw = json.dumps(req).encode()
        with self.proxy._inflight:   # the cap is checked once the call may go: overshoot <= calls in flight
            with self.proxy._lock:
                cap = self.proxy._cap_reached()
            if cap:
                self.proxy._record({**base, "outcome": "refused", "status": 403, "error": cap, "refused": "cap"},
                              None)
                return self._error(403, f"mdbench proxy: {cap}; this episode may make no further model "
                                        "calls", "mdbench_cap_reached")
            if api == "responses" and self.proxy.endpoint_api == "chat":
                self.proxy._forward_translated(self, req, stream, base, t0)
            else:
                self.proxy._forward(self, api, route, raw, stream, base, t0)


class _Retry(Exception):
    """A transient failure of one upstream attempt; ``retry_after`` is the endpoint's ``Retry-After``, if any."""

    def __init__(self, retry_after: str | None = None):
        super().__init__(retry_after)
        self.retry_after = retry_after


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _loggable(raw: bytes, req: dict[str, Any] | None) -> Any:
    if req is not None and len(raw) <= MAX_LOGGED_REQUEST_BYTES:
        return req
    return {"truncated": True, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(),
            "head": raw[:4096].decode("utf-8", "replace")}


def main(argv: list[str] | None = None) -> int:
    """``python -m mdbench.llm.proxy --endpoint URL --log-dir DIR``: serve the metering proxy on a host loopback port
    until interrupted (e.g. to meter a Harbor run whose agent gets ``--ak base_url=http://127.0.0.1:PORT/v1``)."""


    p = argparse.ArgumentParser(prog="python -m mdbench.llm.proxy", description=main.__doc__.split("\n")[0])
    p.add_argument("--endpoint", required=True, help="the OpenAI-compatible base URL (…/v1)")
    p.add_argument("--log-dir", type=Path, required=True, help="calls.jsonl and summary.json go here")
    p.add_argument("--port", type=int, default=0, help="127.0.0.1 port (default: a free one, printed)")
    p.add_argument("--api-key-env", default=None, help="variable holding the key (default MDBENCH_LLM_API_KEY, "
                                                      "then OPENAI_API_KEY)")
    p.add_argument("--model", action="append", default=None, help="allowed model (repeatable; default: any)")
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--max-usd", type=float, default=None)
    p.add_argument("--endpoint-api", choices=("native", "chat"), default="native")
    p.add_argument("--prices", type=Path, default=None, help="price table (default params/llm_prices.yaml)")
    args = p.parse_args(argv)
    try:
        proxy = MeteringProxy(args.endpoint, log_dir=args.log_dir, api_key_env=args.api_key_env,
                              prices=PriceTable.load(args.prices), caps=Caps(args.max_tokens, args.max_usd),
                              allowed_models=args.model, endpoint_api=args.endpoint_api)
        proxy.serve_loopback(args.port)
    except (MdbenchError, InputError, OSError) as exc:
        print(f"mdbench proxy: {exc}", file=sys.stderr)
        return 2
    print(proxy.base_url, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    t = proxy.stop()
    print(json.dumps(t.to_json()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
