"""Evidence items E1–E5, judged per episode from the run record and the delivered files."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from mdbench.audit.bundle import Bundle
from mdbench.audit.model import CLAIMED_OUTCOMES, Evidence, Finding, Judgment
from mdbench.audit.runread import RunData, normalise_outcome
from mdbench.audit.simulation import ProdFiles, production_attempts

REC = "run_record"
CASE_BUDGET_NS = 100.0
STUDY_BUDGET_NS = 300.0


def _rate(problems: list[str], partial: list[str], ok: str) -> tuple[float, str]:
    if problems:
        return 0.0, "; ".join(problems + partial)
    if partial:
        return 0.5, "; ".join(partial)
    return 1.0, ok


def check_lineage(run: RunData, valid_cases: list[str]) -> Judgment:
    """E1: production branches reconstruct uniquely from the attempts ledger (parents, restarts, discards)."""
    problems, partial = [], []
    if not run.attempts:
        problems.append("attempts ledger empty or unreadable")
    for aid, a in run.attempts.items():
        parent = a.get("parent")
        if parent is not None and parent not in run.attempts:
            problems.append(f"attempt {aid} names unknown parent {parent}")
        seen, cur = {aid}, parent
        while cur is not None and cur in run.attempts:
            if cur in seen:
                problems.append(f"attempt {aid}: parent chain loops")
                break
            seen.add(cur)
            cur = run.attempts[cur].get("parent")
    for c in valid_cases:
        leaves = production_attempts(run, c)
        if len(leaves) != 1:
            partial.append(f"{c}: {len(leaves)} canonical production branches")
    r, why = _rate(problems, partial, f"{len(run.attempts)} attempts; one canonical production branch per case")
    return Judgment("E1", r, why, evidence=[Evidence(f"{REC}/attempts.jsonl")])


def check_provenance(run: RunData, bundle: Bundle, prods: dict[str, ProdFiles]) -> Judgment:
    """E2: artifact inventory checksums, bundle checksums and canonical files bound to the inventory."""
    problems, partial, ev = [], [], [Evidence(f"{REC}/artifacts.json")]
    inv = run.artifacts
    checked = 0
    if not isinstance(inv, dict):
        problems.append("no readable artifact inventory")
        inv = {}
    for path, meta in inv.items():
        want = meta.get("sha256") if isinstance(meta, dict) else meta
        if not isinstance(want, str):
            partial.append(f"{path}: no sha256")
            continue
        got = run.fs.sha256(str(path))
        if got is None:
            problems.append(f"{path}: listed but missing")
        elif got != want:
            problems.append(f"{path}: sha256 mismatch")
            ev.append(Evidence(str(path), note="sha256 mismatch"))
        else:
            checked += 1
    for f in bundle.checksum_findings:
        problems.append(f"bundle: {f.message}")
    for f in run.fs.findings:
        if f.code == "symlink_escape":
            problems.append(f"{f.path}: symlink leaves the run directory")
    for case, pf in prods.items():
        for p in (pf.tpr, pf.xtc, pf.edr):
            if p and p not in inv:
                partial.append(f"{p} not in the artifact inventory")
        res = f"analysis/{case}/results.json"
        if run.results.get(case) is not None and res not in inv:
            partial.append(f"{res} not in the artifact inventory")
    r, why = _rate(problems, partial[:10], f"{checked} artifact checksums verified; bundle checksums "
                                             f"{bundle.checksums_verified} verified")
    return Judgment("E2", r, why, evidence=ev)


def check_records(run: RunData, extra: list[Finding]) -> Judgment:
    """E3: required records parse; event, attempt and artifact references resolve."""
    parse = [f for f in run.fs.findings if f.code in ("malformed_json", "malformed_jsonl", "file_too_large")
             and f.path and f.path.startswith(REC)]
    missing = [f for f in run.fs.findings if f.code == "missing" and f.path and f.path.startswith(REC)]
    refs = [f for f in extra]
    ev = [Evidence(f.path or REC, line=f.line, note=f.message[:120]) for f in (parse + missing + refs)[:20]]
    if parse or missing:
        return Judgment("E3", 0.0, f"{len(parse)} unparseable record line(s)/file(s), {len(missing)} missing "
                        "record file(s); first: " + (parse + missing)[0].message + f" at {(parse + missing)[0].location()}",
                        evidence=ev)
    if refs:
        return Judgment("E3", 0.5, f"{len(refs)} record reference/schema problem(s); first: {refs[0].message}",
                        evidence=ev)
    return Judgment("E3", 1.0, "records parse; references resolve", evidence=[Evidence(REC)])


def check_delivery(run: RunData, valid_cases: list[str]) -> Judgment:
    """E4: report, terminal record, manifests and numerical results present and usable."""
    missing = []
    if run.report_md is None or not run.report_md.strip():
        missing.append("report.md")
    for name, val in (("episode_terminal.json", run.terminal), ("artifacts.json", run.artifacts),
                      ("stage_states.json", run.stage_states), ("observables.json", run.observables)):
        if val is None:
            missing.append(f"{REC}/{name}")
    if not run.attempt_rows:
        missing.append(f"{REC}/attempts.jsonl")
    for c in valid_cases:
        if run.results.get(c) is None:
            missing.append(f"analysis/{c}/results.json")
    if not missing:
        return Judgment("E4", 1.0, "report, terminal record, inventory, states and results present",
                        evidence=[Evidence("report.md"), Evidence(f"{REC}/episode_terminal.json")])
    severe = any(m in ("report.md", f"{REC}/episode_terminal.json") for m in missing) or len(missing) > 2
    return Judgment("E4", 0.0 if severe else 0.5, "missing or unusable: " + ", ".join(missing),
                    evidence=[Evidence(m) for m in missing])


def _pointer(doc: Any, pointer: str) -> Any:
    cur = doc
    for part in [p for p in pointer.split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise KeyError(part)
    return cur


def resolve_ref(run: RunData, ref: str) -> tuple[bool, Any]:
    """Resolve ``path#/json/pointer`` inside the run directory (record files relative to run_record/)."""
    path, _, ptr = ref.partition("#")
    candidates = [path, f"{REC}/{path}"] if "/" not in path else [path]
    for p in candidates:
        if run.fs.resolve(p) is None:
            continue
        doc = {"stage_states.json": run.stage_states, "observables.json": run.observables}.get(p.split("/")[-1]) \
            if p.startswith(REC) or "/" not in p else None
        if doc is None:
            doc = run.fs.read_json(p)
        try:
            return True, _pointer(doc, ptr) if ptr else doc
        except KeyError:
            return False, None
    return False, None


