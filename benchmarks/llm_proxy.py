"""Metering-proxy overhead per model call: through ``mdbench.llm.proxy`` vs directly to the fake endpoint.

Usage::

    .venv/bin/python benchmarks/llm_proxy.py [--calls 200] [--history-kb 40] [--api chat|responses] [--stream]

The fake endpoint (:mod:`mdbench.llm.fake_server`, scripted model) answers a request shaped like a coding agent's
(a ``--history-kb`` history, tools, one tool call back); the same request is sent ``--calls`` times directly and
through the proxy, interleaved (each round: one direct call, one proxied), from one HTTP client. Printed: median and
p95 wall time per call of each path [ms], the added time per call (median and p95 of the per-round difference),
and the ratio proxied/direct of the medians. The proxy's work per call is parsing and logging the request, one
upstream connection, assembling the answer and metering it; a real endpoint's latency (hundreds of ms to
minutes) dwarfs it, so the added milliseconds are what matters. Nothing here is a test: the numbers depend on
the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def _p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]


def main(argv: list[str] | None = None) -> int:
    from mdbench.llm.fake_server import FakeChatServer
    from mdbench.llm.prices import PriceTable
    from mdbench.llm.proxy import MeteringProxy
    from mdbench.llm.scripted import ScriptedModel

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--history-kb", type=int, default=40, help="size of the conversation sent each call [KiB]")
    p.add_argument("--api", choices=("chat", "responses"), default="responses")
    p.add_argument("--stream", action="store_true", help="server-sent events (what the CLIs use)")
    args = p.parse_args(argv)

    model = ScriptedModel({"turns": [{"shell": "ls"}], "loop": True,
                           "usage": {"input": 12000, "cached": 8000, "output": 200}})
    pad = "x" * (args.history_kb * 1024)
    if args.api == "chat":
        route = "chat/completions"
        body = {"model": "gpt-5", "stream": args.stream, "messages": [{"role": "user", "content": pad}],
                "tools": [{"type": "function", "function": {"name": "bash", "parameters": {}}}]}
    else:
        route = "responses"
        body = {"model": "gpt-5", "stream": args.stream, "input": [{"role": "user", "content": pad}],
                "tools": [{"type": "function", "name": "exec_command", "parameters": {}}]}
    data = json.dumps(body).encode()

    def call(url: str) -> float:
        req = urllib.request.Request(f"{url}/{route}", data=data, headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
        return time.perf_counter() - t0

    with FakeChatServer(model) as srv, tempfile.TemporaryDirectory() as tmp:
        proxy = MeteringProxy(srv.base_url, log_dir=Path(tmp) / "llm", api_key="bench", prices=PriceTable.load())
        proxy.serve_loopback()
        for _ in range(5):                       # warm up both paths
            call(srv.base_url)
            call(proxy.base_url)
        direct, proxied = [], []
        for _ in range(args.calls):
            direct.append(call(srv.base_url))
            proxied.append(call(proxy.base_url))
        totals = proxy.stop()
    added = [b - a for a, b in zip(direct, proxied)]
    md, mp = statistics.median(direct), statistics.median(proxied)
    print(f"{args.calls} calls, {args.api}{' streamed' if args.stream else ''}, {args.history_kb} KiB history "
          f"(proxy metered {totals.calls} calls, {totals.tokens_in} tokens in)")
    print(f"direct to the endpoint : median {md * 1e3:7.2f} ms   p95 {_p95(direct) * 1e3:7.2f} ms")
    print(f"through the proxy      : median {mp * 1e3:7.2f} ms   p95 {_p95(proxied) * 1e3:7.2f} ms")
    print(f"added by the proxy     : median {statistics.median(added) * 1e3:7.2f} ms   p95 {_p95(added) * 1e3:7.2f} ms"
          " per call")
    print(f"ratio proxied / direct : {mp / md:.2f} (medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
