"""``audit_run``: the SAEO audit of one run directory, from files to ``saeo.json`` and ``findings.md``.

Pipeline: read the run (bounded, read-only) → Sim1–Sim4 per case → optional canonical reanalysis of each
valid production (``mdbench.analysis.pipeline.analyze_files`` on links to the run's files placed in the
audit directory; in a child process beside the checks that do not need it where a second CPU is free,
:mod:`mdbench.audit.reanalysis`) → A1–A7 per case and observable with observable states → E1–E5 → O1–O5 →
external judge (optional) → aggregation (:data:`mdbench.audit.model.AGGREGATION_RULE`) → expert adjudication
(applied last) → composite score, preliminary and final.
"""

from __future__ import annotations

import functools
import html
import json
import logging
import os
import re
import stat
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from mdbench.analysis.reduce.centres import CENTRES_FILE, load_centres
from mdbench.audit import (analysis_items, evidence, fabrication, gate_checks, gmx_dump, group_checks, outcome,
                           production_protocol, record_checks, registered_definitions, required_results, simulation,
                           trajectory_integrity)
from mdbench.audit.bundle import load_bundle
from mdbench.audit.judges import (check_append_only, entry_digest, load_adjudication, run_external_judge,
                                  run_llm_judge)
from mdbench.audit.model import Evidence
from mdbench.audit.reanalysis import Reanalyses, case_dir
from mdbench.audit.model import (AGGREGATION_RULE, ITEM_TITLES, ITEMS, PER_CASE_ITEMS, PER_OBSERVABLE_ITEMS,
                                 AuditResult, Finding, ItemScore, Judgment, composite_score, deduplicate)
from mdbench.audit.runread import RunData, load_run
from mdbench.audit.safeio import RunFS
from mdbench.audit.transport import WindowRefit
from mdbench.errors import InputError
from mdbench.record.atomic import atomic_write_text

log = logging.getLogger(__name__)

SAEO_JSON = "saeo.json"
FINDINGS_MD = "findings.md"
APPLIED = "adjudication.applied.json"


def _schema() -> dict[str, Any]:
    return json.loads(resources.files("mdbench.audit").joinpath("schemas/saeo.schema.json").read_text())


def aggregate(judgments: list[Judgment], cases: list[str]) -> tuple[dict[str, Judgment], list[Judgment]]:
    """Per-case judgments from per-observable ones, then episode judgments (weakest-link rule).

    Returns the episode judgment per item and the list of derived per-case judgments.
    """
    by_key = {j.key(): j for j in judgments}
    derived: list[Judgment] = []
    for case in cases:
        for item in PER_OBSERVABLE_ITEMS:
            if (item, case, None) in by_key:
                continue
            obs = [j for j in judgments if j.item == item and j.case == case and j.observable is not None]
            rated = [j for j in obs if j.rating is not None]
            if not obs:
                continue
            if not rated:
                j = Judgment(item, None, obs[0].reason, case, source="aggregate")
            else:
                worst = min(rated, key=lambda x: x.rating)
                j = Judgment(item, worst.rating, f"{worst.observable}: {worst.reason}" if worst.rating < 1 else
                             f"all {len(rated)} applicable observables satisfied", case,
                             evidence=worst.evidence[:3], source="aggregate")
            derived.append(j)
            by_key[j.key()] = j
    episode: dict[str, Judgment] = {}
    for item in ITEMS:
        if (item, None, None) in by_key:
            episode[item] = by_key[(item, None, None)]
            continue
        per_case = [by_key[(item, c, None)] for c in cases if (item, c, None) in by_key]
        rated = [j for j in per_case if j.rating is not None]
        if not rated:
            why = "; ".join(sorted({f"{j.case}: {j.reason}" for j in per_case}))[:300] or "no case judged"
            episode[item] = Judgment(item, 0.0, f"no applicable case or observable (evidence unavailable): {why}",
                                     source="aggregate")
            continue
        worst = min(rated, key=lambda x: x.rating)
        reason = (f"{worst.case}: {worst.reason}" if worst.rating < 1 else
                  f"satisfied in all {len(rated)} applicable case(s)")
        episode[item] = Judgment(item, worst.rating, reason, evidence=worst.evidence[:3],
                                 source=worst.source if worst.source != "aggregate" else "rule")
    return episode, derived


