"""The shared chat client against the loopback fake endpoint: replies, retries (5xx, 429 with Retry-After,
timeouts, garbled bodies, dropped connections), no retry on 4xx, token and cost accounting, the transcript."""

from __future__ import annotations

import json
import socket

import pytest

from mdbench.llm.client import ChatClient, EndpointError, Prices, parse_json_reply
from mdbench.llm.fake_server import FakeChatServer

MSG = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hi"}]


def echo(req):
    return "hi: " + req["messages"][-1]["content"]


def client(srv, **kw):
    sleeps: list[float] = []
    c = ChatClient(srv.base_url, "m-1", sleep=sleeps.append, **kw)
    return c, sleeps


def test_reply_usage_and_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-test-123")
    with FakeChatServer(echo, api_key="sk-test-123") as srv:
        assert srv.base_url.startswith("http://127.0.0.1:")
        c = ChatClient(srv.base_url, "m-1", api_key_env="MY_KEY", prices=Prices(2.0, 8.0))
        res = c.chat(MSG, temperature=0)
        assert res.text == "hi: say hi" and res.finish_reason == "stop"
        assert srv.requests[0]["authorization"] == "Bearer sk-test-123"
        assert srv.requests[0]["body"]["model"] == "m-1" and srv.requests[0]["body"]["temperature"] == 0
        u = res.usage
        assert u.calls == 1 and u.attempts == 1 and u.prompt_tokens > 0 and u.completion_tokens == 3
        assert u.cost == pytest.approx((u.prompt_tokens * 2.0 + 3 * 8.0) / 1e6) and u.cost_source == "declared_prices"
        c.chat(MSG)
        assert c.totals.calls == 2 and c.totals.total_tokens == 2 * u.total_tokens
        bad = ChatClient(srv.base_url, "m-1", api_key="wrong", sleep=lambda s: None)
        with pytest.raises(EndpointError, match="401") as exc:
            bad.chat(MSG)
        assert "wrong" not in str(exc.value)
        assert len(srv.requests) == 3                       # 401 is not retried


def test_retries_5xx_429_garbled_and_timeouts_then_succeeds():
    with FakeChatServer(echo, cost_per_call=0.5) as srv:
        c, sleeps = client(srv, max_retries=4, backoff_s=0.5, timeout_s=0.5)
        srv.fail_next(503)
        srv.fail_next(429, retry_after=7)
        srv.garble_next()
        srv.delay_next(2.0)
        res = c.chat(MSG)
        assert res.text == "hi: say hi" and res.usage.attempts == 5
        assert [a.get("status") for a in res.failed_attempts] == [503, 429, 200, None]
        assert "timed out" in res.failed_attempts[3]["error"] or "timeout" in res.failed_attempts[3]["error"].lower()
        assert sleeps == [0.5, 7.0, 2.0, 4.0]               # exponential backoff; Retry-After wins
        assert res.usage.cost == 0.5 and res.usage.cost_source == "provider"


def test_gives_up_after_max_retries_and_on_a_refused_connection():
    with FakeChatServer(echo) as srv:
        c, sleeps = client(srv, max_retries=2)
        srv.fail_next(500, n=3)
        with pytest.raises(EndpointError, match="after 3 attempt"):
            c.chat(MSG)
        assert len(srv.requests) == 3 and len(sleeps) == 2
    with socket.socket() as s:                              # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = ChatClient(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, sleep=lambda s: None, timeout_s=2)
    with pytest.raises(EndpointError, match="Connection refused|refused"):
        c.chat(MSG)


def test_transcript_logs_exchanges_never_the_key(tmp_path):
    t = tmp_path / "t.jsonl"
    with FakeChatServer(echo, api_key="sk-secret") as srv:
        c = ChatClient(srv.base_url, "m-1", api_key="sk-secret", transcript=t, sleep=lambda s: None, max_retries=1)
        c.chat(MSG, session="s1")
        c.chat(MSG + [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "again"}],
               session="s1", log_from=2)
        srv.fail_next(500, n=2)
        with pytest.raises(EndpointError):
            c.chat(MSG, session="s2")
    text = t.read_text()
    assert "sk-secret" not in text
    lines = [json.loads(x) for x in text.splitlines()]
    assert [x["session"] for x in lines] == ["s1", "s1", "s2"]
    assert lines[0]["messages"] == MSG and lines[0]["reply"] == "hi: say hi"
    assert [m["content"] for m in lines[1]["messages"]] == ["hi", "again"] and lines[1]["n_messages"] == 4
    assert lines[2]["error"] and len(lines[2]["failed_attempts"]) == 2
    assert all(len(x["messages_sha256"]) == 64 for x in lines)


def test_parse_json_reply():
    assert parse_json_reply('{"a": 1}') == {"a": 1}
    assert parse_json_reply('Sure:\n```json\n{"action": "stop"}\n```') == {"action": "stop"}
    assert parse_json_reply('I choose {"action": "stop"} because') == {"action": "stop"}
    with pytest.raises(ValueError, match="no JSON"):
        parse_json_reply("no idea")
