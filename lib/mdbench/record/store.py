"""The run record (contract schema version 1.2): append-only events, attempts ledger with budget guard,
registrations, artifact inventory, stage and observable states, and the terminal claim.

Every file lives in ``RUN_DIR/run_record/``. JSON-lines files are append-only: a line, once written and
fsynced, is never rewritten; a correction is a new event carrying ``corrects: <id>``. JSON snapshot files
(``artifacts.json``, ``stage_states.json``, ``observables.json``, ``episode_terminal.json``) are replaced
atomically and every change to them is also written as an event, so the history lives in
``events.jsonl``. An inter-process file lock serialises writers, so several processes (executor workers)
can append to one record safely.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from filelock import FileLock

from mdbench import untrusted
from mdbench.observable_states import OBSERVABLE_STATES
from mdbench.errors import MdbenchError
from mdbench.jsonsafe import json_safe as json_safe  # re-export (execute/stage.py imports it from here)
from mdbench.hashing import sha256_file as sha256_file  # re-export: the one definition is below every room
from mdbench.record.atomic import atomic_write_text

SCHEMA_VERSION = "1.2"
#: Contract budget: nanoseconds of MD per case and for the whole study (all newly completed steps count).
CASE_BUDGET_NS = 100.0
STUDY_BUDGET_NS = 300.0
#: Tolerance for floating-point sums of ns when checking the budget [ns].
_BUDGET_EPS_NS = 1e-9

EVENTS = "events.jsonl"
ATTEMPTS = "attempts.jsonl"
REGISTRATIONS = "registrations.jsonl"
ARTIFACTS = "artifacts.json"
STAGE_STATES = "stage_states.json"
OBSERVABLES = "observables.json"
TERMINAL = "episode_terminal.json"

ATTEMPT_STATUSES = ("reserved", "completed", "failed", "interrupted", "discarded")
ATTEMPT_RELATIONS = ("continuation", "extension", "branch", "restart")
STAGE_STATE_VALUES = ("valid", "invalid", "running", "not_reached", "invalid_upstream")
#: The observable states (one definition: mdbench.observable_states, below every room).
OBSERVABLE_STATE_VALUES = OBSERVABLE_STATES
CLAIMED_OUTCOMES = ("clean_valid", "recovered_valid", "partial", "candidate_failure", "infrastructure_blocked")


class RecordError(MdbenchError):
    """The run record cannot be written or read as asked."""


class BudgetExceeded(RecordError):
    """A reservation would take a case past 100 ns or the study past 300 ns; nothing was reserved."""

    def __init__(self, case: str, planned_ns: float, committed_case_ns: float, committed_study_ns: float,
                 limit: str):
        self.case = case
        self.planned_ns = planned_ns
        self.committed_case_ns = committed_case_ns
        self.committed_study_ns = committed_study_ns
        self.limit = limit
        super().__init__(
            f"budget refused for case {case}: {planned_ns:.6g} ns planned on top of "
            f"{committed_case_ns:.6g} ns committed to the case and {committed_study_ns:.6g} ns to the study "
            f"would exceed the {limit}"
        )


def run_relative(path: str | Path, run_dir: str | Path | None) -> str:
    """``path`` relative to ``run_dir`` (both resolved) as written in the record; unchanged when it lies
    outside (or no run directory is given)."""
    if run_dir is None:
        return str(path)
    try:
        return str(Path(path).resolve().relative_to(Path(run_dir).resolve()))
    except ValueError:
        return str(path)


def utc_now() -> str:
    """UTC timestamp with microseconds, ISO 8601 with a trailing Z."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: The JSON-safe copy every record line and snapshot goes through (non-finite → null; one convention with
#: results.json, :mod:`mdbench.jsonsafe`); ``json_safe`` is the name other rooms use.
_json_safe = json_safe


def dumps_line(obj: dict) -> str:
    """One canonical JSON line (sorted keys, no NaN literals)."""
    return json.dumps(_json_safe(obj), sort_keys=True, allow_nan=False, separators=(",", ":"))