def _apply(judgments: list[Judgment], overrides: list[Judgment]) -> list[Judgment]:
    by_key = {j.key(): j for j in judgments}
    for o in overrides:
        by_key[o.key()] = o
    return list(by_key.values())


def _record_findings(run_path: Path) -> tuple[list[Finding], list[Finding]]:
    """E3's record findings from :func:`mdbench.record.validate.validate_run` (errors only): all of them, and
    those that are not parse findings RunFS reported already."""
    extra: list[Finding] = []
    refs: list[Finding] = []
    try:
        from mdbench.record.validate import validate_run  # noqa: PLC0415

        for f in validate_run(run_path, check_hashes=False):
            if f.severity == "error":
                extra.append(Finding("record_" + f.code, f.message[:300], f.file, f.line or None, item="E3"))
                if f.code != "malformed":  # malformed lines are E3's parse findings already (RunFS)
                    refs.append(extra[-1])
    except Exception as exc:  # noqa: BLE001 - the validator must not crash the audit
        extra.append(Finding("record_validation", f"record validator could not run: {type(exc).__name__}",
                             item="E3"))
        refs.append(extra[-1])
    return extra, refs


def _record_findings_doc(run_path: Path) -> dict[str, Any]:
    """:func:`_record_findings` as JSON (the reanalysis child's task): every finding, and the indices of those
    that are not parse findings."""
    extra, refs = _record_findings(run_path)
    at = {id(f): i for i, f in enumerate(extra)}
    return {"extra": [asdict(f) for f in extra], "refs": [at[id(f)] for f in refs]}


def _record_findings_from(doc: dict[str, Any]) -> tuple[list[Finding], list[Finding]]:
    """:func:`_record_findings` from :func:`_record_findings_doc`."""
    extra = [Finding(**f) for f in doc["extra"]]
    return extra, [extra[i] for i in doc["refs"]]


def _upstream(run: RunData, case: str, s4: Judgment) -> str | None:
    """The upstream state of a case's observables: ``not_reached`` without a production, ``invalid_upstream``
    when Sim4 fails or the run recorded the production invalid, else None (observables judged on their own)."""
    prod_state = run.stage_state(case, "prod")
    has_prod = bool(run.stage_dirs.get(case, {}).get("prod")) or bool(simulation.production_attempts(run, case))
    if not has_prod and (prod_state is None or prod_state.get("state") in ("not_reached", "running")):
        return "not_reached"
    if s4.rating == 0.0 or (prod_state is not None and prod_state.get("state") in ("invalid", "invalid_upstream")):
        return "invalid_upstream"
    return None


#: Check codes that contradict a claim of the run, reported as findings with their item (the A items read the
#: same codes; :mod:`mdbench.audit.analysis_items`).
CLAIM_FINDING_ITEMS: dict[str, str] = {
    "surrogate_definition": "A2", "tplus_mixed_convention": "A2", "conductivity_without_cross_terms": "A2",
    "registered_after_results": "A2", "outside_canonical_r5": "A3", "value_contradicts_reanalysis": "A3",
    "trajectory_treatment_differs": "A4", "diagnostic_contradicts_evidence": "A5",
    "charge_weighting_differs": "A2", "frame_differs_from_registration": "A4",
}


def claim_findings(assessments: list[Any]) -> list[Finding]:
    """One finding per check that contradicts a claim of the run (value, label, diagnostic, registration)."""
    out = []
    for a in assessments:
        for c in a.checks:
            item = CLAIM_FINDING_ITEMS.get(c.code)
            if item is not None:
                where = c.evidence[0] if c.evidence else None
                note = f" [{where.note}]" if where is not None and where.note else ""
                out.append(Finding(c.code, f"{a.observable}: {c.message}{note}"[:600],
                                   where.path if where is not None else None, item=item, case=a.case))
    return out


def _report_values(assessments: list[Any]) -> dict[str, float]:
    """Result name → value for the report check; names shared by several cases are left out (ambiguous)."""
    import re  # noqa: PLC0415

    seen: dict[str, list[float]] = {}
    for a in assessments:
        for key, val in a.values.items():
            seen.setdefault(re.split(r"[./]", key)[-1], []).append(val)
            # the full result path too ('transference/solvent:DMC/unweighted_L'), for path-qualified quotes
            seen.setdefault(f"{a.case}:{key.split('.', 1)[-1]}", []).append(val)
    out = {k: v[0] for k, v in seen.items() if len(v) == 1}
    # path keys are matched without their case prefix; drop a path that two cases share
    paths: dict[str, list[float]] = {}
    for k, v in out.items():
        if ":" in k and "/" in k:
            paths.setdefault(k.split(":", 1)[1], []).append(v)
    out = {k: v for k, v in out.items() if not (":" in k and "/" in k)}
    out.update({k: v[0] for k, v in paths.items() if len(v) == 1})
    return out


