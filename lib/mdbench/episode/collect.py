"""What an episode cost, read back from the workspace after the run (deliverable 9 of the seed's prompt).

Everything here reads files the *agent* wrote, so every reader is bounded (size, count), opens files
without following symlinks, and turns malformed content into ``None`` plus a note — never an exception:

* MD nanoseconds charged: the agent's own ledger ``run_record/attempts.jsonl`` (latest row per attempt id);
* tokens and USD: an ATIF ``trajectory.json`` (Harbor's trajectory format, ``final_metrics``; summed over
  steps when absent) or a ``cost.json`` (``{"tokens": {...}, "usd": …}``);
* GPU-hours: GROMACS ``md.log``-style logs in the workspace that report a GPU selected for the run, each
  contributing its wall time × the GPUs it used.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_JSON_BYTES = 50_000_000
MAX_LEDGER_LINES = 200_000
MAX_LOGS = 2_000
LOG_TAIL_BYTES = 65_536
LOG_HEAD_BYTES = 262_144
#: Where an agent's trajectory or cost file is looked for (relative to the workspace), first match wins.
COST_FILES = ("trajectory.json", "agent/trajectory.json", "logs/agent/trajectory.json", "cost.json",
              "run_record/cost.json")


def within(root: Path, rel: str) -> Path | None:
    """``root/rel`` when no component below ``root`` is a symlink (an agent pointing the evaluator elsewhere
    is refused, not followed); None otherwise."""
    path = root
    for part in Path(rel).parts:
        path = path / part
        if path.is_symlink():
            return None
    return path


def read_bounded(path: Path | None, limit: int, *, tail: bool = False) -> bytes | None:
    """Up to ``limit`` bytes of a regular file (its end when ``tail``); None for symlinks, folders, errors."""
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        if tail and st.st_size > limit:
            fh.seek(st.st_size - limit)
        return fh.read(limit)


def read_json(path: Path | None, limit: int = MAX_JSON_BYTES) -> Any:
    """Parsed JSON of an agent-written file, or None (missing, symlink, too large, malformed)."""
    raw = read_bounded(path, limit + 1)
    if raw is None or len(raw) > limit:
        return None
    try:
        return json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        return None


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def ns_charged(workspace: Path) -> dict[str, Any]:
    """MD nanoseconds charged per case and in total from the agent's ledger [ns].

    Returns ``{"total_ns", "per_case_ns", "attempts", "source", "note"}``; ``total_ns`` is None when there
    is no readable ledger (the agent kept none).
    """
    raw = read_bounded(within(workspace, "run_record/attempts.jsonl"), MAX_JSON_BYTES)
    if raw is None:
        return {"total_ns": None, "per_case_ns": {}, "attempts": 0, "source": None,
                "note": "no ledger (run_record/attempts.jsonl) in the workspace"}
    latest: dict[str, dict] = {}
    bad = 0
    for n, line in enumerate(raw.decode("utf-8", errors="replace").splitlines()):
        if n >= MAX_LEDGER_LINES:
            break
        try:
            row = json.loads(line)
        except ValueError:
            bad += line.strip() != ""
            continue
        if isinstance(row, dict) and isinstance(row.get("id"), (str, int)):
            latest[str(row["id"])] = row
    per_case: dict[str, float] = {}
    for row in latest.values():
        v = _num(row.get("ns_charged"))
        if v is not None and v >= 0:
            case = str(row.get("case", "?"))[:40]
            per_case[case] = per_case.get(case, 0.0) + v
    return {"total_ns": round(sum(per_case.values()), 6), "per_case_ns": {k: round(v, 6) for k, v in
                                                                           sorted(per_case.items())},
            "attempts": len(latest), "source": "run_record/attempts.jsonl",
            "note": f"{bad} malformed ledger line(s) ignored" if bad else None}


def _atif_costs(doc: dict) -> dict[str, Any] | None:
    fm = doc.get("final_metrics") if isinstance(doc.get("final_metrics"), dict) else {}
    steps = doc.get("steps") if isinstance(doc.get("steps"), list) else []

    def total(key_final: str, key_step: str) -> float | None:
        v = _num(fm.get(key_final))
        if v is not None:
            return v
        vals = [_num((s.get("metrics") or {}).get(key_step)) for s in steps
                if isinstance(s, dict) and isinstance(s.get("metrics"), dict)]
        vals = [x for x in vals if x is not None]
        return sum(vals) if vals else None

    prompt = total("total_prompt_tokens", "prompt_tokens")
    completion = total("total_completion_tokens", "completion_tokens")
    cached = total("total_cached_tokens", "cached_tokens")
    usd = total("total_cost_usd", "cost_usd")
    agent = doc.get("agent") if isinstance(doc.get("agent"), dict) else {}
    return {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached,
            "total_tokens": None if prompt is None and completion is None else (prompt or 0) + (completion or 0),
            "usd": usd, "format": str(doc.get("schema_version", "ATIF"))[:40],
            "agent": str(agent.get("name", ""))[:80] or None, "model": str(agent.get("model_name", ""))[:120] or None}


def _cost_json(doc: dict) -> dict[str, Any]:
    tok = doc.get("tokens") if isinstance(doc.get("tokens"), dict) else {}
    prompt = _num(tok.get("prompt", tok.get("input", tok.get("prompt_tokens"))))
    completion = _num(tok.get("completion", tok.get("output", tok.get("completion_tokens"))))
    total = _num(tok.get("total")) if tok else _num(doc.get("tokens"))
    if total is None and (prompt is not None or completion is not None):
        total = (prompt or 0) + (completion or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": _num(tok.get("cached")),
            "total_tokens": total, "usd": _num(doc.get("usd", doc.get("cost_usd"))), "format": "cost.json",
            "agent": str(doc.get("agent", ""))[:80] or None, "model": str(doc.get("model", ""))[:120] or None}


def agent_costs(workspace: Path) -> dict[str, Any]:
    """Tokens and USD the agent reports (:data:`COST_FILES`); ``source`` None when it reports none.

    These are the agent's own statements (``reported_by: agent``): an evaluator with a metering proxy
    should prefer that proxy's numbers.
    """
    for rel in COST_FILES:
        doc = read_json(within(workspace, rel))
        if not isinstance(doc, dict):
            continue
        out = _atif_costs(doc) if ("steps" in doc or "final_metrics" in doc) else _cost_json(doc)
        if out is not None:
            return {**out, "source": rel, "reported_by": "agent"}
    return {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": None, "total_tokens": None,
            "usd": None, "format": None, "agent": None, "model": None, "source": None, "reported_by": None}


_GPU_LINE = re.compile(rb"(\d+) GPUs? selected for this run")
_WALL_LINE = re.compile(rb"^\s*Time:\s+([0-9.eE+-]+)\s+([0-9.eE+-]+)", re.M)


def gpu_hours(workspace: Path) -> dict[str, Any]:
    """GPU-hours of the GROMACS runs in the workspace: Σ wall time × GPUs selected, from their logs [h]."""
    total_h, logs, gpu_logs = 0.0, 0, 0
    cases = workspace / "cases"
    roots = [cases] if cases.is_dir() and not cases.is_symlink() else [workspace]
    for root in roots:
        for folder, dirs, names in os.walk(root, followlinks=False):
            dirs[:] = [d for d in dirs if d not in ("agent_input", "notebooks")]
            for n in names:
                if not n.endswith(".log") or logs >= MAX_LOGS:
                    continue
                logs += 1
                p = Path(folder) / n
                head = read_bounded(p, LOG_HEAD_BYTES) or b""
                m = _GPU_LINE.search(head)
                if not m:
                    continue
                tail = read_bounded(p, LOG_TAIL_BYTES, tail=True) or b""
                walls = _WALL_LINE.findall(tail)
                if walls:
                    gpu_logs += 1
                    total_h += float(walls[-1][1]) * int(m.group(1)) / 3600.0
    return {"gpu_hours": round(total_h, 6), "gpu_logs": gpu_logs, "logs_read": logs,
            "source": "GROMACS logs ('N GPU(s) selected for this run', 'Time: ... wall t')"}