_NUMBER = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"


def _same_up_to_unit(a: float, b: float, rel: float = 0.05) -> bool:
    """True when a = b · 10^k for an integer k (unit prefixes) within ``rel``."""
    if a == 0 or b == 0:
        return a == b
    if (a > 0) != (b > 0):
        return False
    k = round(math.log10(abs(a / b)))
    return abs(a / (b * 10.0 ** k) - 1.0) <= rel


#: Words of a table's header row that make its value columns alternatives of one result — the seed's
#: sensitivity table of a revised guard (original | revised) — so that the result's value is one of the row's
#: numbers, not necessarily the first.
COMPARISON_WORDS = re.compile(r"\b(original|revised|superseded|previous|before|after|sensitivity|alternative|"
                              r"variant)\b", re.I)
#: Words of a section heading that make every table under it such a comparison.
COMPARISON_HEADING = re.compile(r"\b(sensitivity|comparison|revised|revision|superseded)\b", re.I)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")


def comparison_lines(report: str) -> set[int]:
    """Line numbers (1-based) of report.md that are rows of a comparison table: a table whose header row names
    alternatives in two or more value columns (:data:`COMPARISON_WORDS`), or any table under a section heading
    that says so (:data:`COMPARISON_HEADING`). Free text is never a comparison: its first number is the value."""
    out: set[int] = set()
    section = in_table = table = False
    for n, line in enumerate(report.splitlines()[:100_000], start=1):
        if _HEADING.match(line):
            section, in_table = bool(COMPARISON_HEADING.search(line)), False
            continue
        row = line.lstrip().startswith("|")
        if row and not in_table:
            head = line.strip().strip("|").split("|")
            table = section or (len(head) >= 3 and sum(bool(COMPARISON_WORDS.search(h)) for h in head[1:]) >= 1)
        in_table = row
        if row and table:
            out.add(n)
    return out


