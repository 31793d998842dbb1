"""Load what a run directory holds, tolerantly, into one :class:`RunData` (never raises on bad input).

What the audit reads (contract 1.2, ``docs`` in ARCHITECTURE.md):

``run_record/``  events.jsonl, attempts.jsonl, registrations.jsonl, artifacts.json, stage_states.json,
                 observables.json, episode_terminal.json
``cases/<CASE>/{setup,em,equil,prod}/``  GROMACS files (``*.tpr``, ``*.log``, ``*.edr``, ``*.xtc``, ``*.cpt``)
``analysis/<CASE>/results.json``  numerical results. Observables are found by name anywhere in the file; an
                 observable entry is a number or an object with ``value`` (or ``whole``/``estimate``),
                 optional ``blocks`` (list; ``null`` entries are non-finite values written as JSON null),
                 ``uncertainty``, ``unit``, and estimator diagnostics (``beta``, ``fit_window_ps``,
                 ``plateau``, ``convention``, ``onsager``, ``frame``, ...).
``report.md``    the final report.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from mdbench.analysis.observables import AUDIT_GROUPS, audit_group, category_group, null_means_none, target_categories
from mdbench.audit.model import OUTCOME_SYNONYMS, Finding
from mdbench.audit.safeio import RunFS

log = logging.getLogger(__name__)

RECORD = "run_record"
STAGE_DIRS: dict[str, tuple[str, ...]] = {
    "setup": ("setup", "10_setup"),
    "em": ("em", "minimization", "20_minimize"),
    "equil": ("equil", "equilibration", "30_equilibrate"),
    "prod": ("prod", "production", "40_production"),
}

#: Observable groups of Table 2 / A3 (from the registry, :mod:`mdbench.analysis.observables`).
OBSERVABLE_GROUPS: tuple[str, ...] = tuple(g.name for g in AUDIT_GROUPS)
#: Top-level sections of a results document that hold settings/provenance, not observables.
_NON_RESULT_SECTIONS = frozenset({"settings", "system", "source", "software", "windows", "registrations",
                                  "guard_detection", "meta", "provenance", "onsager", "association_details",
                                  "definitions", "figures", "superseded_results"})
#: The section of a results document that lists observables by name (anything there the registry does not
#: know is reported, never dropped).
OBSERVABLES_SECTION = "observables"
_VALUE_KEYS = ("value", "whole", "whole_interval", "estimate", "mean")
_BLOCK_KEYS = ("blocks", "block_values", "block")


def tokens(name: str) -> set[str]:
    """Lower-case alphanumeric tokens of a key (``"cn_Li-O(FSI)"`` → {cn, li, o, fsi})."""
    return set(t for t in re.split(r"[^a-z0-9+]+", name.lower()) if t)


@dataclass
class Entry:
    """One numerical result found in ``results.json``."""

    key: str               # JSON key path, e.g. "observables.self_diffusion.D_li"
    value: float | None    # None: absent; nan: non-finite
    blocks: list[float | None] | None
    raw: dict[str, Any]
    null_is_none: bool = False  # a null (value or block) means "none by the registered rule", not non-finite

    @property
    def finite_value(self) -> bool:
        return self.value is not None and math.isfinite(self.value)

    def nonfinite_blocks(self) -> list[int]:
        if not self.blocks:
            return []
        return [i for i, b in enumerate(self.blocks)
                if (b is None and not self.null_is_none) or (b is not None and not math.isfinite(b))]

    def has_uncertainty(self) -> bool:
        u = self.raw.get("uncertainty", self.raw.get("ci95", self.raw.get("stderr", self.raw.get("block_std"))))
        if isinstance(u, dict):
            return any(isinstance(v, (int, float)) and math.isfinite(v) for v in u.values())
        return isinstance(u, (int, float)) and math.isfinite(u)


def _num(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    return None


#: Words by which a result marks itself as an additional result, not the required quantity (seed: "may be
#: reported as an additional result but must be explicitly labeled"), in :data:`EXTRA_LABEL_FIELDS`.
EXTRA_WORDS = re.compile(r"\b(additional|supplementary|auxiliary|for comparison|comparison only|not the required|"
                         r"extra result|labell?ed extra)\b", re.I)
#: Fields of a result whose text may label it additional.
EXTRA_LABEL_FIELDS = ("label", "definition", "description", "note", "notes", "role", "status", "comment")
#: Boolean fields that label a result additional (``True``) or not required (``required: False``).
EXTRA_FLAGS = ("additional", "extra", "supplementary")


def is_labelled_extra(raw: Any) -> bool:
    """True when a result entry labels itself an additional result (:data:`EXTRA_FLAGS` true, ``required``
    false, or :data:`EXTRA_WORDS` in one of :data:`EXTRA_LABEL_FIELDS`). Such an entry never delivers a required
    target and is never judged against the required observable's formula (it may stand beside it)."""
    if not isinstance(raw, dict):
        return False
    if any(raw.get(k) is True for k in EXTRA_FLAGS) or raw.get("required") is False:
        return True
    return any(isinstance(raw.get(k), str) and EXTRA_WORDS.search(raw[k][:2000]) for k in EXTRA_LABEL_FIELDS)


