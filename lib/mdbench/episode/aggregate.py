"""Many episodes → the seed's figures: tables (pandas) for ``notebooks/episodes.ipynb`` and the HTML page.

A *configuration* is a (harness, model) pair; its episodes are the repeats. Figures (seed 000): Fig. 2
composite per configuration with repeats as points, Fig. 3 the item heatmap (per system where an item is
judged per case), Figs. S1–S4 detail matrices, Fig. 5 repeat consistency of one configuration, and the
cost table of deliverable 9. Episodes that are ``infrastructure_blocked`` are listed but never scored as a
candidate's result; episodes that have not run are listed only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from mdbench.audit.model import DIMENSIONS, ITEMS, PER_CASE_ITEMS
from mdbench.episode.workspace import EPISODE_JSON, RESULT_JSON
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

    @property
    def status(self) -> str:
        return self.result["status"] if self.result else "not_run"

    @property
    def scored(self) -> bool:
        """Counted as a candidate's result: it ran, was audited, and was not blocked by infrastructure."""
        return (self.result is not None and self.audit is not None
                and self.result.get("status") != "infrastructure_blocked")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise InputError(f"not valid JSON ({exc})", str(path)) from None


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
        rec = EpisodeRecord(d, ep, result if isinstance(result, dict) else None, None)
        label = rec.label
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label} #{seen[label]}"
        if isinstance(saeo, dict) and "items" in saeo:
            rec.audit = Audit(label, d / "audit", saeo)
        out.append(rec)
    return out


def _labels(eps: list[EpisodeRecord]) -> dict[int, str]:
    return {id(e): (e.audit.label if e.audit else e.label) for e in eps}


def episode_table(eps: list[EpisodeRecord]) -> pd.DataFrame:
    """One row per episode: configuration, repeat, status, score and dimensions, claim, integrity."""
    rows = []
    for e in eps:
        r = e.result or {}
        a = r.get("audit") or {}
        dims = r.get("dimensions") or {}
        rows.append({"configuration": e.configuration, "repeat": e.repeat, "episode": e.episode.get("episode_id"),
                     "status": e.status, "scored": e.scored, "score": r.get("score"),
                     **{d: dims.get(d) for d in DIMENSIONS},
                     "claimed": a.get("claimed_outcome"), "evidence supports": a.get("expected_outcome"),
                     "agent_input": None if not r else ("intact" if r.get("agent_input_intact") else "CHANGED"),
                     "stragglers killed": r.get("stragglers_killed")})
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


def cost_table(eps: list[EpisodeRecord]) -> pd.DataFrame:
    """Deliverable 9: wall, CPU and GPU hours, MD ns charged, tokens, USD, peak memory per episode."""
    rows = []
    for e in eps:
        r = e.result or {}
        hours = (lambda s: None if s is None else s / 3600.0)
        rows.append({"configuration": e.configuration, "repeat": e.repeat, "status": e.status,
                     "wall [h]": hours(r.get("wall_s")), "CPU [h]": hours(r.get("cpu_s")),
                     "GPU [h]": r.get("gpu_hours"), "MD charged [ns]": r.get("ns_charged"),
                     "tokens": r.get("tokens"), "cost [USD]": r.get("cost_usd"),
                     "peak memory [MiB]": r.get("peak_memory_mib"),
                     "cost source": (r.get("cost") or {}).get("source")})
    return pd.DataFrame(rows)


def notes(eps: list[EpisodeRecord]) -> list[str]:
    """Plain-language remarks a reader needs: unscored episodes, changed inputs, episodes without claims."""
    out = []
    for e in eps:
        r = e.result or {}
        if e.status == "not_run":
            out.append(f"{e.label}: prepared but not run — not shown in the figures.")
        elif e.status == "infrastructure_blocked":
            out.append(f"{e.label}: infrastructure blocked ({(r.get('audit') or {}).get('claimed_outcome')}) — the "
                       "agent was not started; listed, not scored as a candidate result.")
        if r and not r.get("agent_input_intact", True):
            out.append(f"{e.label}: agent_input/ changed during the run ({len(r['input_integrity']['findings'])} "
                       "finding(s)); E2 set to 0 with the evidence kept in integrity/.")
        if e.scored and e.audit.doc.get("claimed_outcome") is None:
            states = sorted({o["state"] for o in e.audit.doc["observables"]})
            ones = [i for i in ITEMS if e.audit.doc["items"][i]["final"] == 1]
            out.append(f"{e.label}: no terminal claim; every observable {'/'.join(states)}; the audit rated "
                       f"{len(ones)} item(s) 1 ({', '.join(ones) or 'none'}) and the others 0 or ½ — composite "
                       f"{e.audit.doc['composite']['final']:.1f}.")
        if r.get("status") == "timeout":
            out.append(f"{e.label}: ended by the wall-clock limit ({r['limits']['timeout_min']:g} min); "
                       f"{r.get('stragglers_killed', 0)} leftover process(es) killed; audited as left.")
    return out


def render_report(dirs: list[str | Path], out_html: str | Path, *, title: str = "ElectrolyteMD-Bench episodes",
                  timeout_s: int = 600) -> Path:
    """Execute ``notebooks/episodes.ipynb`` over the episode folders and write one self-contained HTML page."""
    from mdbench.report.render import render_notebook  # noqa: PLC0415

    load_episodes(dirs)  # fail here, with the folder named, rather than inside the notebook
    params = {"episode_dirs": [str(Path(d).resolve()) for d in dirs], "title": title}
    return render_notebook(NOTEBOOKS_DIR / "episodes.ipynb", params, out_html, timeout_s=timeout_s)