def report_number_mismatches(report: str, values: dict[str, float]) -> list[tuple[int, str]]:
    """(line, message) where report.md quotes a named result with a number that matches no reported value.

    A result name (last key segment, at least 4 characters, e.g. ``density``) followed within 40
    characters by a number is compared with results.json; unit prefixes (powers of ten) are allowed. In a row
    of a comparison table (:func:`comparison_lines`: original | revised guard) the value may be any number of
    the row.
    """
    out: list[tuple[int, str]] = []
    compares = comparison_lines(report)
    number = re.compile(_NUMBER)
    # Several results may share a last key segment (t+ in two frames): a quoted number must match one of them.
    by_name: dict[str, list[float]] = {}
    for name, val in values.items():
        if len(name) >= 4 and math.isfinite(val):
            by_name.setdefault(name.lower(), []).append(val)
    for name, vals in by_name.items():
        # the name as a whole word: 'sigma' must not match inside 'sigma_NE' or 'charge_weighted_sigma'
        # a bare name preceded by '/' belongs to a longer path: only the path's own entry is compared
        pat = re.compile(r"(?<![A-Za-z0-9_/])" + re.escape(name).replace("_", "[ _]") + r"(?![A-Za-z0-9_])"
                         + r"[^0-9\n+-]{0,40}?" + _NUMBER, re.I)
        for n, line in enumerate(report.splitlines(), start=1):
            for m in pat.finditer(line):
                try:
                    x = float(m.group(1))
                except ValueError:
                    continue
                if n in compares and any(_same_up_to_unit(float(y), v) for y in number.findall(line[m.start():])
                                         for v in vals):
                    continue
                if not any(_same_up_to_unit(x, v) for v in vals):
                    shown = ", ".join(f"{v:.6g}" for v in vals[:3])
                    out.append((n, f"report.md:{n} gives {name} = {m.group(1)}, results.json has {shown}"))
    return out


@dataclass
class Consumption:
    """MD consumption from the ledger: every attempt of every branch (its latest line), whatever its status."""

    per_case_ns: dict[str, float] = field(default_factory=dict)
    per_attempt_ns: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)   # ledger arithmetic
    over: list[str] = field(default_factory=list)       # budget limits exceeded
    statements: list[str] = field(default_factory=list)  # report / terminal statements unlike the ledger

    @property
    def total_ns(self) -> float:
        return sum(self.per_case_ns.values())


def _attempt_ns(a: dict) -> tuple[float | None, float | None]:
    """(ns_charged as recorded, completed_steps · dt) of one ledger attempt [ns]; None where not numeric."""
    def num(x: Any) -> float | None:
        return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None

    charged = num(a.get("ns_charged"))
    steps, dt = num(a.get("completed_steps")), num(a.get("dt_ps"))
    return charged, (steps * dt / 1000.0 if steps is not None and dt is not None else None)


_STATED = re.compile(r"(?:charged|consumed|used|spent|budget used)[^0-9\n]{0,30}?" + r"(\d+(?:\.\d+)?)\s*ns|"
                     r"(\d+(?:\.\d+)?)\s*ns\s+(?:of MD\s+)?(?:charged|consumed|used|spent)", re.I)


