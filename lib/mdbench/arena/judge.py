"""The process judge: score a task's process criteria from the agent's trajectory and output files.

MDArena's judge is given the agent's full execution trajectory (``trajectory.json``) together with a
task-specific set of output files, and scores the task's process criteria (seed 001, §3.3). Here a
task lists its criteria in ``tests/process.toml`` — rewardkit's format: ``[[criterion]]`` entries
(``name``, ``description``, ``type`` binary|likert, ``points``, ``weight``) and a ``[judge]`` table
whose ``files`` are the output files the judge sees — and one of these judges scores them:

- ``command`` — an external program (``--judge-cmd``, ``$ARENA_JUDGE_CMD``): it gets one JSON
  document on stdin (:class:`JudgeInput`: task, instruction, criteria, trajectory, files) and prints
  ``{criterion: raw}`` or ``{criterion: {"raw": r, "reasoning": "…"}}`` on stdout;
- ``expert`` — an expert score file (``--process-scores``, ``$ARENA_PROCESS_SCORES``) keyed by who was
  scored: ``{"trials": {trial_name: {criterion: raw}}}`` and/or ``{"agents": {agent_name: {task_name:
  {criterion: raw}}}}`` (a trial entry wins). The verifier learns the trial and agent from the runner
  (``$ARENA_TRIAL_NAME``, ``$ARENA_AGENT_NAME``; never from the agent's own files); a trial or agent the file
  does not name scores 0 on every criterion, with the reason recorded. A file keyed by task alone is refused:
  it would give every agent that leaves a trajectory the same process score.

A trial without a usable ATIF trajectory is **unscorable**: no judge is run, no ``process`` reward
is written, and ``reward-details.json`` says why. A judge that fails scores every criterion 0 with
the error recorded. Normalisation follows rewardkit: binary → raw 0/1, Likert with ``P`` points →
``(r − 1)/(P − 1)``.

- ``llm`` — an OpenAI-compatible chat endpoint (``--judge-llm URL``, ``$ARENA_JUDGE_LLM_URL``) through
  the project's one client, :class:`mdbench.llm.ChatClient` (retries, timeouts, token accounting, a
  transcript in the verifier folder): the model (``$ARENA_JUDGE_MODEL``, else the ``[judge] judge``
  of ``process.toml``) gets the same :class:`JudgeInput` and answers in the judge command's format.
  The key is read from the variable ``$ARENA_JUDGE_API_KEY_ENV`` names (default ``OPENAI_API_KEY``).

Command and LLM judges run inside the verifier, so they reach only what the task's network allows: a
``network_mode = "no-network"`` task (every task of this suite) cuts the endpoint off, exactly as under
Harbor's Docker environment — score such trials with an expert file or a judge that needs no network.
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

from mdbench import untrusted
from mdbench.arena import atif
from mdbench.arena.criterion import Criterion
from mdbench.arena.folders import agent_dir, app_dir, harbor_path, verifier_dir
from mdbench.errors import InputError

#: Largest part of one output file handed to a judge [characters].
MAX_FILE_CHARS = 100_000
#: Wall-clock limit of a judge command [s] (MDArena: 300–600 s).
JUDGE_TIMEOUT_S = 600.0
#: Largest part of the trajectory JSON put into an LLM judge's prompt [characters].
MAX_TRAJECTORY_CHARS = 200_000
#: Per-request timeout of an LLM judge [s].
LLM_TIMEOUT_S = 300.0


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

    kind: str                               # "command" (a judge program), "expert" (a score file), "llm"
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
            files[cpath] = untrusted.read_text(host, max_bytes=4 * MAX_FILE_CHARS)[:MAX_FILE_CHARS]
        except untrusted.Refused:
            files[cpath] = None
    instr = agent_dir() / "instruction.md"
    instruction = None
    try:
        instruction = untrusted.read_text(instr)
    except untrusted.Refused:
        pass
    return JudgeInput(task=task, instruction=instruction,
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
        return _failed(criteria, f"judge {shlex.quote(command)} failed: {exc}")
    return score_process(criteria, data)


def _failed(criteria: list[ProcessCriterion], error: str) -> list[Criterion]:
    """Every criterion 0, with the judge's failure recorded."""
    return [Criterion(pc.name, 0.0, None, pc.weight, pc.description, None, error) for pc in criteria]


LLM_SYSTEM_PROMPT = (
    "You are the process judge of a molecular-dynamics benchmark task. You get the task's instruction, its "
    "process criteria, the agent's ATIF trajectory (what it ran and saw) and the output files the task lists. "
    "Score every criterion from that evidence only: a binary criterion 0 or 1, a likert criterion an integer "
    "from 1 to its points. Reply with one JSON object and nothing else: "
    '{"<criterion name>": {"raw": <number>, "reasoning": "<one or two sentences citing the evidence>"}, ...}.')