#: The guard [ps] of the registration in force for a case (kept under its old name for the registry tests).
_guard_ps = registered_definitions.registered_guard_ps


def audit_run(run_dir: str | Path, bundle_dir: str | Path | None, out_dir: str | Path, reanalysis: bool = True,
              judge_cmd: str | None = None, adjudication: str | Path | None = None,
              verbose: bool = False, judge_llm: str | None = None, judge_model: str | None = None,
              judge_key_env: str = "OPENAI_API_KEY", force: bool = False) -> AuditResult:
    """SAEO audit of one run directory.

    Parameters
    ----------
    run_dir : path
        The run directory to audit (never modified, nothing in it executed).
    bundle_dir : path or None
        The agent input bundle (case definitions, force field, checksums).
    out_dir : path
        Where ``saeo.json``, ``findings.md`` and reanalysis outputs are written (outside ``run_dir``).
    reanalysis : bool
        Recompute observables canonically from the production files (about one analysis per case).
    judge_cmd : str, optional
        External judge command (see :mod:`mdbench.audit.judges`).
    judge_llm, judge_model, judge_key_env : str, optional
        Built-in LLM judge: an OpenAI-compatible endpoint URL, the model, and the environment variable
        holding the key (:func:`mdbench.audit.judges.run_llm_judge`).
    adjudication : path, optional
        Expert ``adjudication.yaml``, applied last.
    force : bool
        Audit a folder without ``run_record/`` too (everything it lacks scores 0) — an agent's workspace is
        scored whatever it left; otherwise :class:`~mdbench.audit.fabrication.NotARunDirectory` is raised.
    verbose : bool
        Show a progress bar over cases.

    Returns
    -------
    AuditResult
    """
    t_start = time.perf_counter()
    run_path, out, entries = _prepare(run_dir, out_dir, adjudication, force)
    fs = RunFS(run_path)
    bundle = load_bundle(bundle_dir)
    run = load_run(fs, bundle_cases=list(bundle.cases))
    st = _case_pass(run, fs, bundle, bundle_dir, run_path, out, reanalysis, verbose)
    expected = _episode_pass(run, bundle, st)
    prelim, judge_info = _run_judges(run, run_path, out, st, expected, judge_cmd, judge_llm, judge_model,
                                     judge_key_env)
    result = _result(run, run_path, out, st, prelim, entries, expected, judge_info, bundle_dir)
    result.meta["seconds"] = round(time.perf_counter() - t_start, 3)
    write_outputs(result)
    if adjudication is not None:
        (out / APPLIED).write_text(json.dumps([{"digest": entry_digest({k: v for k, v in e.items() if k != "line"}),
                                                "item": e["item"], "case": e["case"]} for e in entries], indent=1))
    log.info("audit of %s: composite %.1f (preliminary %.1f)", run_path, result.composite_final,
             result.composite_preliminary)
    return result


def _prepare(run_dir: str | Path, out_dir: str | Path, adjudication: str | Path | None, force: bool
             ) -> tuple[Path, Path, list[dict[str, Any]]]:
    """(run path, output folder, adjudication entries) after the refusals: no run directory, no run_record/
    (unless ``force``), an output folder inside the run, an adjudication file that is not append-only."""
    run_path = Path(run_dir)
    if not run_path.is_dir():
        raise InputError("run directory not found; pass the directory holding run_record/", str(run_dir))
    if not force:
        fabrication.require_run_directory(run_path)  # NotARunDirectory: no run_record/, nothing scored
    out = Path(out_dir)
    real_run, real_out = run_path.resolve(), out.resolve()
    if real_out == real_run or real_run in real_out.parents:
        raise InputError("the audit output directory must lie outside the audited run directory", str(out_dir))
    entries: list[dict[str, Any]] = []
    if adjudication is not None:
        entries = load_adjudication(adjudication)
        prev_path = out / APPLIED
        if prev_path.is_file():
            check_append_only(entries, json.loads(prev_path.read_text()), adjudication)
    out.mkdir(parents=True, exist_ok=True)
    return run_path, out, entries


