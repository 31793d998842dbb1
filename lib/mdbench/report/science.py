"""The science of an audited run for the report: per-case results, the cross-system comparison, evidence figures.

Reads ``<run_dir>/analysis/<case>/results.json`` of each audited run (the reference pipeline's output).
Everything here is data (pandas tables, PNG bytes); escaping for HTML happens in :mod:`mdbench.report.tables`.
A run directory may be hostile: values that are not numbers are shown as text, figures are read only when
they are PNG files inside the case's analysis folder, and nothing here executes run-provided content.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from mdbench.analysis.observables import evidence_figures as registry_evidence_figures
from mdbench.analysis.observables import get, report_order

#: Evidence figures of results.json and the results each one supports (report order; from the registry).
EVIDENCE_FIGURES: tuple[tuple[str, str], ...] = registry_evidence_figures()
_PNG = b"\x89PNG\r\n\x1a\n"


@dataclass
class CaseResults:
    """One case's results.json, with where it came from."""

    run: str
    case: str
    folder: Path
    doc: dict[str, Any]

    @property
    def observables(self) -> dict[str, Any]:
        obs = self.doc.get("observables")
        return obs if isinstance(obs, dict) else {}


def load_case_results(run_dir: str | Path, label: str | None = None) -> list[CaseResults]:
    """Every ``analysis/<case>/results.json`` of a run directory (unreadable ones are skipped)."""
    root = Path(run_dir) / "analysis"
    out = []
    if not root.is_dir():
        return out
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        f = folder / "results.json"
        if not f.is_file() or f.is_symlink():
            continue
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (ValueError, OSError, UnicodeDecodeError):
            continue
        if isinstance(doc, dict):
            out.append(CaseResults(label or Path(run_dir).name, folder.name, folder, doc))
    return out


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(float(x)) else None


def value_text(entry: Any) -> str:
    """``value ± half-width`` (3 significant digits), ``withheld`` for not_estimable, ``–`` when absent."""
    if not isinstance(entry, dict):
        return "–"
    if entry.get("state") == "not_estimable":
        return "withheld"
    v = _num(entry.get("value"))
    if v is None:
        return "–" if entry.get("value") is None else str(entry.get("value"))[:40]
    unc = entry.get("uncertainty") if isinstance(entry.get("uncertainty"), dict) else {}
    hw = _num(unc.get("half_width_95"))
    return f"{v:.3g}" if hw is None else f"{v:.3g} ± {hw:.2g}"


def fixed_by_ensemble(name: Any, entry: Any) -> bool:
    """A volume or density held constant by the ensemble (NVT production: every block equal, half-width 0):
    a constant of the protocol, not a converged estimate, so it is labelled so instead of C."""
    if not isinstance(name, str) or not isinstance(entry, dict):
        return False
    if not any(k in name.lower() for k in ("density", "volume")):
        return False
    unc = entry.get("uncertainty") if isinstance(entry.get("uncertainty"), dict) else {}
    return _num(unc.get("half_width_95")) == 0.0


def state_text(name: Any, entry: Any) -> str:
    """The state shown for a result everywhere in the report (tables and figures read this one function)."""
    if fixed_by_ensemble(name, entry):
        return "fixed by ensemble"
    return str(entry.get("state") or "") if isinstance(entry, dict) else ""


def results_table(case: CaseResults) -> pd.DataFrame:
    """Every result of one case: value ± 95 % half-width, unit, state and reason."""
    rows = []
    for name, e in case.observables.items():
        if not isinstance(e, dict):
            continue
        rows.append({"result": str(name), "value ± 95 % CI": value_text(e), "unit": str(e.get("unit") or ""),
                     "state": state_text(name, e), "reason": str(e.get("reason") or "")})
    return pd.DataFrame(rows, columns=["result", "value ± 95 % CI", "unit", "state", "reason"])


def _cell(e: Any, name: Any = None) -> str:
    return "–" if not isinstance(e, dict) else f"{value_text(e)} ({state_text(name, e) or '?'})"


