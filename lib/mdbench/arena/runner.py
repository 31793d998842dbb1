"""Local runner without Docker or Harbor: run a task as Harbor would, write what Harbor writes.

For a machine without Python 3.12 (Harbor itself runs the same tasks through
:mod:`mdbench.arena.harbor_env`). A trial follows Harbor's single-step flow:

1. **environment** — a workspace stands in for the container and the task's ``environment/Dockerfile``
   is replayed in it (:mod:`mdbench.arena.staging`); a failed build is ``SandboxBuildFailedError``
   and nothing is graded;
2. **agent** — the oracle runs ``solution/solve.sh`` (copied to ``/solution``; a non-zero exit is
   recorded in ``agent/exit-code.txt``, not as an error, as Harbor's oracle does), a command agent runs
   its shell command with the instruction in ``/logs/agent/instruction.md``
   (``NonZeroAgentExitCodeError`` on a non-zero exit); both as the task's ``[agent] user`` in the
   sandbox, within the agent timeout (``AgentTimeoutError``);
3. **artifacts** — the task's ``artifacts`` (``/app/output``) are copied to ``artifacts/``;
4. **verifier** — ``tests/`` is copied to ``/tests`` only now and ``tests/test.sh`` runs
   (``VerifierTimeoutError``); ``reward.json``/``reward.txt`` are read by Harbor's rules
   (:mod:`mdbench.arena.rewards`: ``RewardFileNotFoundError``, ``RewardFileEmptyError``,
   ``VerifierOutputParseError``).

The trial folder is the one Harbor writes — ``config.json`` (a ``TrialConfig``), ``result.json``
(a ``TrialResult``), ``agent/``, ``verifier/``, ``artifacts/``, ``exception.txt`` — and a job folder
holds a ``JobConfig`` ``config.json`` and a ``JobResult`` ``result.json``; the tests validate them
with Harbor's models. What Harbor has no field for lives under the key ``"mdbench"``: the runner, the
interpreter, the judge configuration, the sandbox that was enforced, and the task's own sha256
(``task_checksum`` is Harbor's directory hash, which this runner does not compute: it is left ``""``
as Harbor's viewer does for trials it did not hash).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import secrets
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from mdbench import untrusted
from mdbench.arena import rewards as rw
from mdbench.arena import staging
from mdbench.arena import usage as usage_mod
from mdbench.arena.task import Task, load_task
from mdbench.errors import InputError

log = logging.getLogger(__name__)

#: ShortUUID's alphabet: Harbor's trial-name suffixes are 7 characters of it.
_SHORT_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
#: Recorded as the environment's import path: the runner stages tasks exactly as this plug-in does.
HOST_ENV_IMPORT_PATH = "mdbench.arena.harbor_env:HostEnvironment"
COMMAND_AGENT_IMPORT_PATH = "mdbench.arena.harbor_agent:CommandAgent"


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
    def model_info(self) -> dict[str, Any] | None:
        if not self.model_name:
            return None
        provider, _, name = self.model_name.rpartition("/")
        return {"name": name, "provider": provider or None}

    def config(self) -> dict[str, Any]:
        """Harbor's ``AgentConfig`` of this agent."""
        if self.command is None:
            return {"name": "oracle", "import_path": None, "model_name": self.model_name, "kwargs": {}}
        return {"name": None, "import_path": COMMAND_AGENT_IMPORT_PATH, "model_name": self.model_name,
                "kwargs": {"command": self.command, "agent_name": self.name, "agent_version": self.version}}


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


