"""Ask the installed Harbor about files: run inside the Harbor environment, answer JSON on stdout.

``python -m mdbench.arena.harbor_probe COMMAND PATH…`` with ``.venv-harbor/bin/python``; the
project side calls it through :mod:`mdbench.arena.harbor_compat` (which runs under Python 3.11 and
cannot import Harbor). Commands:

- ``task DIR…``: load each folder with Harbor's ``Task``; report Harbor's Docker-path decision.
- ``trial DIR…``: validate ``result.json`` with ``TrialResult`` and ``config.json`` with ``TrialConfig``.
- ``job DIR``: validate ``config.json`` with ``JobConfig`` and ``result.json`` with ``JobResult``.
- ``stats DIR…``: Harbor's ``JobStats.from_trial_results`` over the trial folders (``result.json``).
- ``trajectory FILE…``: validate ATIF files with Harbor's ``Trajectory``.
- ``reward DIR…``: Harbor's verifier reading ``reward.json``/``reward.txt`` of each folder.
- ``policy NAME…``: Harbor's error policy of exception type names.

Each answer is ``{"harbor_version": …, "items": [{"path": …, "ok": bool, "error": str|null, …}]}``.
Keys a model does not know are listed as ``unknown_keys`` (Harbor ignores them silently).
"""

from __future__ import annotations

import json
import sys
import types
import typing
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any


def _unknown_keys(model_cls, data: Any, prefix: str = "") -> list[str]:
    """Keys of ``data`` that ``model_cls`` (a pydantic model) has no field for, recursively."""
    from pydantic import BaseModel

    out: list[str] = []
    if not isinstance(data, dict):
        return out
    fields = model_cls.model_fields
    computed = getattr(model_cls, "model_computed_fields", {})
    for key, value in data.items():
        if key not in fields and key not in computed:
            out.append(prefix + key)
            continue
        if key in computed:
            continue
        ann = fields[key].annotation
        origin = typing.get_origin(ann)
        if origin is not None and origin not in (typing.Union, types.UnionType):
            continue    # dict[...] / list[...]: keys are data, not field names
        for cand in getattr(ann, "__args__", (ann,)):
            if isinstance(cand, type) and issubclass(cand, BaseModel) and isinstance(value, dict):
                out += _unknown_keys(cand, value, prefix + key + ".")
                break
    return out


def _error(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " | ")
    return f"{type(exc).__name__}: {text}"


def probe_task(path: Path) -> dict[str, Any]:
    from harbor.environments.definition import should_upload_environment_dir, should_use_prebuilt_docker_image
    from harbor.models.task.task import Task

    item: dict[str, Any] = {"path": str(path)}
    try:
        task = Task(path)
    except Exception as exc:  # noqa: BLE001 - report any loading failure
        return {**item, "ok": False, "error": _error(exc)}
    env_dir = task.paths.environment_dir
    image = task.config.environment.docker_image
    item.update({
        "ok": True, "error": None, "name": task.name, "schema_version": task.config.schema_version,
        "docker_image": image, "dockerfile": (env_dir / "Dockerfile").is_file(),
        "uses_prebuilt_image": should_use_prebuilt_docker_image(env_dir, docker_image=image, force_build=False),
        "uploads_environment_dir": should_upload_environment_dir(env_dir, docker_image=image),
        "agent_user": task.config.agent.user, "network_mode": task.config.environment.network_mode.value,
        "artifacts": [a if isinstance(a, str) else a.source for a in task.config.artifacts],
    })
    return item


def probe_trial(path: Path) -> dict[str, Any]:
    from harbor.models.trial.config import TrialConfig
    from harbor.models.trial.result import TrialResult

    item: dict[str, Any] = {"path": str(path)}
    try:
        raw = json.loads((path / "result.json").read_text(encoding="utf-8"))
        result = TrialResult.model_validate(raw)
        item["unknown_keys"] = _unknown_keys(TrialResult, raw)
        if (path / "config.json").is_file():
            craw = json.loads((path / "config.json").read_text(encoding="utf-8"))
            TrialConfig.model_validate(craw)
            item["config_unknown_keys"] = _unknown_keys(TrialConfig, craw)
    except Exception as exc:  # noqa: BLE001
        return {**item, "ok": False, "error": _error(exc)}
    item.update({"ok": True, "error": None, "reward_valid": result.reward_valid,
                 "rewards": result.verifier_result.rewards if result.verifier_result else None,
                 "exceptions": [e.exception_type for e in result.recorded_exceptions()]})
    return item


