"""Many episodes → the seed's figures: tables (pandas) for ``notebooks/episodes.ipynb`` and the HTML page.

A *configuration* is a (harness, model) pair; its episodes are the repeats. Figures (seed 000): Fig. 2
composite per configuration with repeats as points, Fig. 3 the item heatmap (per system where an item is
judged per case), Figs. S1–S4 detail matrices, Fig. 5 repeat consistency of one configuration, and the
cost table of deliverable 9. Episodes that are ``infrastructure_blocked`` are listed but never scored as a
candidate's result; episodes that have not run are listed only. An episode that ran but left no audit (the
runner was interrupted or killed, the audit failed) is scored 0 on every item and counts in its
configuration's mean — a weak repeat is never dropped from the figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from mdbench.audit.model import DIMENSIONS, ITEMS, PER_CASE_ITEMS
from mdbench.episode.workspace import EPISODE_JSON, RESULT_JSON
from mdbench import untrusted
from mdbench.errors import InputError
from mdbench.paths import NOTEBOOKS_DIR
from mdbench.report.data import Audit, repeat_values

CASE_LETTER = {"DE": "D", "HCE": "H", "LHCE": "L"}


@dataclass
class EpisodeRecord:
    """One episode folder read back: ``episode.json``, ``result.json`` and the audit (when it ran)."""

    path: Path
    episode: dict[str, Any]
    result: dict[str, Any] | None
    audit: Audit | None

    @property
    def configuration(self) -> str:
        c = self.episode.get("configuration", {})
        return f"{c.get('harness', '?')} / {c.get('model', '?')}"

    @property
    def repeat(self) -> int:
        return int(self.episode.get("configuration", {}).get("repeat", 1))

    @property
    def label(self) -> str:
        return f"{self.configuration} · R{self.repeat}"

    started: bool = False
    #: Why the audit is a stand-in of zeros (None when the episode's own audit is used).
    zero_reason: str | None = None

    @property
    def status(self) -> str:
        if self.result and isinstance(self.result.get("status"), str):
            return self.result["status"]
        return "interrupted" if self.started else "not_run"

    @property
    def scored(self) -> bool:
        """Counted as a candidate's result: it ran (whatever it left) and was not blocked by infrastructure."""
        return self.status not in ("not_run", "infrastructure_blocked") and self.audit is not None


def _read_json(path: Path) -> Any:
    value, exc = untrusted.try_read_json(path, max_bytes=256 * 1024 * 1024)  # the evaluator's own files
    if exc is not None and exc.reason != "missing":
        raise InputError(f"unreadable ({exc.reason}: {exc.detail}); rerun the episode with --force", str(path))
    return value


def zero_audit_doc(reason: str) -> dict[str, Any]:
    """A stand-in ``saeo.json`` for an episode that ran but left no audit: every item 0, no claim."""
    items = {i: {"final": 0.0, "preliminary": 0.0, "source": "episode", "reason": reason} for i in ITEMS}
    return {"items": items, "composite": {"final": 0.0, "preliminary": 0.0},
            "dimension_means": {"final": {d: 0.0 for d in DIMENSIONS}, "preliminary": {d: 0.0 for d in DIMENSIONS}},
            "judgments": [], "observables": [], "findings": [], "claimed_outcome": None, "expected_outcome": None,
            "stand_in": True}


def load_episodes(dirs: list[str | Path]) -> list[EpisodeRecord]:
    """Read episode folders; labels made unique.

    Raises
    ------
    InputError
        No folder given, or a folder without ``episode.json`` (naming it and the fix).
    """
    if not dirs:
        raise InputError("no episode folder given; pass one or more EP folders (mdbench episode prepare/run)")
    out: list[EpisodeRecord] = []
    seen: dict[str, int] = {}
    for d in dirs:
        d = Path(d)
        ep = _read_json(d / EPISODE_JSON)
        if not isinstance(ep, dict):
            raise InputError("not an episode folder (no episode.json); prepare it with `mdbench episode prepare`",
                             str(d))
        result = _read_json(d / RESULT_JSON)
        saeo = _read_json(d / "audit" / "saeo.json")
        started = (d / "agent").is_dir() or result is not None
        rec = EpisodeRecord(d, ep, result if isinstance(result, dict) else None, None, started=started)
        label = rec.label
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label} #{seen[label]}"
        if isinstance(saeo, dict) and "items" in saeo and (rec.result or {}).get("score") is not None:
            rec.audit = Audit(label, d / "audit", saeo)
        elif rec.status not in ("not_run", "infrastructure_blocked"):
            why = ((rec.result or {}).get("audit") or {}).get("error") or "no audit was written"
            rec.zero_reason = f"{rec.status}: {why}"[:300]
            rec.audit = Audit(label, d / "audit", zero_audit_doc(f"scored 0: the episode left no audit ({rec.zero_reason})"))
        out.append(rec)
    return out