def as_entry(key: str, obj: Any) -> Entry | None:
    """An :class:`Entry` if ``obj`` looks like a result (a number, or a dict with a value or blocks).

    An entry whose own ``state`` is ``M`` (declared not delivered) is not a result.
    """
    if isinstance(obj, bool):
        return None
    if isinstance(obj, (int, float)):
        return Entry(key, float(obj), None, {})
    if not isinstance(obj, dict) or obj.get("state") == "M":
        return None
    value = None
    has_value_key = False
    null_is_none = isinstance(obj.get("category"), str) and null_means_none(obj["category"])
    for k in _VALUE_KEYS:
        if k in obj:
            has_value_key = True
            v = obj[k]
            value = _num(v) if v is not None else (None if null_is_none else float("nan"))
            break
    blocks = None
    for k in _BLOCK_KEYS:
        if isinstance(obj.get(k), list):
            blocks = [_num(b) if b is not None else None for b in obj[k]]
            break
    if not has_value_key and blocks is None:
        return None
    return Entry(key, value, blocks, obj, null_is_none)


def _walk(obj: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, str, Any]]:
    """(path, last key, value) of every dict member, depth-limited."""
    out: list[tuple[str, str, Any]] = []
    if depth > 8 or not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        out.append((path, str(k), v))
        if isinstance(v, dict) and as_entry(path, v) is None:
            out.extend(_walk(v, path, depth + 1))
    return out