#: Largest JSON-lines record file read [bytes], by its *logical* size (a sparse file is as big as it says):
#: a larger one is not read at all (one ``malformed`` entry at line 0 says so). 256 MiB is ~10^6 events.
MAX_JSONL_BYTES = 256 * 1024 * 1024
#: Longest line of a JSON-lines record file [bytes]; a longer one is skipped unparsed (a ``malformed`` entry).
MAX_JSONL_LINE_BYTES = 16 * 1024 * 1024
#: Most lines of a JSON-lines record file read; the rest are ignored (a ``malformed`` entry says so).
MAX_JSONL_LINES = 2_000_000


@dataclass(frozen=True)
class JsonlRead:
    """Result of reading a JSON-lines file: parsed rows, malformed lines and a truncated tail, if any.

    ``capped`` says why the file was not read whole (too large, too many lines), None when it was."""

    rows: list[tuple[int, dict]]
    malformed: list[tuple[int, str]]
    truncated_tail_line: int | None
    capped: str | None = None


def read_jsonl(path: Path, *, max_bytes: int = MAX_JSONL_BYTES, max_line_bytes: int = MAX_JSONL_LINE_BYTES,
               max_lines: int = MAX_JSONL_LINES) -> JsonlRead:
    """Read a JSON-lines file without repairing it, line by line and capped (the file may be an agent's).

    A final line without its newline is a *truncated tail* (a writer killed mid-write); it is reported,
    not dropped silently, and not parsed even if it happens to be valid JSON. The file is opened through
    :func:`mdbench.untrusted.open_regular` (no link followed, no FIFO waited on); a file whose logical size is
    above ``max_bytes`` is not read (memory and time stay bounded whatever a sparse file claims), a line longer
    than ``max_line_bytes`` is skipped unparsed, and lines past ``max_lines`` are ignored — each a ``malformed``
    entry (line 0 for the whole file) and ``capped``.
    """
    rows: list[tuple[int, dict]] = []
    malformed: list[tuple[int, str]] = []
    truncated: int | None = None
    try:
        fd = untrusted.open_regular(path)
    except untrusted.Refused as exc:
        if exc.reason == "missing":
            return JsonlRead(rows, malformed, truncated)
        raise OSError(f"{path}: {exc.detail or exc.reason}") from None
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            why = f"{size} bytes, above the {max_bytes}-byte cap of a record file; not read"
            return JsonlRead(rows, [(0, why)], None, capped=why)
        capped = None
        index = 0
        while True:
            raw = fh.readline(max_line_bytes + 1)
            if not raw:
                break
            index += 1
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of the line, a bounded piece at a time
                    raw = fh.readline(max_line_bytes + 1)
                malformed.append((index, f"line longer than {max_line_bytes} bytes; not parsed"))
                continue
            if index > max_lines:
                capped = f"more than {max_lines} lines; the rest not read"
                malformed.append((index, capped))
                break
            if not raw.endswith(b"\n"):
                if raw.strip():
                    truncated = index
                break
            _parse_line(raw, index, rows, malformed)
    return JsonlRead(rows, malformed, truncated, capped=capped)


def _parse_line(raw: bytes, index: int, rows: list[tuple[int, dict]], malformed: list[tuple[int, str]]) -> None:
    """One complete line of a JSON-lines file into ``rows`` (an object) or ``malformed`` (anything else)."""
    if not raw.strip():
        malformed.append((index, "empty line"))
        return
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        malformed.append((index, f"not valid JSON ({str(exc)[:200]})"))
        return
    if not isinstance(obj, dict):
        malformed.append((index, "line is not a JSON object"))
        return
    rows.append((index, obj))


