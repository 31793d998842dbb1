"""The metering proxy against the fake endpoint: both APIs, streaming and not; metering; caps; retries; bad
endpoints."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mdbench.llm.fake_server import FakeChatServer
from mdbench.llm.prices import ModelPrice, PriceTable
from mdbench.llm.proxy import Caps, MeteringProxy, ProxyError
from mdbench.llm.retry import RetryPolicy
from mdbench.llm.usage import usage_of
from mdbench.llm.scripted import ScriptedModel
from mdbench.llm.trajectory import build_trajectory, read_calls

KEY = "sk-upstream-abc123"
USAGE = {"input": 1000, "cached": 250, "output": 40}
PRICES = PriceTable({"m1": ModelPrice(input_usd_per_mtok=2.0, output_usd_per_mtok=8.0, cached_input_usd_per_mtok=0.5)})
CHAT_TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
RESP_TOOLS = [{"type": "function", "name": "exec_command", "parameters": {}}]
FAST = RetryPolicy(max_retries=2, backoff_s=0.01, max_backoff_s=0.05, connect_timeout_s=2, read_timeout_s=5)


def _model() -> ScriptedModel:
    return ScriptedModel({"turns": [{"shell": "echo hi"}, {"final": "done"}], "usage": USAGE})


def _body(api: str, stream: bool, model: str = "m1", history: int = 0) -> dict:
    if api == "chat":
        msgs = [{"role": "user", "content": "go"}] + [{"role": "assistant", "tool_calls": []}] * history
        return {"model": model, "messages": msgs, "tools": CHAT_TOOLS, "stream": stream}
    return {"model": model, "input": [{"role": "user", "content": "go"}], "tools": RESP_TOOLS, "stream": stream}


def _post(url: str, body: dict | bytes, token: str | None = None, timeout: float = 30) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def upstream():
    with FakeChatServer(_model(), api_key=KEY) as srv:
        yield srv


def _proxy(upstream, tmp_path: Path, **kw) -> MeteringProxy:
    kw.setdefault("retry", FAST)
    px = MeteringProxy(upstream.base_url, log_dir=tmp_path / "llm", api_key=KEY, prices=PRICES, **kw)
    px.serve_loopback()
    return px


@pytest.mark.parametrize("api,route", [("chat", "chat/completions"), ("responses", "responses")])
@pytest.mark.parametrize("stream", [False, True])
def test_both_apis_streaming_or_not_are_forwarded_and_metered_as_declared(upstream, tmp_path, api, route, stream):
    px = _proxy(upstream, tmp_path)
    status, raw = _post(f"{px.base_url}/{route}", _body(api, stream))
    assert status == 200
    text = raw.decode()
    assert "echo hi" in text                              # the tool call reached the agent unchanged
    if stream:
        assert text.startswith(("data:", "event:"))
    t = px.stop()
    assert (t.calls, t.tokens_in, t.tokens_cached, t.tokens_out) == (1, 1000, 250, 40)
    assert t.usd == pytest.approx(((1000 - 250) * 2.0 + 250 * 0.5 + 40 * 8.0) / 1e6)
    rec = read_calls(tmp_path / "llm" / "calls.jsonl")[0]
    assert rec["api"] == api and rec["stream"] is stream and rec["response"]["complete"] is True
    tc = rec["response"]["tool_calls"][0]
    assert tc["name"] in ("bash", "exec_command") and "echo hi" in tc["arguments"]
    assert upstream.requests[0]["authorization"] == f"Bearer {KEY}"
    assert KEY not in (tmp_path / "llm" / "calls.jsonl").read_text()
    summary = json.loads((tmp_path / "llm" / "summary.json").read_text())
    assert summary["calls"] == 1 and summary["tokens_in"] == 1000


def test_retries_429_and_5xx_then_succeeds_with_every_attempt_logged(upstream, tmp_path):
    px = _proxy(upstream, tmp_path)
    upstream.fail_next(429, retry_after=0.01)
    upstream.fail_next(503)
    status, _ = _post(f"{px.base_url}/chat/completions", _body("chat", True))
    assert status == 200
    t = px.stop()
    assert t.calls == 1 and t.attempts == 3 and t.failed == 0
    rec = read_calls(tmp_path / "llm" / "calls.jsonl")[0]
    assert [a.get("status") for a in rec["attempts"]] == [429, 503, 200]


def test_malformed_answers_are_retried_before_any_byte_reaches_the_agent(upstream, tmp_path):
    px = _proxy(upstream, tmp_path)
    upstream.garble_next()
    assert _post(f"{px.base_url}/responses", _body("responses", False))[0] == 200
    upstream.garble_stream_next()
    status, raw = _post(f"{px.base_url}/responses", _body("responses", True))
    assert status == 200 and b"<html>" not in raw and b"response.completed" in raw
    t = px.stop()
    assert t.calls == 2 and t.attempts == 4


def test_endpoint_down_gives_502_with_the_cause_and_the_proxy_keeps_serving(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()                                             # nothing listens there
    px = MeteringProxy(f"http://127.0.0.1:{dead}/v1", log_dir=tmp_path / "llm", api_key=KEY, retry=FAST)
    px.serve_loopback()
    status, raw = _post(f"{px.base_url}/chat/completions", _body("chat", False))
    assert status == 502
    msg = json.loads(raw)["error"]["message"]
    assert "failed after 3 attempt(s)" in msg and "Connection" in msg and KEY not in msg
    assert _post(f"{px.base_url}/chat/completions", _body("chat", False))[0] == 502   # still serving
    t = px.stop()
    assert t.failed == 2 and t.calls == 0 and t.tokens_in == 0


def test_slow_endpoint_times_out_and_is_retried(upstream, tmp_path):
    px = _proxy(upstream, tmp_path, retry=RetryPolicy(max_retries=1, backoff_s=0.01, read_timeout_s=0.5))
    upstream.delay_next(2.0)
    t0 = time.monotonic()
    status, _ = _post(f"{px.base_url}/chat/completions", _body("chat", False))
    assert status == 200 and time.monotonic() - t0 < 10
    t = px.stop()
    assert t.calls == 1 and "timed out" in json.dumps(read_calls(tmp_path / "llm" / "calls.jsonl")[0]["attempts"])


def test_a_stream_that_breaks_midway_is_passed_on_and_logged_incomplete(upstream, tmp_path):
    px = _proxy(upstream, tmp_path)
    upstream.truncate_next()
    status, raw = _post(f"{px.base_url}/chat/completions", _body("chat", True))
    assert status == 200 and b"[DONE]" not in raw
    t = px.stop()
    assert t.calls == 1 and t.incomplete == 1 and t.usd_unknown_calls == 1
    rec = read_calls(tmp_path / "llm" / "calls.jsonl")[0]
    assert rec["outcome"] == "incomplete" and "without its final event" in rec["error"]
    assert rec["metered"]["usage_missing"] is True


def test_non_transient_errors_are_passed_through_not_retried(upstream, tmp_path):
    px = _proxy(upstream, tmp_path)
    upstream.fail_next(400)
    status, raw = _post(f"{px.base_url}/chat/completions", _body("chat", False))
    assert status == 400 and b"injected 400" in raw
    t = px.stop()
    assert t.attempts == 1 and t.failed == 1


@pytest.mark.parametrize("cap,word", [(Caps(max_tokens=2000), "token cap"), (Caps(max_usd=0.003), "USD cap"),
                                      (Caps(max_calls=2), "call cap")])
def test_caps_refuse_further_calls_with_the_cap_named(upstream, tmp_path, cap, word):
    hit = []
    px = _proxy(upstream, tmp_path, caps=cap, on_cap=hit.append)
    codes = [_post(f"{px.base_url}/chat/completions", _body("chat", False))[0] for _ in range(4)]
    t = px.stop()
    assert codes[:2] == [200, 200] and codes[2:] == [403, 403]
    assert t.calls == 2 and t.refused == 2 and word in t.capped and hit == [t.capped]
    assert len(upstream.requests) == 2                    # refused calls never reached the endpoint


def test_unknown_prices_stay_unknown_never_zero(upstream, tmp_path):
    px = _proxy(upstream, tmp_path)
    assert _post(f"{px.base_url}/chat/completions", _body("chat", False, model="no-such-model"))[0] == 200
    t = px.stop()
    assert t.usd == 0.0 and t.usd_unknown_calls == 1
    assert read_calls(tmp_path / "llm" / "calls.jsonl")[0]["metered"]["usd"] is None


def test_provider_reported_cost_wins_over_the_table(tmp_path):
    with FakeChatServer(_model(), api_key=KEY, cost_per_call=0.25) as srv:
        px = _proxy(srv, tmp_path)
        _post(f"{px.base_url}/responses", _body("responses", True))
        t = px.stop()
    assert t.usd == pytest.approx(0.25)
    assert read_calls(tmp_path / "llm" / "calls.jsonl")[0]["metered"]["usd_source"] == "provider"


def test_usage_of_reads_both_apis_and_rejects_nonsense():
    assert usage_of("chat", {"prompt_tokens": 10, "completion_tokens": 2,
                             "prompt_tokens_details": {"cached_tokens": 4}}) == (10, 4, 2, None)
    assert usage_of("chat", {"prompt_tokens": 10, "completion_tokens": 2, "prompt_cache_hit_tokens": 3}) == (10, 3, 2,
                                                                                                              None)
    assert usage_of("responses", {"input_tokens": 7, "output_tokens": 1,
                                  "input_tokens_details": {"cached_tokens": 9}, "cost": 0.5}) == (7, 7, 1, 0.5)
    assert usage_of("chat", {"prompt_tokens": -5, "completion_tokens": True, "cost": float("nan")}) == (0, 0, 0, None)
    assert usage_of("chat", None) is None


def test_bad_endpoint_url_is_one_clear_error(tmp_path):
    with pytest.raises(ProxyError, match="not an http"):
        MeteringProxy("ftp://x", log_dir=tmp_path)


def test_parallel_calls_are_all_metered(upstream, tmp_path):
    px = _proxy(upstream, tmp_path)
    codes: list[int] = []
    threads = [threading.Thread(target=lambda: codes.append(
        _post(f"{px.base_url}/chat/completions", _body("chat", True))[0])) for _ in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    t = px.stop()
    assert codes == [200] * 12 and t.calls == 12 and t.tokens_in == 12 * 1000
    assert len(read_calls(tmp_path / "llm" / "calls.jsonl")) == 12


def test_trajectory_from_a_chat_log_pairs_tool_calls_with_their_outputs(upstream, tmp_path):
    px = _proxy(upstream, tmp_path)
    first = _body("chat", True)
    first["messages"].insert(0, {"role": "system", "content": "You are an agent."})
    _post(f"{px.base_url}/chat/completions", first)
    second = dict(first, messages=first["messages"] + [
        {"role": "assistant", "tool_calls": [{"id": "call_mdb_1", "type": "function",
                                              "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_mdb_1", "content": "hi\n"}])
    _post(f"{px.base_url}/chat/completions", second)
    px.stop()
    traj = build_trajectory(read_calls(tmp_path / "llm" / "calls.jsonl"), agent_name="opencode",
                            agent_version="1.18.33", model_name="m1")
    assert [s["source"] for s in traj["steps"]] == ["system", "user", "agent", "agent"]
    call = traj["steps"][2]
    assert call["tool_calls"][0]["function_name"] == "bash"
    assert call["observation"]["results"] == [{"source_call_id": "call_mdb_1", "content": "hi\n"}]
    assert traj["steps"][3]["message"] == "done"
    assert traj["final_metrics"]["total_prompt_tokens"] == 2000
    assert traj["final_metrics"]["total_cost_usd"] == pytest.approx(2 * ((750 * 2.0 + 250 * 0.5 + 40 * 8.0) / 1e6))


def test_compressed_request_bodies_are_decoded_and_bombs_refused(upstream, tmp_path):
    import gzip

    px = _proxy(upstream, tmp_path)

    def post(data: bytes, enc: str) -> int:
        req = urllib.request.Request(f"{px.base_url}/chat/completions", data=data, method="POST",
                                     headers={"Content-Type": "application/json", "Content-Encoding": enc})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert post(gzip.compress(json.dumps(_body("chat", False)).encode()), "gzip") == 200
    assert post(b"\x28\xb5\x2f\xfd", "zstd") == 415
    assert post(gzip.compress(b"{" + b" " * (70 * 1024 * 1024) + b"}"), "gzip") == 415   # a bomb: too large
    assert post(b"not gzip", "gzip") == 415
    t = px.stop()
    assert t.calls == 1 and t.refused == 3
    assert upstream.requests[0]["body"]["model"] == "m1"


def test_a_streamed_answer_with_a_multi_megabyte_event_is_passed_on_whole(tmp_path):
    """A file write of 3 MB arrives as one tool-call argument: one SSE line far longer than any read buffer."""
    big = "y" * (3 * 1024 * 1024)
    model = ScriptedModel({"turns": [{"write": {"path": "big.txt", "content": big}}], "usage": USAGE})
    with FakeChatServer(model, api_key=KEY) as srv:
        px = _proxy(srv, tmp_path)
        status, raw = _post(f"{px.base_url}/responses", {**_body("responses", True), "tools": [
            {"type": "function", "name": "write", "parameters": {}}]})
        t = px.stop()
    assert status == 200 and raw.count(big.encode()) == 3   # arguments delta, output_item.done, completed
    rec = read_calls(tmp_path / "llm" / "calls.jsonl")[0]
    assert rec["response"]["complete"] and json.loads(rec["response"]["tool_calls"][0]["arguments"])["content"] == big
    assert t.calls == 1 and t.tokens_in == USAGE["input"]


def test_a_responses_log_becomes_a_harbor_valid_trajectory_and_planted_links_are_not_followed(upstream, tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from _harness_run import harbor_validate
    from mdbench.llm.trajectory import write_trajectory

    px = _proxy(upstream, tmp_path)
    first = _body("responses", True)
    first["input"].insert(0, {"role": "developer", "content": [{"type": "input_text", "text": "Be careful."}]})
    _post(f"{px.base_url}/responses", first)
    second = dict(first, input=first["input"] + [
        {"type": "function_call", "call_id": "call_mdb_1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_mdb_1", "output": "total 0"}])
    _post(f"{px.base_url}/responses", second)
    px.stop()
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep")
    out = tmp_path / "trajectory.json"
    out.symlink_to(target)
    path = write_trajectory(tmp_path / "llm" / "calls.jsonl", out, agent_name="codex", agent_version="0.171.0")
    assert target.read_text() == "keep" and not path.is_symlink()
    traj = json.loads(path.read_text())
    assert [s["source"] for s in traj["steps"]] == ["system", "user", "agent", "agent"]
    assert traj["steps"][2]["observation"]["results"][0]["content"] == "total 0"
    problems = harbor_validate(path)
    if problems is not None:
        assert problems == []


def test_codex_remote_compaction_route_is_forwarded_and_metered(upstream, tmp_path):
    px = _proxy(upstream, tmp_path)
    status, raw = _post(f"{px.base_url}/responses/compact",
                        {"model": "m1", "input": [{"role": "user", "content": "x"}]})
    assert status == 200 and isinstance(json.loads(raw), dict)
    t = px.stop()
    assert t.calls == 1 and t.tokens_in == USAGE["input"]
    assert read_calls(tmp_path / "llm" / "calls.jsonl")[0]["api"] == "compact"


@pytest.mark.parametrize("stream", [False, True])
def test_responses_calls_are_translated_for_a_chat_only_endpoint(upstream, tmp_path, stream):
    px = _proxy(upstream, tmp_path, endpoint_api="chat")
    body = {"model": "m1", "stream": stream, "instructions": "Be brief.", "reasoning": {"effort": "high"},
            "tools": RESP_TOOLS + [{"type": "web_search"}],
            "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev"}]},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]}
    status, raw = _post(f"{px.base_url}/responses", body)
    assert status == 200
    if stream:
        assert b"event: response.completed" in raw and b"exec_command" in raw
    else:
        out = json.loads(raw)
        assert out["output"][0]["type"] == "function_call" and out["output"][0]["name"] == "exec_command"
        assert out["usage"]["input_tokens"] == 1000 and out["usage"]["input_tokens_details"]["cached_tokens"] == 250
    sent = upstream.requests[0]
    assert sent["path"].endswith("/chat/completions")
    assert [m["role"] for m in sent["body"]["messages"]] == ["system", "system", "user"]
    assert [t["function"]["name"] for t in sent["body"]["tools"]] == ["exec_command"]
    assert sent["body"]["reasoning_effort"] == "high" and sent["body"]["stream"] is False
    # the tool result goes back as a chat tool message
    second = dict(body, input=body["input"] + [
        {"type": "function_call", "call_id": "call_mdb_1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_mdb_1", "output": "ok"}])
    assert _post(f"{px.base_url}/responses", second)[0] == 200
    m = upstream.requests[1]["body"]["messages"]
    assert m[-2]["tool_calls"][0]["id"] == "call_mdb_1" and m[-1] == {"role": "tool", "tool_call_id": "call_mdb_1",
                                                                       "content": "ok"}
    t = px.stop()
    assert t.calls == 2 and t.tokens_in == 2000 and t.tokens_cached == 500


def test_a_second_session_on_the_same_log_appends_and_its_trajectory_holds_only_its_calls(upstream, tmp_path):
    from mdbench.llm.trajectory import write_trajectory

    sessions = []
    for _ in range(2):
        px = _proxy(upstream, tmp_path)
        _post(f"{px.base_url}/chat/completions", _body("chat", False))
        px.stop()
        sessions.append(px.session)
    assert sessions[0] != sessions[1]
    assert len(read_calls(tmp_path / "llm" / "calls.jsonl")) == 2          # append-only: both runs kept
    path = write_trajectory(tmp_path / "llm" / "calls.jsonl", tmp_path / "t.json", session=sessions[1],
                            agent_name="codex", agent_version="0")
    traj = json.loads(path.read_text())
    assert [s["extra"]["proxy_seq"] for s in traj["steps"] if s["source"] == "agent"] == [1]
    assert traj["final_metrics"]["total_prompt_tokens"] == 1000


def test_the_standalone_proxy_command_serves_meters_and_stops_cleanly(upstream, tmp_path):
    import signal
    import subprocess
    import sys

    env = {**__import__("os").environ, "MDBENCH_LLM_API_KEY": KEY}
    p = subprocess.Popen([sys.executable, "-m", "mdbench.llm.proxy", "--endpoint", upstream.base_url, "--log-dir",
                          str(tmp_path / "llm"), "--model", "m1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        url = p.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert _post(f"{url}/chat/completions", _body("chat", False))[0] == 200
        assert _post(f"{url}/chat/completions", _body("chat", False, model="other"))[0] == 403
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["calls"] == 1
    assert json.loads((tmp_path / "llm" / "summary.json").read_text())["refused"] == 1
    bad = subprocess.run([sys.executable, "-m", "mdbench.llm.proxy", "--endpoint", "ftp://x", "--log-dir",
                          str(tmp_path / "x")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "not an http" in bad.stderr
