"""Harbor's reward rules and job statistics, restated for Python 3.11 (no Harbor import).

Facts taken from Harbor 0.26.0 (``harbor/verifier/verifier.py``, ``harbor/models/trial/error_policy.py``,
``harbor/models/job/result.py``, ``harbor/metrics/mean.py``); the tests compare every function here with
Harbor itself in ``.venv-harbor``:

- **Reward files.** ``verifier/reward.json`` is read when it exists, else ``verifier/reward.txt``.
  An empty file is ``RewardFileEmptyError``; JSON that does not parse, a value that is not a number
  (``"1.0"``, ``null``; Harbor lets ``true``/``false`` pass as 1/0) or is not finite (``NaN``,
  ``Infinity``, ``1e309``) is ``VerifierOutputParseError`` (so is a document that is not an object,
  which Harbor rejects one step later, in its ``VerifierResult`` model); ``reward.txt`` must hold one finite number (key ``reward``);
  neither file is ``RewardFileNotFoundError``. Each is a verifier error of the trial, with the file
  and the reason in its message — a malformed reward is never read as a partial one.
- **Valid rewards.** A trial's rewards count only when every recorded exception (trial level and
  ``step_results``) has an error policy with a valid reward: agent timeouts and non-zero agent exits
  keep their reward, verifier and infrastructure errors do not, unknown exception types do.
- **Job statistics** (``JobStats``), per ``evals`` key ``<agent>__<model>__<source>`` (``<agent>__<source>``
  without a model; model = the model name without its provider; source ``adhoc`` when unset):
  ``n_trials`` counts trials with valid rewards, ``n_errors`` trials with any exception;
  ``reward_stats`` lists trial names per key and value; Harbor's default metric ``mean`` is taken
  over the valid rewards only — one key gives ``{"mean": m}``, several keys a mean per key.

MDArena's columns (Strict-Pass@1, mean correctness over *all* trials with an error as 0) are
computed in :mod:`mdbench.arena.aggregate` beside these.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

#: Exception types whose trials keep no valid reward in Harbor's error policy table (any type not
#: listed, including exceptions Harbor does not know, keeps its reward).
NO_VALID_REWARD = frozenset({
    # infrastructure: not graded
    "EnvironmentStartTimeoutError", "SandboxBuildFailedError", "AgentSetupTimeoutError", "HealthcheckError",
    "SandboxLikelyOutOfMemoryError", "MemoryLimitExceededError", "SSHAccessError", "GKEExecStreamClosedError",
    "GKEPodNotFoundError", "RuntimeRequestError", "AddTestsDirError", "DownloadVerifierDirError",
    # model API: graded, reward not valid
    "ApiError", "ApiRateLimitError", "ApiInternalServerError", "ApiOverloadedError", "ApiConnectionClosedError",
    "ApiResponseStalledError", "UnknownApiError", "NetworkConnectionError", "ApiConnectionError",
    "ApiUsageLimitError", "RateLimitError", "InternalServerError", "ServiceUnavailableError",
    "APIConnectionError", "APIError", "Timeout",
    "UnsupportedModelParametersError", "BadRequestError", "UnprocessableEntityError", "UnsupportedParamsError",
    "APIResponseValidationError", "BudgetExceededError",
    # verifier
    "VerifierTimeoutError", "RewardFileNotFoundError", "RewardFileEmptyError", "VerifierOutputParseError",
    # authentication, cancellation
    "AgentAuthenticationError", "ModelNotFoundError", "ApiProviderResourceNotFoundError", "AuthenticationError",
    "PermissionDeniedError", "NotFoundError", "ServiceOperationsUnsupportedError", "VercelScopeError",
    "DspyImportError", "MissingExtraError", "RegradeError", "CancelledError",
})

#: Exception types after which Harbor still runs the verifier (agent-side ends of a run).
GRADED_AFTER = frozenset({"NonZeroAgentExitCodeError", "AgentTimeoutError", "ContextWindowExceededError",
                          "OutputTokenExceededError", "ContextLengthExceededError", "OutputLengthExceededError",
                          "AgentSafetyRefusalError", "ContentPolicyViolationError"})

#: The three reward-file errors, in Harbor's names.
REWARD_ERRORS = ("RewardFileNotFoundError", "RewardFileEmptyError", "VerifierOutputParseError")


class RewardFileError(Exception):
    """A reward file Harbor would reject; ``exception_type`` is Harbor's name for the error."""

    def __init__(self, exception_type: str, message: str):
        super().__init__(message)
        self.exception_type = exception_type


