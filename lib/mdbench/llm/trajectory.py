"""The evaluator's trajectory of an episode: the proxy's log (``EP/llm/calls.jsonl``) converted to ATIF.

Harbor's Agent Trajectory Interchange Format (:mod:`mdbench.atif`): the first answered call's request gives
the ``system`` step (system/developer instructions) and the ``user`` step(s) (the prompt, as the CLI sent it);
every answered model call is one ``agent`` step — its text, reasoning, tool calls and the metrics the proxy
metered (prompt tokens with cached included, cached, completion tokens, USD). A tool call's observation is the
tool output the CLI sent back in a later request (``function_call_output`` / ``role: tool`` with the same call
id). Calls that offered no tools (e.g. OpenCode's session title) are agent steps with ``extra.side_call``.
Refused and failed calls are listed in the trajectory's ``extra``; ``final_metrics`` holds the totals of every
answered call. The agent writes nothing here: the log is the proxy's, so the trajectory and cost cannot be
forged from inside the sandbox.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from mdbench import untrusted
from mdbench.atif import SCHEMA_VERSION, check_trajectory

#: A line of the log longer than this is skipped (the proxy caps what it logs well below it).
MAX_LINE_BYTES = 64 * 1024 * 1024
MAX_TEXT = 200_000


def read_calls(path: Path, session: str | None = None) -> list[dict[str, Any]]:
    """The proxy log's records (lines that are not JSON objects are skipped); only ``session``'s when given."""
    out: list[dict[str, Any]] = []
    try:
        fh = Path(path).open("rb")
    except OSError:
        return out
    with fh:
        for line in fh:
            if len(line) > MAX_LINE_BYTES:
                continue
            try:
                rec = untrusted.loads(line, max_bytes=MAX_LINE_BYTES, max_depth=512)
            except (untrusted.Refused, ValueError, RecursionError):
                continue
            if isinstance(rec, dict) and (session is None or rec.get("session") == session):
                out.append(rec)
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content[:MAX_TEXT]
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict):
                t = p.get("text") if isinstance(p.get("text"), str) else p.get("output")
                if isinstance(t, str):
                    parts.append(t)
            elif isinstance(p, str):
                parts.append(p)
        return "\n".join(parts)[:MAX_TEXT]
    return "" if content is None else json.dumps(content)[:MAX_TEXT]


def _prompt_steps(req: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, message) of the system and user messages that open the first request."""
    out: list[tuple[str, str]] = []
    if isinstance(req.get("instructions"), str) and req["instructions"]:
        out.append(("system", req["instructions"][:MAX_TEXT]))
    items = req.get("input") if isinstance(req.get("input"), list) else req.get("messages")
    if isinstance(req.get("input"), str):
        items = [{"role": "user", "content": req["input"]}]
    for it in items if isinstance(items, list) else []:
        if not isinstance(it, dict):
            continue
        role = it.get("role")
        if role in ("system", "developer"):
            out.append(("system", _text(it.get("content"))))
        elif role == "user":
            out.append(("user", _text(it.get("content"))))
        elif role == "assistant" or it.get("type") in ("function_call", "function_call_output"):
            break
    return out


def _tool_outputs(req: dict[str, Any]) -> dict[str, str]:
    """call id → tool output, from a request's history (Responses items and chat ``tool`` messages)."""
    out: dict[str, str] = {}
    items = req.get("input") if isinstance(req.get("input"), list) else req.get("messages")
    for it in items if isinstance(items, list) else []:
        if not isinstance(it, dict):
            continue
        if it.get("type") in ("function_call_output", "custom_tool_call_output") and it.get("call_id"):
            out[str(it["call_id"])] = _text(it.get("output"))
        elif it.get("role") == "tool" and it.get("tool_call_id"):
            out[str(it["tool_call_id"])] = _text(it.get("content"))
    return out


