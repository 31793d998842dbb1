"""results.json: schema validation, writing, and the figures of one case.

The schema (``schemas/results.schema.json``) requires, for every observable: value, unit, uncertainty with
its definition, block values, window, diagnostics, definition, state (C/SI/F/M/invalid_upstream/
not_reached), reason and registration id. An accepted (C) observable must carry a finite value and an
uncertainty (RDF minima excepted: a channel without first-shell structure has no minimum).
"""

from __future__ import annotations

import functools
import json
import logging
import math
from pathlib import Path
from typing import Any


from mdbench.analysis.estimator import Estimate, EstimatorBase
from mdbench.analysis.observables import AUDIT_GROUPS, group_of, template_categories
from mdbench.analysis.settings import AnalysisSettings
from mdbench.analysis.states import SEVERITY
from mdbench.errors import InputError
from mdbench.jsonsafe import json_safe
from mdbench.record.atomic import atomic_write_text
from mdbench.record.schema_refs import inline_local_refs

log = logging.getLogger(__name__)

SCHEMA_PATH = Path(__file__).with_name("schemas") / "results.schema.json"


def load_schema() -> dict[str, Any]:
    """The JSON Schema of results.json."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def _clean(obj: Any) -> Any:
    """JSON-safe copy: numpy scalars → Python, non-finite floats → None, tuples → lists (:func:`json_safe`, the
    convention the run record shares)."""
    return json_safe(obj)


def validate_results(doc: dict[str, Any], path: str | None = None) -> None:
    """Validate a results document against the schema.

    Raises
    ------
    InputError
        Naming the first offending JSON path and what the schema expected.
    """
    _validate_clean(_clean(doc), path)


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    """The schema's validator (built once per process: reading and compiling the schema is a fixed cost),
    with its local ``$ref``s written out in place (:func:`inline_local_refs`: the same rules, validated in
    half the time, since jsonschema resolves a reference anew at every use)."""
    import jsonschema

    return jsonschema.Draft202012Validator(inline_local_refs(load_schema()))


def _validate_clean(doc: dict[str, Any], path: str | None) -> None:
    """:func:`validate_results` of a document that is already JSON-safe (:func:`_clean`)."""
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise InputError(f"results do not match results.schema.json at {where}: {e.message} "
                         f"({len(errors)} error(s))", path)


def write_results(path: str | Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` as pretty JSON (non-finite → null) and return the path."""
    return _write_clean(Path(path), _clean(doc))


def _write_clean(path: Path, clean: dict[str, Any]) -> Path:
    """Write an already JSON-safe document as pretty JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(clean, indent=1, sort_keys=False) + "\n")  # issue 25: never partial
    return path


def write_validated_results(path: str | Path, doc: dict[str, Any]) -> Path:
    """Validate ``doc`` against the schema, then write it (:func:`validate_results` + :func:`write_results`,
    with one JSON-safe copy for both). Nothing is written when the document does not validate."""
    clean = _clean(doc)
    _validate_clean(clean, str(path))
    return _write_clean(Path(path), clean)


def read_results(path: str | Path) -> dict[str, Any]:
    """Read and validate a results.json (errors name the file)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read results ({exc.strerror}); run `mdbench analyze` first", str(p)) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg}", str(p), exc.lineno) from exc
    validate_results(doc, str(p))
    return doc


