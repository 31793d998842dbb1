"""Aggregate Harbor job folders into MDArena-style tables beside Harbor's own job statistics.

Reads any number of job folders (or folders of trial folders: a trial folder is one whose
``result.json`` carries ``trial_name`` and ``task_name``). Per trial:

- **rewards**: ``result.json`` ``verifier_result.rewards`` when Harbor would count them
  (:func:`mdbench.arena.rewards.reward_valid`); without a verifier result, the reward files
  (``verifier/reward.json``, else ``reward.txt``, else ``steps/*/verifier/reward.json``) read by Harbor's
  rules — a malformed file gives no reward and its error in ``reward_error``. A missing reward counts 0.
- **correctness**: reward key ``correctness``; else ``reward``; else the single key present unless that
  key is ``process``; else 0.
- **process**: reward key ``process`` (``None`` when not scored); ``process_state`` from
  ``verifier/reward-details.json``: ``scored``, ``unscorable`` (no trajectory) or ``not_judged``.
- **error**: Harbor's recorded exceptions (top level, then ``step_results``); timeouts
  (``*TimeoutError``) are told apart from other exceptions. An errored trial may still carry rewards.
- **Strict-Pass**: correctness = 1 and process = 1 and no error. With ``require_process=False`` an
  unscored process is not held against the trial.

Grouping is by agent + model + dataset, which is Harbor's ``evals`` key (dataset = the trial's
``source``, ``adhoc`` when unset). Beside the MDArena columns each group carries Harbor's own:
``harbor_n_trials`` (trials with valid rewards), ``harbor_n_errors`` (trials with any exception) and
``harbor_metrics`` (Harbor's default ``mean`` over the valid rewards only, per key when there are
several). The two differ on purpose: MDArena's means run over *all* trials with a failure as 0,
Harbor's over the trials it could grade. Difficulty and category come from the task's ``task.toml``
``[metadata]`` (looked up by task name in ``tasks_dirs`` or via the trial's ``task_id.path``),
``unknown`` otherwise.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from mdbench.arena import rewards as rw
from mdbench.arena import usage as usage_mod
from mdbench.arena.task import TASKS_DIR, list_tasks, read_task_toml
from mdbench.errors import InputError

log = logging.getLogger(__name__)

EPS = 1e-9
#: Exception types of a verifier that did not produce a usable reward (Harbor's names).
VERIFIER_ERRORS = (*rw.REWARD_ERRORS, "VerifierTimeoutError", "AddTestsDirError", "DownloadVerifierDirError")


@dataclass
class TrialRecord:
    """One Harbor trial, flattened for aggregation (units: cost in USD, tokens as counts)."""

    job: str
    trial_name: str
    task_name: str
    task: str
    dataset: str
    agent: str
    model: str
    correctness: float
    process: float | None
    reward_found: bool
    cost_usd: float | None
    n_input_tokens: int | None
    n_output_tokens: int | None
    exception_type: str | None
    error_kind: str | None          # "timeout" | "other" | None
    difficulty: str
    category: str
    strict_pass: bool
    process_state: str = "not_judged"   # "scored" | "unscorable" | "not_judged"
    reward_error: str | None = None     # why a reward file was rejected (Harbor's rules)
    harbor_valid: bool = False          # Harbor counts this trial's rewards (TrialResult.reward_valid)
    rewards_json: str = "{}"            # the trial's rewards as Harbor has them (valid ones only)
    usage_flagged: bool = False         # agent-reported usage was rejected (forged: negative, non-finite, ...)
    usage_findings: str = ""            # why, one finding per line

    @property
    def config(self) -> str:
        return f"{self.agent} / {self.model}"


def _is_timeout(etype: str | None) -> bool:
    return bool(etype) and (etype.endswith("TimeoutError") or etype in ("TimeoutExpired", "Timeout"))


def _read_json(p: Path) -> Any:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def find_trial_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Every trial folder under the given job folders (sorted, no duplicates)."""
    found: set[Path] = set()
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise InputError("no such job folder; pass a Harbor job directory (jobs/<job>)", str(root))
        candidates = [root / "result.json"] if (root / "result.json").is_file() else []
        candidates += list(root.rglob("result.json"))
        for rj in candidates:
            if "steps" in rj.relative_to(root).parts[:-1]:
                continue
            data = _read_json(rj)
            if isinstance(data, dict) and "trial_name" in data and "task_name" in data:
                found.add(rj.parent.resolve())
    return sorted(found)


