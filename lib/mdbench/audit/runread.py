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

import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any

from mdbench.analysis.observables import (AUDIT_GROUPS, audit_group, category_group, null_means_none,
                                          target_categories)
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
