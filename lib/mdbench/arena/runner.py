"""Local Harbor-style runner without Docker: stage a task, run an agent (or the oracle), verify.

A trial is staged in a temporary workspace whose folders stand in for the container's paths::

    <ws>/app            ← /app            (environment/app/ copied in, environment/build.sh run here)
    <ws>/tests          ← /tests          (copied only after the agent finished, as Harbor does)
    <ws>/solution       ← /solution       (oracle runs only)
    <ws>/logs/verifier  ← /logs/verifier
    <ws>/logs/agent     ← /logs/agent

Scripts see the mapping in ``ARENA_APP_DIR``, ``ARENA_TESTS_DIR``, ``ARENA_SOLUTION_DIR``,
``ARENA_VERIFIER_DIR``, ``ARENA_AGENT_DIR``; literal container paths in staged text files
(scripts, instruction) are rewritten to the workspace, so a script that hard-codes ``/tests`` still works.
No root, chroot or container is needed. The interpreter is passed as ``MDBENCH_PYTHON``.

The trial folder written is Harbor-shaped: ``config.json``, ``result.json``, ``agent/`` (with
``trajectory.json``), ``verifier/`` (``reward.json``, ``reward-details.json``, ``test-stdout.txt``).
A job folder holds the trial folders plus job-level ``config.json`` and ``result.json``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from mdbench.arena.task import Task, load_task
from mdbench.errors import InputError

log = logging.getLogger(__name__)

TIMEOUT_EXCEPTIONS = ("AgentTimeoutError", "VerifierTimeoutError")


@dataclass
class AgentSpec:
    """Who runs a trial: the oracle (``command=None``) or a shell command.

    Attributes
    ----------
    name : str
        Agent name as Harbor records it (``oracle``, ``null``, ``my-agent``).
    command : str | None
        Shell command run in ``/app`` (mapped); ``None`` runs ``solution/solve.sh``.
    model_name : str | None
        ``provider/model`` string, e.g. ``anthropic/claude-opus-5``.
    version : str
        Agent version.
    """

    name: str = "oracle"
    command: str | None = None
    model_name: str | None = None
    version: str = "1.0.0"

    @property
    def model_info(self) -> dict[str, str] | None:
        if not self.model_name:
            return None
        provider, _, name = self.model_name.rpartition("/")
        return {"name": name, "provider": provider or None}


@dataclass
class TrialOutcome:
    """Summary of one finished trial (the full record is the trial's ``result.json``)."""

    trial_dir: Path
    task_name: str
    rewards: dict[str, float] | None
    exception_type: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def correctness(self) -> float:
        return float((self.rewards or {}).get("correctness", 0.0))


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def task_checksum(task_dir: Path) -> str:
    """sha256 over the task's files (relative path + content), like Harbor's ``task_checksum``."""
    h = hashlib.sha256()
    for p in sorted(task_dir.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(task_dir)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _trial_name(task: Task) -> str:
    alphabet = string.ascii_letters + string.digits
    return f"{task.short_name[:32]}__{''.join(secrets.choice(alphabet) for _ in range(7))}"


def path_map(ws: Path) -> dict[str, Path]:
    """Container path → workspace folder for a staged trial."""
    return {
        "/logs/verifier": ws / "logs" / "verifier",
        "/logs/agent": ws / "logs" / "agent",
        "/solution": ws / "solution",
        "/tests": ws / "tests",
        "/app": ws / "app",
    }


def rewrite_paths(text: str, mapping: dict[str, Path]) -> str:
    """Replace container paths (``/app``, ``/tests``, ``/logs/verifier`` …) by their workspace folders.

    A path is replaced only as a whole component: ``/app/x`` and ``/app`` change, ``/apple`` does not.
    """
    for container, local in sorted(mapping.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(rf"(?<![\w./-]){re.escape(container)}(?![\w.-])", str(local), text)
    return text


def _copy_rewritten(src: Path, dst: Path, mapping: dict[str, Path]) -> None:
    """Copy a folder; text files (scripts, markdown, toml, py) get their container paths rewritten."""
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    for p in dst.rglob("*"):
        if p.is_file() and p.suffix in {".sh", ".md", ".toml", ".py", ".txt", ""}:
            try:
                text = p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            new = rewrite_paths(text, mapping)
            if new != text:
                p.write_text(new, encoding="utf-8")


def _run(cmd: list[str] | str, *, cwd: Path, env: dict[str, str], timeout: float, log_path: Path,
         shell: bool = False) -> tuple[int | None, bool]:
    """Run a command in its own process group, output to ``log_path``; return (rc, timed_out)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, shell=shell,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # only the group this call started
            proc.wait()
            return None, True


def _exception(etype: str, message: str) -> dict[str, Any]:
    return {"exception_type": etype, "exception_message": message, "exception_traceback": "",
            "occurred_at": _now()}


def _read_rewards(verifier_dir: Path) -> dict[str, float] | None:
    """Harbor's rule: ``reward.json`` (flat numbers) first, else ``reward.txt`` (one number)."""
    rj = verifier_dir / "reward.json"
    if rj.is_file():
        try:
            data = json.loads(rj.read_text(encoding="utf-8"))
            return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}
        except (ValueError, AttributeError):
            return None
    rt = verifier_dir / "reward.txt"
    if rt.is_file():
        try:
            return {"reward": float(rt.read_text(encoding="utf-8").strip())}
        except ValueError:
            return None
    return None


def _trajectory(agent: AgentSpec, instruction: str, command: str, output: str) -> dict[str, Any]:
    """A minimal ATIF trajectory for a command agent that wrote none itself."""
    return {
        "schema_version": "ATIF-v1.7",
        "session_id": str(uuid.uuid4()),
        "agent": {"name": agent.name, "version": agent.version, "model_name": agent.model_name},
        "steps": [
            {"step_id": 1, "timestamp": _now(), "source": "user", "message": instruction},
            {"step_id": 2, "timestamp": _now(), "source": "agent", "message": f"Ran: {command}",
             "tool_calls": [{"tool_call_id": "call_1", "function_name": "bash",
                             "arguments": {"command": command}}],
             "observation": {"results": [{"source_call_id": "call_1", "content": output[-20000:]}]}},
        ],
    }


def run_trial(task_dir: str | Path, agent: AgentSpec, job_dir: str | Path, *, python: str | None = None,
              judge_cmd: str | None = None, process_scores: str | Path | None = None,
              timeout_multiplier: float = 1.0, job_id: str | None = None, keep_workspace: bool = False) -> TrialOutcome:
    """Run one trial of a task and write its Harbor-shaped trial folder under ``job_dir``.

    Parameters
    ----------
    task_dir : path
        The Harbor task folder.
    agent : AgentSpec
        Oracle (runs ``solution/solve.sh``) or a shell command.
    job_dir : path
        Job folder; the trial folder ``<task>__<id>`` is created inside.
    python : str, optional
        Interpreter passed to scripts as ``MDBENCH_PYTHON`` (default: this interpreter).
    judge_cmd, process_scores : optional
        How the verifier scores process criteria (external judge command, or expert score JSON).
    timeout_multiplier : float
        Scales the task's agent and verifier timeouts [s].
    """
    task = load_task(task_dir)
    job_dir = Path(job_dir)
    trial_name = _trial_name(task)
    trial_dir = job_dir / trial_name
    (trial_dir / "agent").mkdir(parents=True, exist_ok=True)
    (trial_dir / "verifier").mkdir(parents=True, exist_ok=True)
    ws = Path(tempfile.mkdtemp(prefix=f"arena-{task.short_name}-"))
    mapping = path_map(ws)
    for d in mapping.values():
        d.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update({
        "MDBENCH_PYTHON": python or sys.executable,
        "ARENA_APP_DIR": str(mapping["/app"]), "ARENA_TESTS_DIR": str(mapping["/tests"]),
        "ARENA_SOLUTION_DIR": str(mapping["/solution"]), "ARENA_VERIFIER_DIR": str(mapping["/logs/verifier"]),
        "ARENA_AGENT_DIR": str(mapping["/logs/agent"]), "ARENA_TASK": task.name,
    })
    for key in ("ARENA_JUDGE_CMD", "ARENA_PROCESS_SCORES"):
        env.pop(key, None)
    if judge_cmd:
        env["ARENA_JUDGE_CMD"] = judge_cmd
    if process_scores:
        env["ARENA_PROCESS_SCORES"] = str(Path(process_scores).resolve())

    config = {
        "task": {"path": str(task.path), "git_url": None, "git_commit_id": None, "name": task.name,
                 "ref": None, "overwrite": False, "download_dir": None, "source": task.name.split("/")[0]},
        "trial_name": trial_name, "trials_dir": str(job_dir), "timeout_multiplier": timeout_multiplier,
        "agent": {"name": agent.name, "import_path": None, "model_name": agent.model_name,
                  "override_timeout_sec": None, "kwargs": {"command": agent.command}, "env": {}},
        "environment": {"type": "local-nodocker", "import_path": None, "force_build": False, "delete": not keep_workspace,
                        "env": {}, "kwargs": {"python": env["MDBENCH_PYTHON"]}},
        "verifier": {"override_timeout_sec": None, "env": {}, "disable": False,
                     "judge_cmd": judge_cmd, "process_scores": str(process_scores) if process_scores else None},
        "artifacts": [], "job_id": job_id,
    }
    (trial_dir / "config.json").write_text(json.dumps(config, indent=4), encoding="utf-8")
    result: dict[str, Any] = {
        "id": str(uuid.uuid4()), "task_name": task.name, "trial_name": trial_name,
        "trial_uri": trial_dir.resolve().as_uri(), "task_id": {"path": str(task.path)},
        "source": task.name.split("/")[0], "task_checksum": task_checksum(task.path), "config": config,
        "agent_info": {"name": agent.name, "version": agent.version, "model_info": agent.model_info},
        "agent_result": None, "verifier_result": None, "exception_info": None,
        "started_at": _now(), "finished_at": None,
        "environment_setup": None, "agent_setup": None, "agent_execution": None, "verifier": None,
        "step_results": None,
    }
    exception = None
    try:
        # --- environment: copy environment/app → /app, run environment/build.sh -----------------
        t0 = _now()
        env_dir = task.path / "environment"
        if (env_dir / "app").is_dir():
            _copy_rewritten(env_dir / "app", mapping["/app"], mapping)
        build = env_dir / "build.sh"
        build_ok = True
        if build.is_file():
            _copy_rewritten(env_dir, ws / "environment", mapping)
            rc, to = _run(["bash", str(ws / "environment" / "build.sh")], cwd=mapping["/app"], env=env,
                          timeout=float(task.config.get("environment", {}).get("build_timeout_sec", 600)),
                          log_path=trial_dir / "environment-build.txt")
            if to or rc != 0:
                build_ok = False
                exception = _exception("EnvironmentStartTimeoutError" if to else "RuntimeError",
                                       f"environment/build.sh {'timed out' if to else f'exited with code {rc}'}")
        result["environment_setup"] = {"started_at": t0, "finished_at": _now()}
        # --- agent ------------------------------------------------------------------------------
        if build_ok:
            instruction = rewrite_paths(task.instruction, mapping)
            (ws / "instruction.md").write_text(instruction, encoding="utf-8")
            env["ARENA_INSTRUCTION"] = str(ws / "instruction.md")
            t0 = _now()
            if agent.command is None:
                _copy_rewritten(task.path / "solution", mapping["/solution"], mapping)
                cmd: list[str] | str = ["bash", str(mapping["/solution"] / "solve.sh")]
                shell, out_name, shown = False, "oracle.txt", "bash /solution/solve.sh"
            else:
                cmd, shell, out_name, shown = agent.command, True, "command-output.txt", agent.command
            rc, to = _run(cmd, cwd=mapping["/app"], env=env, shell=shell,
                          timeout=task.agent_timeout_sec * timeout_multiplier,
                          log_path=mapping["/logs/agent"] / out_name)
            result["agent_execution"] = {"started_at": t0, "finished_at": _now()}
            if to:
                exception = _exception("AgentTimeoutError",
                                       f"Agent execution timed out after {task.agent_timeout_sec * timeout_multiplier} seconds")
            elif rc != 0 and agent.command is not None:
                exception = _exception("NonZeroAgentExitCodeError", f"Agent command exited with code {rc}")
            elif rc != 0:
                exception = _exception("RuntimeError", f"solution/solve.sh exited with code {rc}")
            traj = mapping["/logs/agent"] / "trajectory.json"
            if not traj.is_file():
                output = (mapping["/logs/agent"] / out_name).read_text(encoding="utf-8", errors="replace")
                traj.write_text(json.dumps(_trajectory(agent, instruction, shown, output), indent=2), encoding="utf-8")
            usage_file = mapping["/logs/agent"] / "usage.json"
            usage = json.loads(usage_file.read_text(encoding="utf-8")) if usage_file.is_file() else {}
            result["agent_result"] = {
                "n_input_tokens": usage.get("n_input_tokens"), "n_cache_tokens": usage.get("n_cache_tokens"),
                "n_output_tokens": usage.get("n_output_tokens"), "cost_usd": usage.get("cost_usd"),
                "rollout_details": None, "metadata": None,
            }
            # --- verifier (runs even after an agent error, as Harbor does) ------------------------
            _copy_rewritten(task.path / "tests", mapping["/tests"], mapping)
            t0 = _now()
            rc, to = _run(["bash", str(mapping["/tests"] / "test.sh")], cwd=mapping["/app"], env=env,
                          timeout=task.verifier_timeout_sec * timeout_multiplier,
                          log_path=mapping["/logs/verifier"] / "test-stdout.txt")
            result["verifier"] = {"started_at": t0, "finished_at": _now()}
            rewards = _read_rewards(mapping["/logs/verifier"])
            if rewards is not None:
                result["verifier_result"] = {"rewards": rewards}
            if to and exception is None:
                exception = _exception("VerifierTimeoutError",
                                       f"Verifier timed out after {task.verifier_timeout_sec * timeout_multiplier} seconds")
            elif rewards is None and exception is None:
                exception = _exception("RewardFileNotFoundError",
                                       "tests/test.sh wrote neither reward.json nor reward.txt")
    finally:
        for sub in ("agent", "verifier"):
            src = mapping[f"/logs/{sub}"]
            if src.is_dir():
                shutil.copytree(src, trial_dir / sub, dirs_exist_ok=True)
        result["exception_info"] = exception
        result["finished_at"] = _now()
        if exception is not None:
            (trial_dir / "exception.txt").write_text(
                f"{exception['exception_type']}: {exception['exception_message']}\n", encoding="utf-8")
        (trial_dir / "result.json").write_text(json.dumps(result, indent=4), encoding="utf-8")
        if keep_workspace:
            log.info("workspace kept at %s", ws)
        else:
            shutil.rmtree(ws, ignore_errors=True)
    rewards = (result.get("verifier_result") or {}).get("rewards")
    return TrialOutcome(trial_dir, task.name, rewards, (exception or {}).get("exception_type"))


def run_job(task_dirs: list[Path], agent: AgentSpec, jobs_dir: str | Path, *, job_name: str | None = None,
            verbose: bool = False, **trial_kwargs: Any) -> tuple[Path, list[TrialOutcome]]:
    """Run one trial per task and write a Harbor job folder ``jobs_dir/<job_name>/``.

    Returns the job folder and the trial outcomes. Job ``result.json`` carries Harbor's ``stats`` with
    ``evals`` keyed ``<agent>__<model>__<dataset>``.
    """
    if not task_dirs:
        raise InputError("no task folders given; pass a task folder or a folder of tasks", None)
    job_name = job_name or _dt.datetime.now().strftime("%Y-%m-%d__%H-%M-%S")
    job_dir = Path(jobs_dir) / job_name
    if (job_dir / "result.json").exists():
        raise InputError("job folder already holds a result.json; choose another --job-name", str(job_dir))
    job_dir.mkdir(parents=True, exist_ok=True)
    job_id = str(uuid.uuid4())
    started = _now()
    tasks = [load_task(t) for t in task_dirs]
    config = {
        "job_name": job_name, "jobs_dir": str(Path(jobs_dir)), "n_attempts": 1,
        "timeout_multiplier": trial_kwargs.get("timeout_multiplier", 1.0),
        "orchestrator": {"type": "local", "n_concurrent_trials": 1},
        "environment": {"type": "local-nodocker"},
        "agents": [{"name": agent.name, "model_name": agent.model_name, "import_path": None,
                    "kwargs": {"command": agent.command}}],
        "datasets": [], "tasks": [{"path": str(t.path)} for t in tasks],
    }
    (job_dir / "config.json").write_text(json.dumps(config, indent=4), encoding="utf-8")
    outcomes = []
    for t in tqdm(tasks, desc=f"arena {agent.name}", disable=not verbose):
        outcomes.append(run_trial(t.path, agent, job_dir, job_id=job_id, **trial_kwargs))
    (job_dir / "result.json").write_text(json.dumps(job_result(job_id, started, agent, outcomes), indent=4),
                                         encoding="utf-8")
    return job_dir, outcomes


def job_result(job_id: str, started_at: str, agent: AgentSpec, outcomes: list[TrialOutcome]) -> dict[str, Any]:
    """Harbor job-level ``result.json`` for one agent's trials."""
    evals: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        dataset = o.task_name.split("/")[0]
        key = f"{agent.name}__{agent.model_name or 'None'}__{dataset}"
        e = evals.setdefault(key, {"n_trials": 0, "n_errors": 0, "metrics": [], "pass_at_k": {},
                                   "reward_stats": {}, "exception_stats": {}, "_c": []})
        e["n_trials"] += 1
        e["_c"].append(o.correctness)
        if o.exception_type:
            e["n_errors"] += 1
            e["exception_stats"].setdefault(o.exception_type, []).append(o.trial_dir.name)
        for k, v in (o.rewards or {}).items():
            e["reward_stats"].setdefault(k, {}).setdefault(str(v), []).append(o.trial_dir.name)
    for e in evals.values():
        c = e.pop("_c")
        e["metrics"] = [{"mean": sum(c) / len(c) if c else 0.0}]
    n_err = sum(1 for o in outcomes if o.exception_type)
    now = _now()
    return {
        "id": job_id, "started_at": started_at, "updated_at": now, "finished_at": now,
        "n_total_trials": len(outcomes),
        "stats": {"n_completed_trials": len(outcomes), "n_errored_trials": n_err,
                  "n_running_trials": 0, "n_pending_trials": 0, "n_cancelled_trials": 0, "n_retries": 0,
                  "evals": evals, "n_input_tokens": None, "n_output_tokens": None, "cost_usd": None},
    }