@dataclass
class _AuditState:
    """What the per-case pass leaves for the episode items, the judges and the result."""

    fs: RunFS
    reinfo: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    judgments: list[Judgment] = field(default_factory=list)
    assessments: list[Any] = field(default_factory=list)
    prods: dict[str, simulation.ProdFiles] = field(default_factory=dict)
    upstream: dict[str, str | None] = field(default_factory=dict)
    extra: list[Finding] = field(default_factory=list)   # the record validator's findings (E3)
    refs: list[Finding] = field(default_factory=list)    # ... those that are not parse findings


def _case_pass(run: RunData, fs: RunFS, bundle: Any, bundle_dir: Any, run_path: Path, out: Path, reanalysis: bool,
               verbose: bool) -> _AuditState:
    """Sim1–Sim4 per case, the canonical reanalyses (beside the checks that do not need them) and A1–A7 with
    the observable states, and this room's checks on each case's delivered observables."""
    st = _AuditState(fs, {"enabled": reanalysis, "cases": {}}, findings=list(bundle.checksum_findings))
    if bundle.root is None:
        st.findings.append(Finding("bundle_missing", f"agent input bundle not found: {bundle_dir}", item="Sim1"))
    # the reanalysis child starts at once on every case's production files as Sim4 will locate them; Sim1,
    # Sim2 and Sim4 then decide which productions it reads (restrict); with a reanalysis, Sim4 reads the
    # trajectory's frame headers and the reanalysis decompresses the frames
    speculative = {case: functools.partial(_reanalysis_job, run, case) for case in run.cases} if reanalysis else {}
    per_case: dict[str, list[Judgment]] = {}
    sim4_found: dict[str, list[Finding]] = {}  # what each first Sim4 noted (replaced if it runs again)
    # the record validator needs the run directory alone: where a child analyses, it validates once its cases
    # are done (the parent has the last assessments to do meanwhile)
    tasks = {"record": functools.partial(_record_findings_doc, run_path)}
    with Reanalyses(fs, speculative, out, tasks=tasks) as canonical:  # with a child where a second CPU is free
        for case in run.cases:
            n0 = len(fs.findings)
            s4, st.prods[case] = simulation.check_production(run, case, decode=not reanalysis)
            sim4_found[case] = fs.findings[n0:]
            per_case[case] = [simulation.check_setup(run, bundle, case), simulation.check_minimization(run, case),
                              s4]
            st.upstream[case] = _upstream(run, case, s4)
        jobs = {case: _job(run, case, pf) for case, pf in st.prods.items()
                if reanalysis and st.upstream[case] is None and pf.readable}
        canonical.restrict(jobs)
        if not canonical.in_background:  # the run inputs' gmx dump in threads while the parent analyses
            gmx_dump.prefetch(run, st.prods)  # (beside a child they would take its CPU; the parent has time)
        for case in run.cases:  # Sim3 reads the equilibration energy files meanwhile, E3 the record, E2 hashes
            per_case[case].insert(2, simulation.check_equilibration(run, bundle, case))
            gate_checks.reevaluate_registered_gate(run, case)  # the registered gate, kept for record_checks.amend
        record_in_child = canonical.in_background
        if not record_in_child:
            st.extra, st.refs = _record_findings(run_path)
        if canonical.in_background and isinstance(run.artifacts, dict):
            fs.prefetch_sha256(str(p) for p in run.artifacts)
        if canonical.in_background:  # while the child still analyses: the gate / force-field / production
            for case in run.cases:  # checks of the E/O pass
                record_checks.precompute_case_findings(run, bundle, case, st.prods.get(case))
        for case in tqdm(run.cases, desc="audit", disable=not verbose):
            canon = None
            if case in jobs:
                canon, st.reinfo["cases"][case], re_findings = canonical.result(case)
                canon = registered_definitions.annotate(canon, run, case)  # cutoffs, registered windows
                st.findings += re_findings
                if canon is None:  # failed or unavailable: nobody decompressed the frames, Sim4 does it now
                    first = {id(f) for f in sim4_found[case]}
                    fs.findings[:] = [f for f in fs.findings if id(f) not in first]
                    s4, st.prods[case] = simulation.check_production(run, case, decode=True)
                    per_case[case][3] = s4
                    st.upstream[case] = _upstream(run, case, s4)
            st.findings += production_protocol.apply(run, bundle, case, st.prods[case], per_case[case])  # Sim1/Sim4 from the tpr
            st.judgments += per_case[case]
            _assess(run, bundle, case, canon, out, st)
        if record_in_child:
            st.extra, st.refs = _record_findings_from(canonical.task("record"))
    return st


