"""An agent attacking the metering proxy from inside its sandbox (model-only network).

The attacker is a program run as the agent (``/usr/bin/python3``, confined like a harness CLI) that holds the proxy
token, as every agent does. Each test fails if the cheat gains anything — a call the episode did not pay for, the
endpoint's key, a model other than its configuration's, a route of the endpoint other than the model calls, a
network peer other than the proxy — or if the proxy crashes or stops serving.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest
from mdbench.llm.fake_server import FakeChatServer
from mdbench.llm.prices import PriceTable
from mdbench.llm.proxy import Caps, MeteringProxy, RetryPolicy
from mdbench.llm.scripted import ScriptedModel

KEY = "sk-upstream-never-inside-91b2"
TOKEN = "mdbench-proxy-agent-token"
PORT = 4141
SYSTEM_PYTHON = Path("/usr/bin/python3")

PRELUDE = textwrap.dedent(f"""
    import json, os, socket, sys, http.client
    RESULTS = {{}}
    def call(path, body, token="{TOKEN}", method="POST", headers=None, raw=None):
        c = http.client.HTTPConnection("127.0.0.1", {PORT}, timeout=20)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        h = {{"Content-Type": "application/json", **({{"Authorization": "Bearer " + token}} if token else {{}}),
             **(headers or {{}})}}
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.status, r.read()
        c.close()
        return out
    def chat(model="gpt-5", stream=False, n_hist=0):
        return {{"model": model, "stream": stream, "tools": [{{"type": "function", "function": {{"name": "bash"}}}}],
                "messages": [{{"role": "user", "content": "x"}}] + [{{"role": "assistant", "content": "y"}}] * n_hist}}
