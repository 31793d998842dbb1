"""What an episode cost, read back from the workspace after the run (deliverable 9 of the seed's prompt).

Two kinds of figures, never mixed:

* ``self_reported`` — what the agent's own files say: tokens and USD from an ATIF ``trajectory.json`` or a
  ``cost.json``, MD nanoseconds from its ledger ``run_record/attempts.jsonl``, GPU-hours from the GROMACS logs
  in its workspace. Each number is validated (a finite, non-negative number below a generous ceiling); a
  number that fails becomes ``None`` plus a finding, never a figure in the cost table.
* ``measured`` — what the evaluator itself saw: the trajectories on disk (:func:`ns_on_disk`, the time each
  complete xtc spans, read from its frame headers), and, in the runner, wall/CPU time, GPU-hours allotted and
  a harness's metered tokens. The ledger is cross-checked against the trajectories: charging fewer ns than the
  workspace holds is a finding.

Every file here was written by the agent, so every read goes through :mod:`mdbench.untrusted` (regular files
only, no link followed, no FIFO opened in blocking mode, sizes, depths and integers capped) and every
directory listing through :func:`mdbench.untrusted.walk`. Nothing here raises for what a file holds.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mdbench import untrusted
from mdbench.untrusted import Refused

SELF_REPORTED = "self_reported"
MEASURED = "measured"
#: Largest trajectory/cost/ledger file read [bytes].
MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_LEDGER_LINES = 200_000
MAX_LOGS = 2_000
MAX_XTC = 2_000
LOG_TAIL_BYTES = 65_536
LOG_HEAD_BYTES = 262_144
#: Ceilings of plausible self-reported figures (a forged 1e308 is refused, not summed).
MAX_TOKENS = 1e13
MAX_USD = 1e7
MAX_NS = 1e6
MAX_WALL_S = 1e8
#: Where an agent's trajectory or cost file is looked for (relative to the workspace), first match wins.
COST_FILES = ("trajectory.json", "agent/trajectory.json", "logs/agent/trajectory.json", "cost.json",
              "run_record/cost.json")
#: Folders of the workspace never searched for logs or trajectories.
SKIP_DIRS = ("agent_input",)


def finding(code: str, path: str | None, detail: str) -> dict[str, Any]:
    """One finding about an agent-written file: ``code``, workspace-relative ``path``, one-line ``detail``."""
    return {"code": code, "path": path, "detail": str(detail)[:300]}


def refused(exc: Refused, root: Path) -> dict[str, Any]:
    """A :class:`~mdbench.untrusted.Refused` as a finding (path relative to ``root``)."""
    try:
        rel = Path(exc.path).relative_to(root).as_posix()
    except ValueError:
        rel = exc.path
    return finding(f"refused_{exc.reason}", rel, exc.detail or exc.reason)


def within(root: Path, rel: str) -> Path | None:
    """``root/rel`` when no folder between ``root`` and the file is a symlink (an agent pointing the
    evaluator elsewhere is refused, not followed); the last component is checked by the reader's O_NOFOLLOW."""
    path = root
    parts = Path(rel).parts
    for part in parts[:-1]:
        path = path / part
        if path.is_symlink():
            return None
    return path / parts[-1] if parts else path