def group_entries(results: Any, unknown: list[str] | None = None) -> dict[str, dict[str, Entry]]:
    """Observable group → {target key path → Entry} found in a results.json document.

    Entries tagged with a ``category`` (mdbench's results, and any tool that tags them) are grouped by the
    registry (:func:`mdbench.analysis.observables.category_group`); untagged ones by the names an agent may
    use (:attr:`AuditGroup.aliases`). The key path of every categorised entry whose category the registry
    does not know, and of every member of the ``observables`` section that matches no group, is appended
    to ``unknown`` (the audit reports them as findings).
    """
    groups: dict[str, dict[str, Entry]] = {g: {} for g in OBSERVABLE_GROUPS}
    if not isinstance(results, dict):
        return groups
    unknown = unknown if unknown is not None else []
    members = _walk(results)
    categorised = any(isinstance(v, dict) and isinstance(v.get("category"), str) for _p, _k, v in members)
    by_key = [(g, group_targets(g.name)) for g in AUDIT_GROUPS if g.target_by_key]
    for path, key, val in members:
        if path.split(".")[0] in _NON_RESULT_SECTIONS:
            continue
        if categorised and not (isinstance(val, dict) and isinstance(val.get("category"), str)):
            continue  # mdbench results.json: only category-tagged entries are observables
        low = key.lower()
        cat = val.get("category") if isinstance(val, dict) else None
        if isinstance(cat, str):
            group = category_group(cat)
            ent = as_entry(path, val)
            if group is None:
                unknown.append(path)
            elif ent is not None and not tokens(low) & audit_group(group).excluded_tokens:
                groups[group][path] = ent
            continue
        if val is None or (isinstance(val, dict) and val.get("state") == "M"):
            continue
        low = re.split(r"[/]", low)[0]
        for g in AUDIT_GROUPS:
            if not g.pattern.search(low):
                continue
            if tokens(key) & g.excluded_tokens:
                break
            ent = as_entry(path, val)
            if ent is not None:
                groups[g.name][path] = ent
            elif isinstance(val, dict):
                for k2, v2 in val.items():
                    e2 = as_entry(f"{path}.{k2}", v2)
                    if e2 is not None:
                        groups[g.name][f"{path}.{k2}"] = e2
            break
        else:
            for g, wanted in by_key:
                base = g.target_aliases.get(low, low)
                if base in wanted or any(low.startswith(t) for t in wanted):
                    ent = as_entry(path, val)
                    if ent is not None and not any(p.startswith(path + ".") for p in groups[g.name]):
                        groups[g.name][path] = ent
                    break
            else:
                if path.count(".") == 1 and path.split(".")[0] == OBSERVABLES_SECTION:
                    unknown.append(path)
    return groups


def group_targets(group: str, case: str = "*") -> tuple[str, ...]:
    """The targets the registry requires of ``group`` for ``case`` (any case by default)."""
    from mdbench.analysis.observables import targets

    return tuple(targets(case)[group])


def unknown_observable_findings(case: str, results: Any) -> list[Finding]:
    """One finding per observable of ``results`` the registry does not know (never a silent drop)."""
    unknown: list[str] = []
    group_entries(results, unknown)
    rel = f"analysis/{case}/results.json"
    return [Finding("unknown_observable", f"{key}: an observable the registry does not know (no audit group); "
                    "reported here, not assessed", rel, item="A1", case=case) for key in unknown]


def match_target(group: str, target: str, entries: dict[str, Entry]) -> Entry | None:
    """The entry delivering ``target`` (e.g. ``li_o_fsi`` or ``density``) inside a group, if any.

    Entries of the registry category that declares the group's targets are tried first (the coordination
    numbers deliver ``li_o_fsi``, not the RDF minima of the same group), then the others.
    """
    g = audit_group(group)
    want = tokens(target)
    relaxed = want - g.centre_tokens
    ordered = target_entries_first(group, entries)
    for path, ent in ordered.items():
        last = re.split(r"[./]", path)[-1].lower()
        if g.target_by_key:
            base = g.target_aliases.get(last, last)
            if base == target or base.startswith(target):
                return ent
            continue
        if want <= tokens(path):
            return ent
    if relaxed != want:
        for path, ent in ordered.items():
            if relaxed and relaxed <= tokens(path):
                return ent
    return None


def target_entries_first(group: str, entries: dict[str, Entry]) -> dict[str, Entry]:
    """``entries`` with those of the registry category that declares ``group``'s targets first (the
    coordination numbers before the RDF minima of the same group); order otherwise kept."""
    owners = target_categories(group)
    preferred = {p: e for p, e in entries.items() if str(e.raw.get("category", "")).lower() in owners}
    return {**preferred, **{p: e for p, e in entries.items() if p not in preferred}}


