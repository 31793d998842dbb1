"""A scripted model: replays assistant turns — shell commands, file writes, a final message — in the wire
format of the coding-agent CLI that asks, so the real CLI executes real commands in the sandbox.

A script is JSON (a file for :meth:`ScriptedModel.load`, or a dict)::

    {"turns": [{"shell": "mkdir -p out && echo ok > out/a.txt"},
               {"write": {"path": "notes.md", "content": "# plan\\n"}},
               {"final": "done"}],
     "usage": {"input": 1200, "cached": 200, "output": 40},    # declared per reply (default)
     "loop": false}                                             # true: repeat the tool turns, never stop

Each turn may carry its own ``"usage"``. The model is stateless: the turn it answers is the number of its
tool calls already in the request's history (``function_call`` items of a Responses ``input``; assistant
messages of a chat ``messages`` list), so a CLI's retries and parallel sessions replay consistently. A request
that offers no tools (OpenCode's title generation) is answered with :attr:`ScriptedModel.side_text` and the
script's usage.

Tools are picked from those the request offers — a shell turn becomes Codex's ``exec_command`` (``{"cmd"}``),
``shell_command``, ``shell`` (``{"command": ["bash", "-lc", …]}``) or OpenCode's ``bash``; a write becomes
OpenCode's ``write`` (``{"filePath", "content"}``), an ``apply_patch`` function (``*** Add File``) or, when
neither is offered, a shell here-document. A turn whose tool is not offered is an error the CLI sees (HTTP 500).

The encoders (:func:`encode_chat`, :func:`sse_chat`, :func:`encode_responses`, :func:`sse_responses`) write
a :class:`Reply` as the OpenAI Chat Completions and Responses APIs do, with the declared usage
(``prompt_tokens_details.cached_tokens`` / ``input_tokens_details.cached_tokens``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdbench.errors import InputError

SHELL_TOOLS = ("exec_command", "shell_command", "shell", "bash")
WRITE_TOOLS = ("write", "apply_patch")
HEREDOC_END = "MDBENCH_SCRIPT_EOF"


@dataclass(frozen=True)
class ToolCall:
    """One function call of a reply: ``arguments`` is the JSON text the model emits."""

    call_id: str
    name: str
    arguments: str


@dataclass
class Reply:
    """An assistant reply: text and/or tool calls, and the token usage it declares."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0


def _usage(d: Any, where: str) -> tuple[int, int, int]:
    if not isinstance(d, dict):
        raise InputError(f'{where}: "usage" must be an object {{"input": N, "cached": N, "output": N}}')
    vals = []
    for k in ("input", "cached", "output"):
        v = d.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InputError(f'{where}: usage.{k} must be a non-negative integer (got {v!r})')
        vals.append(v)
    if vals[1] > vals[0]:
        raise InputError(f"{where}: usage.cached ({vals[1]}) cannot exceed usage.input ({vals[0]})")
    return vals[0], vals[1], vals[2]


