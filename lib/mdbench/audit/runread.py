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

from mdbench.audit.model import OUTCOME_SYNONYMS
from mdbench.audit.safeio import RunFS

log = logging.getLogger(__name__)

RECORD = "run_record"
STAGE_DIRS: dict[str, tuple[str, ...]] = {
    "setup": ("setup", "10_setup"),
    "em": ("em", "minimization", "20_minimize"),
    "equil": ("equil", "equilibration", "30_equilibrate"),
    "prod": ("prod", "production", "40_production"),
}

#: Observable groups of Table 2 / A3 with the species- or quantity-specific targets each must deliver.
OBSERVABLE_GROUPS: tuple[str, ...] = (
    "thermodynamics", "coordination", "association", "self_diffusion", "viscosity", "conductivity",
    "transference_number",
)
_GROUP_PATTERNS: dict[str, re.Pattern[str]] = {
    "thermodynamics": re.compile(r"^(thermo|thermodynamics)$"),
    "coordination": re.compile(r"^(cn|coordination|rdf|rdf_cn|structure)"),
    "association": re.compile(r"^(association|ion_association|cip|agg|ion_pairs?|clusters?)"),
    "self_diffusion": re.compile(r"^(self_diffusion|diffusion|d)($|_)"),
    "viscosity": re.compile(r"^(viscosity|eta)($|_)"),
    "conductivity": re.compile(r"^(conductivity|sigma)($|_)"),
    "transference_number": re.compile(r"^(transference|transference_number|t_plus|tplus|t\+)($|_)"),
}
#: ``category`` field of an entry (mdbench analysis results.json) → observable group.
_CATEGORY_GROUPS = {"thermodynamics": "thermodynamics", "thermo": "thermodynamics", "structure": "coordination",
                    "coordination": "coordination", "association": "association",
                    "self_diffusion": "self_diffusion", "diffusion": "self_diffusion", "viscosity": "viscosity",
                    "conductivity": "conductivity", "transference": "transference_number",
                    "transference_number": "transference_number"}
#: Top-level sections of a results document that hold settings/provenance, not observables.
_NON_RESULT_SECTIONS = frozenset({"settings", "system", "source", "software", "windows", "registrations",
                                  "guard_detection", "meta", "provenance", "onsager", "association_details"})
#: Centre species implied by coordination keys such as ``coordination/FSI:O@first_min``.
CENTRE_TOKENS = frozenset({"li", "na"})
_THERMO_TARGETS = ("density", "temperature", "pressure", "potential_energy", "total_energy", "volume")
_THERMO_ALIASES = {"potential": "potential_energy", "epot": "potential_energy", "etot": "total_energy",
                   "total": "total_energy"}

#: Default required targets by case name (seed Table 2; LHCE separates three Li–O channels).
DEFAULT_TARGETS: dict[str, dict[str, list[str]]] = {
    "DE": {"coordination": ["li_o_dmc_carbonyl", "li_o_fsi"], "self_diffusion": ["li", "fsi", "dmc"]},
    "HCE": {"coordination": ["li_o_dmc_carbonyl", "li_o_fsi"], "self_diffusion": ["li", "fsi", "dmc"]},
    "LHCE": {"coordination": ["li_o_dmc_carbonyl", "li_o_fsi", "li_o_tte_ether"],
             "self_diffusion": ["li", "fsi", "dmc", "tte"]},
}
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

    @property
    def finite_value(self) -> bool:
        return self.value is not None and math.isfinite(self.value)

    def nonfinite_blocks(self) -> list[int]:
        if not self.blocks:
            return []
        return [i for i, b in enumerate(self.blocks) if b is None or not math.isfinite(b)]

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
    for k in _VALUE_KEYS:
        if k in obj:
            has_value_key = True
            v = obj[k]
            value = _num(v) if v is not None else float("nan")
            break
    blocks = None
    for k in _BLOCK_KEYS:
        if isinstance(obj.get(k), list):
            blocks = [_num(b) if b is not None else None for b in obj[k]]
            break
    if not has_value_key and blocks is None:
        return None
    return Entry(key, value, blocks, obj)


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


def group_entries(results: Any) -> dict[str, dict[str, Entry]]:
    """Observable group → {target key path → Entry} found in a results.json document."""
    groups: dict[str, dict[str, Entry]] = {g: {} for g in OBSERVABLE_GROUPS}
    if not isinstance(results, dict):
        return groups
    members = _walk(results)
    categorised = any(isinstance(v, dict) and isinstance(v.get("category"), str) for _p, _k, v in members)
    for path, key, val in members:
        if path.split(".")[0] in _NON_RESULT_SECTIONS:
            continue
        if categorised and not (isinstance(val, dict) and isinstance(val.get("category"), str)):
            continue  # mdbench results.json: only category-tagged entries are observables
        low = key.lower()
        cat = val.get("category") if isinstance(val, dict) else None
        if isinstance(cat, str) and as_entry(path, val) is not None:
            group = _CATEGORY_GROUPS.get(cat.lower())
            if group is not None and not (group == "conductivity" and tokens(low) & {"ne", "ionicity"}):
                groups[group][path] = as_entry(path, val)  # type: ignore[assignment]
            continue
        if val is None or (isinstance(val, dict) and val.get("state") == "M"):
            continue
        low = re.split(r"[/]", low)[0]
        for group, pat in _GROUP_PATTERNS.items():
            if not pat.search(low):
                continue
            if group == "conductivity" and tokens(key) & {"ne", "nernst", "nernst_einstein", "ionicity"}:
                break
            ent = as_entry(path, val)
            if ent is not None:
                groups[group][path] = ent
            elif isinstance(val, dict):
                for k2, v2 in val.items():
                    e2 = as_entry(f"{path}.{k2}", v2)
                    if e2 is not None:
                        groups[group][f"{path}.{k2}"] = e2
            break
        else:
            base = _THERMO_ALIASES.get(low, low)
            if base in _THERMO_TARGETS or any(low.startswith(t) for t in _THERMO_TARGETS):
                ent = as_entry(path, val)
                if ent is not None and not any(p.startswith(path + ".") for p in groups["thermodynamics"]):
                    groups["thermodynamics"][path] = ent
    return groups


def match_target(group: str, target: str, entries: dict[str, Entry]) -> Entry | None:
    """The entry delivering ``target`` (e.g. ``li_o_fsi`` or ``density``) inside a group, if any."""
    want = tokens(target)
    relaxed = want - CENTRE_TOKENS if group == "coordination" else want
    for path, ent in entries.items():
        last = re.split(r"[./]", path)[-1].lower()
        if group == "thermodynamics":
            base = _THERMO_ALIASES.get(last, last)
            if base == target or base.startswith(target):
                return ent
            continue
        if want <= tokens(path):
            return ent
    if relaxed != want:
        for path, ent in entries.items():
            if relaxed and relaxed <= tokens(path):
                return ent
    return None


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
