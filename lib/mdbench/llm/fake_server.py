"""A fake OpenAI-compatible model endpoint on the loopback address, for tests of anything model-backed.

``FakeChatServer(responder)`` serves ``POST /v1/chat/completions`` and ``POST /v1/responses`` (the Responses
API), streaming (``"stream": true``, server-sent events) and not, on ``127.0.0.1`` at a free port (never
another interface). ``responder(request) -> str | Reply`` gets the decoded request body (``model``,
``messages`` or ``input``, …) and returns the assistant's reply text, or a :class:`~mdbench.llm.scripted.Reply`
(text, tool calls, declared token usage) — :class:`~mdbench.llm.scripted.ScriptedModel` is such a responder:
it replays a script of assistant turns (shell commands, file writes, a final message) so that a real coding-agent
CLI executes them. Faults can be scripted: :meth:`FakeChatServer.fail_next` answers
the next requests with an HTTP error (and an optional ``Retry-After``), :meth:`FakeChatServer.delay_next`
stalls them (to test timeouts), :meth:`FakeChatServer.garble_next` returns a body that is not a chat
completion. Every request is kept in :attr:`FakeChatServer.requests` (with its ``Authorization`` header, so a
test can check the key was sent and nowhere else); what was answered (API, streaming, usage) is kept in
:attr:`FakeChatServer.served`. Usage is what a :class:`~mdbench.llm.scripted.Reply` declares, else
``ceil(characters / 4)`` tokens, an approximation; ``cost_per_call`` adds a provider-style ``usage.cost``.
:meth:`FakeChatServer.truncate_next` cuts the next streams after their first event (a malformed stream), and
:meth:`FakeChatServer.garble_stream_next` sends a stream whose first event is not JSON.

``python -m mdbench.llm.fake_server --script FILE [--port N]`` serves a script from the command line.

Use it as a context manager so the test that starts it stops it::

    with FakeChatServer(lambda req: '{"action": "stop"}') as srv:
        client = ChatClient(srv.base_url, "fake-model")
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mdbench.llm.scripted import (
    Reply,
    ScriptedModel,
    encode_chat,
    encode_responses,
    sse_chat,
    sse_responses,
)


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


class FakeChatServer:
    """See module docstring."""

    def __init__(self, responder: Callable[[dict[str, Any]], str | Reply], *, api_key: str | None = None,
                 model: str = "fake-model", cost_per_call: float | None = None, port: int = 0):
        self.responder = responder
        self.api_key = api_key
        self.model = model
        self.cost_per_call = cost_per_call
        self.port = port
        self.requests: list[dict[str, Any]] = []
        self.served: list[dict[str, Any]] = []
        self._faults: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -------------------------------------------------------------------------------------------- faults
    def fail_next(self, status: int, n: int = 1, retry_after: float | None = None) -> None:
        """Answer the next ``n`` requests with HTTP ``status``."""
        with self._lock:
            self._faults += [("status", (status, retry_after))] * n

    def delay_next(self, seconds: float, n: int = 1) -> None:
        """Stall the next ``n`` requests for ``seconds`` before answering normally."""
        with self._lock:
            self._faults += [("delay", seconds)] * n

    def garble_next(self, n: int = 1) -> None:
        """Answer the next ``n`` requests with 200 and a body that is not a chat completion."""
        with self._lock:
            self._faults += [("garble", None)] * n

    def truncate_next(self, n: int = 1) -> None:
        """Cut the next ``n`` streamed answers after their first event (no completion event, no usage)."""
        with self._lock:
            self._faults += [("truncate", None)] * n

    def garble_stream_next(self, n: int = 1) -> None:
        """Answer the next ``n`` streamed requests with 200 and an event stream whose data is not JSON."""
        with self._lock:
            self._faults += [("garble_stream", None)] * n

    def totals(self) -> dict[str, int]:
        """Calls answered with a completed reply and the tokens they declared (input, cached, output)."""
        with self._lock:
            done = [s for s in self.served if s["completed"]]
            return {"calls": len(done), "tokens_in": sum(s["usage"]["input"] for s in done),
                    "tokens_cached": sum(s["usage"]["cached"] for s in done),
                    "tokens_out": sum(s["usage"]["output"] for s in done)}

    def _take_fault(self) -> tuple[str, Any] | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    # ---------------------------------------------------------------------------------------- life cycle
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> FakeChatServer:
        """Serve on ``127.0.0.1:port`` (0: a free one) from a daemon thread; returns ``self``."""
        handler = type("Handler", (_FakeHandler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-chat-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> FakeChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _FakeHandler(BaseHTTPRequestHandler):
    """One connection to a :class:`FakeChatServer` (``fake`` is set per server by ``FakeChatServer.start``)."""

    fake: FakeChatServer

    def log_message(self, *args: Any) -> None:   # keep test output clean
        pass

    def _send(self, status: int, body: dict[str, Any] | str, headers: dict[str, str] | None = None) -> None:
        raw = (body if isinstance(body, str) else json.dumps(body)).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):   # the client gave up (a timeout test)
            pass

    def _stream(self, events: list[bytes], cut: bool) -> bool:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for ev in events[:1] if cut else events:
                self.wfile.write(ev)
                self.wfile.flush()
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            return self._send(200, {"object": "list", "data": [{"id": self.fake.model, "object": "model"}]})
        self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(length))
        except ValueError:
            return self._send(400, {"error": {"message": "body is not JSON"}})
        with self.fake._lock:
            self.fake.requests.append({"path": self.path, "authorization": self.headers.get("Authorization"),
                                    "body": req})
            n = len(self.fake.requests)
        route = self.path.split("?")[0].rstrip("/")
        api = ("chat" if route.endswith("/chat/completions") else
               "responses" if route.endswith("/responses") else
               "compact" if route.endswith("/responses/compact") else None)
        if api is None:
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        if self.fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {self.fake.api_key}":
            return self._send(401, {"error": {"message": "invalid API key"}})
        fault = self.fake._take_fault()
        if fault and fault[0] == "status":
            status, retry_after = fault[1]
            extra = {"Retry-After": str(retry_after)} if retry_after is not None else {}
            return self._send(status, {"error": {"message": f"injected {status}"}}, extra)
        if fault and fault[0] == "delay":
            time.sleep(fault[1])
        if fault and fault[0] == "garble":
            return self._send(200, "<html>gateway</html>")
        stream = bool(req.get("stream"))
        if fault and fault[0] == "garble_stream" and stream:
            self._stream([b"data: <html>gateway</html>\n\n"], False)
            return None
        try:
            reply = self.fake.responder(req)
        except Exception as exc:  # noqa: BLE001 — a responder bug is a 500, visible to the client
            return self._send(500, {"error": {"message": f"responder failed: {exc}"}})
        if not isinstance(reply, Reply):
            text = str(reply)
            msgs = req.get("messages") if api == "chat" else req.get("input")
            prompt = (sum(_tokens(json.dumps(m.get("content", ""))) for m in msgs if isinstance(m, dict))
                      if isinstance(msgs, list) else _tokens(json.dumps(msgs)))
            reply = Reply(text=text, input_tokens=prompt, output_tokens=_tokens(text))
        model = req.get("model", self.fake.model)
        cost = self.fake.cost_per_call
        rid = f"fake-{n}"
        cut = bool(fault and fault[0] == "truncate" and stream)
        if api == "chat":
            body = encode_chat(reply, model, rid, cost)
            events = sse_chat(reply, model, rid, cost, include_usage=True) if stream else []
        else:
            body = encode_responses(reply, model, rid, cost)
            events = sse_responses(reply, model, rid, cost) if stream else []
        ok = self._stream(events, cut) if stream else (self._send(200, body) or True)
        with self.fake._lock:
            self.fake.served.append({"api": api, "stream": stream, "model": model, "completed": ok and not cut,
                                  "tool_calls": [c.name for c in reply.tool_calls],
                                  "usage": {"input": reply.input_tokens, "cached": reply.cached_tokens,
                                            "output": reply.output_tokens}})
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -m mdbench.llm.fake_server --script FILE [--port N]``: serve a script until interrupted."""
    p = argparse.ArgumentParser(prog="python -m mdbench.llm.fake_server", description=__doc__.split("\n\n")[0])
    p.add_argument("--script", type=Path, required=True, help="JSON script of assistant turns (mdbench.llm.scripted)")
    p.add_argument("--port", type=int, default=0, help="loopback port (default: a free one)")
    args = p.parse_args(argv)
    from mdbench.errors import MdbenchError

    try:
        model = ScriptedModel.load(args.script)
    except MdbenchError as exc:
        print(f"fake_server: {exc}", file=sys.stderr)
        return 2
    with FakeChatServer(model, port=args.port) as srv:
        print(srv.base_url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