def _job(run: RunData, case: str, pf: simulation.ProdFiles) -> tuple:
    """The canonical reanalysis of a case: its production files, the guard and the definitions it registered
    (recomputed as registered: registered_definitions)."""
    return ((pf.tpr, pf.xtc, pf.edr), _guard_ps(run, case),
            registered_definitions.settings_overrides(run, case, pf.extra.get("charges_e")))


def _reanalysis_job(run: RunData, case: str) -> tuple | None:
    """:func:`_job` as the reanalysis child forms it before Sim4 has run (in its own copy of the audit's
    state): the files Sim4 locates, when all three are regular files, and the species charges of the run
    input. The parent takes the child's result only where its own job, after Sim4, is the same."""
    pf = simulation.locate_production(run, case)
    for rel in (pf.tpr, pf.xtc, pf.edr):
        path = run.fs.resolve(rel) if rel else None
        if path is None or not stat.S_ISREG(os.stat(path).st_mode):  # no FIFO or device is opened here
            return None
    pf.extra["charges_e"] = simulation.species_charges(simulation.tpr_universe(run, pf.tpr))
    return _job(run, case, pf)


def _assess(run: RunData, bundle: Any, case: str, canon: Any, out: Path, st: _AuditState) -> None:
    """A1–A7 and the observable states of one case (against ``canon``, the reanalysis, where it ran), then
    this room's checks that see through the run's own numbers."""
    pf = st.prods[case]
    links = case_dir(out, case) / "inputs"  # the reanalysis' links: offset caches stay out of the run
    centres = load_centres(links.parent / CENTRES_FILE) if canon else None  # the reanalysis' pass, kept
    refit = WindowRefit.for_case(links / Path(pf.tpr).name, links / Path(pf.xtc).name, canon,
                                 centres) if canon else None
    st.findings += trajectory_integrity.apply(run, case, pf, centres, st.judgments)  # Sim4: frames of one continuous run
    js, groups = analysis_items.assess_case(run, bundle, case, st.upstream[case], canon, pf.extra, refit)
    st.findings += group_checks.case_checks(run, case, st.upstream[case], canon, pf, groups, js, refit)
    st.findings += required_results.apply(run, bundle, case, st.upstream[case], groups, js)  # A1 from the task spec
    if canon is not None:  # a required observable the reanalysis could not compare as registered: A2
        st.findings += group_checks.apply(case, groups, js, registered_definitions.not_compared_extras(
            groups, analysis_items.required_targets(case, bundle)))
    st.judgments += js
    st.assessments += [g.assessment for g in groups]


def _episode_pass(run: RunData, bundle: Any, st: _AuditState) -> str:
    """E1–E5 and O1–O5 (the budget from the ledger), then this room's record checks and the findings'
    de-duplication. Returns the outcome the evidence supports."""
    valid_cases = [c for c in run.cases if st.upstream.get(c) is None]
    consumption = evidence.ledger_consumption(run)
    late = [f.message for f in claim_findings(st.assessments) if f.code == "registered_after_results"]
    st.judgments += [evidence.check_lineage(run, valid_cases), evidence.check_provenance(run, bundle, st.prods),
                     evidence.check_records(run, st.refs), evidence.check_delivery(run, valid_cases),
                     evidence.check_consistency(run, _report_values(st.assessments), consumption, sorted(set(late)))]
    ojs, expected = outcome.judge_outcome(run, st.assessments, valid_cases)
    if consumption.over:  # seed O3: action and stopping must address the remaining budget
        ojs = [Judgment("O3", 0.0, "MD consumption exceeds the budget: " + "; ".join(consumption.over),
                        evidence=[Evidence(f"{evidence.REC}/attempts.jsonl")]) if j.item == "O3" else j for j in ojs]
    st.judgments += ojs
    st.findings += record_checks.amend(run, bundle, st.prods, st.judgments, st.assessments)
    st.findings += trajectory_integrity.cap_consistency(run, st.judgments, st.findings)  # E5: records vs frames
    budget = [Finding("budget_exceeded", m, f"{evidence.REC}/attempts.jsonl", item="E5") for m in consumption.over]
    budget += [Finding("budget_statement_disagrees", m, "report.md" if m.startswith("report.md") else
                       f"{evidence.REC}/episode_terminal.json", item="E5") for m in consumption.statements]
    st.findings = deduplicate(st.findings + st.fs.findings + st.extra + claim_findings(st.assessments) + budget
                              + outcome.state_disagreements(run, st.assessments)
                              + outcome.next_action_findings(run, st.assessments)
                              + outcome.production_decision_findings(run))
    return expected


