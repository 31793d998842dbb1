"""Check a run record against its JSON Schemas and its cross-references.

Findings are printed as ``file:line: message`` (line 0 when a whole file is concerned). The checker only
reads: it never repairs, never follows a symlink out of the run directory, and never executes anything.
A file it cannot read — a symlink loop, a dangling link, a directory or FIFO where a file belongs, an I/O
error — is one finding for that file (code ``unreadable``); every other check still runs.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jsonschema

from mdbench.record.schema_refs import inline_local_refs
from mdbench.record.store import (
    ARTIFACTS,
    ATTEMPTS,
    EVENTS,
    OBSERVABLES,
    REGISTRATIONS,
    STAGE_STATES,
    TERMINAL,
    read_jsonl,
    sha256_file,
)
from mdbench.record.state_graph import STATE_GRAPH
from mdbench.record.steps import segment_accounts

JSONL_SCHEMAS = {EVENTS: "event", ATTEMPTS: "attempt", REGISTRATIONS: "registration"}
JSON_SCHEMAS = {ARTIFACTS: "artifacts", STAGE_STATES: "stage_states", OBSERVABLES: "observables",
                TERMINAL: "episode_terminal", STATE_GRAPH: "state_graph"}


@dataclass(frozen=True)
class Finding:
    """One problem found in a run record."""

    file: str
    line: int
    message: str
    severity: str = "error"  # error | warning
    #: What kind of problem: ``malformed`` (a line or file that does not parse), ``unreadable`` (cannot be
    #: opened as a regular file inside the run), ``schema``, ``reference``, ``missing`` or ``record``.
    code: str = "record"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


def _check_graph_states(graph: dict, observables: dict, add) -> None:
    """Every observable node of the state graph carries, as its ``own_state``, the state ``observables.json``
    records for that case and result: a graph that says otherwise contradicts the run's own records."""
    nodes = graph.get("nodes") if isinstance(graph.get("nodes"), list) else []
    for node in nodes[:100_000]:
        if not isinstance(node, dict) or node.get("kind") != "observable":
            continue
        case, name = node.get("case"), node.get("name")
        recorded = observables.get(case) if isinstance(case, str) else None
        entry = recorded.get(name) if isinstance(recorded, dict) and isinstance(name, str) else None
        if isinstance(entry, dict) and entry.get("state") != node.get("own_state"):
            add(STATE_GRAPH, 0, f"node {str(node.get('id'))[:120]!r} has own_state {node.get('own_state')!r}, but "
                f"observables.json records {entry.get('state')!r} for {case}/{name[:120]}")


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """The JSON Schema ``<name>.schema.json`` shipped with the package."""
    text = resources.files("mdbench.record").joinpath("schemas", f"{name}.schema.json").read_text("utf-8")
    return json.loads(text)


@lru_cache(maxsize=None)
def _validator(schema_name: str) -> jsonschema.Draft202012Validator:
    """The validator of one shipped schema, built once per process from its inlined copy
    (:func:`mdbench.record.schema_refs.inline_local_refs`: the same rules, fewer reference lookups)."""
    return jsonschema.Draft202012Validator(inline_local_refs(load_schema(schema_name)))


def _schema_errors(obj: object, schema_name: str) -> list[str]:
    validator = _validator(schema_name)
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(obj)]


def _non_finite(obj: object, where: str = "") -> list[str]:
    """Paths of NaN/inf values (also as the strings 'nan'/'inf' that record writers before the null convention
    of :mod:`mdbench.jsonsafe` wrote)."""
    found: list[str] = []
    if isinstance(obj, float) and not math.isfinite(obj):
        found.append(where or "(root)")
    elif isinstance(obj, str) and obj.lower() in {"nan", "inf", "-inf", "infinity", "-infinity"}:
        found.append(where or "(root)")
    elif isinstance(obj, dict):
        for key, value in obj.items():
            found += _non_finite(value, f"{where}/{key}")
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            found += _non_finite(value, f"{where}/{index}")
    return found


