"""A fake OpenAI-compatible chat endpoint on the loopback address, for tests of anything model-backed.

``FakeChatServer(responder)`` serves ``POST /v1/chat/completions`` on ``127.0.0.1`` at a free port (never
another interface). ``responder(request) -> str`` gets the decoded request body (``model``, ``messages``,
…) and returns the assistant's reply text. Faults can be scripted: :meth:`FakeChatServer.fail_next` answers
the next requests with an HTTP error (and an optional ``Retry-After``), :meth:`FakeChatServer.delay_next`
stalls them (to test timeouts), :meth:`FakeChatServer.garble_next` returns a body that is not a chat
completion. Every request is kept in :attr:`FakeChatServer.requests` (with its ``Authorization`` header, so a
test can check the key was sent and nowhere else). Usage is reported as ``ceil(characters / 4)`` tokens,
an approximation; ``cost_per_call`` adds a provider-style ``usage.cost``.

Use it as a context manager so the test that starts it stops it::

    with FakeChatServer(lambda req: '{"action": "stop"}') as srv:
        client = ChatClient(srv.base_url, "fake-model")
"""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


class FakeChatServer:
    """See module docstring."""

    def __init__(self, responder: Callable[[dict[str, Any]], str], *, api_key: str | None = None,
                 model: str = "fake-model", cost_per_call: float | None = None):
        self.responder = responder
        self.api_key = api_key
        self.model = model
        self.cost_per_call = cost_per_call
        self.requests: list[dict[str, Any]] = []
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

    def _take_fault(self) -> tuple[str, Any] | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    # ---------------------------------------------------------------------------------------- life cycle
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> "FakeChatServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
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

            def do_POST(self) -> None:  # noqa: N802 — http.server API
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    req = json.loads(self.rfile.read(length))
                except ValueError:
                    return self._send(400, {"error": {"message": "body is not JSON"}})
                with server._lock:
                    server.requests.append({"path": self.path, "authorization": self.headers.get("Authorization"),
                                            "body": req})
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                if server.api_key is not None and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    return self._send(401, {"error": {"message": "invalid API key"}})
                fault = server._take_fault()
                if fault and fault[0] == "status":
                    status, retry_after = fault[1]
                    extra = {"Retry-After": str(retry_after)} if retry_after is not None else {}
                    return self._send(status, {"error": {"message": f"injected {status}"}}, extra)
                if fault and fault[0] == "delay":
                    time.sleep(fault[1])
                if fault and fault[0] == "garble":
                    return self._send(200, "<html>gateway</html>")
                try:
                    text = server.responder(req)
                except Exception as exc:  # noqa: BLE001 — a responder bug is a 500, visible to the client
                    return self._send(500, {"error": {"message": f"responder failed: {exc}"}})
                prompt = sum(_tokens(json.dumps(m.get("content", ""))) for m in req.get("messages", []))
                usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": _tokens(text),
                                         "total_tokens": prompt + _tokens(text)}
                if server.cost_per_call is not None:
                    usage["cost"] = server.cost_per_call
                self._send(200, {"id": f"chatcmpl-fake-{len(server.requests)}", "object": "chat.completion",
                                 "created": int(time.time()), "model": req.get("model", server.model),
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                              "finish_reason": "stop"}], "usage": usage})

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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

    def __enter__(self) -> "FakeChatServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
