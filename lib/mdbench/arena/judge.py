"""The process judge: score a task's process criteria from the agent's trajectory and output files.

MDArena's judge is given the agent's full execution trajectory (``trajectory.json``) together with a
task-specific set of output files, and scores the task's process criteria (seed 001, §3.3). Here a
task lists its criteria in ``tests/process.toml`` — rewardkit's format: ``[[criterion]]`` entries
(``name``, ``description``, ``type`` binary|likert, ``points``, ``weight``) and a ``[judge]`` table
whose ``files`` are the output files the judge sees — and one of these judges scores them:

- ``command`` — an external program (``--judge-cmd``, ``$ARENA_JUDGE_CMD``): it gets one JSON
  document on stdin (:class:`JudgeInput`: task, instruction, criteria, trajectory, files) and prints
  ``{criterion: raw}`` or ``{criterion: {"raw": r, "reasoning": "…"}}`` on stdout;
- ``expert`` — an expert score file (``--process-scores``, ``$ARENA_PROCESS_SCORES``): JSON
  ``{criterion: raw}`` or ``{task_name: {criterion: raw}}``.

A trial without a usable ATIF trajectory is **unscorable**: no judge is run, no ``process`` reward
is written, and ``reward-details.json`` says why. A judge that fails scores every criterion 0 with
the error recorded. Normalisation follows rewardkit: binary → raw 0/1, Likert with ``P`` points →
``(r − 1)/(P − 1)``.

An LLM-endpoint judge belongs in :data:`JUDGES` as ``"llm"`` (built on the shared ``mdbench.llm``
client, reading the same :class:`JudgeInput` and the ``[judge] judge`` model name); nothing here
calls a model.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from mdbench.arena import atif
from mdbench.arena.grading import Criterion, agent_dir, app_dir, harbor_path
from mdbench.errors import InputError

#: Largest part of one output file handed to a judge [characters].
MAX_FILE_CHARS = 100_000
#: Wall-clock limit of a judge command [s] (MDArena: 300–600 s).
JUDGE_TIMEOUT_S = 600.0


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


@dataclass
class ProcessSpec:
    """A task's ``tests/process.toml``: the criteria and what the judge is shown."""

    criteria: list[ProcessCriterion]
    files: list[str] = field(default_factory=list)       # container paths, e.g. /app/output/changes.md
    judge_model: str | None = None                       # [judge] judge, for an LLM judge


def load_process_spec(path: Path) -> ProcessSpec:
    """Read ``[[criterion]]`` entries and the ``[judge]`` table of a process TOML file.

    Raises
    ------
    InputError
        Malformed TOML, a criterion without a description, an unknown type, a Likert scale with
        fewer than 2 points, or ``[judge] files`` that is not a list of absolute paths.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"malformed TOML ({exc}); fix the syntax", str(path)) from exc
    items = data.get("criterion")
    if not isinstance(items, list) or not items:
        raise InputError("no [[criterion]] entries; add at least one with description and type", str(path))
    criteria = []
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
        criteria.append(ProcessCriterion(name=name, description=desc.strip(), type=ctype, points=points,
                                         weight=float(item.get("weight", 1.0))))
    judge = data.get("judge") or {}
    files = judge.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) and f.startswith("/") for f in files):
        raise InputError("[judge] files must be a list of absolute container paths (e.g. \"/app/output/x.json\")",
                         str(path))
    return ProcessSpec(criteria=criteria, files=files, judge_model=judge.get("judge"))


def load_process_criteria(path: Path) -> list[ProcessCriterion]:
    """The criteria of a process TOML file (see :func:`load_process_spec`)."""
    return load_process_spec(path).criteria


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


@dataclass
class JudgeInput:
    """What a judge sees: the JSON document a judge command reads on stdin."""

    task: str
    instruction: str | None
    criteria: list[dict[str, Any]]
    trajectory: dict[str, Any]
    files: dict[str, str | None]          # container path → text (None: missing or unreadable)

    def to_json(self) -> str:
        return json.dumps(asdict(self))


@dataclass
class ProcessScore:
    """The outcome of judging one trial's process."""

    kind: str                               # "command" (a judge program), "expert" (a score file)
    state: str                              # "scored" | "unscorable"
    criteria: list[Criterion] = field(default_factory=list)
    reason: str | None = None