def write_figures(out_dir: Path, *, observables: dict[str, Any], settings: AnalysisSettings | None = None,
                  drawn: list[tuple[type[EstimatorBase], Estimate]] | None = None) -> dict[str, str]:
    """PNG figures: what each estimator draws itself (``drawn``: (estimator class, its Estimate), drawn by
    :meth:`EstimatorBase.figures <mdbench.analysis.estimator.EstimatorBase.figures>` under the figure name of
    its registry entry) and the block bars (:func:`mdbench.analysis.blockbars.block_bars`). Estimators that
    share one ``figures`` hook (residence times and contact lifetimes) draw one figure from their estimates
    together. ``settings`` gives the registered limits drawn (first-minimum search limit, accepted β).
    Returns name → file name (relative to ``out_dir``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mdbench.analysis import observables as registry
    from mdbench.analysis.blockbars import block_bars

    settings = settings if settings is not None else AnalysisSettings()
    figs: dict[str, str] = {}

    def save(fig: Any, name: str) -> None:
        fname = f"{name}.png"
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=110)
        plt.close(fig)
        figs[name] = fname

    for cls, estimate in _by_figures_hook(drawn or []):
        for name, fig in cls.figures(estimate, settings).items():
            save(fig, name)
    names = [k for k in registry.block_bar_names(list(observables)) if observables[k].get("blocks")
             and observables[k].get("value") is not None and any(b is not None for b in observables[k]["blocks"])]
    if names:
        frame = observables_frame({"observables": {k: observables[k] for k in names}})
        save(block_bars(frame), registry.BLOCK_BARS_FIGURE)
    return figs


def _by_figures_hook(drawn: list[tuple[type[EstimatorBase], Estimate]]) -> list[tuple[type[EstimatorBase], Estimate]]:
    """``drawn`` with the estimates of estimators sharing one ``figures`` hook merged into one Estimate
    (measurements in order, figure data together), first place kept."""
    merged: dict[Any, tuple[type[EstimatorBase], Estimate]] = {}
    for cls, est in drawn:
        hook = getattr(cls.figures, "__func__", cls.figures)
        if hook in merged:
            first_cls, first = merged[hook]
            merged[hook] = (first_cls, Estimate(first.measurements + est.measurements,
                                                figure_data={**first.figure_data, **est.figure_data}))
        else:
            merged[hook] = (cls, est)
    return list(merged.values())


# ----------------------------------------------------------------------------- tables and comparison
def observables_frame(doc: dict[str, Any], categories: tuple[str, ...] | None = None) -> Any:
    """A pandas DataFrame of the observables of one results document (optionally some categories)."""
    import pandas as pd

    rows = []
    for name, ob in doc["observables"].items():
        if categories is not None and ob["category"] not in categories:
            continue
        unc = ob.get("uncertainty") or {}
        rows.append({"observable": name, "value": ob["value"], "unit": ob["unit"],
                     "half_width_95": unc.get("half_width_95"),
                     "blocks": [None if b is None else float(f"{b:.6g}") for b in ob.get("blocks") or []],
                     "state": ob["state"], "reason": ob["reason"], "registration": ob["registration_id"]})
    return pd.DataFrame(rows, columns=["observable", "value", "unit", "half_width_95", "blocks", "state",
                                       "reason", "registration"])


def template_frame(doc: dict[str, Any], template: str) -> Any:
    """:func:`observables_frame` of the categories a template presents (from the registry)."""
    return observables_frame(doc, template_categories(template))


def diagnostics_frame(doc: dict[str, Any], template: str, keys: tuple[str, ...]) -> Any:
    """A pandas DataFrame of chosen ``diagnostics`` (and ``window``) fields of a template's observables."""
    import pandas as pd

    cats = template_categories(template)
    rows = []
    for name, ob in doc["observables"].items():
        if ob["category"] in cats:
            found = {**(ob.get("window") or {}), **(ob.get("diagnostics") or {})}
            rows.append({"observable": name, **{k: found.get(k) for k in keys}, "state": ob["state"]})
    return pd.DataFrame(rows, columns=["observable", *keys, "state"])


def load_case_results(run_dir: str | Path, cases: list[str]) -> dict[str, dict[str, Any] | None]:
    """results.json of each case (None where it does not exist)."""
    out: dict[str, dict[str, Any] | None] = {}
    for case in cases:
        p = Path(run_dir) / "analysis" / case / "results.json"
        out[case] = read_results(p) if p.is_file() else None
    return out