def llm_messages(judge_input: JudgeInput) -> list[dict[str, str]]:
    """The chat messages an LLM judge gets: the rubric as system prompt, the judge input as JSON."""
    doc = asdict(judge_input)
    traj = json.dumps(doc.pop("trajectory"))
    if len(traj) > MAX_TRAJECTORY_CHARS:
        traj = traj[:MAX_TRAJECTORY_CHARS] + f" … [trajectory cut at {MAX_TRAJECTORY_CHARS} characters]"
    user = (f"Task: {judge_input.task}\n\nJudge input (criteria, instruction, output files):\n"
            f"{json.dumps(doc, indent=1)}\n\nAgent trajectory (ATIF JSON):\n{traj}")
    return [{"role": "system", "content": LLM_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def run_llm_judge(url: str, model: str, judge_input: JudgeInput, criteria: list[ProcessCriterion], *,
                  api_key_env: str = "OPENAI_API_KEY", transcript: Path | None = None,
                  timeout_s: float = LLM_TIMEOUT_S) -> list[Criterion]:
    """Ask an OpenAI-compatible endpoint to score ``criteria``; a failed call or an unreadable reply scores 0."""
    from mdbench.llm import ChatClient, EndpointError

    client = ChatClient(url, model, api_key_env=api_key_env, timeout_s=timeout_s, transcript=transcript,
                        params={"temperature": 0})
    try:
        data, _ = client.complete_json(llm_messages(judge_input), session=judge_input.task)
        if not isinstance(data, dict):
            raise ValueError("the reply is not a JSON object")
    except (EndpointError, ValueError) as exc:
        return _failed(criteria, f"LLM judge {model} at {client.url} failed: {exc}")
    return score_process(criteria, data)


def expert_scores(path: Path, task: str, *, agent: str | None = None, trial: str | None = None) -> dict[str, Any]:
    """Raw scores of one trial from an expert score file keyed by trial or by agent and task (module docstring).

    Raises
    ------
    InputError
        The file is unreadable, keyed by task only, or names neither this trial nor this agent on this task.
    """
    data, refused = untrusted.try_read_json(path)
    if refused is not None:
        raise InputError(f"expert score file unreadable ({refused.reason}); write JSON keyed by "
                         "'trials' or 'agents'", str(path))
    if not isinstance(data, dict) or not ({"trials", "agents"} & set(data)):
        raise InputError("expert score file must be keyed by trial ({'trials': {trial: {criterion: raw}}}) or by "
                         "agent ({'agents': {agent: {task: {criterion: raw}}}}); scores per task alone would "
                         "score every agent alike", str(path))
    trials, agents = data.get("trials") or {}, data.get("agents") or {}
    if trial and isinstance(trials.get(trial), dict):
        return trials[trial]
    per_task = agents.get(agent) if agent else None
    if isinstance(per_task, dict):
        entry = per_task.get(task) or per_task.get(task.split("/")[-1])
        if isinstance(entry, dict):
            return entry
    raise InputError(f"no expert scores for trial {trial!r} / agent {agent!r} on task {task}", str(path))


def _judge_command(spec, judge_input, task, *, command: str) -> list[Criterion]:
    return run_command_judge(command, judge_input, spec.criteria)


def _judge_expert(spec, judge_input, task, *, scores_file: str) -> list[Criterion]:
    try:
        raw = expert_scores(Path(scores_file), task, agent=os.environ.get("ARENA_AGENT_NAME"),
                            trial=os.environ.get("ARENA_TRIAL_NAME"))
    except InputError as exc:
        return _failed(spec.criteria, f"expert scores: {exc}")
    return score_process(spec.criteria, raw)


def _judge_llm(spec, judge_input, task, *, url: str, model: str | None) -> list[Criterion]:
    model = model or spec.judge_model
    if not model:
        return _failed(spec.criteria, "LLM judge: no model (set ARENA_JUDGE_MODEL or [judge] judge in process.toml)")
    return run_llm_judge(url, model, judge_input, spec.criteria,
                         api_key_env=os.environ.get("ARENA_JUDGE_API_KEY_ENV") or "OPENAI_API_KEY",
                         transcript=verifier_dir() / "judge-transcript.jsonl")


#: Judges by kind: ``(spec, judge_input, task, **config) -> criteria``, configured from the verifier's
#: environment (:func:`judge_process`).
JUDGES: dict[str, Callable[..., list[Criterion]]] = {"command": _judge_command, "expert": _judge_expert,
                                                     "llm": _judge_llm}


def judge_process(process_file: Path, task: str, *, judge_cmd: str | None = None,
                  scores_file: str | None = None, llm_url: str | None = None) -> ProcessScore | None:
    """Score ``process_file``'s criteria for the trial being verified; ``None`` when no judge is configured.

    ``judge_cmd``/``scores_file``/``llm_url`` default to ``$ARENA_JUDGE_CMD``/``$ARENA_PROCESS_SCORES``/
    ``$ARENA_JUDGE_LLM_URL``; when several are set the score file wins, then the command, then the LLM.
    """
    judge_cmd = judge_cmd or os.environ.get("ARENA_JUDGE_CMD")
    scores_file = scores_file or os.environ.get("ARENA_PROCESS_SCORES")
    llm_url = llm_url or os.environ.get("ARENA_JUDGE_LLM_URL")
    if scores_file:
        kind, config = "expert", {"scores_file": scores_file}
    elif judge_cmd:
        kind, config = "command", {"command": judge_cmd}
    elif llm_url:
        kind, config = "llm", {"url": llm_url, "model": os.environ.get("ARENA_JUDGE_MODEL")}
    else:
        return None
    spec = load_process_spec(process_file)
    judge_input, reason = gather_input(spec, task)
    if judge_input is None:
        return ProcessScore(kind=kind, state="unscorable", reason=reason)
    return ProcessScore(kind=kind, state="scored", criteria=JUDGES[kind](spec, judge_input, task, **config))