def _run_judges(run: RunData, run_path: Path, out: Path, st: _AuditState, expected: str, judge_cmd: str | None,
                judge_llm: str | None, judge_model: str | None, judge_key_env: str
                ) -> tuple[list[Judgment], dict[str, Any]]:
    """The preliminary judgments: the rules', with an external or LLM judge's verdicts applied where one is
    named (its findings join ``st.findings``). Returns them and the judge's record."""
    judge_info: dict[str, Any] = {"kind": "rule"}
    if not (judge_cmd or judge_llm):
        return st.judgments, judge_info
    bundle_doc = {"protocol": "mdbench-saeo-judge/1", "run_dir": str(run_path),
                  "items": [j.to_dict() for j in st.judgments], "item_titles": ITEM_TITLES,
                  "observables": [a.to_dict() for a in st.assessments],
                  "findings": [f.to_dict() for f in st.findings],
                  "unresolved": outcome.unresolved_summary(st.assessments),
                  "claimed_outcome": run.claimed_outcome(), "expected_outcome": expected}
    if judge_llm:
        verdicts, jf, judge_info = run_llm_judge(judge_llm, judge_model or "default", bundle_doc, out,
                                                 api_key_env=judge_key_env)
        judge_info["kind"] = "llm"
    else:
        verdicts, jf, judge_info = run_external_judge(judge_cmd, bundle_doc, out)
        judge_info["kind"] = "external"
    st.findings += jf
    return _apply(st.judgments, verdicts), judge_info


def _result(run: RunData, run_path: Path, out: Path, st: _AuditState, prelim: list[Judgment],
            entries: list[dict[str, Any]], expected: str, judge_info: dict[str, Any], bundle_dir: Any
            ) -> AuditResult:
    """Aggregation (preliminary), expert adjudication applied last, the composite scores and the result."""
    episode_pre, _derived_pre = aggregate(prelim, run.cases)
    adj_low = [Judgment(e["item"], e["rating"], e["reason"], e["case"], e["observable"], source="expert",
                        reviewer=e["reviewer"]) for e in entries if e["case"] is not None]
    adj_ep = {e["item"]: e for e in entries if e["case"] is None}
    final_js = _apply(prelim, adj_low)
    # drop derived per-case aggregates so that adjudicated observables propagate
    episode_fin, derived_fin = aggregate([j for j in final_js if j.source != "aggregate"], run.cases)
    for item, e in adj_ep.items():
        episode_fin[item] = Judgment(item, e["rating"], e["reason"], source="expert", reviewer=e["reviewer"])
    pre_r = {i: float(episode_pre[i].rating) for i in ITEMS}
    fin_r = {i: float(episode_fin[i].rating) for i in ITEMS}
    comp_pre, means_pre = composite_score(pre_r)
    comp_fin, means_fin = composite_score(fin_r)
    items = {i: ItemScore(i, pre_r[i], fin_r[i], episode_fin[i].reason, episode_fin[i].source) for i in ITEMS}
    all_js = [j for j in final_js if j.source != "aggregate"] + derived_fin
    return AuditResult(
        run_dir=str(run_path), out_dir=str(out), cases=run.cases, judgments=all_js, episode_items=items,
        observables=st.assessments, findings=st.findings, composite_preliminary=comp_pre, composite_final=comp_fin,
        dimension_means_preliminary=means_pre, dimension_means_final=means_fin,
        claimed_outcome=run.claimed_outcome(), expected_outcome=expected, reanalysis=st.reinfo, judge=judge_info,
        adjudications=[{k: v for k, v in e.items()} for e in entries],
        meta={"bundle_dir": str(bundle_dir) if bundle_dir else None, "seconds": 0.0,
              "preliminary_items": {i: episode_pre[i].to_dict() for i in ITEMS}})