def normalise_outcome(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    v = value.strip()
    return OUTCOME_SYNONYMS.get(v, OUTCOME_SYNONYMS.get(v.lower(), v))


@dataclass
class RunData:
    """Everything read from one run directory (each part ``None``/empty when absent or unreadable)."""

    fs: RunFS
    cases: list[str]
    events: list[tuple[int, dict]]
    attempt_rows: list[tuple[int, dict]]
    attempts: dict[str, dict]
    registrations: list[tuple[int, dict]]
    artifacts: Any
    stage_states: Any
    observables: Any
    terminal: Any
    results: dict[str, Any]
    report_md: str | None
    stage_dirs: dict[str, dict[str, str]] = field(default_factory=dict)
    curves: dict[tuple, Any] = field(default_factory=dict)   # recorded curves read so far (read_recorded_curve)

    def run_observable_states(self, case: str) -> dict[str, dict]:
        """observables.json entries of one case (empty when absent/malformed)."""
        obs = self.observables
        if isinstance(obs, dict) and isinstance(obs.get(case), dict):
            return {k: v for k, v in obs[case].items() if isinstance(v, dict)}
        return {}

    def stage_state(self, case: str, stage: str) -> dict | None:
        """stage_states.json entry of one case for a canonical stage (setup/em/equil/prod)."""
        ss = self.stage_states
        if not isinstance(ss, dict) or not isinstance(ss.get(case), dict):
            return None
        for key, val in ss[case].items():
            if canonical_stage(str(key)) == stage and isinstance(val, dict):
                return val
        return None

    def in_force(self, *words: str, case: str | None = None) -> list[dict]:
        """:meth:`registered`, without the registrations a later one ``revises``, latest first: the first
        row is the definition in force (also when a run registered again without naming a revision)."""
        revised = {row.get("revises") for _line, row in self.registrations if row.get("revises")}
        return [r for r in reversed(self.registered(*words, case=case)) if r.get("id") not in revised]

    def registered(self, *words: str, case: str | None = None) -> list[dict]:
        """Registrations whose kind or definition keys mention any of ``words``."""
        out = []
        for _line, row in self.registrations:
            if case is not None and row.get("case") not in (None, case):
                continue
            text = str(row.get("kind", "")).lower() + " " + " ".join(
                str(k).lower() for k in (row.get("definition") or {}) if isinstance(row.get("definition"), dict))
            if any(w in text for w in words):
                out.append(row)
        return out

    def claimed_outcome(self) -> str | None:
        t = self.terminal
        return normalise_outcome(t.get("candidate_claimed_outcome")) if isinstance(t, dict) else None


def canonical_stage(name: str) -> str | None:
    """Map a stage name (``40_production``, ``prod``, ``equilibration``…) to setup/em/equil/prod."""
    low = name.lower()
    if "prod" in low:
        return "prod"
    if "equil" in low or "nvt" in low or "npt" in low:
        return "equil"
    if "min" in low or low in ("em", "20_em"):
        return "em"
    if "setup" in low or "build" in low:
        return "setup"
    return None


def load_run(fs: RunFS, bundle_cases: list[str] | None = None) -> RunData:
    """Read the run record, results and report of a run directory (findings go to ``fs.findings``)."""
    fs.scan_symlinks()
    rec = RECORD
    events = fs.read_jsonl(f"{rec}/events.jsonl", required=True)
    attempt_rows = fs.read_jsonl(f"{rec}/attempts.jsonl", required=True)
    attempts: dict[str, dict] = {}
    for _n, row in attempt_rows:
        aid = row.get("id", row.get("attempt_id"))
        if isinstance(aid, str):
            merged = dict(attempts.get(aid, {}))
            merged.update(row)
            attempts[aid] = merged
    registrations = fs.read_jsonl(f"{rec}/registrations.jsonl")
    artifacts = fs.read_json(f"{rec}/artifacts.json", required=True)
    stage_states = fs.read_json(f"{rec}/stage_states.json", required=True)
    observables = fs.read_json(f"{rec}/observables.json", required=True)
    terminal = fs.read_json(f"{rec}/episode_terminal.json", required=True)
    cases: list[str] = []

    def add_case(c: Any) -> None:
        if isinstance(c, str) and c and c not in cases and len(c) < 64:
            cases.append(c)

    for c in bundle_cases or []:
        add_case(c)
    casedir = fs.resolve("cases")
    if casedir is not None and casedir.is_dir():
        for p in sorted(casedir.iterdir()):
            if p.is_dir() and not p.is_symlink():
                add_case(p.name)
    for src in (stage_states, observables):
        if isinstance(src, dict):
            for c in src:
                add_case(c)
    for a in attempts.values():
        add_case(a.get("case"))
    results: dict[str, Any] = {}
    for c in cases:
        results[c] = fs.read_json(f"analysis/{c}/results.json", item="A1")
        fs.findings.extend(unknown_observable_findings(c, results[c]))
    stage_dirs: dict[str, dict[str, str]] = {}
    for c in cases:
        stage_dirs[c] = {}
        for stage, names in STAGE_DIRS.items():
            for n in names:
                rel = f"cases/{c}/{n}"
                p = fs.resolve(rel)
                if p is not None and p.is_dir():
                    stage_dirs[c][stage] = rel
                    break
    report_md = fs.read_text("report.md", item="E4")
    return RunData(fs=fs, cases=cases, events=events, attempt_rows=attempt_rows, attempts=attempts,
                   registrations=registrations, artifacts=artifacts, stage_states=stage_states,
                   observables=observables, terminal=terminal, results=results, report_md=report_md,
                   stage_dirs=stage_dirs)


# ------------------------------------------------------------------------------------------ recorded curves
#: Keys of a result (or of its ``diagnostics``/``details``/``files`` block) that cite the MSD behind it: a path
#: in the run directory (a string, or ``{"path": ..., "column": ...}``) or the curve itself inline
#: (``{"lag_ps": [...], "msd_nm2": [...]}``, what ``DiffusionResult.to_dict(include_curves=True)`` writes).
CURVE_KEYS = ("msd_file", "msd_path", "msd_source", "msd", "curves", "curve", "curve_file", "source_file",
              "source", "timeseries_file")
#: Largest recorded curve read [bytes] and [rows]: a curve is a few thousand lags.
MAX_CURVE_BYTES = 8 * 1024 * 1024
MAX_CURVE_ROWS = 200_000
_LAG_WORDS = ("lag", "time", "tau", "t")
_NUM_SPLIT = re.compile(r"[,;\s]+")


@dataclass
class RecordedCurve:
    """An MSD a run recorded for one result, in the audit's units (lag [ps], MSD [nm^2])."""

    lag_ps: np.ndarray
    msd_nm2: np.ndarray
    source: str          # where it came from: a run-relative path (``#column``) or ``inline '<key>'``
    units: str           # how its units were read ("declared ps, nm^2" or "assumed ...")
    location: str = ""   # run-relative file, or a JSON pointer into the results for an inline curve


def json_pointer(rel: str, key: str) -> str:
    """``rel#/a/b`` for an entry key path ``a.b`` (RFC 6901 escapes): where a finding about one result of
    ``rel`` points, apart from the findings about the file as a whole."""
    return rel + "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in key.split("."))


#: Keys that name nothing but an MSD file (any path they give is read); under the other keys of
#: :data:`CURVE_KEYS` only a path with a table's suffix (:data:`CURVE_SUFFIXES`) is an MSD citation.
CURVE_FILE_KEYS = frozenset({"msd_file", "msd_path", "msd_source", "curve_file", "timeseries_file"})
CURVE_SUFFIXES = (".xvg", ".csv", ".tsv", ".dat", ".txt", ".json")


def curve_citation(raw: dict[str, Any]) -> tuple[str, Any] | None:
    """(key, cited value) of the first MSD citation of a result — a path (string or ``{"path", "column"}``) or
    an inline curve (an object holding an ``msd`` array) — None when it cites none (a ``source`` naming a tool
    or the trajectory is not an MSD citation)."""
    def is_curve_path(k: str, p: Any) -> bool:
        return isinstance(p, str) and bool(p.strip()) and (
            k in CURVE_FILE_KEYS or p.strip().lower().endswith(CURVE_SUFFIXES))

    def holds_msd(d: dict, depth: int = 0) -> bool:
        return any(isinstance(v, list) and "msd" in str(k).lower() for k, v in d.items()) or depth < 2 and any(
            isinstance(v, dict) and holds_msd(v, depth + 1) for v in d.values())

    for src in (raw, *(raw.get(k) for k in ("diagnostics", "details", "files", "provenance"))):
        if not isinstance(src, dict):
            continue
        for k in CURVE_KEYS:
            v = src.get(k)
            if is_curve_path(k, v):
                return k, v
            if isinstance(v, dict) and (is_curve_path(k, v.get("path", v.get("file"))) or holds_msd(v)):
                return k, v
    return None


def _units(name: str, kind: str) -> tuple[float, bool]:
    """(factor to ps or nm^2, declared?) of a column name or axis label (``lag_ns``, ``MSD (nm\\S2\\N)``,
    ``msd_A2``, ``MSD [Å^2]``)."""
    low = name.lower()
    toks = set(re.split(r"[^a-z0-9å]+", low))
    if kind == "lag":
        for unit, f in (("fs", 1e-3), ("ps", 1.0), ("ns", 1e3)):
            if unit in toks or low.endswith("_" + unit):
                return f, True
        return 1.0, False
    if toks & {"nm", "nm2"} or "nm^2" in low or "nm²" in low:
        return 1.0, True
    if "å" in low or toks & {"a2", "ang", "angstrom", "angstrom2"} or "angstr" in low or "a^2" in low:
        return 1e-2, True
    return 1.0, False


def _pick_column(names: list[str], want: set[str], column: Any) -> int | str:
    """Index of the MSD column (not the first, the lag) for the species ``want``; a message when none or
    several qualify."""
    ys = list(range(1, len(names)))
    if isinstance(column, int) and not isinstance(column, bool) and 1 <= column < len(names):
        return column
    if isinstance(column, str) and column.strip():
        hit = [i for i in ys if names[i].strip().lower() == column.strip().lower()]
        return hit[0] if len(hit) == 1 else f"column {column!r} not found among {names[1:][:8]}"
    if len(ys) == 1:
        return ys[0]
    msd = [i for i in ys if "msd" in names[i].lower()] or ys
    if len(msd) == 1:
        return msd[0]
    hit = [i for i in msd if tokens(names[i]) & want]
    return hit[0] if len(hit) == 1 else f"{len(msd)} MSD columns ({', '.join(names[i] for i in msd[:6])}) and none " \
                                         "is named after the result's species alone"


def parse_curve_text(text: str, want: set[str], column: Any = None) -> tuple[np.ndarray, np.ndarray, str] | str:
    """(lag [ps], MSD [nm^2], units note) of a two-or-more-column text table: GROMACS ``.xvg`` (``#``/``@``
    lines; axis labels and ``legend`` lines name the units and columns), CSV/TSV/whitespace with an optional
    header (``lag_ps,msd_nm2``); a message saying what is wrong otherwise. Unlabelled columns are read in
    GROMACS units (ps, nm^2), and the note says so."""
    header: list[str] | None = None
    xlabel = ylabel = ""
    legends: dict[int, str] = {}
    rows: list[list[float]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("@"):
            m = re.match(r'@\s*(xaxis|yaxis)\s+label\s+"(.*)"', s)
            if m:
                xlabel, ylabel = (m.group(2), ylabel) if m.group(1) == "xaxis" else (xlabel, m.group(2))
            m = re.match(r'@\s*s(\d+)\s+legend\s+"(.*)"', s)
            if m:
                legends[int(m.group(1))] = m.group(2)
            continue
        if s.startswith("&"):
            break                                     # xvg: the first data set only
        comment = s.startswith(("#", "%", "//"))
        body = s.lstrip("#%/ ").strip()
        parts = [p for p in _NUM_SPLIT.split(body) if p]
        try:
            vals = [float(p) for p in parts]
        except ValueError:
            if not rows and parts:
                header = parts                        # a header line (commented or not) before the data
                continue
            if comment:
                continue
            return f"line {n}: not a number ({s[:60]!r})"
        if comment:
            continue
        if len(vals) < 2:
            return f"line {n}: fewer than two columns"
        if rows and len(vals) != len(rows[0]):
            return f"line {n}: {len(vals)} columns, the table has {len(rows[0])}"
        rows.append(vals)
        if len(rows) > MAX_CURVE_ROWS:
            return f"more than {MAX_CURVE_ROWS} rows"
    if len(rows) < 3:
        return "fewer than three data rows"
    data = np.asarray(rows, dtype=np.float64)
    ncol = data.shape[1]
    if header is not None and len(header) == ncol:
        names = header
    else:
        names = [xlabel or "lag"] + [legends.get(i - 1, ylabel or f"column {i + 1}") for i in range(1, ncol)]
    idx = _pick_column(names, want, column)
    if isinstance(idx, str):
        return idx
    fx, dx = _units(names[0] + " " + xlabel, "lag")
    fy, dy = _units(names[idx] + " " + ylabel, "msd")
    note = ", ".join(("declared " if d else "assumed ") + u for d, u in ((dx, "ps" if fx == 1 else f"×{fx:g} ps"),
                                                                          (dy, "nm^2" if fy == 1 else "Å^2")))
    return data[:, 0] * fx, data[:, idx] * fy, f"column {names[idx]!r}; {note}"


def _curve_from_mapping(d: dict[str, Any], want: set[str], depth: int = 0) -> tuple[np.ndarray, np.ndarray, str] | str:
    """A curve inside a JSON object: lag and MSD arrays side by side (``lag_ps``/``msd_nm2``, ``time_ns``/
    ``msd_A2``, ...), directly or under a key naming the species or ``curves``."""
    lag_k = next((k for k in d if isinstance(d[k], list) and any(str(k).lower().startswith(w) for w in _LAG_WORDS)
                  and "msd" not in str(k).lower()), None)
    msd_k = [k for k in d if isinstance(d[k], list) and "msd" in str(k).lower() and "block" not in str(k).lower()]
    if lag_k is not None and msd_k:
        if len(msd_k) > 1:
            msd_k = [k for k in msd_k if tokens(str(k)) & want] or msd_k
        if len(msd_k) != 1:
            return f"{len(msd_k)} MSD arrays and none named after the result's species alone"
        try:
            lag = np.asarray([float(x) for x in d[lag_k]], dtype=np.float64)
            msd = np.asarray([np.nan if x is None else float(x) for x in d[msd_k[0]]], dtype=np.float64)
        except (TypeError, ValueError):
            return f"{lag_k}/{msd_k[0]}: not arrays of numbers"
        if lag.size != msd.size or lag.size < 3:
            return f"{lag_k} ({lag.size}) and {msd_k[0]} ({msd.size}) differ in length or hold fewer than three lags"
        fx, dx = _units(str(lag_k), "lag")
        fy, dy = _units(str(msd_k[0]), "msd")
        note = f"{msd_k[0]!r}; " + ("declared" if dx and dy else "assumed ps, nm^2 where not declared")
        return lag * fx, msd * fy, note
    if depth < 3:
        subs = [(k, v) for k, v in d.items() if isinstance(v, dict)]
        named = [(k, v) for k, v in subs if tokens(str(k)) & want or str(k).lower() in ("curves", "curve", "msd")]
        for _k, v in named or (subs if len(subs) == 1 else []):
            got = _curve_from_mapping(v, want, depth + 1)
            if not isinstance(got, str):
                return got
    return "no lag and MSD arrays found"


def read_recorded_curve(run: RunData, case: str, e: Entry, species: str | None = None) -> RecordedCurve | None:
    """The MSD a result cites as its source (:data:`CURVE_KEYS`), read safely: through :class:`RunFS`, no
    symbolic link followed, at most :data:`MAX_CURVE_BYTES`; a cited curve that is missing, unreadable or
    malformed is one ``recorded_curve_unusable`` finding (E3) and None, never an exception."""
    cited = curve_citation(e.raw)
    if cited is None:
        return None
    key, val = cited
    want = tokens(species or "") | (tokens(re.split(r"[./]", e.key)[-1]) - {"d", "self", "diffusion", "msd"})
    res_dir = f"analysis/{case}"
    column = val.get("column") if isinstance(val, dict) else None
    path = val if isinstance(val, str) else next((val[k] for k in ("path", "file") if isinstance(val.get(k), str)),
                                                 None)
    cache_key = (case, e.key, path)
    if cache_key in run.curves:
        return run.curves[cache_key]
    fs = run.fs

    def unusable(msg: str, where: str) -> None:
        fs.add("recorded_curve_unusable", f"{e.key}: the MSD it cites ({key}) cannot be used: {msg}"[:400], where,
               item="E3", case=case)

    out: RecordedCurve | None = None
    if path is None:
        got = _curve_from_mapping(val, want)
        if isinstance(got, str):
            unusable(got, f"{res_dir}/results.json")
        else:
            out = RecordedCurve(got[0], got[1], f"inline {key!r}", got[2],
                                json_pointer(f"{res_dir}/results.json", f"{e.key}.{key}"))
    else:
        rel = path.strip()
        # run-relative, else relative to the results' folder; an absolute or climbing path is resolve's finding
        outside = rel.startswith("/") or ".." in PurePosixPath(rel).parts
        cands = [rel] if outside else [rel, f"{res_dir}/{rel}"]
        where = next((c for c in cands if fs.resolve(c, item="E3") is not None), None)
        if where is None:
            # a link leaving the run directory or a climbing path is already resolve's finding
            if not outside and not any(os.path.lexists(fs.root / c) for c in cands):
                unusable("no such file in the run directory", rel)
        else:
            text = fs.read_text(where, item="E3", follow_symlinks=False, max_bytes=MAX_CURVE_BYTES)
            if text is not None:
                if PurePosixPath(where).suffix.lower() == ".json":
                    try:
                        doc = json.loads(text)
                        got = _curve_from_mapping(doc, want) if isinstance(doc, dict) else "not a JSON object"
                    except (json.JSONDecodeError, RecursionError) as exc:
                        got = f"malformed JSON ({getattr(exc, 'msg', 'nested too deeply')})"
                else:
                    got = parse_curve_text(text, want, column)
                if isinstance(got, str):
                    unusable(got, fs.rel(fs.root / where))
                else:
                    out = RecordedCurve(got[0], got[1], fs.rel(fs.root / where) + (f"#{column}" if column else ""),
                                        got[2], fs.rel(fs.root / where))
    if out is not None:
        ok = np.isfinite(out.lag_ps) & np.isfinite(out.msd_nm2)
        order = np.argsort(out.lag_ps[ok], kind="stable")
        lag, msd = out.lag_ps[ok][order], out.msd_nm2[ok][order]
        if lag.size < 3 or np.any(np.diff(lag) <= 0) or lag[0] < 0:
            unusable("its lags are not increasing non-negative times (or fewer than three are finite)", out.source)
            out = None
        else:
            out = RecordedCurve(lag, msd, out.source, out.units, out.location)
    run.curves[cache_key] = out
    return out