def ledger_consumption(run: RunData) -> Consumption:
    """Sum ``ns_charged`` over every attempt (latest line per attempt id; failed, discarded, replicate and
    unreported branches included) per case and in total, against the seed's 100 ns / 300 ns limits, and
    compare what report.md and the terminal record state about consumption with that sum."""
    c = Consumption()
    for aid, a in run.attempts.items():
        charged, ns = _attempt_ns(a)
        if charged is None and ns is None:
            c.problems.append(f"attempt {aid}: non-numeric steps/dt")
            continue
        if charged is not None and ns is not None and not (
                math.isfinite(charged) and abs(charged - ns) <= 1e-9 * max(1.0, ns)):
            c.problems.append(f"attempt {aid}: ns_charged {charged} ≠ steps·dt = {ns:.6g} ns")
        value = charged if charged is not None and math.isfinite(charged) else (ns or 0.0)
        value = max(value, ns or 0.0)  # never less than the steps the ledger says were completed
        c.per_attempt_ns[aid] = value
        case = str(a.get("case"))
        c.per_case_ns[case] = c.per_case_ns.get(case, 0.0) + value
    for case, ns in sorted(c.per_case_ns.items()):
        if ns > CASE_BUDGET_NS + 1e-9:
            c.over.append(f"{case}: {ns:.3f} ns charged over all its attempts exceeds the {CASE_BUDGET_NS:g} ns "
                          "case budget")
    if c.total_ns > STUDY_BUDGET_NS + 1e-9:
        c.over.append(f"study: {c.total_ns:.3f} ns charged over all attempts exceeds {STUDY_BUDGET_NS:g} ns")
    t = run.terminal if isinstance(run.terminal, dict) else {}
    for key in ("ns_charged", "consumed_ns", "budget_used_ns", "total_ns_charged", "budget"):
        stated = t.get(key)
        if isinstance(stated, dict):
            stated = stated.get("total_ns", stated.get("used_ns", stated.get("consumed_ns")))
        if isinstance(stated, (int, float)) and not isinstance(stated, bool) and \
                abs(float(stated) - c.total_ns) > 0.01 * max(c.total_ns, 0.1):
            c.statements.append(f"terminal record {key} = {stated} ns, the ledger sums {c.total_ns:.4g} ns")
    for n, line in enumerate((run.report_md or "").splitlines(), start=1):
        for m in _STATED.finditer(line):
            x = float(m.group(1) or m.group(2))
            case = next((k for k in c.per_case_ns if re.search(rf"\b{re.escape(k)}\b", line)), None)
            ref = c.per_case_ns[case] if case else c.total_ns
            if abs(x - ref) > 0.01 * max(ref, 0.1) and not (case is None and any(
                    abs(x - v) <= 0.01 * max(v, 0.1) for v in c.per_case_ns.values())):
                c.statements.append(f"report.md:{n} states {x:g} ns consumed{' for ' + case if case else ''}, "
                                    f"the ledger sums {ref:.4g} ns")
    return c


def check_consistency(run: RunData, values: dict[str, float] | None = None,
                      consumption: Consumption | None = None, late: list[str] | None = None) -> Judgment:
    """E5: ledger arithmetic and budget, terminal ↔ states ↔ results references, report ↔ terminal claim,
    and numbers quoted in report.md ↔ results.json."""
    problems: list[str] = []
    ev = [Evidence(f"{REC}/attempts.jsonl"), Evidence(f"{REC}/episode_terminal.json")]
    cons = consumption if consumption is not None else ledger_consumption(run)
    problems += cons.problems + cons.over + cons.statements + list(late or [])
    t = run.terminal if isinstance(run.terminal, dict) else {}
    for section, states in (("final_stages", run.stage_states), ("observables", run.observables)):
        block = t.get(section)
        if not isinstance(block, dict):
            continue
        for case, entries in block.items():
            if not isinstance(entries, dict):
                continue
            for name, ref in entries.items():
                if isinstance(ref, str):
                    ok, val = resolve_ref(run, ref)
                    if not ok:
                        problems.append(f"terminal {section}.{case}.{name} → {ref!r} does not resolve")
                elif isinstance(ref, dict) and "state" in ref:
                    cur = states.get(case, {}).get(name) if isinstance(states, dict) and isinstance(
                        states.get(case), dict) else None
                    if isinstance(cur, dict) and cur.get("state") != ref.get("state"):
                        problems.append(f"terminal says {case}/{name} is {ref.get('state')}, {section} file says "
                                        f"{cur.get('state')}")
    if isinstance(run.observables, dict):
        for case, obs in run.observables.items():
            if not isinstance(obs, dict):
                continue
            for name, ent in obs.items():
                ref = ent.get("results_ref") if isinstance(ent, dict) else None
                if isinstance(ref, str) and ref and not resolve_ref(run, ref)[0]:
                    problems.append(f"observables.json {case}/{name} results_ref {ref!r} does not resolve")
    claimed = run.claimed_outcome()
    if run.report_md and claimed:
        mentioned = {o for o in CLAIMED_OUTCOMES if re.search(rf"\b{o}\b", run.report_md)}
        mentioned |= {normalise_outcome(m) for m in re.findall(r"valid_study_\w+", run.report_md)}
        if mentioned and claimed not in mentioned:
            problems.append(f"report.md states {sorted(mentioned)}, terminal record claims {claimed}")
            ev.append(Evidence("report.md"))
    if run.report_md and values:
        for line, msg in report_number_mismatches(run.report_md, values)[:5]:
            problems.append(msg)
            ev.append(Evidence("report.md", line=line))
    if not problems:
        return Judgment("E5", 1.0, "ledger, budget, terminal, states and report agree", evidence=ev)
    return Judgment("E5", 0.5 if len(problems) == 1 else 0.0, "; ".join(problems[:10]), evidence=ev)
