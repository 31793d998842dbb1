"""Responses API → Chat Completions, for Codex with a model that only a chat endpoint serves (DeepSeek, GLM, …).

Codex speaks the Responses API only; seed 000 pairs it with DeepSeek models, whose endpoints serve Chat Completions
only. With ``endpoint_api="chat"`` the proxy translates each Responses request into one chat completion (not
streamed upstream), and writes the answer back in the Responses form the client asked for (a JSON ``response`` or
its server-sent events, from :func:`mdbench.llm.scripted.sse_responses`):

* ``instructions`` and ``developer``/``system`` messages → ``system`` messages; ``user``/``assistant`` messages →
  the same roles (text parts joined); ``function_call`` → an assistant message with ``tool_calls``;
  ``function_call_output`` → a ``tool`` message; reasoning items are dropped (chat endpoints take none back).
* function tools → chat ``tools`` (name, description, parameters); hosted and namespace tools (web search,
  sub-agents) have no chat form and are dropped; ``tool_choice`` and ``parallel_tool_calls`` are kept.
* ``reasoning.effort`` → ``reasoning_effort``; ``max_output_tokens`` → ``max_tokens``.
* the chat answer's text, tool calls and usage (``prompt_tokens`` with ``prompt_tokens_details.cached_tokens``
  or ``prompt_cache_hit_tokens``, ``completion_tokens``) → a ``message`` item, ``function_call`` items and
  Responses usage. ``reasoning_content`` is not returned to the client.
"""

from __future__ import annotations

import json
from typing import Any

from mdbench.llm.scripted import Reply, ToolCall


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def responses_to_chat(req: dict[str, Any]) -> dict[str, Any]:
    """The chat-completion request equivalent to a Responses request (see module docstring)."""
    msgs: list[dict[str, Any]] = []
    if isinstance(req.get("instructions"), str) and req["instructions"]:
        msgs.append({"role": "system", "content": req["instructions"]})
    items = req.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    pending: dict[str, Any] | None = None      # the assistant message collecting consecutive function calls
    for it in items if isinstance(items, list) else []:
        if not isinstance(it, dict):
            continue
        typ = it.get("type", "message")
        if typ == "function_call":
            call = {"id": str(it.get("call_id") or it.get("id") or ""), "type": "function",
                    "function": {"name": str(it.get("name") or ""), "arguments": str(it.get("arguments") or "")}}
            if pending is None:
                pending = {"role": "assistant", "content": None, "tool_calls": []}
                msgs.append(pending)
            pending["tool_calls"].append(call)
            continue
        pending = None
        if typ == "function_call_output":
            out = it.get("output")
            msgs.append({"role": "tool", "tool_call_id": str(it.get("call_id") or ""),
                         "content": out if isinstance(out, str) else _text(out) or json.dumps(out)})
        elif typ == "message":
            role = it.get("role")
            role = "system" if role in ("developer", "system") else role
            if role in ("system", "user", "assistant"):
                msgs.append({"role": role, "content": _text(it.get("content"))})
    tools = []
    for t in req.get("tools") or []:
        if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("name"), str):
            fn: dict[str, Any] = {"name": t["name"], "parameters": t.get("parameters") or {"type": "object"}}
            if isinstance(t.get("description"), str):
                fn["description"] = t["description"]
            tools.append({"type": "function", "function": fn})
    out: dict[str, Any] = {"model": req.get("model"), "messages": msgs, "stream": False}
    if tools:
        out["tools"] = tools
        if req.get("tool_choice") in ("auto", "none", "required"):
            out["tool_choice"] = req["tool_choice"]
        if isinstance(req.get("parallel_tool_calls"), bool):
            out["parallel_tool_calls"] = req["parallel_tool_calls"]
    eff = req.get("reasoning", {}).get("effort") if isinstance(req.get("reasoning"), dict) else None
    if isinstance(eff, str):
        out["reasoning_effort"] = eff
    if isinstance(req.get("max_output_tokens"), int):
        out["max_tokens"] = req["max_output_tokens"]
    for key in ("temperature", "top_p"):
        if isinstance(req.get(key), (int, float)) and not isinstance(req.get(key), bool):
            out[key] = req[key]
    return out


def chat_to_reply(data: dict[str, Any]) -> Reply | None:
    """The :class:`~mdbench.llm.scripted.Reply` in a chat completion, or ``None`` when it is not one."""
    ch = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(ch, list) or not ch or not isinstance(ch[0], dict) or not isinstance(ch[0].get("message"), dict):
        return None
    msg = ch[0]["message"]
    calls = []
    for k, tc in enumerate(msg.get("tool_calls") or []):
        fn = tc.get("function") if isinstance(tc, dict) and isinstance(tc.get("function"), dict) else {}
        calls.append(ToolCall(str(tc.get("id") or f"call_{k}"), str(fn.get("name") or ""),
                              str(fn.get("arguments") or "")))
    u = data.get("usage") if isinstance(data.get("usage"), dict) else {}

    def n(v: Any) -> int:
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

    det = u.get("prompt_tokens_details") if isinstance(u.get("prompt_tokens_details"), dict) else {}
    tin = n(u.get("prompt_tokens"))
    cached = min(n(det.get("cached_tokens")) or n(u.get("prompt_cache_hit_tokens")), tin)
    return Reply(text=msg.get("content") if isinstance(msg.get("content"), str) else "", tool_calls=calls,
                 input_tokens=tin, cached_tokens=cached, output_tokens=n(u.get("completion_tokens")))
