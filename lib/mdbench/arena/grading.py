"""Verifier support for arena tasks: deterministic checks, process criteria, Harbor reward files.

A task's ``tests/verify.py`` builds a :class:`Grader`, adds one check per deterministic criterion and
calls :meth:`Grader.finish`. That writes, in the Harbor verifier log folder (``/logs/verifier`` in a
container, ``$ARENA_VERIFIER_DIR`` in the local runner):

- ``reward.json``: a flat object of numbers, ``{"correctness": k/n}`` plus ``"process"`` when process
  criteria were scored;
- ``reward-details.json``: per reward key ``{score, criteria: [{name, value, raw, weight, description,
  reasoning, error}], kind}`` with ``kind`` ``programmatic`` (deterministic checks) or ``llm``/``agent``
  (process criteria scored by a judge command or an expert score file).

Correctness is the fraction of satisfied criteria, :math:`c = \\sum_i w_i v_i / \\sum_i w_i` with
:math:`v_i \\in \\{0, 1\\}`. Process criteria follow rewardkit: a binary criterion scores its raw 0/1, a
Likert criterion with ``points`` :math:`P` scores :math:`(r - 1)/(P - 1)` for a raw rating :math:`r \\in [1, P]`.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from mdbench.errors import InputError

log = logging.getLogger(__name__)

#: Harbor's in-container paths and the environment variables the local runner maps them with.
HARBOR_PATHS: dict[str, str] = {
    "ARENA_APP_DIR": "/app",
    "ARENA_TESTS_DIR": "/tests",
    "ARENA_SOLUTION_DIR": "/solution",
    "ARENA_VERIFIER_DIR": "/logs/verifier",
    "ARENA_AGENT_DIR": "/logs/agent",
}


def harbor_path(var: str) -> Path:
    """Return the folder a Harbor path maps to: ``$VAR`` when set (local runner), else the container path.

    Parameters
    ----------
    var : str
        One of :data:`HARBOR_PATHS` (``ARENA_APP_DIR``, ``ARENA_TESTS_DIR``, ...).
    """
    return Path(os.environ.get(var, HARBOR_PATHS[var]))


def app_dir() -> Path:
    """The agent's working directory (``/app`` in the container)."""
    return harbor_path("ARENA_APP_DIR")


def tests_dir() -> Path:
    """The task's ``tests/`` folder (``/tests`` in the container)."""
    return harbor_path("ARENA_TESTS_DIR")


def verifier_dir() -> Path:
    """Where rewards go (``/logs/verifier`` in the container)."""
    return harbor_path("ARENA_VERIFIER_DIR")


def agent_dir() -> Path:
    """Where agent logs and the trajectory go (``/logs/agent`` in the container)."""
    return harbor_path("ARENA_AGENT_DIR")


@dataclass
class Criterion:
    """One scored criterion of a reward key (Harbor ``reward-details.json`` entry).

    Attributes
    ----------
    name : str
        Identifier, unique within the reward key.
    value : float
        Normalised score in [0, 1].
    raw : Any
        What was measured or rated (a number, a bool, a short string).
    weight : float
        Weight in the weighted mean.
    description : str
        What the criterion demands.
    reasoning : str | None
        Why it got this value.
    error : str | None
        Set when evaluating the criterion raised (the criterion then scores 0).
    """

    name: str
    value: float
    raw: Any = None
    weight: float = 1.0
    description: str = ""
    reasoning: str | None = None
    error: str | None = None


def weighted_score(criteria: list[Criterion]) -> float:
    """Weighted mean of criterion values, :math:`\\sum w_i v_i / \\sum w_i` (0 for no criteria)."""
    total = sum(c.weight for c in criteria)
    if total <= 0:
        return 0.0
    return sum(c.weight * c.value for c in criteria) / total