#: What a Markdown viewer would read as raw HTML: a tag opening (``<img``, ``</p``, ``<!--``) or an entity.
_MD_HTML = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?[A-Za-z0-9]+;)")


def _md(text: Any) -> str:
    """Run-provided text made inert for Markdown tables: tag openings and entities escaped (a Markdown
    viewer passes raw HTML through), comparisons such as ``<=`` left readable; no pipes or newlines."""
    out = _MD_HTML.sub(lambda m: html.escape(m.group(0)), str(text))
    return out.replace("|", "\\|").replace("\n", " ")[:400]


def findings_markdown(res: AuditResult, doc: dict[str, Any] | None = None) -> str:
    """The human-readable audit summary written as ``findings.md`` (``doc``: ``res.to_dict()``, if at hand)."""
    d = res.to_dict() if doc is None else doc
    lines = [f"# SAEO audit of `{_md(res.run_dir)}`", "",
             f"Composite score: preliminary **{res.composite_preliminary:.1f}**, final **{res.composite_final:.1f}** "
             f"(judge: {_md(res.judge.get('kind'))}; {len(res.adjudications)} adjudication entries).", "",
             f"Claimed outcome: `{_md(res.claimed_outcome)}`; outcome the evidence supports: `{res.expected_outcome}`.",
             "", f"Aggregation: {AGGREGATION_RULE}", "", "## Items", "",
             "| item | criterion | preliminary | final | source | reason |", "|---|---|---|---|---|---|"]
    for i in ITEMS:
        s = d["items"][i]
        lines.append(f"| {i} | {ITEM_TITLES[i]} | {s['preliminary']:g} | {s['final']:g} | {s['source']} | "
                     f"{_md(s['reason'])} |")
    lines += ["", "## Per case", "", "| case | " + " | ".join(PER_CASE_ITEMS) + " |",
              "|---|" + "---|" * len(PER_CASE_ITEMS)]
    by = {(j.item, j.case): j for j in res.judgments if j.observable is None and j.case is not None}
    for c in res.cases:
        cells = []
        for i in PER_CASE_ITEMS:
            j = by.get((i, c))
            cells.append("–" if j is None or j.rating is None else f"{j.rating:g}")
        lines.append(f"| {_md(c)} | " + " | ".join(cells) + " |")
    lines += ["", "## Observables", "", "| case | observable | audit state | run state | reason |",
              "|---|---|---|---|---|"]
    for o in res.observables:
        lines.append(f"| {_md(o.case)} | {o.observable} | {o.state} | {_md(o.run_state)} | {_md(o.reason)} |")
    lines += ["", "## Findings", ""]
    if not res.findings:
        lines.append("None.")
    for f in res.findings:
        lines.append(f"- `{_md(f.code)}` {_md(f.location())}: {_md(f.message)}" + (f" (item {f.item})" if f.item else "")
                     + (f" — {f.count}×" if f.count > 1 else ""))
    if res.adjudications:
        lines += ["", "## Expert adjudication", ""]
        for e in res.adjudications:
            lines.append(f"- {e['item']} {_md(e.get('case') or 'episode')}: {e['rating']:g} by {_md(e['reviewer'])} — "
                         f"{_md(e['reason'])}")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1)
def _saeo_validator() -> Any:
    """The ``saeo.schema.json`` validator, built once per process from its inlined copy."""
    import jsonschema  # noqa: PLC0415 - imported when first needed: its format checkers take seconds to import

    from mdbench.record.schema_refs import inline_local_refs  # noqa: PLC0415

    return jsonschema.Draft202012Validator(inline_local_refs(_schema()))


def write_outputs(res: AuditResult) -> None:
    """Validate against ``saeo.schema.json`` and write ``saeo.json`` and ``findings.md``."""
    import jsonschema  # noqa: PLC0415

    doc = json.loads(json.dumps(res.to_dict(), default=str))
    errors = list(_saeo_validator().iter_errors(doc))
    if errors:  # our own report breaking its schema is a bug: raise as jsonschema.validate would
        raise jsonschema.exceptions.best_match(errors)
    out = Path(res.out_dir)
    atomic_write_text(out / SAEO_JSON, json.dumps(doc, indent=1, allow_nan=False) + "\n")  # issue 25: never partial
    atomic_write_text(out / FINDINGS_MD, findings_markdown(res, doc))