def parse_reward_json(path: Path) -> dict[str, float | int]:
    """Rewards of a ``reward.json`` by Harbor's rules; :class:`RewardFileError` names file and reason."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.stat().st_size == 0:
        raise RewardFileError("RewardFileEmptyError", f"Reward file is empty at {path}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RewardFileError("VerifierOutputParseError", f"Failed to parse rewards from JSON file {path}: {exc}") \
            from None
    if not isinstance(data, dict):
        raise RewardFileError("VerifierOutputParseError",
                              f"Rewards in JSON file {path} are {type(data).__name__}, not an object of numbers")
    for key, value in data.items():
        # as Harbor: a JSON true/false passes as the integer 1/0 (bool is an int in Python)
        if not isinstance(value, (int, float)):
            raise RewardFileError("VerifierOutputParseError", f"Non-numeric reward {key}={value!r} in JSON file {path}")
        if not math.isfinite(value):
            raise RewardFileError("VerifierOutputParseError", f"Non-finite reward {key}={value!r} in JSON file {path}")
    return data


def parse_reward_txt(path: Path) -> dict[str, float]:
    """``{"reward": x}`` from a ``reward.txt`` holding one finite number (Harbor's rule)."""
    if path.stat().st_size == 0:
        raise RewardFileError("RewardFileEmptyError", f"Reward file is empty at {path}")
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        value = float(text)
    except ValueError:
        raise RewardFileError("VerifierOutputParseError",
                              f"Failed to parse rewards from text file {path}: {text.strip()[:40]!r} is not one number") \
            from None
    if not math.isfinite(value):
        raise RewardFileError("VerifierOutputParseError", f"Non-finite reward {value!r} in text file {path}")
    return {"reward": value}


def read_rewards(verifier_dir: Path) -> dict[str, float | int]:
    """Rewards from a verifier folder: ``reward.json`` first, else ``reward.txt`` (Harbor's order)."""
    rj, rt = Path(verifier_dir) / "reward.json", Path(verifier_dir) / "reward.txt"
    if rj.exists():
        return parse_reward_json(rj)
    if rt.exists():
        return parse_reward_txt(rt)
    raise RewardFileError("RewardFileNotFoundError", f"No reward file found at {rt} or {rj}")


def has_valid_reward(exception_type: str) -> bool:
    """Whether a trial that recorded this exception type keeps a valid reward (Harbor's error policy)."""
    return exception_type not in NO_VALID_REWARD


def recorded_exceptions(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Trial-level exception first, then those of ``step_results`` (Harbor's ``recorded_exceptions``)."""
    out = [result["exception_info"]] if result.get("exception_info") else []
    out += [s["exception_info"] for s in result.get("step_results") or [] if s.get("exception_info")]
    return out


def reward_valid(result: dict[str, Any]) -> bool:
    """Harbor's ``TrialResult.reward_valid`` on a ``result.json`` document."""
    rewards = (result.get("verifier_result") or {}).get("rewards")
    if not rewards:
        return False
    return all(has_valid_reward(e.get("exception_type", "")) for e in recorded_exceptions(result))


def evals_key(result: dict[str, Any]) -> str:
    """Harbor's ``evals`` key of a trial: ``agent__model__source`` (``agent__source`` without a model)."""
    info = result.get("agent_info") or {}
    model = (info.get("model_info") or {}).get("name")
    source = result.get("source") or "adhoc"
    return f"{info.get('name')}__{model}__{source}" if model else f"{info.get('name')}__{source}"


def harbor_mean(rewards: list[dict[str, float | int]]) -> dict[str, float]:
    """Harbor's default ``mean`` metric over valid reward dicts (one key → ``mean``, else per key)."""
    keys = sorted({k for r in rewards for k in r})
    if not rewards:
        return {}
    if len(keys) <= 1:
        values = [next(iter(r.values()), 0) for r in rewards]
        return {"mean": sum(values) / len(values)}
    return {k: sum(r.get(k, 0) for r in rewards) / len(rewards) for k in keys}


def job_stats(results: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Harbor's ``JobStats`` of trial ``result.json`` documents, with the default ``mean`` metric.

    Returns ``{"n_completed_trials", "n_errored_trials", "n_cancelled_trials", "evals": {key: {"n_trials",
    "n_errors", "metrics", "reward_stats", "exception_stats"}}, "n_input_tokens", "n_cache_tokens",
    "n_output_tokens", "cost_usd"}`` (reward values as strings, as Harbor writes them to JSON).
    """
    evals: dict[str, dict[str, Any]] = {}
    totals: dict[str, float | int | None] = {"n_input_tokens": None, "n_cache_tokens": None,
                                             "n_output_tokens": None, "cost_usd": None}
    n, n_err, n_cancel = 0, 0, 0
    valid: dict[str, list[dict[str, float | int]]] = defaultdict(list)
    for res in results:
        n += 1
        key = evals_key(res)
        e = evals.setdefault(key, {"n_trials": 0, "n_errors": 0, "metrics": [], "reward_stats": {},
                                   "exception_stats": {}})
        if reward_valid(res):
            e["n_trials"] += 1
            rewards = res["verifier_result"]["rewards"]
            valid[key].append(rewards)
            for k, v in rewards.items():
                e["reward_stats"].setdefault(k, {}).setdefault(str(v), []).append(res.get("trial_name"))
        types = sorted({x.get("exception_type") for x in recorded_exceptions(res)})
        for t in types:
            e["exception_stats"].setdefault(t, []).append(res.get("trial_name"))
        if types:
            e["n_errors"] += 1
            n_err += 1
            n_cancel += "CancelledError" in types
        for k, v in _token_totals(res).items():
            if v is not None:
                totals[k] = (totals[k] or 0) + v
    for key, e in evals.items():
        e["metrics"] = [harbor_mean(valid[key])] if valid[key] else []
    return {"n_completed_trials": n, "n_errored_trials": n_err, "n_cancelled_trials": n_cancel,
            "evals": evals, **totals}


def _token_totals(res: dict[str, Any]) -> dict[str, float | int | None]:
    contexts = [res["agent_result"]] if res.get("agent_result") else [
        s["agent_result"] for s in res.get("step_results") or [] if s.get("agent_result")]
    out: dict[str, float | int | None] = {"n_input_tokens": None, "n_cache_tokens": None, "n_output_tokens": None,
                                          "cost_usd": None}
    for ctx in contexts:
        for k in out:
            if ctx.get(k) is not None:
                out[k] = (out[k] or 0) + ctx[k]
    return out