def comparable_results(run_dir: str | Path, cases: list[str]) -> Any:
    """Side-by-side table of observables that are comparable across ``cases``.

    Comparable (rule): present in every case with state C, the same unit and the same definition text.
    Anything else is left out of this table (it appears, with its state, in the state table).
    """
    import pandas as pd

    docs = load_case_results(run_dir, cases)
    names = None
    for d in docs.values():
        keys = set(d["observables"]) if d else set()
        names = keys if names is None else names & keys
    rows = []
    for name in sorted(names or []):
        obs = [docs[c]["observables"][name] for c in cases]
        if not all(o["state"] == "C" and o["value"] is not None for o in obs):
            continue
        if len({o["unit"] for o in obs}) != 1 or len({o["definition"] for o in obs}) != 1:
            continue
        row = {"observable": name, "unit": obs[0]["unit"]}
        for c, o in zip(cases, obs):
            hw = (o.get("uncertainty") or {}).get("half_width_95")
            row[c] = o["value"]
            row[f"{c} ±95%"] = hw
        rows.append(row)
    return pd.DataFrame(rows)


def state_table(run_dir: str | Path, cases: list[str]) -> Any:
    """Stage and observable states of every case from the run record (deliverable 11)."""
    import pandas as pd

    from mdbench.record import RunRecord

    rec = RunRecord(run_dir)
    stages = rec.stage_states()
    observables = rec.observable_states()
    rows = []
    for case in cases:
        for stage, st in (stages.get(case) or {}).items():
            rows.append({"case": case, "kind": "stage", "name": stage, "state": st["state"], "reason": st["reason"]})
        for name, st in sorted((observables.get(case) or {}).items()):
            rows.append({"case": case, "kind": "observable", "name": name, "state": st["state"],
                         "reason": st["reason"], "registration": st.get("registration_id")})
        if not stages.get(case) and not observables.get(case):
            rows.append({"case": case, "kind": "case", "name": "(no record)", "state": "not_reached",
                         "reason": "no stage or observable state recorded for this case"})
    return pd.DataFrame(rows, columns=["case", "kind", "name", "state", "reason", "registration"])


def _markdown(df: Any) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        cells = ["" if (v is None or (isinstance(v, float) and not math.isfinite(v))) else
                 (f"{v:.6g}" if isinstance(v, float) else str(v)).replace("|", "/") for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_state_table(run_dir: str | Path, cases: list[str]) -> dict[str, str]:
    """Write ``analysis/state_table.{csv,md}`` and return their paths relative to the run directory."""
    df = state_table(run_dir, cases)
    out = Path(run_dir) / "analysis"
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "state_table.csv", index=False)
    (out / "state_table.md").write_text("# Stage and observable states\n\n" + _markdown(df), encoding="utf-8")
    return {"csv": "analysis/state_table.csv", "md": "analysis/state_table.md"}


#: The rule by which the terminal claim follows from the recorded states (registered with the claim).
CLAIM_RULE = (
    "candidate_failure if no case has a valid production stage; clean_valid if every case has valid "
    "production and every recorded observable is C and no attempt failed/was interrupted/discarded; "
    "recovered_valid if the same holds except that some attempts failed and were recovered; otherwise partial. "
    "Every non-C observable and every non-valid production is listed as unresolved."
)