def _rewards(trial_dir: Path, result: dict[str, Any]) -> tuple[dict[str, float] | None, str | None]:
    """(rewards, reward_error) of a trial by Harbor's rules (see the module docstring)."""
    vr = result.get("verifier_result") or {}
    if isinstance(vr.get("rewards"), dict) and vr["rewards"]:
        return ({k: float(v) for k, v in vr["rewards"].items()} if rw.reward_valid(result) else None), None
    try:
        return {k: float(v) for k, v in rw.read_rewards(trial_dir / "verifier").items()}, None
    except rw.RewardFileError as exc:
        if exc.exception_type != "RewardFileNotFoundError":
            return None, f"{exc.exception_type}: {exc}"
    for rj in sorted(trial_dir.glob("steps/*/verifier/reward.json")):
        try:
            return {k: float(v) for k, v in rw.parse_reward_json(rj).items()}, None
        except rw.RewardFileError as exc:
            return None, f"{exc.exception_type}: {exc}"
    return None, None


def _correctness(rewards: dict[str, float] | None) -> float:
    if not rewards:
        return 0.0
    if "correctness" in rewards:
        return rewards["correctness"]
    if "reward" in rewards:
        return rewards["reward"]
    if len(rewards) == 1 and "process" not in rewards:
        return next(iter(rewards.values()))
    return 0.0


def _process_state(trial_dir: Path, process: float | None) -> str:
    details = _read_json(trial_dir / "verifier" / "reward-details.json")
    state = ((details or {}).get("process") or {}).get("state") if isinstance(details, dict) else None
    if state in ("scored", "unscorable"):
        return state
    return "scored" if process is not None else "not_judged"


def _exception_type(result: dict[str, Any]) -> str | None:
    excs = rw.recorded_exceptions(result)
    return str(excs[0].get("exception_type")) if excs else None


def task_metadata_index(tasks_dirs: Iterable[str | Path] = (TASKS_DIR,)) -> dict[str, dict[str, Any]]:
    """Map task name (full and short) → ``[metadata]`` of every task under ``tasks_dirs``."""
    index: dict[str, dict[str, Any]] = {}
    for d in tasks_dirs:
        if not Path(d).is_dir():
            continue
        for t in list_tasks(d):
            index[t.name] = t.metadata
            index.setdefault(t.short_name, t.metadata)
    return index


def load_trial(trial_dir: Path, meta_index: dict[str, dict[str, Any]] | None = None, *,
               require_process: bool = True) -> TrialRecord:
    """Flatten one trial folder into a :class:`TrialRecord`."""
    result = _read_json(trial_dir / "result.json")
    if not isinstance(result, dict):
        raise InputError("unreadable trial result.json; re-run the trial or remove the folder",
                         str(trial_dir / "result.json"))
    info = result.get("agent_info") or {}
    cfg_agent = (result.get("config") or {}).get("agent") or {}
    agent = info.get("name") or cfg_agent.get("name") or "unknown"
    model_info = info.get("model_info") or {}
    model = model_info.get("name") or (cfg_agent.get("model_name") or "").split("/")[-1] or "none"
    task_name = result["task_name"]
    dataset = result.get("source") or "adhoc"
    rewards, reward_error = _rewards(trial_dir, result)
    correctness, process = _correctness(rewards), (rewards or {}).get("process")
    ar = result.get("agent_result") or {}
    # usage is the agent's own claim: checked again here (a result.json from any runner), forged figures dropped
    checked, findings = usage_mod.check_context(ar if isinstance(ar, dict) else {})
    meta_findings = ((ar.get("metadata") or {}) if isinstance(ar, dict) else {}).get(usage_mod.FINDINGS_KEY) or []
    findings = [*(str(f) for f in meta_findings if isinstance(meta_findings, list)), *findings]
    cost = checked["cost_usd"]
    etype = _exception_type(result)
    meta = {}
    if meta_index:
        meta = meta_index.get(task_name) or meta_index.get(task_name.split("/")[-1]) or {}
    if not meta:
        tp = (result.get("task_id") or {}).get("path")
        if tp and Path(tp, "task.toml").is_file():
            try:
                meta = read_task_toml(Path(tp, "task.toml")).get("metadata", {})
            except InputError:
                meta = {}
    process_ok = (process is not None and process >= 1 - EPS) or (process is None and not require_process)
    strict = etype is None and correctness >= 1 - EPS and process_ok
    return TrialRecord(
        job=trial_dir.parent.name, trial_name=result.get("trial_name", trial_dir.name), task_name=task_name,
        task=task_name.split("/")[-1], dataset=dataset, agent=agent, model=model, correctness=float(correctness),
        process=None if process is None else float(process), reward_found=rewards is not None,
        cost_usd=None if cost is None else float(cost), n_input_tokens=checked["n_input_tokens"],
        n_output_tokens=checked["n_output_tokens"], exception_type=etype,
        error_kind=None if etype is None else ("timeout" if _is_timeout(etype) else "other"),
        difficulty=str(meta.get("difficulty", "unknown")), category=str(meta.get("category", "unknown")),
        strict_pass=bool(strict), process_state=_process_state(trial_dir, process), reward_error=reward_error,
        harbor_valid=rw.reward_valid(result),
        rewards_json=json.dumps((result.get("verifier_result") or {}).get("rewards") or {} if rw.reward_valid(result)
                                else {}),
        usage_flagged=bool(findings), usage_findings="\n".join(findings),
    )