@dataclass
class Grader:
    """Collects the deterministic checks of one task and writes Harbor reward files.

    Examples
    --------
    >>> g = Grader("scale-charges-072")
    >>> g.check("file_exists", lambda: out.exists(), "the output file exists")
    >>> g.finish()
    """

    task: str
    criteria: list[Criterion] = field(default_factory=list)

    def check(self, name: str, test: Callable[[], Any] | bool, description: str, weight: float = 1.0) -> bool:
        """Evaluate one binary criterion; an exception counts as a failure and is recorded.

        ``test`` may return a bool, or a ``(bool, raw)`` tuple to record what was measured.
        """
        raw: Any = None
        error = None
        try:
            result = test() if callable(test) else test
            if isinstance(result, tuple):
                result, raw = result
            ok = bool(result)
        except Exception as exc:  # noqa: BLE001 - any failure of a check is a failed criterion
            ok = False
            error = f"{type(exc).__name__}: {exc}"
        self.criteria.append(
            Criterion(name=name, value=1.0 if ok else 0.0, raw=_jsonable(raw), weight=weight,
                      description=description, error=error)
        )
        return ok

    @property
    def correctness(self) -> float:
        """Fraction of satisfied deterministic criteria."""
        return weighted_score(self.criteria)

    def finish(self, out_dir: Path | None = None) -> dict[str, float]:
        """Write ``reward.json`` and ``reward-details.json``; score process criteria when configured.

        Process criteria (``tests/process.toml``) are scored when ``ARENA_JUDGE_CMD`` (an external judge
        command) or ``ARENA_PROCESS_SCORES`` (an expert score file) is set; otherwise no ``process`` key.

        Returns
        -------
        dict
            The rewards written, e.g. ``{"correctness": 0.75, "process": 1.0}``.
        """
        out_dir = Path(out_dir) if out_dir is not None else verifier_dir()
        out_dir.mkdir(parents=True, exist_ok=True)
        rewards = {"correctness": round(self.correctness, 6)}
        details: dict[str, Any] = {
            "correctness": {"score": rewards["correctness"],
                            "criteria": [asdict(c) for c in self.criteria], "kind": "programmatic"}
        }
        process_file = tests_dir() / "process.toml"
        if process_file.exists():
            scored = score_process_from_env(process_file, self.task)
            if scored is not None:
                kind, crits = scored
                rewards["process"] = round(weighted_score(crits), 6)
                details["process"] = {"score": rewards["process"],
                                      "criteria": [asdict(c) for c in crits], "kind": kind}
        (out_dir / "reward.json").write_text(json.dumps(rewards, indent=2) + "\n", encoding="utf-8")
        (out_dir / "reward-details.json").write_text(json.dumps(details, indent=2) + "\n", encoding="utf-8")
        for c in self.criteria:
            mark = "PASS" if c.value == 1.0 else "FAIL"
            # stdout of test.sh is the verifier's log (Harbor keeps it as test-stdout.txt)
            sys.stdout.write(f"[{mark}] {c.name}: {c.description}" + (f" ({c.error})" if c.error else "") + "\n")
        sys.stdout.write(json.dumps(rewards) + "\n")
        return rewards


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


@dataclass
class ProcessCriterion:
    """A rewardkit-style process criterion from ``tests/process.toml``."""

    name: str
    description: str
    type: str = "binary"
    points: int = 2
    weight: float = 1.0

    def normalise(self, raw: float) -> float:
        """Binary → raw (0/1); Likert → (raw − 1)/(points − 1), clipped to [0, 1]."""
        if self.type == "binary":
            return 1.0 if float(raw) >= 1 else 0.0
        value = (float(raw) - 1.0) / (self.points - 1.0)
        return min(1.0, max(0.0, value))


