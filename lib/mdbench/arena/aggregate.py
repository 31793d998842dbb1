"""Aggregate Harbor job folders into MDArena-style tables: Strict-Pass@1, rewards, cost, errors.

Reads any number of job folders (or folders of trial folders: a trial folder is one whose
``result.json`` carries ``trial_name`` and ``task_name``). Per trial:

- **rewards**: ``result.json`` ``verifier_result.rewards``; else ``verifier/reward.json``, else
  ``verifier/reward.txt``, else ``steps/*/verifier/reward.json``. A missing reward counts as 0.
- **correctness**: reward key ``correctness``; else ``reward``; else the single key present.
- **process**: reward key ``process`` (``None`` when not scored).
- **error**: top-level ``exception_info`` or any ``step_results[].exception_info``; timeouts
  (``*TimeoutError``) are told apart from other exceptions. An errored trial may still carry rewards.
- **Strict-Pass**: correctness = 1 and process = 1 and no error. With ``require_process=False`` an
  unscored process is not held against the trial.

Grouping is by agent + model + dataset (Harbor's ``evals`` key). Difficulty and category come from
the task's ``task.toml`` ``[metadata]`` (looked up by task name in ``tasks_dirs`` or via the trial's
``task_id.path``), ``unknown`` otherwise.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from mdbench.arena.task import TASKS_DIR, list_tasks, read_task_toml
from mdbench.errors import InputError

log = logging.getLogger(__name__)

EPS = 1e-9


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


def _rewards(trial_dir: Path, result: dict[str, Any]) -> dict[str, float] | None:
    vr = result.get("verifier_result") or {}
    if isinstance(vr.get("rewards"), dict) and vr["rewards"]:
        return {k: float(v) for k, v in vr["rewards"].items() if isinstance(v, (int, float))}
    for rj in [trial_dir / "verifier" / "reward.json", *sorted(trial_dir.glob("steps/*/verifier/reward.json"))]:
        data = _read_json(rj)
        if isinstance(data, dict):
            return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}
    rt = trial_dir / "verifier" / "reward.txt"
    if rt.is_file():
        try:
            return {"reward": float(rt.read_text(encoding="utf-8").strip())}
        except ValueError:
            return None
    return None


def _exception_type(result: dict[str, Any]) -> str | None:
    exc = result.get("exception_info")
    if isinstance(exc, dict) and exc.get("exception_type"):
        return str(exc["exception_type"])
    for step in result.get("step_results") or []:
        e = (step or {}).get("exception_info")
        if isinstance(e, dict) and e.get("exception_type"):
            return str(e["exception_type"])
    return None


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
    dataset = result.get("source") or (task_name.split("/")[0] if "/" in task_name else "local")
    rewards = _rewards(trial_dir, result)
    if rewards is None:
        correctness, process = 0.0, None
    elif "correctness" in rewards:
        correctness, process = rewards["correctness"], rewards.get("process")
    elif "reward" in rewards:
        correctness, process = rewards["reward"], rewards.get("process")
    elif len(rewards) == 1:
        correctness, process = next(iter(rewards.values())), None
    else:
        correctness, process = 0.0, rewards.get("process")
    ar = result.get("agent_result") or {}
    cost = ar.get("cost_usd")
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
        cost_usd=None if cost is None else float(cost), n_input_tokens=ar.get("n_input_tokens"),
        n_output_tokens=ar.get("n_output_tokens"), exception_type=etype,
        error_kind=None if etype is None else ("timeout" if _is_timeout(etype) else "other"),
        difficulty=str(meta.get("difficulty", "unknown")), category=str(meta.get("category", "unknown")),
        strict_pass=bool(strict),
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
    ``n_errored``, ``n_timeouts``, ``n_other_errors``, ``n_verifier_failures`` (no error, not a strict pass).
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
            "n_verifier_failures": int((g["error_kind"].isna() & ~g["strict_pass"]).sum()),
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
                  require_process: bool = True, notebook: str | Path | None = None) -> dict[str, Path]:
    """Execute ``notebooks/arena_report.ipynb`` with papermill and convert it to HTML (code hidden).

    Writes ``out_html``, the executed notebook and ``<stem>.summary.json`` beside it; returns their paths.
    """
    import nbformat
    import papermill as pm
    from nbconvert import HTMLExporter

    from mdbench.paths import NOTEBOOKS_DIR

    out_html = Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    trials = load_trials(job_dirs, tasks_dirs, require_process=require_process)   # fail early, clear error
    summary_path = out_html.with_suffix(".summary.json")
    summary_path.write_text(json.dumps(summary_json(trials), indent=2), encoding="utf-8")
    nb_in = Path(notebook) if notebook else NOTEBOOKS_DIR / "arena_report.ipynb"
    nb_out = out_html.with_suffix(".ipynb")
    pm.execute_notebook(
        str(nb_in), str(nb_out), kernel_name="mdbench", progress_bar=False, cwd=str(out_html.parent),
        parameters={"job_dirs": json.dumps([str(Path(j).resolve()) for j in job_dirs]),
                    "tasks_dirs": json.dumps([str(Path(t).resolve()) for t in tasks_dirs]),
                    "require_process": require_process},
    )
    exporter = HTMLExporter(exclude_input=True)
    with warnings.catch_warnings():
        # scrapbook's glue outputs have a MIME type HTML cannot show; they are data, not display
        warnings.filterwarnings("ignore", message=".*is not able to be represented.*")
        body, _ = exporter.from_notebook_node(nbformat.read(str(nb_out), as_version=4))
    out_html.write_text(body, encoding="utf-8")
    return {"html": out_html, "notebook": nb_out, "summary": summary_path}