def cross_system(cases: list[CaseResults]) -> pd.DataFrame:
    """The comparison an electrolyte expert reads first: one row per quantity, one column per case.

    The rows are the registry's members (:attr:`mdbench.analysis.observables.Observable.members`): results
    found in any case (Li+-O CN per channel, CIP/SSIP/AGG per anion, D per species uncorrected and
    Yeh-Hummer, residence times, ...) in report order, then the rows every comparison shows (eta, sigma
    beside sigma_NE and the ionicity, t+ with its convention).
    """
    found: dict[str, tuple[tuple[int, str], str]] = {}
    for c in cases:
        for name in c.observables:
            fam = _family(name) if isinstance(name, str) else None
            if fam is None or name in found:
                continue
            member = next((m for m in fam.members if m.matches(_member(name))), None)
            if member is not None:
                found[name] = ((fam.report_rank, name), member.row_label(_member(name)))
    fixed = [(e.key(*([m.pattern] if m.pattern else [])), m.row_label(m.pattern))
             for e in report_order() for m in e.members if m.fixed]
    rows = []
    for name, label in [(n, lab) for n, (_, lab) in sorted(found.items(), key=lambda kv: kv[1][0])] + fixed:
        row = {"quantity": label}
        for c in cases:
            column = f"{c.case}" if len({x.run for x in cases}) == 1 else f"{c.run}/{c.case}"
            row[column] = _cell(c.observables.get(name), name)
        rows.append(row)
    return pd.DataFrame(rows)


def _member(name: str) -> str:
    """The qualifier of a result name (``self_diffusion/LI`` → ``LI``; a bare family name → itself)."""
    return name.split("/", 1)[1] if "/" in name else name


def _family(name: str):
    try:
        return get(name)
    except KeyError:
        return None


def evidence_figures(case: CaseResults) -> list[tuple[str, bytes]]:
    """(caption, PNG bytes) of the registered evidence figures of one case, in report order.

    Only plain PNG files inside the case's own analysis folder are read (no links, no paths outside it).
    """
    figs = case.doc.get("figures") if isinstance(case.doc.get("figures"), dict) else {}
    out = []
    base = case.folder.resolve()
    for key, caption in EVIDENCE_FIGURES:
        rel = figs.get(key)
        if not isinstance(rel, str):
            continue
        p = (case.folder / rel)
        try:
            real = p.resolve()
            if p.is_symlink() or base not in real.parents or not real.is_file() or real.stat().st_size > 20_000_000:
                continue
            data = real.read_bytes()
        except OSError:
            continue
        if data.startswith(_PNG):
            out.append((caption, data))
    return out


def show_science(run_dirs: list[tuple[str, str | Path]]) -> int:
    """Display (in a notebook) the science of each ``(label, run_dir)``: the cross-system comparison, then per
    case the results table and the evidence figures under it. Returns the number of cases shown."""
    from IPython.display import Image, display

    from mdbench.report import tables

    shown = 0
    for label, run_dir in run_dirs:
        cases = load_case_results(run_dir, label)
        if not cases:
            display(tables.heading(f"{label}: no analysis results (analysis/<case>/results.json) in the run", 3))
            continue
        try:
            cross = cross_system(cases)
        except Exception as exc:  # a malformed results.json is shown as such, never a failed report
            display(tables.heading(f"{label}: results.json not readable as mdbench results ({type(exc).__name__})", 3))
            continue
        display(tables.heading(f"{label}: cross-system comparison", 3))
        display(tables.html_table(cross, caption="value ± 95 % CI (state) per case; "
                                  "withheld = not estimable (reason in the case table)"))
        for c in cases:
            display(tables.heading(f"{label} / {c.case}: results", 3))
            display(tables.html_table(results_table(c), caption="every result with its state and reason"))
            for caption, png in evidence_figures(c):
                display(tables.heading(caption, 4))
                display(Image(data=png, format="png"))
            shown += 1
    return shown