""")


def _need():
    from mdbench.sandbox import capabilities

    if not capabilities().get("namespaces"):
        pytest.skip("the OS cannot confine here")
    if not SYSTEM_PYTHON.is_file():
        pytest.skip("no /usr/bin/python3 for the attacker")


def _attack(code: str, *, caps: Caps = Caps(), env_extra: dict | None = None, timeout_s: float = 120):
    """Run ``code`` (after PRELUDE) confined with only the proxy reachable; returns (results, proxy, upstream)."""
    from mdbench.sandbox import Confinement, spawn_confined

    base = Path(tempfile.mkdtemp(prefix="mdbench-redteam-harness-"))
    os.chmod(base, 0o755)
    ws, ep = base / "ws", base / "ep"
    ws.mkdir()
    ep.mkdir()
    up = FakeChatServer(ScriptedModel({"turns": [{"shell": "echo hi"}], "loop": True,
                                       "usage": {"input": 1000, "cached": 0, "output": 100}}), api_key=KEY).start()
    px = MeteringProxy(up.base_url, log_dir=ep / "llm", api_key=KEY, client_token=TOKEN, prices=PriceTable.load(),
                       caps=caps, retry=RetryPolicy(max_retries=1, backoff_s=0.01), allowed_models=("gpt-5",))
    script = ws / "attack.py"
    script.write_text(PRELUDE + textwrap.dedent(code) + "\nprint(json.dumps(RESULTS))\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "MDBENCH_PROXY_TOKEN": TOKEN, **(env_extra or {})}
    conf = Confinement(workdir=ws, env=env, hidden=(ep,), minimal_root=True, timeout_s=timeout_s, grace_s=2,
                       loopback_listen=(PORT,), tag="redteam-harness")
    out, err = base / "out.txt", base / "err.txt"
    try:
        proc = spawn_confined([str(SYSTEM_PYTHON), str(script)], conf, stdout=out, stderr=err)
        px.serve_socket(proc.listeners[PORT])
        res = proc.wait()
        text = out.read_text()
        assert res.exit_code == 0, err.read_text()[-3000:]
        results = json.loads(text.strip().splitlines()[-1])
        totals = px.stop()
        log = (ep / "llm" / "calls.jsonl").read_text()
        return results, totals, up, log
    finally:
        up.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_swapping_in_another_model_is_refused_and_never_reaches_the_endpoint():
    _need()
    r, t, up, log = _attack("""
        RESULTS["other"] = call("/v1/chat/completions", chat(model="gpt-5-pro"))[0]
        RESULTS["none"] = call("/v1/chat/completions", {"messages": []})[0]
        RESULTS["mine"] = call("/v1/chat/completions", chat())[0]
    """)
    assert (r["other"], r["none"], r["mine"]) == (403, 403, 200)
    assert [q["body"].get("model") for q in up.requests] == ["gpt-5"]
    assert t.calls == 1 and t.refused == 2 and '"refused": "model"' in log


def test_the_endpoint_key_is_nowhere_inside_and_a_forged_authorization_is_refused():
    _need()
    r, t, up, log = _attack("""
        found = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    if b"sk-upstream" in open(f"/proc/{pid}/environ", "rb").read():
                        found.append(pid)
                except OSError:
                    pass
        RESULTS["key_in_proc"] = found
        RESULTS["key_in_env"] = any("sk-upstream" in v for v in os.environ.values())
        RESULTS["no_token"] = call("/v1/chat/completions", chat(), token=None)[0]
        RESULTS["guessed"] = call("/v1/chat/completions", chat(), token="sk-upstream-guess")[0]
        st, body = call("/v1/chat/completions", chat(), headers={"X-Api-Key": "mine", "OpenAI-Organization": "org-x"})
        RESULTS["ok"] = st
        RESULTS["echo"] = "sk-upstream" in body.decode()
    """)
    assert r["key_in_proc"] == [] and r["key_in_env"] is False and r["echo"] is False
    assert (r["no_token"], r["guessed"], r["ok"]) == (401, 401, 200)
    assert [q["authorization"] for q in up.requests] == [f"Bearer {KEY}"]
    assert KEY not in log


def test_routes_other_than_model_calls_are_refused_and_logged():
    _need()
    r, t, up, log = _attack("""
        for p in ("/v1/files", "/v1/embeddings", "/v1/../admin", "/v1/chat/completions/../../x", "/v1/audio/speech",
                  "/v1/responses/resp_1/cancel"):
            RESULTS[p] = call(p, {"model": "gpt-5", "input": "x"})[0]
        RESULTS["get_files"] = call("/v1/files", None, method="GET")[0]
        RESULTS["delete"] = call("/v1/models/gpt-5", None, method="DELETE")[0]
    """)
    assert all(v in (404, 501) for v in r.values()), r
    assert up.requests == [] and t.calls == 0
    assert log.count('"route not served"') >= 7


def test_malformed_deep_and_huge_requests_never_crash_the_proxy():
    _need()
    r, t, up, _log = _attack("""
        RESULTS["deep"] = call("/v1/chat/completions", None, raw=b"[" * 200000 + b"]" * 200000)[0]
        RESULTS["nan"] = call("/v1/chat/completions", None, raw=b'{"model": "gpt-5", "x": NaN}')[0]
        RESULTS["binary"] = call("/v1/chat/completions", None, raw=bytes(range(256)) * 100)[0]
        big = b'{"model": "gpt-5", "pad": "' + b"a" * (65 * 1024 * 1024) + b'"}'
        try:
            RESULTS["huge"] = call("/v1/chat/completions", None, raw=big)[0]
        except OSError as exc:
            RESULTS["huge"] = "closed"
        # a lying Content-Length: the proxy reads what comes and answers (or drops) without hanging forever
        s = socket.create_connection(("127.0.0.1", {PORT}), timeout=30)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 10\\r\\n\\r\\n{{")
        s.shutdown(socket.SHUT_WR)
        try:
            RESULTS["short_body"] = s.recv(100).split(b" ")[1].decode()
        except (OSError, IndexError):
            RESULTS["short_body"] = "closed"
        RESULTS["still_serving"] = call("/v1/chat/completions", chat())[0]
    """.replace("{PORT}", str(PORT)))
    assert r["deep"] == 400 and r["nan"] == 400 and r["binary"] == 400
    assert r["huge"] in (413, "closed") and r["short_body"] in ("400", "401", "closed")
    assert r["still_serving"] == 200 and t.calls == 1


def test_hanging_up_mid_stream_does_not_escape_metering():
    _need()
    r, t, up, _log = _attack("""
        body = json.dumps(chat(stream=True)).encode()
        s = socket.create_connection(("127.0.0.1", 4141), timeout=20)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\n"
                  b"Authorization: Bearer mdbench-proxy-agent-token\\r\\nContent-Length: "
                  + str(len(body)).encode() + b"\\r\\n\\r\\n" + body)
        s.recv(10)
        s.close()
        RESULTS["hung_up"] = True
        import time; time.sleep(1)
    """)
    assert r["hung_up"] and t.calls == 1 and t.tokens_in == 1000 and t.tokens_out == 100


def test_a_parallel_flood_cannot_overshoot_the_cap_by_more_than_the_calls_in_flight():
    _need()
    r, t, up, _log = _attack("""
        import threading
        codes = []
        def hit():
            for _ in range(5):
                codes.append(call("/v1/chat/completions", chat())[0])
        th = [threading.Thread(target=hit) for _ in range(20)]
        [x.start() for x in th]
        [x.join() for x in th]
        RESULTS["ok"] = codes.count(200)
        RESULTS["refused"] = codes.count(403)
    """, caps=Caps(max_tokens=5500, max_inflight=4))
    assert r["ok"] == t.calls and r["refused"] == t.refused and r["ok"] + r["refused"] == 100
    # the cap (5 calls' worth) is overshot by at most the calls in flight when it was reached
    assert 5 <= t.calls <= 5 + 4
    assert t.capped and "token cap" in t.capped
    assert len(up.requests) == t.calls
