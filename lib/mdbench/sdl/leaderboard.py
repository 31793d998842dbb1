"""Leaderboards over systems and assignments, built only from verified traces.

:func:`score_results` re-verifies every trace of every system in a results folder (hash chain, chain head
signed with the compile's evaluator key, copies equal to the log; :mod:`mdbench.sdl.verify`) and recomputes
every metric from the logs; ``metrics.json`` files are never read. A system whose traces fail verification is
*refused* with the first bad row named.

:func:`score_results` scores a system only against a compile the caller names (``--assignments``, or the
evaluator key sha256 with ``--compile-sha256``); a system run against any other compile is refused — never
trusted on its own ``compile_dir`` and never shown as a table of its own.

:func:`build_leaderboards` then puts systems into one table only when the sha256 sets of the assignments they
ran are identical (so a budget-4 compile is never ranked beside a budget-12 one, nor a partial run beside a
full one). Within a table:

* a system with an unfinished branch on any assignment (policy error, invalid-action streak, call limit,
  missing checkpoint; :func:`mdbench.sdl.metrics.branch_status`) is listed as *did not finish* with the reason,
  never ranked;
* a system whose coordinator ran without enforced isolation (an unconfined process, or an in-process policy
  object that is not a shipped baseline) is listed as *not ranked* with the reason;
* a system run without the schedule-matched random control is listed as *not ranked* (no selection lift);
* the rest are ranked by mean adaptive AUC [nats] with equal weight per assignment (primary, higher is
  better; with its 95 % t-interval over assignments) — the only ranking criterion. Beside it, as diagnostics:
  mean selection lift (each assignment's value a mean over the seeded random-control draws, with the mean
  per-assignment spread; the random control cannot hide itself from a coordinator, so this lift could be
  inflated by forecasting badly on purpose in it), the reference selection lift (the same selections scored by
  the shipped forecaster; immune to that), enhancement at budget, evidence lift (control gain clamped at
  zero, see :mod:`mdbench.sdl.metrics`; assignments whose no-evidence control fell below its own pre-campaign
  forecast, or whose selection lift departs from the reference selection lift beyond its noise, are listed in
  ``control_flags`` and printed by ``mdbench sdl leaderboard``), per-assignment signs of selection lift (e.g. ``+−+0+−``),
  acceleration factor at a target ratio (geometric mean over jointly reached campaigns, with counts), claim
  calibration, local/held-out sign agreement, future-decision gain, and leave-one-assignment-out rank
  stability.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mdbench.errors import InputError, MdbenchError
from mdbench.sdl.bundle import Compiled, load_compiled
from mdbench.sdl.campaign import one_line
from mdbench.sdl.figures import ci95
from mdbench.sdl.metrics import campaign_metrics
from mdbench.sdl.scoring import geometric_mean, sign
from mdbench.sdl.verify import verify_run



def isolation_rankable(iso: dict[str, Any]) -> tuple[bool, str]:
    """Whether a branch's coordinator ran under an enforced information boundary, and why not."""
    method = iso.get("method")
    if method == "in_process":
        if iso.get("trusted") is True:
            return True, "shipped baseline (in-process, trusted)"
        return False, "in-process policy object that is not a shipped baseline (no enforced isolation)"
    if method == "llm_endpoint":
        return True, "remote model behind the built-in adapter"
    if method == "confined_process":
        if iso.get("isolation") == "none":
            return False, "process confinement was unavailable on this machine (isolation: none)"
        return True, "confined process"
    return False, f"coordinator ran without enforced isolation ({method or 'unknown'})"


@dataclass
class SystemRun:
    """One system's verified run over a set of assignments."""

    system: str
    path: str
    compile_dir: str
    assignment_shas: dict[str, str]
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    refused: str | None = None

    @property
    def set_key(self) -> str:
        """sha256 over the sorted assignment sha256s: identical for identical assignment sets."""
        return hashlib.sha256("\n".join(sorted(self.assignment_shas.values())).encode()).hexdigest()


@dataclass
class SystemRow:
    """One leaderboard row (means over assignments with equal weight)."""

    system: str
    rank: int
    n_assignments: int
    adaptive_auc_nats: float
    adaptive_auc_ci95_nats: tuple[float, float] | None
    loss_pre_nats: float
    loss_at_budget_nats: float
    selection_lift_nats: float | None
    selection_lift_sd_nats: float | None
    reference_selection_lift_nats: float | None
    enhancement_at_budget_nats: float | None
    evidence_lift_nats: float | None
    future_gain_nats: float | None
    selection_lift_signs: str
    acceleration_first_passage: float | None
    acceleration_first_passage_n: int
    acceleration_sustained: float | None
    acceleration_sustained_n: int
    claim_unsupported_fraction: float | None
    local_heldout_same_sign_fraction: float | None
    isolation: str
    control_flags: list[str] = field(default_factory=list)
    rank_range_loao: tuple[int, int] = (0, 0)