def load_trials(job_dirs: Iterable[str | Path], tasks_dirs: Iterable[str | Path] = (TASKS_DIR,), *,
                require_process: bool = True) -> pd.DataFrame:
    """All trials of the given job folders as a DataFrame (one row per trial, :class:`TrialRecord` columns)."""
    index = task_metadata_index(tasks_dirs)
    rows = [asdict(load_trial(d, index, require_process=require_process)) for d in find_trial_dirs(job_dirs)]
    if not rows:
        raise InputError("no Harbor trial folders (result.json with trial_name) found under the given paths")
    df = pd.DataFrame(rows)
    df["config"] = df["agent"] + " / " + df["model"]
    return df


GROUP = ["agent", "model", "dataset"]


def _mean_or_none(s: pd.Series) -> float | None:
    s = s.dropna()
    return None if s.empty else float(s.mean())


def summarize(trials: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """Per agent + model + dataset (or ``by``): Strict-Pass@1, rewards, cost, errors.

    Columns: ``n`` trials, ``k`` strict passes, ``strict_pass_pct`` = 100 k/n, ``strict_pass`` ("k/n"),
    ``mean_correctness`` (missing rewards as 0), ``mean_process`` (over scored trials; NaN if none),
    ``n_process_scored``, ``mean_cost_usd`` (over trials reporting a cost; NaN if none), ``n_cost_known``,
    ``n_errored``, ``n_timeouts``, ``n_other_errors``, ``n_failed_without_error`` (no recorded exception, not
    a strict pass: a wrong or partial answer, or a process below 1), ``n_verifier_errors`` (trials whose
    verifier failed: reward file missing/empty/malformed or verifier timeout), ``n_process_unscorable``,
    ``n_reward_errors``, ``n_usage_flagged`` (agent-reported usage rejected as forged); Harbor's ``harbor_n_trials``, ``harbor_n_errors``,
    ``harbor_metrics`` (see the module docstring).
    """
    by = by or GROUP
    out = []
    for key, g in trials.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        n, k = len(g), int(g["strict_pass"].sum())
        row = dict(zip(by, key))
        row.update({
            "n": n, "k": k, "strict_pass": f"{k}/{n}", "strict_pass_pct": 100.0 * k / n,
            "mean_correctness": float(g["correctness"].mean()),
            "mean_process": _mean_or_none(g["process"]), "n_process_scored": int(g["process"].notna().sum()),
            "mean_cost_usd": _mean_or_none(g["cost_usd"]), "n_cost_known": int(g["cost_usd"].notna().sum()),
            "n_errored": int(g["error_kind"].notna().sum()),
            "n_timeouts": int((g["error_kind"] == "timeout").sum()),
            "n_other_errors": int((g["error_kind"] == "other").sum()),
            "n_failed_without_error": int((g["error_kind"].isna() & ~g["strict_pass"]).sum()),
            "n_verifier_errors": int(g["exception_type"].isin(VERIFIER_ERRORS).sum()),
            "n_usage_flagged": int(g["usage_flagged"].sum()),
            "n_process_unscorable": int((g["process_state"] == "unscorable").sum()),
            "n_reward_errors": int(g["reward_error"].notna().sum()),
            "harbor_n_trials": int(g["harbor_valid"].sum()),
            "harbor_n_errors": int(g["exception_type"].notna().sum()),
            "harbor_metrics": rw.harbor_mean([json.loads(r) for r, v in zip(g["rewards_json"], g["harbor_valid"]) if v]),
        })
        out.append(row)
    return pd.DataFrame(out)


def breakdown(trials: pd.DataFrame, column: str) -> pd.DataFrame:
    """Strict-Pass@1 and mean correctness per configuration and ``column`` (``difficulty`` or ``category``)."""
    return summarize(trials, by=[*GROUP, column])[[*GROUP, column, "n", "k", "strict_pass", "strict_pass_pct",
                                                   "mean_correctness", "mean_process"]]


def summary_json(trials: pd.DataFrame) -> dict[str, Any]:
    """Everything the report shows, JSON-ready (NaN → null)."""
    def records(df: pd.DataFrame) -> list[dict[str, Any]]:
        return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in df.to_dict(orient="records")]
    return {"overall": records(summarize(trials)), "by_difficulty": records(breakdown(trials, "difficulty")),
            "by_category": records(breakdown(trials, "category")),
            "trials": records(trials.drop(columns=["config"]))}