def read_json(workspace: Path, rel: str, findings: list[dict], *, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parsed JSON of an agent-written file, or None (missing: silently; anything refused: a finding)."""
    path = within(workspace, rel)
    if path is None:
        findings.append(finding("refused_symlink", rel, "a folder on the way is a symbolic link"))
        return None
    value, exc = untrusted.try_read_json(path, max_bytes=max_bytes)
    if exc is not None and exc.reason != "missing":
        findings.append(refused(exc, workspace))
    return value


def checked(value: Any, name: str, maximum: float, findings: list[dict], path: str | None) -> float | None:
    """``value`` as a finite number in [0, maximum]; None for an absent one, None plus a finding for a bad one."""
    if value is None:
        return None
    x, why = untrusted.try_number(value, name=name, minimum=0.0, maximum=maximum)
    if why is not None:
        findings.append(finding("invalid_self_reported", path, why))
    return x


# ----------------------------------------------------------------------------------------------- the ledger

def ns_charged(workspace: Path, *, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """MD nanoseconds charged per case and in total, as the agent's ledger says [ns] (``self_reported``).

    Returns ``{"total_ns", "per_case_ns", "attempts", "source", "note", "findings", "label"}``; ``total_ns``
    is None when there is no readable ledger. Rows whose ``ns_charged`` is not a finite number in
    [0, :data:`MAX_NS`] are left out with a finding.
    """
    rel = "run_record/attempts.jsonl"
    findings: list[dict] = []
    base = {"per_case_ns": {}, "attempts": 0, "source": None, "findings": findings, "label": SELF_REPORTED}
    path = within(workspace, rel)
    if path is None:
        findings.append(finding("refused_symlink", rel, "a folder on the way is a symbolic link"))
        return {**base, "total_ns": None, "note": "ledger refused"}
    try:
        raw = untrusted.read_bytes(path, max_bytes=max_bytes)
    except Refused as exc:
        if exc.reason != "missing":
            findings.append(refused(exc, workspace))
        return {**base, "total_ns": None, "note": "no ledger (run_record/attempts.jsonl) in the workspace"
                if exc.reason == "missing" else f"ledger refused ({exc.reason})"}
    latest: dict[str, dict] = {}
    bad = 0
    for n, line in enumerate(raw.decode("utf-8", errors="replace").splitlines()):
        if n >= MAX_LEDGER_LINES:
            findings.append(finding("ledger_truncated", rel, f"more than {MAX_LEDGER_LINES} lines; the rest ignored"))
            break
        if not line.strip():
            continue
        try:
            row = untrusted.loads(line, max_bytes=1 << 20, max_depth=16)
        except Refused:
            bad += 1
            continue
        if isinstance(row, dict) and isinstance(row.get("id"), (str, int)) and not isinstance(row.get("id"), bool):
            latest[str(row["id"])[:200]] = row
    per_case: dict[str, float] = {}
    for key, row in latest.items():
        v = checked(row.get("ns_charged"), f"ns_charged of attempt {key[:60]}", MAX_NS, findings, rel)
        if v is not None:
            case = str(row.get("case", "?"))[:40]
            per_case[case] = per_case.get(case, 0.0) + v
    if bad:
        findings.append(finding("ledger_malformed_lines", rel, f"{bad} line(s) not JSON or refused"))
    return {**base, "total_ns": round(sum(per_case.values()), 6),
            "per_case_ns": {k: round(v, 6) for k, v in sorted(per_case.items())}, "attempts": len(latest),
            "source": rel, "note": f"{bad} malformed ledger line(s) ignored" if bad else None}


# ------------------------------------------------------------------------------------------ what is on disk

def workspace_walk(workspace: Path) -> untrusted.Walk:
    """One bounded listing of the workspace (no link followed; depth and entry caps)."""
    try:
        return untrusted.walk(workspace, max_depth=32, max_entries=100_000)
    except Refused as exc:
        return untrusted.Walk(root=str(workspace), truncated=True, reason=f"workspace refused ({exc.reason})")


def _skipped(relpath: str) -> bool:
    return relpath.split("/", 1)[0] in SKIP_DIRS


def case_of(relpath: str) -> str:
    """The case a workspace path belongs to (``cases/<case>/…``), ``?`` elsewhere."""
    parts = relpath.split("/")
    return parts[1][:40] if len(parts) > 2 and parts[0] == "cases" else "?"


def ns_on_disk(workspace: Path, listing: untrusted.Walk | None = None) -> dict[str, Any]:
    """Trajectory time on disk [ns] (``measured``): per complete xtc, last minus first frame time.

    Only regular ``*.xtc`` files are read (links, FIFOs and devices are skipped: they appear in the walk with
    another kind); frame headers are walked by :func:`mdbench.trajcheck.scan_xtc` (no coordinates decoded).
    ``longest_per_case`` names each case's longest trajectory. It is a lower bound of the MD time computed (segments without xtc output, minimisation and the last output
    interval are not seen).
    """
    from mdbench.trajcheck import TrajectoryError, scan_xtc  # noqa: PLC0415

    listing = listing or workspace_walk(workspace)
    per_case: dict[str, float] = {}
    longest: dict[str, tuple[float, str]] = {}
    files, findings = 0, []
    for e in listing.entries:
        if e.kind != "file" or not e.relpath.endswith(".xtc") or _skipped(e.relpath):
            continue
        if files >= MAX_XTC:
            findings.append(finding("too_many_trajectories", None, f"more than {MAX_XTC} xtc files; rest not read"))
            break
        files += 1
        path = workspace / e.relpath
        try:
            os.close(untrusted.open_regular(path))  # refuses whatever is not a regular file now
            scan = scan_xtc(path)
        except (Refused, TrajectoryError, OSError, ValueError) as exc:
            findings.append(finding("trajectory_unreadable", e.relpath, str(exc).splitlines()[0] if str(exc) else
                                    type(exc).__name__))
            continue
        if not scan.checked or scan.first_time_ps is None or scan.last_time_ps is None:
            continue
        span, why = untrusted.try_number((scan.last_time_ps - scan.first_time_ps) / 1000.0, name="span",
                                         minimum=0.0, maximum=MAX_NS)
        if why is not None:
            findings.append(finding("trajectory_time_invalid", e.relpath, why))
            continue
        case = case_of(e.relpath)
        per_case[case] = per_case.get(case, 0.0) + span
        if span > longest.get(case, (-1.0, ""))[0]:
            longest[case] = (span, e.relpath)
    return {"total_ns": round(sum(per_case.values()), 6), "per_case_ns": {k: round(v, 6) for k, v in
                                                                           sorted(per_case.items())},
            "longest_per_case": {k: rel for k, (_, rel) in sorted(longest.items())},
            "xtc_files": files, "findings": findings, "label": MEASURED,
            "source": "complete xtc frames on disk (last - first frame time per file)"}


def cross_check_ledger(ledger: dict[str, Any], disk: dict[str, Any], *, tolerance: float = 0.05,
                       floor_ns: float = 0.001) -> list[dict[str, Any]]:
    """Findings where the ledger charges fewer ns than the trajectories on disk span (per case and in total)."""
    out = []
    charged = ledger.get("per_case_ns") or {}
    for case, seen in (disk.get("per_case_ns") or {}).items():
        c = charged.get(case, 0.0) if ledger.get("total_ns") is not None else 0.0
        if seen > floor_ns and c < seen * (1.0 - tolerance) - floor_ns:
            out.append(finding("ledger_under_reports", "run_record/attempts.jsonl",
                               f"case {case}: the ledger charges {c:.4f} ns but its trajectories on disk span "
                               f"{seen:.4f} ns"))
    return out


# ---------------------------------------------------------------------------------------- tokens and USD

def _atif_costs(doc: dict, rel: str, findings: list[dict]) -> dict[str, Any]:
    fm = doc.get("final_metrics") if isinstance(doc.get("final_metrics"), dict) else {}
    steps = doc.get("steps") if isinstance(doc.get("steps"), list) else []

    def total(key_final: str, key_step: str, maximum: float) -> float | None:
        if key_final in fm:
            return checked(fm.get(key_final), f"final_metrics.{key_final}", maximum, findings, rel)
        vals = []
        for k, s in enumerate(steps):
            if isinstance(s, dict) and isinstance(s.get("metrics"), dict) and key_step in s["metrics"]:
                vals.append(checked(s["metrics"][key_step], f"steps[{k}].metrics.{key_step}", maximum, findings, rel))
        vals = [x for x in vals if x is not None]
        return sum(vals) if vals else None

    prompt = total("total_prompt_tokens", "prompt_tokens", MAX_TOKENS)
    completion = total("total_completion_tokens", "completion_tokens", MAX_TOKENS)
    cached = total("total_cached_tokens", "cached_tokens", MAX_TOKENS)
    usd = total("total_cost_usd", "cost_usd", MAX_USD)
    agent = doc.get("agent") if isinstance(doc.get("agent"), dict) else {}
    return {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached,
            "total_tokens": None if prompt is None and completion is None else (prompt or 0) + (completion or 0),
            "usd": usd, "format": str(doc.get("schema_version", "ATIF"))[:40],
            "agent": str(agent.get("name", ""))[:80] or None, "model": str(agent.get("model_name", ""))[:120] or None}


def _cost_json(doc: dict, rel: str, findings: list[dict]) -> dict[str, Any]:
    tok = doc.get("tokens") if isinstance(doc.get("tokens"), dict) else {}

    def tk(*keys: str) -> float | None:
        for k in keys:
            if k in tok:
                return checked(tok[k], f"tokens.{k}", MAX_TOKENS, findings, rel)
        return None

    prompt = tk("prompt", "input", "prompt_tokens")
    completion = tk("completion", "output", "completion_tokens")
    total = tk("total") if tok else checked(doc.get("tokens"), "tokens", MAX_TOKENS, findings, rel)
    if total is None and (prompt is not None or completion is not None):
        total = (prompt or 0) + (completion or 0)
    usd_key = "usd" if "usd" in doc else "cost_usd"
    return {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": tk("cached"),
            "total_tokens": total, "usd": checked(doc.get(usd_key), usd_key, MAX_USD, findings, rel),
            "format": "cost.json", "agent": str(doc.get("agent", ""))[:80] or None,
            "model": str(doc.get("model", ""))[:120] or None}


def agent_costs(workspace: Path) -> dict[str, Any]:
    """Tokens and USD the agent reports (:data:`COST_FILES`, first parsable one); ``source`` None when none.

    These are the agent's own statements (``label: self_reported``); each number is validated and a bad one
    is None plus a finding. An evaluator with a metering proxy (a harness) measures its own.
    """
    findings: list[dict] = []
    for rel in COST_FILES:
        doc = read_json(workspace, rel, findings)
        if not isinstance(doc, dict):
            continue
        out = (_atif_costs(doc, rel, findings) if ("steps" in doc or "final_metrics" in doc)
               else _cost_json(doc, rel, findings))
        return {**out, "source": rel, "reported_by": "agent", "label": SELF_REPORTED, "findings": findings}
    return {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": None, "total_tokens": None,
            "usd": None, "format": None, "agent": None, "model": None, "source": None, "reported_by": None,
            "label": SELF_REPORTED, "findings": findings}


# -------------------------------------------------------------------------------------------- GROMACS logs

_GPU_LINE = re.compile(rb"(\d{1,4}) GPUs? selected for this run")
_WALL_LINE = re.compile(rb"^\s*Time:\s+(\S{1,40})\s+(\S{1,40})", re.M)


def gpu_hours(workspace: Path, listing: untrusted.Walk | None = None, *, max_wall_s: float = MAX_WALL_S
              ) -> dict[str, Any]:
    """GPU-hours the GROMACS logs in the workspace report: Σ wall time × GPUs selected [h] (``self_reported``).

    A log's wall time must be a finite number in [0, ``max_wall_s``] (pass the episode's wall time: no log
    can have run longer than the agent); anything else is a finding and the log does not count.
    """
    listing = listing or workspace_walk(workspace)
    total_h, logs, gpu_logs, findings = 0.0, 0, 0, []
    for e in listing.entries:
        if e.kind != "file" or not e.relpath.endswith(".log") or _skipped(e.relpath):
            continue
        if logs >= MAX_LOGS:
            break
        logs += 1
        path = workspace / e.relpath
        head = head_bytes(path, LOG_HEAD_BYTES, findings, e.relpath)
        m = _GPU_LINE.search(head)
        if not m:
            continue
        tail = _tail(path, LOG_TAIL_BYTES, findings, e.relpath)
        walls = _WALL_LINE.findall(tail)
        if not walls:
            continue
        try:
            wall = float(walls[-1][1])
        except ValueError:
            findings.append(finding("invalid_self_reported", e.relpath, f"wall time {walls[-1][1][:40]!r}"))
            continue
        wall_s = checked(wall, "GROMACS log wall time [s]", max_wall_s, findings, e.relpath)
        if wall_s is None:
            continue
        gpu_logs += 1
        total_h += wall_s * int(m.group(1)) / 3600.0
    return {"gpu_hours": round(total_h, 6), "gpu_logs": gpu_logs, "logs_read": logs, "findings": findings,
            "label": SELF_REPORTED, "source": "GROMACS logs ('N GPU(s) selected for this run', 'Time: ... wall t')"}


def head_bytes(path: Path, n: int, findings: list[dict], rel: str) -> bytes:
    return _slice(path, n, False, findings, rel)


def _tail(path: Path, n: int, findings: list[dict], rel: str) -> bytes:
    return _slice(path, n, True, findings, rel)


def _slice(path: Path, n: int, tail: bool, findings: list[dict], rel: str) -> bytes:
    """The first (or last) ``n`` bytes of a regular file, opened through :func:`mdbench.untrusted.open_regular`."""
    try:
        fd = untrusted.open_regular(path)
    except Refused as exc:
        findings.append(finding(f"refused_{exc.reason}", rel, exc.detail or exc.reason))
        return b""
    try:
        if tail:
            size = os.fstat(fd).st_size
            os.lseek(fd, max(0, size - n), os.SEEK_SET)
        return os.read(fd, n)
    except OSError as exc:
        findings.append(finding("refused_unreadable", rel, exc.strerror or str(exc)))
        return b""
    finally:
        os.close(fd)