def load_process_criteria(path: Path) -> list[ProcessCriterion]:
    """Read ``[[criterion]]`` entries (description, type binary|likert, points, weight) from a TOML file.

    Raises
    ------
    InputError
        Malformed TOML, a criterion without a description, an unknown type, or a Likert scale with
        fewer than 2 points.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"malformed TOML ({exc}); fix the syntax", str(path)) from exc
    items = data.get("criterion")
    if not isinstance(items, list) or not items:
        raise InputError("no [[criterion]] entries; add at least one with description and type", str(path))
    out = []
    for i, item in enumerate(items):
        name = item.get("name") or f"criterion_{i + 1}"
        desc = item.get("description")
        ctype = item.get("type", "binary")
        if not isinstance(desc, str) or not desc.strip():
            raise InputError(f"criterion {name!r} has no description", str(path))
        if ctype not in ("binary", "likert"):
            raise InputError(f"criterion {name!r}: type must be 'binary' or 'likert', not {ctype!r}", str(path))
        points = int(item.get("points", 2 if ctype == "binary" else 5))
        if ctype == "likert" and points < 2:
            raise InputError(f"criterion {name!r}: a likert scale needs points >= 2", str(path))
        out.append(ProcessCriterion(name=name, description=desc.strip(), type=ctype, points=points,
                                    weight=float(item.get("weight", 1.0))))
    return out


def score_process(criteria: list[ProcessCriterion], raw_scores: dict[str, Any]) -> list[Criterion]:
    """Turn raw judge/expert scores into normalised criteria; a criterion not scored gets 0.

    ``raw_scores`` maps criterion name to a number or to ``{"raw": number, "reasoning": str}``.
    """
    out = []
    for pc in criteria:
        entry = raw_scores.get(pc.name)
        reasoning = None
        if isinstance(entry, dict):
            reasoning = entry.get("reasoning")
            entry = entry.get("raw")
        if entry is None:
            out.append(Criterion(pc.name, 0.0, None, pc.weight, pc.description, None, "not scored"))
            continue
        try:
            value = pc.normalise(float(entry))
            err = None
        except (TypeError, ValueError) as exc:
            value, err = 0.0, f"raw score {entry!r} is not a number ({exc})"
        out.append(Criterion(pc.name, value, entry, pc.weight, pc.description, reasoning, err))
    return out


def score_process_from_env(process_file: Path, task: str) -> tuple[str, list[Criterion]] | None:
    """Score process criteria with ``$ARENA_PROCESS_SCORES`` (expert file) or ``$ARENA_JUDGE_CMD``.

    The expert score file is JSON, either ``{criterion: raw}`` or ``{task_name: {criterion: raw}}``.
    The judge command runs in a shell with ``ARENA_CRITERIA`` (this TOML), ``ARENA_TRAJECTORY`` and the
    mapped Harbor folders in its environment, and prints a JSON object ``{criterion: raw}`` on stdout.
    Returns ``None`` when neither is configured.
    """
    criteria = load_process_criteria(process_file)
    scores_file = os.environ.get("ARENA_PROCESS_SCORES")
    judge = os.environ.get("ARENA_JUDGE_CMD")
    if scores_file:
        data = json.loads(Path(scores_file).read_text(encoding="utf-8"))
        if task in data and isinstance(data[task], dict):
            data = data[task]
        return "agent", score_process(criteria, data)
    if judge:
        env = dict(os.environ, ARENA_CRITERIA=str(process_file),
                   ARENA_TRAJECTORY=str(agent_dir() / "trajectory.json"), ARENA_TASK=task)
        try:
            proc = subprocess.run(judge, shell=True, env=env, capture_output=True, text=True, timeout=600)
            data = json.loads(proc.stdout)
            if not isinstance(data, dict):
                raise ValueError("judge output is not a JSON object")
        except (subprocess.TimeoutExpired, ValueError) as exc:
            crits = [Criterion(pc.name, 0.0, None, pc.weight, pc.description, None,
                               f"judge {shlex.quote(judge)} failed: {exc}") for pc in criteria]
            return "llm", crits
        return "llm", score_process(criteria, data)
    return None


def read_json(path: Path) -> Any:
    """Read a JSON file (helper for verifiers)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_xvg(path: Path):
    """Read a GROMACS ``.xvg`` table (``#`` and ``@`` lines skipped) into a 2-D numpy array."""
    import numpy as np

    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        s = line.strip()
        if not s or s[0] in "#@":
            continue
        rows.append([float(x) for x in s.split()])
    return np.asarray(rows, dtype=float)