@dataclass
class Leaderboard:
    """One table: systems that ran exactly the same assignments."""

    assignment_set_sha256: str
    assignments: dict[str, str]
    horizons: list[int]
    rows: list[SystemRow]
    did_not_finish: dict[str, str]
    not_ranked: dict[str, str]
    target_ratio: float
    loao_rank_stable_fraction: float | None
    per_assignment_auc: dict[str, dict[str, float]] = field(default_factory=dict)
    budgets: list[dict[str, int]] = field(default_factory=list)
    random_draws: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"assignment_set_sha256": self.assignment_set_sha256, "assignments": self.assignments,
                "horizons": self.horizons, "budgets": self.budgets, "random_draws": self.random_draws, "rows": [asdict(r) for r in self.rows],
                "did_not_finish": self.did_not_finish, "not_ranked": self.not_ranked,
                "target_ratio": self.target_ratio, "loao_rank_stable_fraction": self.loao_rank_stable_fraction,
                "per_assignment_auc": self.per_assignment_auc}


@dataclass
class Leaderboards:
    """All tables of a results folder, and the systems refused before any table."""

    tables: list[Leaderboard]
    refused: dict[str, str]
    runs: list[SystemRun]

    def to_dict(self) -> dict[str, Any]:
        return {"tables": [t.to_dict() for t in self.tables], "refused": self.refused}

    def results(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{system: {assignment_id: metrics}}`` of every verified run (for plots)."""
        return {r.system: r.metrics for r in self.runs if r.refused is None}


def score_system(system_dir: str | Path, compiled: Compiled | None = None,
                 expect_key_sha256: str | None = None) -> SystemRun:
    """Verify and score every campaign of one system folder (``<results>/<system>/``) against a compile named
    by the caller: ``compiled`` (the compile folder given on the command line), or ``expect_key_sha256`` (the
    evaluator key sha256 given on the command line; the compile folder recorded in ``run.json`` is then used
    only if its key hashes to it). The folder's own ``compile_dir`` is never trusted by itself.

    The folder is verified end to end against its signed manifests (:func:`mdbench.sdl.verify.verify_run`):
    a swapped, missing, duplicated or spliced trace refuses the system, naming the file and the manifest entry;
    a run against another compile is refused before anything is read of its traces.

    Raises
    ------
    InputError
        When ``run.json`` is missing or unreadable (no system there), or when neither ``compiled`` nor
        ``expect_key_sha256`` is given. Verification failures do not raise: the run comes back with ``refused``
        set.
    """
    from mdbench.untrusted import Refused, read_json

    if compiled is None and not expect_key_sha256:
        raise InputError("name the compile to score against (--assignments DIR or --compile-sha256 HEX): a results "
                         "folder is never scored against the compile it names itself", str(system_dir))
    d = Path(system_dir)
    try:
        run = read_json(d / "run.json")
        if not isinstance(run, dict):
            raise Refused(d / "run.json", "not_json", "expected an object")
    except Refused as exc:
        raise InputError(f"no readable run.json ({exc.reason}) — write it with `mdbench sdl run`", str(d)) from exc
    asg_shas = run.get("assignments") if isinstance(run.get("assignments"), dict) else {}
    sr = SystemRun(str(run.get("system", d.name)), str(d), str(run.get("compile_dir", "")),
                   {str(k): str(v) for k, v in asg_shas.items()})
    try:
        if compiled is None:
            recorded = str(run.get("evaluator_key_sha256", ""))
            if recorded != expect_key_sha256:
                raise InputError(foreign_compile(recorded, str(expect_key_sha256)), str(d / "run.json"))
            compiled = load_compiled(sr.compile_dir)
            if compiled.keys.key_sha256 != expect_key_sha256:
                raise InputError(f"the compile folder {compiled.root} named in run.json does not hold the evaluator "
                                 f"key {str(expect_key_sha256)[:12]}… given on the command line", str(d / "run.json"))
        elif run.get("evaluator_key_sha256") != compiled.keys.key_sha256:
            raise InputError(foreign_compile(str(run.get("evaluator_key_sha256", "")), compiled.keys.key_sha256,
                                             compiled.root), str(d / "run.json"))
        by_id = {a.assignment_id: a for a in compiled.assignments}
        for aid, sha in sr.assignment_shas.items():
            asg = by_id.get(aid)
            if asg is None or asg.sha256 != sha:
                raise InputError(f"assignment {aid} ({sha[:12]}…) is not in the compile folder {compiled.root}",
                                 str(d / "run.json"))
        manifest, traces = verify_run(d, by_id, compiled.keys)
        if manifest.get("assignments") != sr.assignment_shas or manifest.get("system") != sr.system:
            raise InputError("run.json and run.manifest.json disagree on the system or its assignments",
                             str(d / "run.json"))
        for aid in sorted(traces):
            sr.metrics[aid] = campaign_metrics(traces[aid], compiled.ledger, by_id[aid])
    except MdbenchError as exc:
        sr.refused = str(exc)
    return sr


def foreign_compile(recorded: str, given: str, root: Path | None = None) -> str:
    """One line: a system ran against another compile than the one named on the command line."""
    where = f" ({root})" if root is not None else ""
    return (f"ran against another compile (evaluator key sha256 {recorded[:12] or 'none'}…) than the one given on "
            f"the command line{where} (key sha256 {given[:12]}…); score it against its own compile, in its own "
            "results folder")


def score_results(results_dir: str | Path, compile_dirs: str | Path | list[str | Path] | tuple = (), *,
                  compile_sha256: list[str] | tuple[str, ...] = ()) -> list[SystemRun]:
    """Verified runs of every system in ``results_dir``, each against the compile named by the caller.

    ``compile_dirs`` are compile folders (the command line's ``--assignments``; one or several), and
    ``compile_sha256`` evaluator key sha256s (``--compile-sha256``). A system is scored against the given
    compile whose evaluator key it records; a system of any other compile is refused (listed in
    :attr:`Leaderboards.refused`, never a table of its own).
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise InputError("results folder not found — run `mdbench sdl run --out DIR` first", str(root))
    dirs = [compile_dirs] if isinstance(compile_dirs, (str, Path)) else list(compile_dirs or ())
    if not dirs and not compile_sha256:
        raise InputError("name the compile to score against (--assignments DIR, or --compile-sha256 HEX of its "
                         "evaluator key): a results folder is never scored against the compile it names itself",
                         str(root))
    compiles = {c.keys.key_sha256: c for c in (load_compiled(x) for x in dirs)}
    runs = []
    for p in sorted(root.glob("*/run.json")):
        key = _recorded_key(p)
        if key in compiles:
            runs.append(score_system(p.parent, compiles[key]))
        elif key in compile_sha256:
            runs.append(score_system(p.parent, expect_key_sha256=key))
        else:   # of none of the named compiles: refused by score_system, with the reason
            first = next(iter(compiles.values()), None)
            runs.append(score_system(p.parent, first, None if first is not None else compile_sha256[0]))
    if not runs:
        raise InputError("no */run.json found — run `mdbench sdl run --out DIR` first", str(root))
    return runs


def _recorded_key(run_json: Path) -> str:
    from mdbench.untrusted import Refused, read_json

    try:
        run = read_json(run_json)
    except Refused:
        return ""
    return str(run.get("evaluator_key_sha256", "")) if isinstance(run, dict) else ""


def _ranks(values: dict[str, float]) -> dict[str, int]:
    order = sorted(values, key=lambda s: (-values[s], s))
    return {s: k + 1 for k, s in enumerate(order)}


def _mean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None


def _exclusion(run: SystemRun) -> tuple[str | None, str | None]:
    """``(did_not_finish_reason, not_ranked_reason)`` of a verified run."""
    for aid, m in run.metrics.items():
        if not m["finished"]:
            return one_line(f"{aid}: {m['dnf_reasons'][0]}"), None
    for aid, m in run.metrics.items():
        for b, br in m["branches"].items():
            ok, why = isolation_rankable(br["isolation"])
            if not ok:
                return None, f"{aid} {b}: {why}"
        if "random_control" not in m["branches"]:
            return None, f"{aid}: no schedule-matched random control (run without --no-controls)"
    return None, None


def _row(s: str, ms: list[dict[str, Any]], auc: float, target_ratio: float) -> SystemRow:
    acc: dict[str, list[float]] = {rule: [] for rule in ("first_passage", "sustained")}
    for m in ms:
        for ac in m.get("acceleration", []):
            if abs(ac["target_ratio"] - target_ratio) < 1e-12 and ac["factor"] is not None:
                acc[ac["rule"]].append(ac["factor"])
    ad = [m["branches"]["adaptive"] for m in ms]
    claims = [b["claim_calibration"] for b in ad]
    n_el = sum(c["n_eligible"] for c in claims)
    sa = [b["sign_agreement"] for b in ad]
    n_both = sum(x["n_both_changed"] for x in sa)
    isos = sorted({isolation_rankable(b["isolation"])[1] for m in ms for b in m["branches"].values()})
    return SystemRow(
        system=s, rank=0, n_assignments=len(ms), adaptive_auc_nats=auc,
        adaptive_auc_ci95_nats=ci95([b["adaptive_auc_nats"] for b in ad]),
        loss_pre_nats=float(np.mean([b["loss_pre_nats"] for b in ad])),
        loss_at_budget_nats=float(np.mean([b["loss_at_budget_nats"] for b in ad])),
        selection_lift_nats=_mean([m.get("selection_lift_nats") for m in ms]),
        selection_lift_sd_nats=_mean([m.get("selection_lift_sd_nats") for m in ms]),
        reference_selection_lift_nats=_mean([m.get("reference_selection_lift_nats") for m in ms]),
        enhancement_at_budget_nats=_mean([m.get("enhancement_at_budget_nats") for m in ms]),
        evidence_lift_nats=_mean([m.get("evidence_lift_nats") for m in ms]),
        future_gain_nats=_mean([b.get("future_gain_nats") for b in ad]),
        selection_lift_signs="".join(sign(m.get("selection_lift_nats")) for m in ms),
        acceleration_first_passage=geometric_mean(acc["first_passage"]),
        acceleration_first_passage_n=len(acc["first_passage"]),
        acceleration_sustained=geometric_mean(acc["sustained"]), acceleration_sustained_n=len(acc["sustained"]),
        claim_unsupported_fraction=(sum(c["n_unsupported_crossing"] for c in claims) / n_el) if n_el else None,
        local_heldout_same_sign_fraction=(sum(x["n_same_sign"] for x in sa) / n_both) if n_both else None,
        isolation="; ".join(isos),
        control_flags=[m["assignment_id"] for m in ms if m.get("control_sabotage_suspected")])


def _table(runs: list[SystemRun], target_ratio: float) -> Leaderboard:
    first = runs[0]
    assignments = dict(sorted(first.assignment_shas.items()))
    aids = list(assignments)
    dnf, nr, ranked = {}, {}, {}
    for r in runs:
        d, n = _exclusion(r)
        if d:
            dnf[r.system] = d
        elif n:
            nr[r.system] = n
        else:
            ranked[r.system] = r
    auc = {s: {a: r.metrics[a]["branches"]["adaptive"]["adaptive_auc_nats"] for a in aids} for s, r in ranked.items()}
    mean_auc = {s: float(np.mean(list(v.values()))) for s, v in auc.items()}
    ranks = _ranks(mean_auc)
    loao: dict[str, list[int]] = {s: [] for s in ranked}
    n_stable = 0
    if len(aids) > 1 and ranked:
        for left in aids:
            r = _ranks({s: float(np.mean([v for a, v in auc[s].items() if a != left])) for s in ranked})
            n_stable += r == ranks
            for s in ranked:
                loao[s].append(r[s])
    rows = []
    for s, run in ranked.items():
        row = _row(s, [run.metrics[a] for a in aids], mean_auc[s], target_ratio)
        row.rank = ranks[s]
        row.rank_range_loao = (min(loao[s]), max(loao[s])) if loao[s] else (ranks[s], ranks[s])
        rows.append(row)
    rows.sort(key=lambda r: r.rank)
    horizons = sorted({m["horizon"] for r in runs for m in r.metrics.values()}, reverse=True)
    budgets = [dict(b) for b in sorted({tuple(sorted(m.get("budgets", {}).items())) for r in runs
                                        for m in r.metrics.values()})]
    draws = sorted({len(m.get("random_draws", [])) for r in runs for m in r.metrics.values()})
    return Leaderboard(first.set_key, assignments, horizons, rows, dnf, nr, target_ratio,
                       (n_stable / len(aids)) if len(aids) > 1 and ranked else None, auc, budgets, draws)


def build_leaderboards(runs: list[SystemRun], target_ratio: float = 1.05) -> Leaderboards:
    """One table per distinct assignment sha256 set (see module docstring); refused runs listed apart."""
    refused = {r.system: r.refused for r in runs if r.refused}
    groups: dict[str, list[SystemRun]] = {}
    for r in runs:
        if not r.refused:
            groups.setdefault(r.set_key, []).append(r)
    tables = [_table(g, target_ratio) for g in groups.values()]
    tables.sort(key=lambda t: (-len(t.rows), -len(t.assignments), t.assignment_set_sha256))
    return Leaderboards(tables, refused, runs)