def plot_success_vs_cost(summary: pd.DataFrame, ax=None):
    """Scatter of Strict-Pass@1 (%) against mean cost per task (USD), one point per configuration."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    ax = ax or plt.gca()
    df = summary.assign(config=summary["agent"] + " / " + summary["model"],
                        cost=summary["mean_cost_usd"].astype(float).fillna(0.0))
    sns.scatterplot(data=df, x="cost", y="strict_pass_pct", hue="config", s=90, ax=ax)
    for _, r in df.iterrows():
        ax.annotate(f"{r['strict_pass']}", (r["cost"], r["strict_pass_pct"]), textcoords="offset points", xytext=(5, 5))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="agent / model")
    ax.set_xlabel("mean cost per task [USD] (unknown cost plotted at 0)")
    ax.set_ylabel("Strict-Pass@1 [%]")
    ax.set_ylim(-5, 105)
    return ax


def plot_category_bars(trials: pd.DataFrame, ax=None):
    """Bars of Strict-Pass@1 (%) per task category, one colour per configuration."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    ax = ax or plt.gca()
    df = breakdown(trials, "category").assign(config=lambda d: d["agent"] + " / " + d["model"])
    sns.barplot(data=df, x="category", y="strict_pass_pct", hue="config", ax=ax)
    ax.set_ylabel("Strict-Pass@1 [%]")
    ax.set_xlabel("task category")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="agent / model")
    ax.set_ylim(0, 105)
    return ax


def render_report(job_dirs: list[str | Path], out_html: str | Path, *, tasks_dirs: Iterable[str | Path] = (TASKS_DIR,),
                  require_process: bool = True, notebook: str | Path | None = None,
                  keep_notebook: str | Path | None = None) -> dict[str, Path | None]:
    """Execute ``notebooks/arena_report.ipynb`` with papermill and convert it to HTML (code hidden), by
    :func:`mdbench.report.render.render_notebook`, as the study report and the episode aggregate do.

    Writes ``out_html`` and ``<stem>.summary.json`` beside it, and the executed notebook only at
    ``keep_notebook`` when given; returns their paths (``notebook`` None when not kept).
    """
    from mdbench.paths import NOTEBOOKS_DIR
    from mdbench.report.render import render_notebook

    out_html = Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    trials = load_trials(job_dirs, tasks_dirs, require_process=require_process)   # fail early, clear error
    summary_path = out_html.with_suffix(".summary.json")
    summary_path.write_text(json.dumps(summary_json(trials), indent=2), encoding="utf-8")
    nb_in = Path(notebook) if notebook else NOTEBOOKS_DIR / "arena_report.ipynb"
    render_notebook(nb_in, {"job_dirs": json.dumps([str(Path(j).resolve()) for j in job_dirs]),
                            "tasks_dirs": json.dumps([str(Path(t).resolve()) for t in tasks_dirs]),
                            "require_process": require_process}, out_html,
                    keep_notebook=keep_notebook if keep_notebook is not None else False)
    return {"html": out_html, "notebook": Path(keep_notebook) if keep_notebook else None, "summary": summary_path}