def terminal_claim(run_dir: str | Path, cases: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """(claimed outcome, unresolved items) by :data:`CLAIM_RULE`: the claim of the run's state graph."""
    from mdbench.analysis.study_state import terminal_claim_from_graph

    return terminal_claim_from_graph(run_dir, cases)


def write_terminal_claim(run_dir: str | Path, cases: list[str]) -> dict[str, Any]:
    """Register the claim rule, then write ``episode_terminal.json`` from the recorded states."""
    from mdbench.record import RunRecord

    rec = RunRecord(run_dir)
    if not any(r.get("kind") == "terminal_claim_rule" and (r.get("definition") or {}).get("rule") == CLAIM_RULE
               for r in rec.registrations()):
        rec.register("terminal_claim_rule", {"rule": CLAIM_RULE, "cases": list(cases)})
    from mdbench.analysis.study_state import record_state_graph

    claim = record_state_graph(run_dir, cases)["claim"]  # the claim is the recorded state graph's
    outcome, unresolved = claim["candidate_claimed_outcome"], claim["unresolved"]
    stages = rec.stage_states()
    observables = rec.observable_states()
    return rec.write_terminal(outcome, final_stages={c: stages.get(c, {}) for c in cases},
                              observables={c: observables.get(c, {}) for c in cases}, unresolved=unresolved)


def _is_summary(name: str, state: dict) -> bool:
    """A category summary written by :func:`record_group_states` (its reference has no JSON pointer)."""
    return any(g.name == name for g in AUDIT_GROUPS) and "#" not in str(state.get("results_ref") or "")


def observable_group(name: str) -> str | None:
    """The required analysis category of an observable name (``thermo/density`` → ``thermodynamics``)."""
    return group_of(name)


def record_group_states(run_dir: str | Path, cases: list[str]) -> dict[str, dict[str, str]]:
    """Summarise each required category per case by its weakest member and record it in the run record.

    The category states (keyed ``thermodynamics``, ``coordination``, …) sit beside the member states in
    ``observables.json``, so an auditor can match the seed's required analyses by name.
    """
    from mdbench.record import RunRecord

    rec = RunRecord(run_dir)
    observables = rec.observable_states()
    summary: dict[str, dict[str, str]] = {}
    for case in cases:
        members: dict[str, list[tuple[str, dict]]] = {g.name: [] for g in AUDIT_GROUPS}
        for name, o in (observables.get(case) or {}).items():
            group = observable_group(name)
            if group is not None and not _is_summary(name, o):
                members[group].append((name, o))
        for group, items in members.items():
            if any(name == group for name, _ in items):
                continue  # the category is itself an observable (viscosity): its own state stands
            if not items:
                state, reason = "M", "no member observable recorded"
            else:
                worst = max(items, key=lambda item: SEVERITY.get(item[1]["state"], 0))
                state = worst[1]["state"]
                bad = [n for n, o in items if o["state"] == state] if state != "C" else []
                reason = (f"all {len(items)} member observables C" if state == "C"
                          else f"weakest member state {state}: {', '.join(bad[:6])}")
            rec.set_observable_state(case, group, state, reason, results_ref=f"analysis/{case}/results.json")
            summary.setdefault(case, {})[group] = state
    return summary


def _fmt(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, (int, float)) and math.isfinite(v) else "n/a"


def write_report(run_dir: str | Path, cases: list[str]) -> str:
    """Write ``report.md``: claimed outcome, per-case results with uncertainty and state, conventions.

    Every number is copied from ``analysis/<CASE>/results.json`` so that report and results agree.
    """
    from mdbench.record import RunRecord

    run_dir = Path(run_dir)
    rec = RunRecord(run_dir)
    terminal = rec.terminal() or {}
    stages = rec.stage_states()
    lines = ["# Electrolyte study report", "",
             f"Claimed outcome: **{terminal.get('candidate_claimed_outcome', 'not yet claimed')}** "
             f"({len(terminal.get('unresolved') or [])} unresolved items, listed in "
             "`run_record/episode_terminal.json`).", "",
             "Conventions: conductivity σ includes ionic cross-correlations (collective Einstein, Onsager "
             "coefficients in the barycentric frame, ionic charges as scaled in the model, ±0.72 e); the "
             "Nernst–Einstein value is labelled `sigma_NE` and is an additional result only; t+ is given "
             "under both conventions (unweighted L and charge-weighted σ_ij), in the barycentric frame and in "
             "the solvent frame with the named reference species; uncertainties are four-block 95 % "
             "half-widths after the registered guard interval.", ""]
    for case in cases:
        prod = (stages.get(case) or {}).get("production", {})
        lines += [f"## {case}", "", f"Production stage: {prod.get('state', 'not_reached')} "
                  f"({prod.get('reason', 'no production recorded')}).", ""]
        path = run_dir / "analysis" / case / "results.json"
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            lines += ["No analysis results.", ""]
            continue
        lines += ["| observable | value | ± 95 % | unit | state |", "|---|---|---|---|---|"]
        for name, o in sorted((doc.get("observables") or {}).items()):
            value = o.get("value")
            hw = (o.get("uncertainty") or {}).get("half_width_95")
            lines.append(f"| {name} | {_fmt(value)} | {_fmt(hw)} | {o.get('unit', '')} | {o.get('state', '')} |")
        lines.append("")
    target = run_dir / "report.md"
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rec.add_artifact(target)
    return str(target)