def _tool_names(req: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Offered function tools by name → their parameter schema (chat and Responses shapes)."""
    out: dict[str, dict[str, Any]] = {}
    for t in req.get("tools") or []:
        if not isinstance(t, dict):
            continue
        fn = t.get("function") if isinstance(t.get("function"), dict) else t
        name = fn.get("name")
        if isinstance(name, str) and t.get("type", "function") == "function":
            out[name] = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
    return out


def turns_taken(req: dict[str, Any]) -> int:
    """How many scripted tool turns the request's history already holds."""
    if isinstance(req.get("input"), list):
        return sum(1 for it in req["input"] if isinstance(it, dict)
                   and it.get("type") in ("function_call", "custom_tool_call", "local_shell_call"))
    msgs = req.get("messages") if isinstance(req.get("messages"), list) else []
    return sum(1 for m in msgs if isinstance(m, dict) and m.get("role") == "assistant")


class ScriptedModel:
    """A responder for :class:`~mdbench.llm.fake_server.FakeChatServer` (see module docstring)."""

    def __init__(self, script: dict[str, Any], *, where: str = "script", side_text: str = "Scripted session"):
        if not isinstance(script, dict) or not isinstance(script.get("turns"), list) or not script["turns"]:
            raise InputError(f'{where}: needs {{"turns": [...]}} with at least one turn')
        self.usage = _usage(script.get("usage", {"input": 1000, "cached": 0, "output": 50}), where)
        self.loop = bool(script.get("loop", False))
        self.side_text = side_text
        self.turns: list[dict[str, Any]] = []
        for i, t in enumerate(script["turns"]):
            w = f"{where}: turn {i + 1}"
            kinds = [k for k in ("shell", "write", "final") if k in (t if isinstance(t, dict) else {})]
            if len(kinds) != 1:
                raise InputError(f'{w}: give exactly one of "shell", "write", "final"')
            kind = kinds[0]
            if kind == "write":
                wr = t["write"]
                if not (isinstance(wr, dict) and isinstance(wr.get("path"), str)
                        and isinstance(wr.get("content"), str)):
                    raise InputError(f'{w}: "write" needs {{"path": str, "content": str}}')
                if HEREDOC_END in wr["content"]:
                    raise InputError(f"{w}: content may not contain {HEREDOC_END}")
            elif not isinstance(t[kind], str):
                raise InputError(f'{w}: "{kind}" must be a string')
            self.turns.append({"kind": kind, "value": t[kind], "usage": _usage(t.get("usage", dict(
                zip(("input", "cached", "output"), self.usage))), w)})
        self.tool_turns = [t for t in self.turns if t["kind"] != "final"]
        if self.loop and not self.tool_turns:
            raise InputError(f'{where}: "loop" needs at least one shell or write turn')

    @classmethod
    def load(cls, path: str | Path) -> ScriptedModel:
        """Read a JSON script file; :class:`~mdbench.errors.InputError` names the file when it is malformed."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"not a readable JSON script ({exc})", path=str(path)) from None
        return cls(data, where=str(path))

    # ------------------------------------------------------------------------------------------ replies
    def __call__(self, req: dict[str, Any]) -> Reply:
        tools = _tool_names(req)
        n = turns_taken(req)
        if not tools:
            i, o = self.usage[0], self.usage[2]
            return Reply(text=self.side_text, input_tokens=i, cached_tokens=self.usage[1], output_tokens=o)
        if self.loop:
            turn = self.tool_turns[n % len(self.tool_turns)]
        elif n < len(self.turns):
            turn = self.turns[n]
        else:
            turn = {"kind": "final", "value": "(script exhausted)", "usage": self.usage}
        i, c, o = turn["usage"]
        reply = Reply(input_tokens=i, cached_tokens=c, output_tokens=o)
        cid = f"call_mdb_{n + 1}"
        if turn["kind"] == "final":
            reply.text = turn["value"]
        elif turn["kind"] == "shell":
            reply.tool_calls.append(self._shell(turn["value"], tools, cid))
        else:
            reply.tool_calls.append(self._write(turn["value"], tools, cid))
        return reply

    @staticmethod
    def _shell(cmd: str, tools: dict[str, dict[str, Any]], cid: str) -> ToolCall:
        name = next((t for t in SHELL_TOOLS if t in tools), None)
        if name is None:
            raise ValueError(f"no shell tool offered (offered: {sorted(tools)})")
        args: dict[str, Any] = {"exec_command": {"cmd": cmd, "yield_time_ms": 30000},
                                "shell_command": {"command": cmd},
                                "shell": {"command": ["bash", "-lc", cmd]},
                                "bash": {"command": cmd, "description": "scripted command"}}[name]
        return ToolCall(cid, name, json.dumps(args))

    @classmethod
    def _write(cls, wr: dict[str, str], tools: dict[str, dict[str, Any]], cid: str) -> ToolCall:
        path, content = wr["path"], wr["content"]
        if "write" in tools:
            return ToolCall(cid, "write", json.dumps({"filePath": path, "content": content}))
        if "apply_patch" in tools:
            req = tools["apply_patch"].get("required") or ["input"]
            body = "".join(f"+{line}\n" for line in content.splitlines())
            patch = f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch"
            return ToolCall(cid, "apply_patch", json.dumps({req[0]: patch}))
        nl = "" if content.endswith("\n") else "\n"
        quoted = "'" + path.replace("'", "'\\''") + "'"
        return cls._shell(f"cat > {quoted} <<'{HEREDOC_END}'\n{content}{nl}{HEREDOC_END}", tools, cid)


# ---------------------------------------------------------------------------------------------- encoders

def _chat_usage(r: Reply, cost: float | None) -> dict[str, Any]:
    u: dict[str, Any] = {"prompt_tokens": r.input_tokens, "completion_tokens": r.output_tokens,
                         "total_tokens": r.input_tokens + r.output_tokens,
                         "prompt_tokens_details": {"cached_tokens": r.cached_tokens}}
    if cost is not None:
        u["cost"] = cost
    return u


def _resp_usage(r: Reply, cost: float | None) -> dict[str, Any]:
    u: dict[str, Any] = {"input_tokens": r.input_tokens, "input_tokens_details": {"cached_tokens": r.cached_tokens},
                         "output_tokens": r.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                         "total_tokens": r.input_tokens + r.output_tokens}
    if cost is not None:
        u["cost"] = cost
    return u


def encode_chat(r: Reply, model: str, rid: str, cost: float | None = None) -> dict[str, Any]:
    """A non-streamed ``chat.completion``."""
    msg: dict[str, Any] = {"role": "assistant", "content": r.text or (None if r.tool_calls else "")}
    if r.tool_calls:
        msg["tool_calls"] = [{"id": c.call_id, "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}} for c in r.tool_calls]
    return {"id": f"chatcmpl-{rid}", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if r.tool_calls else "stop"}],
            "usage": _chat_usage(r, cost)}


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + (data if isinstance(data, str) else json.dumps(data)) + "\n\n").encode()


def sse_chat(r: Reply, model: str, rid: str, cost: float | None = None, *, include_usage: bool = True) -> list[bytes]:
    """The server-sent events of a streamed chat completion (role, content, tool calls, finish, usage, DONE)."""
    base = {"id": f"chatcmpl-{rid}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    if r.text:
        half = len(r.text) // 2
        out += [chunk({"content": part}) for part in (r.text[:half], r.text[half:]) if part]
    for k, c in enumerate(r.tool_calls):
        out.append(chunk({"tool_calls": [{"index": k, "id": c.call_id, "type": "function",
                                          "function": {"name": c.name, "arguments": ""}}]}))
        out.append(chunk({"tool_calls": [{"index": k, "function": {"arguments": c.arguments}}]}))
    out.append(chunk({}, "tool_calls" if r.tool_calls else "stop"))
    if include_usage:
        out.append(_sse({**base, "choices": [], "usage": _chat_usage(r, cost)}))
    out.append(_sse("[DONE]"))
    return out


def _resp_items(r: Reply, rid: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if r.text:
        items.append({"type": "message", "id": f"msg_{rid}", "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": r.text, "annotations": []}]})
    for c in r.tool_calls:
        items.append({"type": "function_call", "id": f"fc_{c.call_id}", "call_id": c.call_id, "name": c.name,
                      "arguments": c.arguments, "status": "completed"})
    return items


def encode_responses(r: Reply, model: str, rid: str, cost: float | None = None) -> dict[str, Any]:
    """A non-streamed Responses API ``response``."""
    return {"id": f"resp_{rid}", "object": "response", "created_at": int(time.time()), "status": "completed",
            "model": model, "output": _resp_items(r, rid), "usage": _resp_usage(r, cost)}


def sse_responses(r: Reply, model: str, rid: str, cost: float | None = None) -> list[bytes]:
    """The server-sent events of a streamed Responses API answer (created … output items … completed)."""
    full = encode_responses(r, model, rid, cost)
    seq = iter(range(10**6))
    out = [_sse({"type": "response.created", "sequence_number": next(seq),
                 "response": {**full, "status": "in_progress", "output": [], "usage": None}}, "response.created")]
    for k, item in enumerate(full["output"]):
        if item["type"] == "message":
            out.append(_sse({"type": "response.output_item.added", "sequence_number": next(seq), "output_index": k,
                             "item": {**item, "status": "in_progress", "content": []}}, "response.output_item.added"))
            text = item["content"][0]["text"]
            out.append(_sse({"type": "response.output_text.delta", "sequence_number": next(seq), "item_id": item["id"],
                             "output_index": k, "content_index": 0, "delta": text}, "response.output_text.delta"))
        else:
            out.append(_sse({"type": "response.output_item.added", "sequence_number": next(seq), "output_index": k,
                             "item": {**item, "status": "in_progress", "arguments": ""}}, "response.output_item.added"))
            out.append(_sse({"type": "response.function_call_arguments.delta", "sequence_number": next(seq),
                             "item_id": item["id"], "output_index": k, "delta": item["arguments"]},
                            "response.function_call_arguments.delta"))
        out.append(_sse({"type": "response.output_item.done", "sequence_number": next(seq), "output_index": k,
                         "item": item}, "response.output_item.done"))
    out.append(_sse({"type": "response.completed", "sequence_number": next(seq), "response": full},
                    "response.completed"))
    return out