def gather_input(spec: ProcessSpec, task: str) -> tuple[JudgeInput | None, str | None]:
    """The judge input of the trial being verified, or ``(None, reason)`` when it has no usable trajectory."""
    traj, reason = atif.load_trajectory(agent_dir() / "trajectory.json")
    if traj is None:
        return None, reason
    files: dict[str, str | None] = {}
    for cpath in spec.files:
        host = _host_path(cpath)
        try:
            files[cpath] = host.read_text(encoding="utf-8", errors="replace")[:MAX_FILE_CHARS]
        except OSError:
            files[cpath] = None
    instr = agent_dir() / "instruction.md"
    return JudgeInput(task=task, instruction=instr.read_text(encoding="utf-8") if instr.is_file() else None,
                      criteria=[asdict(c) for c in spec.criteria], trajectory=traj, files=files), None


def _host_path(container_path: str) -> Path:
    """A container path where the verifier can read it (``/app`` and ``/logs/agent`` may be mapped)."""
    for var, root in (("ARENA_APP_DIR", "/app"), ("ARENA_AGENT_DIR", "/logs/agent"), ("ARENA_TESTS_DIR", "/tests")):
        if container_path == root or container_path.startswith(root + "/"):
            return harbor_path(var) / container_path[len(root):].lstrip("/")
    return Path(container_path)


def run_command_judge(command: str, judge_input: JudgeInput, criteria: list[ProcessCriterion],
                      timeout_s: float = JUDGE_TIMEOUT_S) -> list[Criterion]:
    """Run a judge program: the input JSON on stdin, ``{criterion: raw}`` JSON expected on stdout."""
    env = dict(os.environ, ARENA_TASK=judge_input.task)
    try:
        proc = subprocess.run(command, shell=True, env=env, input=judge_input.to_json(), capture_output=True,
                              text=True, timeout=timeout_s, cwd=app_dir() if app_dir().is_dir() else None)
        if proc.returncode != 0:
            raise ValueError(f"exit code {proc.returncode}: {proc.stderr.strip()[-300:]}")
        data = json.loads(proc.stdout)
        if not isinstance(data, dict):
            raise ValueError("judge output is not a JSON object")
    except (subprocess.TimeoutExpired, ValueError) as exc:
        return [Criterion(pc.name, 0.0, None, pc.weight, pc.description, None,
                          f"judge {shlex.quote(command)} failed: {exc}") for pc in criteria]
    return score_process(criteria, data)


def expert_scores(path: Path, task: str) -> dict[str, Any]:
    """Raw scores of one task from an expert score file (flat, or keyed by task name)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"expert score file unreadable ({exc})", str(path)) from exc
    if task in data and isinstance(data[task], dict):
        return data[task]
    return data


def _judge_command(spec, judge_input, task, *, command: str) -> list[Criterion]:
    return run_command_judge(command, judge_input, spec.criteria)


def _judge_expert(spec, judge_input, task, *, scores_file: str) -> list[Criterion]:
    return score_process(spec.criteria, expert_scores(Path(scores_file), task))


#: Judges by kind: ``(spec, judge_input, task, **config) -> criteria``. The LLM-endpoint judge is added here
#: as ``"llm"`` (on the shared ``mdbench.llm`` client; configured, like the others, from the verifier's
#: environment) — :func:`judge_process` then only needs to know which variable selects it.
JUDGES: dict[str, Callable[..., list[Criterion]]] = {"command": _judge_command, "expert": _judge_expert}


def judge_process(process_file: Path, task: str, *, judge_cmd: str | None = None,
                  scores_file: str | None = None) -> ProcessScore | None:
    """Score ``process_file``'s criteria for the trial being verified; ``None`` when no judge is configured.

    ``judge_cmd``/``scores_file`` default to ``$ARENA_JUDGE_CMD``/``$ARENA_PROCESS_SCORES``; the
    score file wins when both are set.
    """
    judge_cmd = judge_cmd or os.environ.get("ARENA_JUDGE_CMD")
    scores_file = scores_file or os.environ.get("ARENA_PROCESS_SCORES")
    if not judge_cmd and not scores_file:
        return None
    kind, config = ("expert", {"scores_file": scores_file}) if scores_file else ("command", {"command": judge_cmd})
    spec = load_process_spec(process_file)
    judge_input, reason = gather_input(spec, task)
    if judge_input is None:
        return ProcessScore(kind=kind, state="unscorable", reason=reason)
    return ProcessScore(kind=kind, state="scored", criteria=JUDGES[kind](spec, judge_input, task, **config))