def episode_table(eps: list[EpisodeRecord]) -> pd.DataFrame:
    """One row per episode: configuration, repeat, status, score and dimensions, claim, integrity."""
    rows = []
    for e in eps:
        r = e.result or {}
        a = r.get("audit") or {}
        dims = r.get("dimensions") or {}
        rows.append({"configuration": e.configuration, "repeat": e.repeat, "episode": e.episode.get("episode_id"),
                     "status": e.status, "scored": e.scored,
                     "score": 0.0 if e.scored and e.zero_reason else r.get("score"),
                     **{d: dims.get(d) for d in DIMENSIONS},
                     "claimed": a.get("claimed_outcome"), "evidence supports": a.get("expected_outcome"),
                     "agent_input": None if r.get("agent_input_intact") is None else (
                         "intact" if r.get("agent_input_intact") else "CHANGED"),
                     "stragglers killed": r.get("stragglers_killed"),
                     "work": (r.get("work") or {}).get("verdict")})
    return pd.DataFrame(rows)


def scores(eps: list[EpisodeRecord]) -> pd.DataFrame:
    """Scored episodes: configuration, repeat, composite and the four dimension means (final)."""
    rows = []
    for e in eps:
        if not e.scored:
            continue
        doc = e.audit.doc
        rows.append({"configuration": e.configuration, "repeat": e.repeat, "label": e.audit.label,
                     "composite": float(doc["composite"]["final"]),
                     **{d: float(doc["dimension_means"]["final"][d]) for d in DIMENSIONS}})
    return pd.DataFrame(rows, columns=["configuration", "repeat", "label", "composite", *DIMENSIONS])