def probe_job(path: Path) -> dict[str, Any]:
    from harbor.models.job.config import JobConfig
    from harbor.models.job.result import JobResult

    item: dict[str, Any] = {"path": str(path)}
    try:
        craw = json.loads((path / "config.json").read_text(encoding="utf-8"))
        JobConfig.model_validate(craw)
        rraw = json.loads((path / "result.json").read_text(encoding="utf-8"))
        res = JobResult.model_validate(rraw)
    except Exception as exc:  # noqa: BLE001
        return {**item, "ok": False, "error": _error(exc)}
    return {**item, "ok": True, "error": None, "config_unknown_keys": _unknown_keys(JobConfig, craw),
            "result_unknown_keys": _unknown_keys(JobResult, rraw), "n_total_trials": res.n_total_trials,
            "stats": json.loads(res.stats.model_dump_json())}


def probe_stats(paths: list[Path]) -> dict[str, Any]:
    from harbor.models.job.result import JobStats
    from harbor.models.trial.result import TrialResult

    from harbor.metrics.mean import Mean

    results = [TrialResult.model_validate_json((p / "result.json").read_text(encoding="utf-8")) for p in paths]
    stats = JobStats.from_trial_results(results)
    valid: dict[str, list[dict[str, Any]]] = {}
    for r in results:   # the job's default metric, over the rewards Harbor counts (as Job does)
        key = JobStats.format_agent_evals_key(r.agent_info.name, r.agent_info.model_info.name
                                              if r.agent_info.model_info else None, r.source or "adhoc")
        if r.reward_valid and r.verifier_result is not None:
            valid.setdefault(key, []).append(r.verifier_result.rewards)
    for key, rewards in valid.items():
        stats.evals[key].metrics = [Mean().compute(rewards)]
    return {"path": [str(p) for p in paths], "ok": True, "error": None,
            "stats": json.loads(stats.model_dump_json()),
            "trials": {r.trial_name: {"reward_valid": r.reward_valid,
                                      "rewards": r.verifier_result.rewards if r.verifier_result else None,
                                      "exceptions": [e.exception_type for e in r.recorded_exceptions()]}
                       for r in results}}


def probe_trajectory(path: Path) -> dict[str, Any]:
    from harbor.models.trajectories.trajectory import Trajectory

    try:
        traj = Trajectory.model_validate_json(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001
        return {"path": str(path), "ok": False, "error": _error(exc)}
    return {"path": str(path), "ok": True, "error": None, "schema_version": traj.schema_version,
            "n_steps": len(traj.steps)}


def probe_reward(path: Path) -> dict[str, Any]:
    """Harbor's own reward-file parsing (``Verifier``'s readers) of a verifier folder."""
    from types import SimpleNamespace

    from harbor.verifier.verifier import RewardFileNotFoundError, Verifier

    fake = SimpleNamespace(trial_paths=SimpleNamespace(reward_json_path=path / "reward.json",
                                                       reward_text_path=path / "reward.txt"))
    try:
        if fake.trial_paths.reward_json_path.exists():
            rewards = Verifier._parse_reward_json(fake)
        elif fake.trial_paths.reward_text_path.exists():
            rewards = Verifier._parse_reward_text(fake)
        else:
            raise RewardFileNotFoundError(f"No reward file found in {path}")
        from harbor.models.verifier.result import VerifierResult

        VerifierResult(rewards=rewards)
    except Exception as exc:  # noqa: BLE001
        return {"path": str(path), "ok": False, "error": _error(exc), "exception_type": type(exc).__name__}
    return {"path": str(path), "ok": True, "error": None, "rewards": rewards}


def probe_policy(name: str) -> dict[str, Any]:
    from harbor.models.trial.error_policy import policy_for

    p = policy_for(name)
    return {"path": name, "ok": True, "error": None, "should_retry": p.should_retry,
            "should_grade": p.should_grade, "has_valid_reward": p.has_valid_reward}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    command, args = argv[0], argv[1:]
    warnings.simplefilter("ignore")
    single = {"task": probe_task, "trial": probe_trial, "job": probe_job, "trajectory": probe_trajectory,
              "reward": probe_reward}
    if command in single:
        items = [single[command](Path(a)) for a in args]
    elif command == "stats":
        items = [probe_stats([Path(a) for a in args])]
    elif command == "policy":
        items = [probe_policy(a) for a in args]
    else:
        print(f"unknown command {command!r}; see --help", file=sys.stderr)
        return 2
    json.dump({"harbor_version": version("harbor"), "items": items}, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