def _inside(run_dir: Path, candidate: Path) -> bool:
    """True when ``candidate`` (links resolved without raising on loops) lies inside ``run_dir``."""
    real, root = os.path.realpath(candidate), os.path.realpath(run_dir)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def unreadable_reason(run_dir: Path, path: Path) -> str | None:
    """Why ``path`` cannot be read as a regular file inside the run directory (None: it can, or it is
    simply absent). Never follows a link out of the run and never opens a FIFO or device."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink():
        try:
            os.stat(path)
        except OSError as exc:
            import errno  # noqa: PLC0415

            if exc.errno == errno.ELOOP:
                return "symlink loop; not followed"
            if exc.errno == errno.ENOENT:
                return f"dangling symlink (→ {os.readlink(path)}); not followed"
            return f"symlink cannot be resolved ({exc.strerror}); not followed"
        if not _inside(run_dir, path):
            return "symlink leaving the run directory; not followed"
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISREG(mode):
        return "not a regular file (directory, FIFO or device); not read"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def _acknowledged_torn_lines(events) -> dict[tuple[str, int], int]:
    """(file, line) → id of the ``record_tail_truncated`` event that reported that torn line."""
    out: dict[tuple[str, int], int] = {}
    for _, event in (events.rows if events is not None else []):
        payload = event.get("payload")
        if event.get("type") == "record_tail_truncated" and isinstance(payload, dict):
            if isinstance(payload.get("file"), str) and isinstance(payload.get("line"), int):
                out[(payload["file"], payload["line"])] = event.get("id")
    return out


def _check_step_accounting(rows: list[tuple[int, dict]], add) -> None:
    """Per MD segment: charged = computed for every attempt, and the steps kept in the trajectory tile the
    segment once (none lost, none counted twice); see :mod:`mdbench.record.steps`. Each problem is reported on
    the latest ledger line of the attempt it concerns."""
    latest: dict[str, tuple[int, dict]] = {}
    for line, row in rows:
        if isinstance(row.get("id"), str):
            latest[row["id"]] = (line, row)
    try:
        accounts = segment_accounts([row for _, row in latest.values()])
    except (TypeError, KeyError, AttributeError) as exc:  # malformed step fields: the schema findings name them
        add(ATTEMPTS, 0, f"step accounting not checked: ledger step fields malformed ({exc})")
        return
    for account in accounts.values():
        for attempt_id, message in account.problems:
            add(ATTEMPTS, latest[attempt_id][0], message)


def _read_ledgers(record_dir: Path, readable, add) -> dict[str, list[tuple[int, dict]]]:
    """The rows (line, row) of each JSON-lines file of the record, each checked against its schema; malformed
    lines (a killed writer's fragment acknowledged by a ``record_tail_truncated`` event is a warning), a truncated
    last line and non-finite numbers are reported through ``add``."""
    parsed: dict[str, list[tuple[int, dict]]] = {}
    reads = {}
    for name in JSONL_SCHEMAS:
        path = record_dir / name
        if not readable(name):
            continue
        if not path.exists():
            if name == EVENTS:
                add(name, 0, "missing", code="missing")
            continue
        try:
            reads[name] = read_jsonl(path)
        except OSError as exc:
            add(name, 0, f"cannot be read ({exc.strerror})", code="unreadable")
    torn = _acknowledged_torn_lines(reads.get(EVENTS))
    for name, schema in JSONL_SCHEMAS.items():
        if name not in reads:
            parsed[name] = []
            continue
        read = reads[name]
        for line, message in read.malformed:
            if (name, line) in torn:  # a killed writer's fragment, ended and reported by the next writer
                add(name, line, f"{message}: the fragment of a writer killed mid-line, reported by event "
                                f"{torn[(name, line)]} (record_tail_truncated) and not parsed", "warning",
                    code="malformed")
            else:
                add(name, line, message, code="malformed")
        if read.truncated_tail_line is not None:
            add(name, read.truncated_tail_line,
                "truncated last line (a writer stopped mid-write); record valid up to the line before")
        for line, row in read.rows:
            for error in _schema_errors(row, schema):
                add(name, line, f"schema: {error}", code="schema")
            for where in _non_finite(row):
                add(name, line, f"non-finite value at {where}")
        parsed[name] = read.rows
    return parsed


def _check_events(rows: list[tuple[int, dict]], add) -> set[int]:
    """Event ids strictly increasing and ``corrects`` naming an earlier event; returns the event ids."""
    seen_ids: set[int] = set()
    last_id = 0
    for line, event in rows:
        event_id = event.get("id")
        if not isinstance(event_id, int):
            continue
        if event_id <= last_id:
            add(EVENTS, line, f"id {event_id} does not increase (previous {last_id})")
        last_id = max(last_id, event_id)
        corrects = event.get("corrects")
        if corrects is not None and corrects not in seen_ids:
            add(EVENTS, line, f"corrects event {corrects}, which does not precede it")
        seen_ids.add(event_id)
    return seen_ids


def _check_attempts(rows: list[tuple[int, dict]], events: list[tuple[int, dict]], add) -> None:
    """Ledger rows follow reserved → closed with earlier parents, ns charged = steps·dt, the step accounting of
    each segment (:func:`_check_step_accounting`), and events naming attempts that exist."""
    states: dict[str, str] = {}
    for line, row in rows:
        attempt_id, status, parent = row.get("id"), row.get("status"), row.get("parent")
        if not isinstance(attempt_id, str):
            continue
        if status == "reserved":
            if attempt_id in states:
                add(ATTEMPTS, line, f"attempt {attempt_id} reserved twice")
            if parent is not None and parent not in states:
                add(ATTEMPTS, line, f"attempt {attempt_id} names parent {parent}, which is not earlier in the ledger")
        else:
            if states.get(attempt_id) != "reserved":
                add(ATTEMPTS, line, f"attempt {attempt_id} closed as {status} without an open reservation")
            try:
                expected = row["completed_steps"] * row["dt_ps"] / 1000.0
                if abs(expected - row["ns_charged"]) > 1e-9 * max(1.0, expected):
                    add(ATTEMPTS, line, f"ns_charged {row['ns_charged']} ≠ completed_steps·dt ({expected:.9g} ns)")
            except (KeyError, TypeError):
                pass
        if isinstance(status, str):
            states[attempt_id] = status
    _check_step_accounting(rows, add)
    for line, event in events:
        payload = event.get("payload") if isinstance(event.get("payload"), dict) else {}
        attempt_id = payload.get("attempt_id")
        if attempt_id is not None and attempt_id not in states:
            add(EVENTS, line, f"event names attempt {attempt_id!r}, which is not in attempts.jsonl")


def _check_registrations(rows: list[tuple[int, dict]], add) -> None:
    """A registration's ``revises`` names an earlier registration."""
    reg_ids: set[str] = set()
    for line, row in rows:
        revises = row.get("revises")
        if revises is not None and revises not in reg_ids:
            add(REGISTRATIONS, line, f"revises {revises!r}, which is not an earlier registration")
        if isinstance(row.get("id"), str):
            reg_ids.add(row["id"])


def _read_snapshots(record_dir: Path, readable, add) -> dict[str, object]:
    """The JSON snapshot files of the record that parse, each checked against its schema and for non-finite
    numbers."""
    snapshots: dict[str, object] = {}
    for name, schema in JSON_SCHEMAS.items():
        path = record_dir / name
        if not readable(name) or not path.exists():
            continue
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            add(name, 0, f"cannot be read ({exc.strerror})", code="unreadable")
            continue
        except UnicodeDecodeError:
            add(name, 0, "not UTF-8 text", code="malformed")
            continue
        except json.JSONDecodeError as exc:
            add(name, exc.lineno, f"not valid JSON ({exc.msg})", code="malformed")
            continue
        except RecursionError:
            add(name, 0, "JSON nested too deeply", code="malformed")
            continue
        snapshots[name] = obj
        for error in _schema_errors(obj, schema):
            add(name, 0, f"schema: {error}")
        for where in _non_finite(obj):
            add(name, 0, f"non-finite value at {where}")

    return snapshots


#: What ``mdrun -deffnm`` appends to while a segment runs (``engine.segments``).
_SEGMENT_OUTPUTS = (".xtc", ".edr", ".log", ".cpt", ".trr")


def _open_segments(rows: list[tuple[int, dict]]) -> dict[str, str]:
    """Run-relative segment (``mdrun -deffnm`` path) → id of its attempt still ``reserved`` (an mdrun was
    writing it when its process died; the stage's rerun closes the attempt and records the files again)."""
    latest: dict[str, dict] = {}
    for _line, row in rows:
        if isinstance(row.get("id"), str):
            latest[row["id"]] = row
    return {str(row["segment"]): attempt_id for attempt_id, row in latest.items()
            if row.get("status") == "reserved" and isinstance(row.get("segment"), str)}


def _check_artifacts(run_dir: Path, inventory: dict, seen_ids: set[int], check_hashes: bool, add,
                     open_segments: dict[str, str] | None = None) -> None:
    """Each inventory entry inside the run directory, readable, present, with an existing producer event and
    (``check_hashes``) its recorded sha256. A changed output of a segment whose attempt is still open (an
    extension killed while mdrun appended to it) is a warning that names the attempt, not an error."""
    open_segments = open_segments or {}
    for rel, entry in inventory.items():
        target = run_dir / str(rel)
        if not _inside(run_dir, target):
            add(ARTIFACTS, 0, f"{rel}: path leaves the run directory; not followed", code="reference")
            continue
        why = unreadable_reason(run_dir, target)
        if why is not None:
            add(ARTIFACTS, 0, f"{rel}: {why}", code="unreadable")
            continue
        if not target.is_file():
            add(ARTIFACTS, 0, f"{rel}: listed but missing", code="reference")
            continue
        if not isinstance(entry, dict):
            continue
        producer = entry.get("producer_event")
        if isinstance(producer, int) and producer not in seen_ids:
            add(ARTIFACTS, 0, f"{rel}: producer event {producer} does not exist")
        if check_hashes and isinstance(entry.get("sha256"), str):
            try:
                digest = sha256_file(target)
            except OSError as exc:
                add(ARTIFACTS, 0, f"{rel}: cannot be read ({exc.strerror})", code="unreadable")
                continue
            if digest != entry["sha256"]:
                path = Path(str(rel))
                attempt = open_segments.get(str(path.with_suffix(""))) if path.suffix in _SEGMENT_OUTPUTS else None
                if attempt is not None:
                    add(ARTIFACTS, 0, f"{rel}: changed since recorded while attempt {attempt} of its segment is open "
                        "(mdrun was appending to it); rerun the stage to close the attempt and record it again",
                        severity="warning")
                    continue
                add(ARTIFACTS, 0, f"{rel}: sha256 mismatch (recorded {entry['sha256'][:12]}…, file {digest[:12]}…)")


def validate_run(run_dir: str | Path, *, check_hashes: bool = True) -> list[Finding]:
    """Validate ``RUN_DIR/run_record`` file by file and across files.

    Checks: each JSON-lines row against its schema; a truncated last line (reported, never repaired);
    event ids strictly increasing; ``corrects`` naming an earlier event; attempts whose parent exists and
    whose ledger rows follow reserved → closed; per MD segment, charged = computed steps and the kept steps
    tiling the segment once (none lost, none twice); events naming attempts that exist; artifacts that exist
    inside the run directory with matching sha256; snapshot files against their schemas; the terminal
    record referring to known cases; non-finite numbers.
    """
    run_dir = Path(run_dir)
    record_dir = run_dir / "run_record"
    findings: list[Finding] = []

    def add(file: str, line: int, message: str, severity: str = "error", code: str = "record") -> None:
        findings.append(Finding(f"run_record/{file}", line, message, severity, code))

    def readable(name: str) -> bool:
        why = unreadable_reason(run_dir, record_dir / name)
        if why is not None:
            add(name, 0, why, code="unreadable")
        return why is None

    why = unreadable_reason(run_dir, record_dir) if record_dir.is_symlink() else None
    if why is not None and "regular file" not in why:
        return [Finding("run_record", 0, why, "error", "unreadable")]
    if not record_dir.is_dir():
        return [Finding("run_record", 0, "missing: no run_record/ directory in the run directory", "error", "missing")]

    parsed = _read_ledgers(record_dir, readable, add)
    seen_ids = _check_events(parsed[EVENTS], add)
    _check_attempts(parsed[ATTEMPTS], parsed[EVENTS], add)
    _check_registrations(parsed[REGISTRATIONS], add)
    snapshots = _read_snapshots(record_dir, readable, add)
    inventory = snapshots.get(ARTIFACTS)
    if isinstance(inventory, dict):
        _check_artifacts(run_dir, inventory, seen_ids, check_hashes, add, _open_segments(parsed[ATTEMPTS]))
    terminal = snapshots.get(TERMINAL)
    observables = snapshots.get(OBSERVABLES)
    if isinstance(terminal, dict) and isinstance(terminal.get("observables"), dict) and isinstance(observables, dict):
        for case in terminal["observables"]:
            if case not in observables:
                add(TERMINAL, 0, f"refers to case {case!r}, which has no entry in observables.json")
    graph = snapshots.get(STATE_GRAPH)
    if isinstance(graph, dict) and isinstance(observables, dict):
        _check_graph_states(graph, observables, add)
    if isinstance(graph, dict) and isinstance(terminal, dict) and isinstance(graph.get("claim"), dict):
        claimed, derived = terminal.get("candidate_claimed_outcome"), graph["claim"].get("candidate_claimed_outcome")
        if claimed != derived:
            # a warning: the audit's E3 counts errors, and a claim against the evidence is the outcome items' finding
            add(TERMINAL, 0, f"claims {claimed!r}, but the state graph's claim is {derived!r}", "warning")
    return findings