def configuration_summary(sc: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: repeats, mean, min and max composite (Fig. 2's numbers)."""
    if sc.empty:
        return pd.DataFrame(columns=["configuration", "repeats", "mean", "min", "max", *DIMENSIONS])
    g = sc.groupby("configuration", sort=False)
    out = g["composite"].agg(repeats="count", mean="mean", min="min", max="max")
    out = out.join(g[list(DIMENSIONS)].mean())
    return out.reset_index().sort_values("mean", ascending=False, kind="stable")


def item_matrix(eps: list[EpisodeRecord]) -> pd.DataFrame:
    """Fig. 3: scored episode × columns ``Sim1 D … A7 L`` (per case) and ``E1 … O5`` (per episode).

    Per-case cells hold the case judgment (NaN: not applicable — invalid upstream or not reached); episode
    items hold the episode rating.
    """
    cols = [f"{i} {CASE_LETTER[c]}" for i in PER_CASE_ITEMS for c in CASE_LETTER] + [
        i for i in ITEMS if i not in PER_CASE_ITEMS]
    rows, index = [], []
    for e in eps:
        if not e.scored:
            continue
        row: dict[str, float] = {c: math.nan for c in cols}
        for j in e.audit.doc["judgments"]:
            if j["case"] in CASE_LETTER and j["observable"] is None and j["item"] in PER_CASE_ITEMS:
                row[f"{j['item']} {CASE_LETTER[j['case']]}"] = math.nan if j["rating"] is None else float(j["rating"])
        for i in ITEMS:
            if i not in PER_CASE_ITEMS:
                row[i] = float(e.audit.doc["items"][i]["final"])
        rows.append(row)
        index.append(e.audit.label)
    return pd.DataFrame(rows, index=index, columns=cols)


def episode_items(eps: list[EpisodeRecord], items: tuple[str, ...]) -> pd.DataFrame:
    """Scored episode × the given items (episode-level final ratings), for Figs. S3/S4."""
    return pd.DataFrame([{i: float(e.audit.doc["items"][i]["final"]) for i in items} for e in eps if e.scored],
                        index=[e.audit.label for e in eps if e.scored], columns=list(items))


def item_reasons(eps: list[EpisodeRecord], items: tuple[str, ...]) -> pd.DataFrame:
    """Long table (episode, item, rating, source, reason) of episode-level judgments."""
    rows = [{"episode": e.audit.label, "item": i, "rating": e.audit.doc["items"][i]["final"],
             "source": e.audit.doc["items"][i]["source"], "reason": e.audit.doc["items"][i]["reason"]}
            for e in eps if e.scored for i in items]
    return pd.DataFrame(rows, columns=["episode", "item", "rating", "source", "reason"])


def case_items(eps: list[EpisodeRecord], items: tuple[str, ...]) -> pd.DataFrame:
    """Long table (audit, case, item, rating, reason) of per-case judgments of ``items`` (Figs. S1, S2)."""
    rows = [{"audit": e.audit.label, "case": j["case"], "item": j["item"], "rating": j["rating"],
             "reason": j["reason"]}
            for e in eps if e.scored for j in e.audit.doc["judgments"]
            if j["case"] is not None and j["observable"] is None and j["item"] in items]
    return pd.DataFrame(rows, columns=["audit", "case", "item", "rating", "reason"])


def observable_states(eps: list[EpisodeRecord]) -> pd.DataFrame:
    """Episode × ``CASE/observable`` matrix of audit states (C, SI, F, M, invalid_upstream, not_reached)."""
    rows: dict[str, dict[str, str]] = {}
    for e in eps:
        if not e.scored:
            continue
        row = rows.setdefault(e.audit.label, {})
        for o in e.audit.doc["observables"]:
            row[f"{o['case']}/{o['observable']}"] = o["state"]
    return pd.DataFrame.from_dict(rows, orient="index")


def repeat_configuration(eps: list[EpisodeRecord]) -> str | None:
    """The configuration with the most scored repeats (at least two), for Fig. 5."""
    counts: dict[str, int] = {}
    for e in eps:
        if e.scored:
            counts[e.configuration] = counts.get(e.configuration, 0) + 1
    best = max(counts.items(), key=lambda kv: kv[1], default=(None, 0))
    return best[0] if best[1] >= 2 else None


def repeat_table(eps: list[EpisodeRecord], configuration: str | None) -> pd.DataFrame:
    """Fig. 5 values (panel, audit = R<k>, case, target, value, state) of one configuration's repeats."""
    audits = [Audit(f"R{e.repeat}", e.audit.path, e.audit.doc) for e in sorted(eps, key=lambda e: e.repeat)
              if e.scored and e.configuration == configuration]
    return repeat_values(audits) if audits else repeat_values([])


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def cost_table(eps: list[EpisodeRecord]) -> pd.DataFrame:
    """Deliverable 9, per episode: what the runner *measured* (wall, CPU, GPU-hours allotted, peak memory, ns
    of trajectory on disk, a harness's metered tokens/USD) beside what the agent *self-reported* (tokens, USD,
    GPU-hours from its logs, ns from its ledger); ``flags`` names every forged or refused figure."""
    rows = []
    hours = (lambda s: None if s is None else s / 3600.0)
    for e in eps:
        r = e.result or {}
        cost = r.get("cost") if isinstance(r.get("cost"), dict) else {}
        m = cost.get("measured") if isinstance(cost.get("measured"), dict) else {}
        sr = cost.get("self_reported") if isinstance(cost.get("self_reported"), dict) else {}
        codes = sorted({str(f.get("code")) for f in cost.get("findings") or [] if isinstance(f, dict)})
        rows.append({"configuration": e.configuration, "repeat": e.repeat, "status": e.status,
                     "wall [h] (measured)": hours(r.get("wall_s")), "CPU [h] (measured)": hours(r.get("cpu_s")),
                     "GPU [h] (measured)": m.get("gpu_hours", r.get("gpu_hours")),
                     "MD on disk [ns] (measured)": m.get("ns_on_disk"),
                     "tokens (measured)": m.get("tokens"), "cost [USD] (measured)": m.get("usd"),
                     "peak memory [MiB] (measured)": r.get("peak_memory_mib"),
                     "tokens (self-reported)": sr.get("tokens", r.get("tokens")),
                     "cost [USD] (self-reported)": sr.get("usd", r.get("cost_usd")),
                     "GPU [h] (self-reported)": sr.get("gpu_hours", _get(r, "gpu_detail", "gpu_hours")),
                     "MD charged [ns] (self-reported)": sr.get("ns_charged", r.get("ns_charged")),
                     "flags": ", ".join(codes) or None, "cost source": cost.get("source")})
    return pd.DataFrame(rows)


def notes(eps: list[EpisodeRecord]) -> list[str]:
    """Plain-language remarks a reader needs: unscored episodes, changed inputs, episodes without claims."""
    out = []
    for e in eps:
        r = e.result or {}
        if e.status == "not_run":
            out.append(f"{e.label}: prepared but not run — not shown in the figures.")
        if e.scored and e.zero_reason:
            out.append(f"{e.label}: scored 0 on every item and counted in its configuration's mean — "
                       f"{e.zero_reason}.")
        codes = sorted({str(f.get("code")) for f in (r.get("cost") or {}).get("findings") or []
                        if isinstance(f, dict)})
        if codes:
            out.append(f"{e.label}: figures the agent wrote were refused or invalid ({', '.join(codes[:8])}); "
                       "the cost table shows them as missing, beside what the runner measured.")
        elif e.status == "infrastructure_blocked":
            out.append(f"{e.label}: infrastructure blocked ({(r.get('audit') or {}).get('claimed_outcome')}) — the "
                       "agent was not started; listed, not scored as a candidate result.")
        if r and r.get("agent_input_intact") is False:
            out.append(f"{e.label}: agent_input/ changed during the run ({len(r['input_integrity']['findings'])} "
                       "finding(s)); E2 set to 0 with the evidence kept in integrity/.")
        if e.scored and not e.zero_reason and e.audit.doc.get("claimed_outcome") is None:
            states = sorted({o["state"] for o in e.audit.doc["observables"]})
            ones = [i for i in ITEMS if e.audit.doc["items"][i]["final"] == 1]
            out.append(f"{e.label}: no terminal claim; every observable {'/'.join(states)}; the audit rated "
                       f"{len(ones)} item(s) 1 ({', '.join(ones) or 'none'}) and the others 0 or ½ — composite "
                       f"{e.audit.doc['composite']['final']:.1f}.")
        if r.get("work_not_done_here"):
            out.append(f"{e.label}: work_not_done_here — {(r.get('work') or {}).get('reason', '')[:400]}; every "
                       "item set to 0, Sim4 and E1 with the figures (result.json's work block).")
        if r.get("status") == "timeout":
            out.append(f"{e.label}: ended by the wall-clock limit ({_get(r, 'limits', 'timeout_min')} min); "
                       f"{r.get('stragglers_killed', 0)} leftover process(es) killed; audited as left.")
    return out


def render_report(dirs: list[str | Path], out_html: str | Path, *, title: str = "ElectrolyteMD-Bench episodes",
                  timeout_s: int = 600, keep_notebook: str | Path | None = None) -> Path:
    """Execute ``notebooks/episodes.ipynb`` over the episode folders and write one self-contained HTML page
    (and the executed notebook only at ``keep_notebook`` when given)."""
    from mdbench.report.render import render_notebook  # noqa: PLC0415

    load_episodes(dirs)  # fail here, with the folder named, rather than inside the notebook
    params = {"episode_dirs": [str(Path(d).resolve()) for d in dirs], "title": title}
    return render_notebook(NOTEBOOKS_DIR / "episodes.ipynb", params, out_html, timeout_s=timeout_s,
                           keep_notebook=keep_notebook or False)