def task_sha256(task_dir: Path) -> str:
    """sha256 over a task's files (relative path and content, sorted), ``__pycache__`` left out."""
    h = hashlib.sha256()
    for p in sorted(task_dir.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(task_dir)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def trial_name(task: Task) -> str:
    """Harbor's trial-name form: ``<short name[:32]>__<7 characters>``."""
    return f"{task.short_name[:32].rstrip('_-')}__{''.join(secrets.choice(_SHORT_ALPHABET) for _ in range(7))}"


def _exception(etype: str, message: str) -> dict[str, Any]:
    return {"exception_type": etype, "exception_message": message, "exception_traceback": "",
            "occurred_at": _now()}


def trial_config(task: Task, agent: AgentSpec, *, name: str, job_dir: Path, source: str | None,
                 timeout_multiplier: float, job_id: str | None, keep_workspace: bool,
                 extra: dict[str, Any]) -> dict[str, Any]:
    """Harbor's ``TrialConfig`` document of a trial, our additions under ``"mdbench"``."""
    return {
        "schema_version": 1,
        "task": {"path": str(task.path), "git_url": None, "git_commit_id": None, "name": None, "ref": None,
                 "overwrite": False, "download_dir": None, "source": source},
        "trial_name": name, "trials_dir": str(job_dir), "timeout_multiplier": timeout_multiplier,
        "agent": agent.config(),
        "environment": {"type": None, "import_path": HOST_ENV_IMPORT_PATH, "force_build": False,
                        "delete": not keep_workspace, "kwargs": {}},
        "verifier": {"override_timeout_sec": None, "max_timeout_sec": None, "disable": False},
        "artifacts": [], "job_id": job_id,
        "mdbench": extra,
    }


def _jobs_tree(trial_dir: Path) -> Path:
    """The whole ``-o`` tree of a trial (the folder holding its job folder), hidden from agents."""
    jobs = trial_dir.resolve().parent.parent
    return jobs if len(jobs.parts) > 2 else trial_dir.resolve().parent


class _Trial:
    """One trial's state while it runs (see :func:`run_trial`)."""

    def __init__(self, task: Task, agent: AgentSpec, trial_dir: Path, python: str, *, timeout_multiplier: float,
                 verifier_env: dict[str, str], agent_python: str | None = None, expose: tuple[Path, ...] = ()):
        self.task, self.agent, self.trial_dir, self.python = task, agent, trial_dir, python
        self.agent_python = agent_python or staging.agent_python()
        self.expose = expose
        self.mult = timeout_multiplier
        self.verifier_env = verifier_env
        self.ws = staging.Workspace.create(prefix=f"arena-{task.short_name[:40]}-")
        self.no_network = (task.config.get("environment") or {}).get("network_mode") == "no-network"
        self.hide = staging.hidden_folders(task.path, _jobs_tree(trial_dir))
        self.sandboxes: dict[str, Any] = {}
        self.exception: dict[str, Any] | None = None
        self.usage_findings: list[str] = []
        self.collect_skipped: list[str] = []

    def env(self, ws: staging.Workspace | None = None) -> dict[str, str]:
        return staging.command_env(ws or self.ws, self.python, task=self.task.name)

    def sandbox(self, phase: str, user: str | int | None, ws: staging.Workspace | None = None) -> staging.Sandbox:
        oracle = self.agent.command is None
        python = self.python if (oracle or user in (None, "root", 0)) else self.agent_python
        box = staging.make_sandbox(ws or self.ws, user=user, no_network=self.no_network, python=python,
                                   hide=self.hide, oracle=oracle, expose=self.expose)
        self.sandboxes[phase] = staging.describe(box, requested_user=user, no_network=self.no_network)
        return box

    def build(self) -> bool:
        timeout = float((self.task.config.get("environment") or {}).get("build_timeout_sec", 600.0)) * self.mult
        try:
            box = staging.build_workspace(self.task.path / "environment", self.ws, env=self.env(),
                                          log_path=self.trial_dir / "environment-build.txt", timeout_s=timeout,
                                          no_network=self.no_network)
        except InputError as exc:
            self.exception = _exception("SandboxBuildFailedError", f"environment build failed: {exc}")
            return False
        self.ws.keep_pristine()        # the separate verifier starts from /app as built
        self.sandboxes["build"] = staging.describe(box, requested_user=None, no_network=self.no_network)
        return True

    def run_agent(self) -> dict[str, Any] | None:
        """Run the oracle or the command; return Harbor's ``AgentContext`` of the run."""
        user = (self.task.config.get("agent") or {}).get("user")
        timeout = self.task.agent_timeout_sec * self.mult
        env = self.env()
        if self.agent.command is None:
            self.ws.copy_in(self.task.path / "solution", "/solution")
            self.ws.host("/solution/solve.sh").chmod(0o755)          # as Harbor: chmod as root, run as the user
            command = "/solution/solve.sh > /logs/agent/oracle.txt 2>&1"
        else:
            # container paths in the instruction are rewritten, as the host environment's upload does
            self.ws.host("/logs/agent/instruction.md").write_text(self.ws.rewrite(self.task.instruction),
                                                                  encoding="utf-8")
            env["ARENA_INSTRUCTION"] = str(self.ws.host("/logs/agent/instruction.md"))
            command = f"{{ {self.agent.command}\n}} > /logs/agent/command-output.txt 2>&1"
        rc, timed_out, _ = staging.run_sync(self.ws.rewrite(command), self.sandbox("agent", user),
                                            cwd=self.ws.host(self.ws.workdir), env=env, timeout_s=timeout)
        if timed_out:
            self.exception = _exception("AgentTimeoutError", f"Agent execution timed out after {timeout} seconds")
        elif rc != 0 and self.agent.command is not None:
            self.exception = _exception("NonZeroAgentExitCodeError", f"Agent command exited with code {rc}")
        elif rc != 0:
            self.ws.host("/logs/agent/exit-code.txt").write_text(str(rc), encoding="utf-8")
        ctx: dict[str, Any] = dict.fromkeys(usage_mod.TOKEN_KEYS)
        ctx["cost_usd"] = None
        if self.agent.command is not None:
            fields, self.usage_findings = usage_mod.read_usage(self.ws.host("/logs/agent/usage.json"))
            ctx.update(fields)
        ctx.update({"model_usage": None, "rollout_details": None,
                    "metadata": {usage_mod.FINDINGS_KEY: self.usage_findings} if self.usage_findings else None})
        return ctx

    def collect(self) -> None:
        """Agent logs and declared artifacts out of the workspace: folders and regular files only, no link
        followed, sizes capped, workspace paths written back as container paths (``/app/…``)."""
        self.collect_skipped += staging.copy_untrusted(self.ws.host("/logs/agent"), self.trial_dir / "agent",
                                                       rewrite=self.ws.unrewrite)
        if self.usage_findings:
            untrusted.write_new(self.trial_dir / "agent" / "usage-findings.txt", "\n".join(self.usage_findings) + "\n")
        for src, dest in self._artifacts():
            host = self.ws.host(src)
            target = self.trial_dir / "artifacts" / dest
            if os.path.islink(host):
                self.collect_skipped.append(f"{src}: symlink")
            elif host.is_dir():
                self.collect_skipped += staging.copy_untrusted(host, target, rewrite=self.ws.unrewrite)
            elif host.is_file():
                self.collect_skipped += staging.copy_untrusted(host, target.parent, rewrite=self.ws.unrewrite)
                if target.parent / host.name != target and (target.parent / host.name).exists():
                    os.replace(target.parent / host.name, target)

    def _artifacts(self) -> list[tuple[str, str]]:
        out = []
        for art in self.task.config.get("artifacts", []):
            src = art if isinstance(art, str) else art.get("source")
            dest = (None if isinstance(art, str) else art.get("destination")) or src.lstrip("/")
            out.append((src, dest))
        return out

    def verify(self) -> dict[str, Any] | None:
        """Harbor's separate verifier on this machine: a fresh workspace (``/app`` as built), the collected
        artifacts and the trajectory copied in, ``tests/`` only now, ``tests/test.sh`` run there; return
        Harbor's ``VerifierResult`` (``None`` after a verifier error)."""
        vws = self.ws.fresh_copy()
        try:
            for src, dest in self._artifacts():
                collected = self.trial_dir / "artifacts" / dest   # regular files only, written by collect()
                if collected.is_dir() or collected.is_file():
                    vws.copy_in(collected, src)      # container paths mapped as Harbor's upload does
            staging.copy_untrusted(self.trial_dir / "agent" / "trajectory.json", vws.host("/logs/agent"))
            vws.copy_in(self.task.path / "tests", "/tests")
            vws.host("/tests/test.sh").chmod(0o755)
            timeout = self.task.verifier_timeout_sec * self.mult
            user = (self.task.config.get("verifier") or {}).get("user")
            rc, timed_out, _ = staging.run_sync(
                vws.rewrite("/tests/test.sh > /logs/verifier/test-stdout.txt 2>&1"),
                self.sandbox("verifier", user, ws=vws), cwd=vws.host(vws.workdir),
                env={**self.env(vws), **self.verifier_env}, timeout_s=timeout)
            staging.copy_untrusted(vws.host("/logs/verifier"), self.trial_dir / "verifier", rewrite=vws.unrewrite)
        finally:
            vws.remove()
        if timed_out:
            self.exception = self.exception or _exception(
                "VerifierTimeoutError", f"Verifier execution timed out after {timeout} seconds")
            return None
        try:
            return {"rewards": rw.read_rewards(self.trial_dir / "verifier")}
        except rw.RewardFileError as exc:
            self.exception = self.exception or _exception(exc.exception_type, str(exc))
            return None


def run_trial(task_dir: str | Path, agent: AgentSpec, job_dir: str | Path, *, python: str | None = None,
              judge_cmd: str | None = None, process_scores: str | Path | None = None,
              judge_llm: str | None = None, judge_model: str | None = None, timeout_multiplier: float = 1.0,
              job_id: str | None = None, keep_workspace: bool = False, source: str | None = None,
              agent_python: str | None = None, expose: tuple[str | Path, ...] = ()) -> TrialOutcome:
    """Run one trial of a task and write its Harbor trial folder under ``job_dir``.

    Parameters
    ----------
    task_dir : path
        The Harbor task folder.
    agent : AgentSpec
        Oracle (runs ``solution/solve.sh``) or a shell command.
    job_dir : path
        Job folder; the trial folder ``<task>__<id>`` is created inside.
    python : str, optional
        Interpreter of the build, the verifier and the oracle (``MDBENCH_PYTHON``; default: the project's ``.venv``).
    agent_python : str, optional
        The agent toolchain's interpreter (default :func:`mdbench.arena.staging.agent_python`: no mdbench).
    expose : paths
        Folders of the agent's own install, shown read-only in its sandbox.
    judge_cmd, process_scores, judge_llm, judge_model : optional
        The process judge (a judge program, an expert score file, or an OpenAI-compatible endpoint URL and
        model, :mod:`mdbench.arena.judge`); seen by the verifier only.
    timeout_multiplier : float
        Scales the task's build, agent and verifier timeouts.
    source : str, optional
        Dataset name recorded as Harbor's ``source`` (``None``: an ad-hoc task).
    """
    task = load_task(task_dir)
    job_dir = Path(job_dir)
    name = trial_name(task)
    trial_dir = job_dir / name
    for sub in ("agent", "verifier", "artifacts"):
        (trial_dir / sub).mkdir(parents=True, exist_ok=True)
    python = python or staging.default_python()
    verifier_env = _verifier_env(name, agent, judge_cmd=judge_cmd, process_scores=process_scores,
                                 judge_llm=judge_llm, judge_model=judge_model)
    extra = {"runner": "mdbench arena (local, no Harbor)", "python": python, "judge_cmd": judge_cmd,
             "process_scores": verifier_env.get("ARENA_PROCESS_SCORES"), "judge_llm": judge_llm,
             "judge_model": judge_model}
    config = trial_config(task, agent, name=name, job_dir=job_dir, source=source,
                          timeout_multiplier=timeout_multiplier, job_id=job_id, keep_workspace=keep_workspace,
                          extra=extra)
    (trial_dir / "config.json").write_text(json.dumps(config, indent=4), encoding="utf-8")
    result = _initial_result(task, agent, name, trial_dir, source, config)
    trial = _Trial(task, agent, trial_dir, python, timeout_multiplier=timeout_multiplier, verifier_env=verifier_env,
                   agent_python=agent_python, expose=tuple(Path(e).resolve() for e in expose))
    try:
        _run_phases(trial, result)
    finally:
        _finish_trial(trial, result, keep_workspace=keep_workspace)
    rewards = (result.get("verifier_result") or {}).get("rewards")
    return TrialOutcome(trial_dir, task.name, rewards, (trial.exception or {}).get("exception_type"))


def _verifier_env(name: str, agent: AgentSpec, *, judge_cmd: str | None, process_scores: str | Path | None,
                  judge_llm: str | None, judge_model: str | None) -> dict[str, str]:
    """What the verifier (only) is told: who is scored — from the runner, never from the agent's files (expert
    scores are keyed by it) — and the process judge."""
    verifier_env = {"ARENA_TRIAL_NAME": name, "ARENA_AGENT_NAME": agent.name}
    if judge_cmd:
        verifier_env["ARENA_JUDGE_CMD"] = judge_cmd
    if process_scores:
        verifier_env["ARENA_PROCESS_SCORES"] = str(Path(process_scores).resolve())
    if judge_llm:
        key_env = os.environ.get("ARENA_JUDGE_API_KEY_ENV") or "OPENAI_API_KEY"
        verifier_env.update({"ARENA_JUDGE_LLM_URL": judge_llm, "ARENA_JUDGE_API_KEY_ENV": key_env,
                             **({"ARENA_JUDGE_MODEL": judge_model} if judge_model else {}),
                             **({key_env: os.environ[key_env]} if os.environ.get(key_env) else {})})
    return verifier_env


def _initial_result(task: Task, agent: AgentSpec, name: str, trial_dir: Path, source: str | None,
                    config: dict[str, Any]) -> dict[str, Any]:
    """Harbor's trial ``result.json`` before any phase ran."""
    return {
        "schema_version": 1, "id": str(uuid.uuid4()), "task_name": task.name, "trial_name": name,
        "trial_uri": trial_dir.resolve().as_uri(), "task_id": {"path": str(task.path)}, "source": source,
        "task_checksum": "", "config": config,
        "agent_info": {"name": agent.name, "version": agent.version, "model_info": agent.model_info},
        "agent_result": None, "verifier_result": None, "verifier_environment_mode": "separate",
        "exception_info": None, "started_at": _now(), "finished_at": None, "environment_setup": None,
        "agent_setup": None, "agent_execution": None, "verifier": None, "step_results": None,
    }


def _run_phases(trial: _Trial, result: dict[str, Any]) -> None:
    """Build, agent, collection and (unless the agent phase failed in a way Harbor does not grade) the separate
    verifier; fills ``result`` in place as each phase ends."""
    t0 = _now()
    built = trial.build()
    result["environment_setup"] = {"started_at": t0, "finished_at": _now()}
    if not built:
        return
    now = _now()
    result["agent_setup"] = {"started_at": now, "finished_at": now}
    result["agent_execution"] = {"started_at": _now(), "finished_at": None}
    result["agent_result"] = trial.run_agent()
    result["agent_execution"]["finished_at"] = _now()
    trial.collect()
    if trial.exception is None or trial.exception["exception_type"] in rw.GRADED_AFTER:
        result["verifier"] = {"started_at": _now(), "finished_at": None}
        result["verifier_result"] = trial.verify()
        result["verifier"]["finished_at"] = _now()


def _finish_trial(trial: _Trial, result: dict[str, Any], *, keep_workspace: bool) -> None:
    """Whatever happened: the exception, ``result.json`` and the workspace removed (or kept, logged)."""
    result["exception_info"] = trial.exception
    result["finished_at"] = _now()
    result["mdbench"] = {"task_sha256": task_sha256(trial.task.path), "sandbox": trial.sandboxes,
                         "usage_findings": trial.usage_findings, "collect_skipped": trial.collect_skipped[:100]}
    if trial.exception is not None:
        (trial.trial_dir / "exception.txt").write_text(
            f"{trial.exception['exception_type']}: {trial.exception['exception_message']}\n", encoding="utf-8")
    (trial.trial_dir / "result.json").write_text(json.dumps(result, indent=4), encoding="utf-8")
    if keep_workspace:
        log.info("workspace kept at %s", trial.ws.root)
    else:
        trial.ws.remove()
    trial.ws.remove_pristine()


def run_job(task_dirs: list[Path], agent: AgentSpec, jobs_dir: str | Path, *, job_name: str | None = None,
            verbose: bool = False, dataset: str | Path | None = None, **trial_kwargs: Any
            ) -> tuple[Path, list[TrialOutcome]]:
    """Run one trial per task and write a Harbor job folder ``jobs_dir/<job_name>/``.

    ``dataset`` is the folder of tasks the run was asked for (its name becomes the trials' ``source``,
    as ``harbor run -p <folder>`` records it); without one the trials are ad hoc. Returns the job
    folder and the trial outcomes.
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
    source = Path(dataset).resolve().name if dataset is not None else None
    mult = trial_kwargs.get("timeout_multiplier", 1.0)
    config = {
        "schema_version": 1, "job_name": job_name, "jobs_dir": str(Path(jobs_dir)), "n_attempts": 1,
        "timeout_multiplier": mult, "n_concurrent_trials": 1,
        "environment": {"type": None, "import_path": HOST_ENV_IMPORT_PATH, "kwargs": {}},
        "agents": [agent.config()],
        "datasets": [{"path": str(Path(dataset).resolve())}] if dataset is not None else [],
        "tasks": [] if dataset is not None else [{"path": str(t.path)} for t in tasks],
        "mdbench": {"runner": "mdbench arena (local, no Harbor)"},
    }
    (job_dir / "config.json").write_text(json.dumps(config, indent=4), encoding="utf-8")
    outcomes = []
    for t in tqdm(tasks, desc=f"arena {agent.name}", unit="trial", disable=not verbose):
        outcomes.append(run_trial(t.path, agent, job_dir, job_id=job_id, source=source, **trial_kwargs))
    results = [json.loads((o.trial_dir / "result.json").read_text(encoding="utf-8")) for o in outcomes]
    (job_dir / "result.json").write_text(json.dumps(job_result(job_id, started, results), indent=4),
                                         encoding="utf-8")
    return job_dir, outcomes


def job_result(job_id: str, started_at: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Harbor's job-level ``result.json`` (a ``JobResult``) of finished trials."""
    stats = rw.job_stats(results)
    now = _now()
    return {
        "schema_version": 1, "id": job_id, "started_at": started_at, "updated_at": now, "finished_at": now,
        "n_total_trials": len(results),
        "stats": {**stats, "n_running_trials": 0, "n_pending_trials": 0, "n_retries": 0,
                  "evals": {k: {**e, "pass_at_k": {}} for k, e in stats["evals"].items()}},
    }