class RunRecord:
    """The run record of one run directory.

    Parameters
    ----------
    run_dir
        The run directory; ``run_dir/run_record/`` is created if missing.

    Examples
    --------
    >>> import tempfile
    >>> rec = RunRecord(tempfile.mkdtemp())
    >>> attempt = rec.reserve("DE", planned_steps=50_000, dt_ps=0.002, kind="production", stage="40_production")
    >>> rec.complete(attempt, completed_steps=50_000, status="completed")["ns_charged"]  # 50 000 × 2 fs
    0.1
    """

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / "run_record"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(str(self.dir / ".lock"))

    # ----------------------------------------------------------------- low level
    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the record's inter-process lock (re-entrant within one process)."""
        with self._lock:
            yield

    def _append_line(self, name: str, obj: dict) -> None:
        """Append one JSON line (fsynced). A torn tail left by a killed writer is ended first and, for the
        ledger and the registrations, reported by a ``record_tail_truncated`` event (``append_event`` does
        this itself for the event log), so the new row never fuses with the fragment."""
        if name != EVENTS:
            torn = self._terminate_truncated_tail(name)
            if torn is not None:
                self.append_event("record_tail_truncated", {
                    "file": name, "line": torn, "note": "a writer stopped mid-line; the bytes are kept and not parsed"})
        path = self.dir / name
        line = (dumps_line(obj) + "\n").encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(line)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)

    def _terminate_truncated_tail(self, name: str) -> int | None:
        """If the file ends mid-line, end that line (bytes kept as they are) and return its line number."""
        path = self.dir / name
        if not path.exists() or path.stat().st_size == 0:
            return None
        with open(path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) == b"\n":
                return None
        line_number = path.read_bytes().count(b"\n") + 1
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        return line_number

    def _write_json(self, name: str, obj: Any) -> None:
        text = json.dumps(_json_safe(obj), indent=2, sort_keys=True, allow_nan=False) + "\n"
        atomic_write_text(self.dir / name, text)

    def _read_json(self, name: str, default: Any) -> Any:
        path = self.dir / name
        if not path.exists():
            return default
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise RecordError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); run `mdbench record validate`") from exc

    # ----------------------------------------------------------------- events
    def _last_event_id(self) -> int:
        """Id of the last complete event, read from the file's tail (O(1) in the record's length)."""
        path = self.dir / EVENTS
        if not path.exists():
            return 0
        size = path.stat().st_size
        with open(path, "rb") as handle:
            start = max(0, size - 65536)
            handle.seek(start)
            tail = handle.read()
        lines = tail.split(b"\n")[:-1]  # complete lines only (the tail was terminated above)
        if start > 0:
            lines = lines[1:]  # the first piece may be a fragment of a longer line
        for raw in reversed(lines):
            try:
                obj = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
            if isinstance(obj, dict) and isinstance(obj.get("id"), int):
                return obj["id"]
        read = read_jsonl(path)
        return max((row["id"] for _, row in read.rows if isinstance(row.get("id"), int)), default=0)

    def append_event(self, type: str, payload: dict | None = None, corrects: int | None = None) -> dict:  # noqa: A002
        """Append one event; returns it with its id (monotonically increasing integer) and UTC time.

        A truncated tail left by a killed writer is ended with a newline (its bytes kept, so
        ``record validate`` still reports it) and an ``record_tail_truncated`` event is written first.
        """
        with self.locked():
            truncated_line = self._terminate_truncated_tail(EVENTS)
            last_id = self._last_event_id()
            if truncated_line is not None:
                last_id += 1
                self._append_line(EVENTS, {
                    "id": last_id, "time_utc": utc_now(), "type": "record_tail_truncated",
                    "payload": {"file": EVENTS, "line": truncated_line,
                                "note": "a writer stopped mid-line; the bytes are kept and not parsed"},
                    "schema_version": SCHEMA_VERSION,
                })
            if corrects is not None and not (isinstance(corrects, int) and 0 < corrects <= last_id):
                raise RecordError(f"correction names event {corrects!r}, which does not exist (last id {last_id})")
            event = {"id": last_id + 1, "time_utc": utc_now(), "type": str(type), "payload": payload or {},
                     "schema_version": SCHEMA_VERSION}
            if corrects is not None:
                event["corrects"] = corrects
            self._append_line(EVENTS, event)
        return json.loads(dumps_line(event))

    def events(self) -> list[dict]:
        """All complete, well-formed events in file order."""
        return [row for _, row in read_jsonl(self.dir / EVENTS).rows]

    # ----------------------------------------------------------------- registrations
    def register(self, kind: str, definition: dict, *, case: str | None = None, revises: str | None = None,
                 evidence: dict | None = None) -> str:
        """Register a definition or rule before it is used; returns its id (``R0001`` …).

        A revision is a new registration naming the one it ``revises`` and the triggering ``evidence``.
        """
        with self.locked():
            existing = [row for _, row in read_jsonl(self.dir / REGISTRATIONS).rows]
            if revises is not None and revises not in {row.get("id") for row in existing}:
                raise RecordError(f"registration revises {revises!r}, which does not exist")
            reg_id = f"R{len(existing) + 1:04d}"
            event = self.append_event("registration", {"registration_id": reg_id, "kind": kind, "case": case})
            row = {"id": reg_id, "time_utc": event["time_utc"], "kind": kind, "case": case,
                   "definition": definition, "revises": revises, "evidence": evidence, "event_id": event["id"]}
            self._append_line(REGISTRATIONS, row)
        return reg_id

    def register_once(self, kind: str, definition: dict, *, case: str | None = None, key: str | None = None) -> str:
        """Id of the registration of ``definition``, registering it only if it is new.

        The latest registration of the same ``kind`` and ``case`` (and, with ``key``, the same
        ``definition[key]``) is reused when its definition is identical; a different one is revised, with
        the reason recorded.
        """
        with self.locked():
            previous = [r for r in self.registrations() if r.get("kind") == kind and r.get("case") == case
                        and (key is None or (r.get("definition") or {}).get(key) == definition.get(key))]
            if previous and previous[-1]["definition"] == json.loads(dumps_line(definition)):
                return previous[-1]["id"]
            revises = previous[-1]["id"] if previous else None
            evidence = {"reason": "definition changed (protocol or preset edited)"} if revises else None
            return self.register(kind, definition, case=case, revises=revises, evidence=evidence)

    def registrations(self) -> list[dict]:
        return [row for _, row in read_jsonl(self.dir / REGISTRATIONS).rows]

    def register_or_revise(self, kind: str, definition: dict, *, case: str | None = None,
                           same: Callable[[dict], bool] | None = None,
                           reason: str = "definition changed") -> str:
        """The id of the registration in force for ``kind`` (and ``case``; and ``same(row)`` when given) if its
        definition equals ``definition``; otherwise register ``definition``, as a revision of the one in force
        (evidence: ``reason`` and the changed top-level keys) when there is one. The earlier one stays."""
        clean = json.loads(json.dumps(_json_safe(definition)))
        with self.locked():
            prior = [r for r in self.registrations()
                     if r.get("kind") == kind and r.get("case") == case and (same is None or same(r))]
            if prior and prior[-1].get("definition") == clean:
                return prior[-1]["id"]
            if not prior:
                return self.register(kind, clean, case=case)
            old = prior[-1].get("definition") or {}
            changed = sorted(k for k in set(old) | set(clean) if old.get(k) != clean.get(k))
            return self.register(kind, clean, case=case, revises=prior[-1]["id"],
                                 evidence={"reason": reason, "changed_keys": changed})

    # ----------------------------------------------------------------- attempts and budget
    def attempt_rows(self) -> list[dict]:
        """Every ledger row, in order (several rows per attempt: reserved, then its outcome)."""
        return [row for _, row in read_jsonl(self.dir / ATTEMPTS).rows]

    def attempts(self) -> list[dict]:
        """Current state of each attempt (its latest ledger row), in order of reservation."""
        latest: dict[str, dict] = {}
        for row in self.attempt_rows():
            latest[row["id"]] = row
        return list(latest.values())

    @staticmethod
    def _committed_ns(attempt: dict) -> float:
        """ns an attempt holds against the budget: its plan while reserved, its charge afterwards."""
        if attempt.get("status") == "reserved":
            return float(attempt.get("planned_ns", 0.0))
        return float(attempt.get("ns_charged", 0.0))

    def charged_ns(self, case: str | None = None) -> float:
        """ns charged from completed steps (failed, interrupted and discarded attempts included)."""
        return sum(float(a.get("ns_charged", 0.0)) for a in self.attempts()
                   if case is None or a.get("case") == case)

    def committed_ns(self, case: str | None = None) -> float:
        """ns charged plus ns held by open reservations."""
        return sum(self._committed_ns(a) for a in self.attempts() if case is None or a.get("case") == case)

    def reserve(self, case: str, *, planned_steps: int, dt_ps: float, kind: str, stage: str,
                parent: str | None = None, relation: str | None = None, segment: str | None = None,
                start_step: int | None = None, target_step: int | None = None,
                supersedes: list[dict] | None = None) -> str:
        """Reserve an MD segment before ``mdrun`` starts; refuse it if it would break the budget.

        ``segment`` (the ``mdrun -deffnm`` path relative to the run directory), ``start_step``, ``target_step``
        and ``supersedes`` (the steps of earlier attempts of the segment this one computes again, see
        :mod:`mdbench.record.steps`) make the step accounting checkable; they are kept in the row when given.

        Raises
        ------
        BudgetExceeded
            If charged + reserved + planned would exceed 100 ns for the case or 300 ns for the study.
        """
        if planned_steps < 0 or not math.isfinite(dt_ps) or dt_ps <= 0:
            raise RecordError(f"reservation needs planned_steps ≥ 0 and dt_ps > 0 (got {planned_steps}, {dt_ps})")
        if relation is not None and relation not in ATTEMPT_RELATIONS:
            raise RecordError(f"relation {relation!r} is not one of {ATTEMPT_RELATIONS}")
        planned_ns = planned_steps * dt_ps / 1000.0
        with self.locked():
            attempts = self.attempts()
            ids = {a["id"] for a in attempts}
            if parent is not None and parent not in ids:
                raise RecordError(f"parent attempt {parent!r} does not exist")
            case_ns = sum(self._committed_ns(a) for a in attempts if a.get("case") == case)
            study_ns = sum(self._committed_ns(a) for a in attempts)
            limit = None
            if case_ns + planned_ns > CASE_BUDGET_NS + _BUDGET_EPS_NS:
                limit = f"case budget of {CASE_BUDGET_NS:g} ns"
            elif study_ns + planned_ns > STUDY_BUDGET_NS + _BUDGET_EPS_NS:
                limit = f"study budget of {STUDY_BUDGET_NS:g} ns"
            if limit is not None:
                self.append_event("budget_refused", {"case": case, "stage": stage, "kind": kind,
                                                     "planned_ns": planned_ns, "committed_case_ns": case_ns,
                                                     "committed_study_ns": study_ns, "limit": limit})
                raise BudgetExceeded(case, planned_ns, case_ns, study_ns, limit)
            number = 1 + sum(1 for a in attempts if a.get("case") == case)
            attempt_id = f"{case}-{number:04d}"
            steps = {k: v for k, v in (("segment", segment), ("start_step", start_step),
                                       ("target_step", target_step), ("supersedes", supersedes)) if v is not None}
            event = self.append_event("attempt_reserved", {"attempt_id": attempt_id, "case": case, "stage": stage,
                                                           "kind": kind, "planned_ns": planned_ns, **steps})
            row = {"id": attempt_id, "case": case, "stage": stage, "kind": kind, "parent": parent,
                   "relation": relation, "planned_steps": int(planned_steps), "completed_steps": 0,
                   "dt_ps": float(dt_ps), "planned_ns": planned_ns, "ns_charged": 0.0, "status": "reserved",
                   "artifacts": {}, "reason": None, "time_utc": event["time_utc"], "event_id": event["id"], **steps}
            self._append_line(ATTEMPTS, row)
        return attempt_id

    def complete(self, attempt_id: str, *, completed_steps: int, status: str,
                 artifacts: dict[str, str] | None = None, reason: str | None = None,
                 resources: dict | None = None, end_step: int | None = None,
                 end_step_evidence: dict | None = None) -> dict:
        """Close a reserved attempt, charging its newly completed steps (whatever the status).

        ``end_step`` is the last step mdrun reached (``end_step_evidence``: what each file showed: checkpoint,
        log, energy file); for an attempt reserved with a ``start_step``, ``completed_steps`` must equal
        ``end_step − start_step`` (charged = computed).

        ``resources`` (threads, CPU-hours, pinning, GPU model, offloaded tasks and GPU-hours of the mdrun,
        see :func:`mdbench.engine.gpu.resources_of_run`) is kept in the ledger row when given.
        """
        if status not in ATTEMPT_STATUSES or status == "reserved":
            raise RecordError(f"status {status!r} is not one of completed|failed|interrupted|discarded")
        with self.locked():
            current = {a["id"]: a for a in self.attempts()}.get(attempt_id)
            if current is None:
                raise RecordError(f"attempt {attempt_id!r} was never reserved")
            if current["status"] != "reserved":
                raise RecordError(f"attempt {attempt_id!r} is already closed ({current['status']}); "
                                  "charge further steps to a new attempt naming it as parent")
            if completed_steps < 0:
                raise RecordError(f"completed_steps must be ≥ 0 (got {completed_steps})")
            start = current.get("start_step")
            if end_step is not None and isinstance(start, int) and end_step - start != completed_steps:
                raise RecordError(f"attempt {attempt_id!r} ran steps {start}→{end_step} but would be charged "
                                  f"{completed_steps}; charge what it computed")
            ns_charged = completed_steps * current["dt_ps"] / 1000.0
            steps = {k: v for k, v in (("end_step", end_step), ("end_step_evidence", end_step_evidence))
                     if v is not None}
            event = self.append_event("attempt_closed", {"attempt_id": attempt_id, "status": status,
                                                         "completed_steps": int(completed_steps),
                                                         "ns_charged": ns_charged, "reason": reason, **steps})
            row = dict(current, completed_steps=int(completed_steps), ns_charged=ns_charged, status=status,
                       artifacts=dict(artifacts or {}), reason=reason, time_utc=event["time_utc"],
                       event_id=event["id"], **steps)
            if resources is not None:
                row["resources"] = resources
            self._append_line(ATTEMPTS, row)
        return row

    # ----------------------------------------------------------------- artifacts
    def add_artifact(self, path: str | Path, producer_event: int | None = None) -> str:
        """Record a file (path relative to the run directory) with its sha256 and size; returns the sha256."""
        path = Path(path)
        absolute = path if path.is_absolute() else self.run_dir / path
        try:
            relative = absolute.resolve().relative_to(self.run_dir.resolve())
        except ValueError as exc:
            raise RecordError(f"artifact {absolute} lies outside the run directory {self.run_dir}") from exc
        if not absolute.is_file():
            raise RecordError(f"artifact {absolute} does not exist")
        digest = sha256_file(absolute)
        with self.locked():
            inventory = self._read_json(ARTIFACTS, {})
            event = self.append_event("artifact_recorded", {"path": str(relative), "sha256": digest,
                                                            "producer_event": producer_event})
            inventory[str(relative)] = {"sha256": digest, "bytes": absolute.stat().st_size,
                                        "producer_event": producer_event if producer_event is not None else event["id"],
                                        "recorded_event": event["id"]}
            self._write_json(ARTIFACTS, inventory)
        return digest

    def artifacts(self) -> dict[str, dict]:
        return self._read_json(ARTIFACTS, {})

    def set_aside(self, paths: list[str | Path], dest_dir: str | Path, reason: str, **context: Any) -> dict:
        """Move files or folders into ``dest_dir`` (inside the run directory), keeping the inventory true.

        Used when a resume discards what an interrupted attempt left. Every file moved gets an inventory
        entry at its new path: a listed file keeps its recorded sha256 and producer (its entry is re-pointed,
        with ``moved_from``); a file never listed, or changed since it was listed, is recorded with the
        sha256 it has now. One ``artifacts_set_aside`` event names every move (from, to, sha256, whether it
        was listed) with ``reason`` and ``context``. Paths that do not exist are skipped.

        Returns
        -------
        dict
            The event.
        """
        root = self.run_dir.resolve()
        dest = Path(dest_dir) if Path(dest_dir).is_absolute() else self.run_dir / dest_dir
        try:
            dest.resolve().relative_to(root)
        except ValueError as exc:
            raise RecordError(f"set-aside folder {dest} lies outside the run directory {self.run_dir}") from exc

        def rel(p: Path) -> str:
            return str(p.resolve().relative_to(root))

        with self.locked():
            inventory = self._read_json(ARTIFACTS, {})
            moves = []  # (source, target, [(old rel, new rel, sha256, bytes)])
            for p in paths:
                src = Path(p) if Path(p).is_absolute() else self.run_dir / p
                if not (src.is_file() or src.is_dir()) or src.is_symlink():
                    continue
                target, n = dest / src.name, 0
                while target.exists() or any(t == target for _, t, _ in moves):  # never overwrite evidence
                    n += 1
                    target = dest / f"{src.name}.{n}"
                files = [src] if src.is_file() else sorted(f for f in src.rglob("*") if f.is_file()
                                                             and not f.is_symlink())
                entries = [(rel(f), rel(target / f.relative_to(src)) if src.is_dir() else rel(target),
                            sha256_file(f), f.stat().st_size) for f in files]
                moves.append((src, target, entries))
            if not moves:
                return {}
            listing = [{"from": old, "to": new, "sha256": digest, "listed": old in inventory}
                       for _, _, entries in moves for old, new, digest, _ in entries]
            event = self.append_event("artifacts_set_aside", {"reason": reason, "moved": listing,
                                                              "dest": rel(dest), **context})
            dest.mkdir(parents=True, exist_ok=True)
            for src, target, entries in moves:
                os.replace(src, target)
                for old, new, digest, size in entries:
                    before = inventory.pop(old, None)
                    kept = isinstance(before, dict) and before.get("sha256") == digest
                    inventory[new] = {"sha256": digest, "bytes": size, "moved_from": old,
                                      "producer_event": before.get("producer_event") if kept else event["id"],
                                      "recorded_event": event["id"]}
            self._write_json(ARTIFACTS, inventory)
        return event

    # ----------------------------------------------------------------- states
    def set_stage_state(self, case: str, stage: str, state: str, reason: str, evidence: dict | None = None) -> None:
        """Set the state of one stage of one case (``valid``, ``invalid``, ``running``, …) with its reason."""
        if state not in STAGE_STATE_VALUES:
            raise RecordError(f"stage state {state!r} is not one of {STAGE_STATE_VALUES}")
        with self.locked():
            event = self.append_event("stage_state", {"case": case, "stage": stage, "state": state,
                                                      "reason": reason, "evidence": evidence})
            states = self._read_json(STAGE_STATES, {})
            states.setdefault(case, {})[stage] = {"state": state, "reason": reason, "evidence": evidence,
                                                  "time_utc": event["time_utc"], "event_id": event["id"]}
            self._write_json(STAGE_STATES, states)

    def stage_states(self) -> dict:
        return self._read_json(STAGE_STATES, {})

    def set_observable_state(self, case: str, observable: str, state: str, reason: str, *,
                             results_ref: str | None = None, registration_id: str | None = None) -> None:
        """Set the state (C, SI, F, M, invalid_upstream, not_reached) of one observable of one case."""
        if state not in OBSERVABLE_STATE_VALUES:
            raise RecordError(f"observable state {state!r} is not one of {OBSERVABLE_STATE_VALUES}")
        with self.locked():
            event = self.append_event("observable_state", {"case": case, "observable": observable, "state": state,
                                                           "reason": reason, "results_ref": results_ref,
                                                           "registration_id": registration_id})
            states = self._read_json(OBSERVABLES, {})
            states.setdefault(case, {})[observable] = {"state": state, "reason": reason, "results_ref": results_ref,
                                                       "registration_id": registration_id,
                                                       "time_utc": event["time_utc"], "event_id": event["id"]}
            self._write_json(OBSERVABLES, states)

    def observable_states(self) -> dict:
        return self._read_json(OBSERVABLES, {})

    def write_terminal(self, candidate_claimed_outcome: str, *, final_stages: dict, observables: dict,
                       unresolved: list[dict]) -> dict:
        """Write the episode's terminal record: the claimed outcome plus references to states."""
        if candidate_claimed_outcome not in CLAIMED_OUTCOMES:
            raise RecordError(f"claimed outcome {candidate_claimed_outcome!r} is not one of {CLAIMED_OUTCOMES}")
        with self.locked():
            event = self.append_event("episode_terminal", {"candidate_claimed_outcome": candidate_claimed_outcome,
                                                           "n_unresolved": len(unresolved)})
            terminal = {"schema_version": SCHEMA_VERSION, "candidate_claimed_outcome": candidate_claimed_outcome,
                        "final_stages": final_stages, "observables": observables, "unresolved": unresolved,
                        "time_utc": event["time_utc"], "event_id": event["id"]}
            self._write_json(TERMINAL, terminal)
        return terminal

    def terminal(self) -> dict | None:
        return self._read_json(TERMINAL, None)


def wait_for(path: Path, timeout_s: float = 10.0) -> bool:
    """Poll until a path exists (for tests of concurrent writers)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.01)
    return path.exists()