def _args(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        val = json.loads(text) if isinstance(text, str) and text else {}
    except (ValueError, RecursionError):
        return {"raw": str(text)[:MAX_TEXT]}
    return val if isinstance(val, dict) else {"value": val}


def build_trajectory(calls: list[dict[str, Any]], *, agent_name: str, agent_version: str,
                     model_name: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The ATIF trajectory of the logged calls, or ``None`` when no call was answered (nothing to record)."""
    answered = [c for c in calls if c.get("status") == 200 and c.get("method") == "POST"
                and isinstance(c.get("response"), dict)]
    if not answered:
        return None
    outputs: dict[str, str] = {}
    for c in calls:
        if isinstance(c.get("request"), dict):
            outputs.update(_tool_outputs(c["request"]))
    first = answered[0].get("request") if isinstance(answered[0].get("request"), dict) else {}
    steps: list[dict[str, Any]] = []
    for source, message in _prompt_steps(first):
        steps.append({"step_id": len(steps) + 1, "timestamp": answered[0].get("time"), "source": source,
                      "message": message})
    totals = {"prompt": 0, "cached": 0, "completion": 0, "usd": 0.0, "usd_unknown": 0}
    for c in answered:
        r = c["response"]
        m = c.get("metered") if isinstance(c.get("metered"), dict) else {}
        step: dict[str, Any] = {"step_id": len(steps) + 1, "timestamp": c.get("time"), "source": "agent",
                                "message": _text(r.get("text")), "model_name": c.get("model") or model_name}
        if isinstance(r.get("reasoning"), str) and r["reasoning"]:
            step["reasoning_content"] = r["reasoning"][:MAX_TEXT]
        calls_ = [tc for tc in r.get("tool_calls") or [] if isinstance(tc, dict)]
        if calls_:
            step["tool_calls"] = [{"tool_call_id": str(tc.get("id") or f"call_{step['step_id']}_{k}"),
                                   "function_name": str(tc.get("name") or "unknown"),
                                   "arguments": _args(tc.get("arguments"))} for k, tc in enumerate(calls_)]
            results = [{"source_call_id": tc["tool_call_id"], "content": outputs[tc["tool_call_id"]]}
                       for tc in step["tool_calls"] if tc["tool_call_id"] in outputs]
            if results:
                step["observation"] = {"results": results}
        metrics = {"prompt_tokens": int(m.get("tokens_in") or 0), "completion_tokens": int(m.get("tokens_out") or 0),
                   "cached_tokens": int(m.get("tokens_cached") or 0)}
        if isinstance(m.get("usd"), (int, float)):
            metrics["cost_usd"] = float(m["usd"])
            totals["usd"] += float(m["usd"])
        else:
            totals["usd_unknown"] += 1
        step["metrics"] = metrics
        totals["prompt"] += metrics["prompt_tokens"]
        totals["cached"] += metrics["cached_tokens"]
        totals["completion"] += metrics["completion_tokens"]
        req = c.get("request") if isinstance(c.get("request"), dict) else {}
        step_extra: dict[str, Any] = {"proxy_seq": c.get("seq"), "api": c.get("api"), "stream": c.get("stream"),
                                      "latency_s": c.get("latency_s"), "complete": r.get("complete")}
        if not req.get("tools"):
            step_extra["side_call"] = True
        if r.get("finish_reason"):
            step_extra["finish_reason"] = r["finish_reason"]
        step["extra"] = step_extra
        steps.append(step)
    not_answered = [{"seq": c.get("seq"), "time": c.get("time"), "path": c.get("path"), "status": c.get("status"),
                     "outcome": c.get("outcome"), "error": c.get("error")} for c in calls if c not in answered]
    agent: dict[str, Any] = {"name": agent_name, "version": agent_version}
    if model_name:
        agent["model_name"] = model_name
    traj = {"schema_version": SCHEMA_VERSION, "session_id": str(uuid.uuid4()), "agent": agent, "steps": steps,
            "final_metrics": {"total_prompt_tokens": totals["prompt"], "total_completion_tokens": totals["completion"],
                              "total_cached_tokens": totals["cached"],
                              "total_cost_usd": None if totals["usd_unknown"] else round(totals["usd"], 8),
                              "total_steps": len(steps),
                              "extra": {"source": "mdbench.llm.proxy (evaluator side)", "calls": len(answered),
                                        "usd_known_part": round(totals["usd"], 8),
                                        "usd_unknown_calls": totals["usd_unknown"]}},
            "extra": {**(extra or {}), "calls_not_answered": not_answered}}
    reason = check_trajectory(traj)
    if reason:   # cannot happen with the steps built above; never write an invalid file
        raise ValueError(f"built an invalid trajectory: {reason}")
    return traj


def write_trajectory(log_path: Path, out_path: Path, *, session: str | None = None, **kw: Any) -> Path | None:
    """Convert ``log_path`` (``calls.jsonl``; only ``session``'s lines when given) into ``out_path``
    (``trajectory.json``); ``None`` when no call was answered."""
    traj = build_trajectory(read_calls(log_path, session), **kw)
    if traj is None:
        return None
    out_path = Path(out_path)
    untrusted.write_new(out_path, json.dumps(traj, indent=1) + "\n")   # never through a planted link
    return out_path
