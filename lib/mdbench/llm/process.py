"""Process evidence from the evaluator's trajectory: what a harness agent did, as its model calls show it.

The episode's process judge (the SAEO audit of the workspace, :func:`mdbench.episode.runner.audit_workspace`)
reads the files the agent left; what the agent *did* — the commands it ran, what it read and wrote, the
network it tried, its final message — is in ``EP/trajectory.json``, the ATIF trajectory the metering proxy's
log was converted into (:mod:`mdbench.llm.trajectory`). The agent cannot write there (``EP/`` is hidden from
it), so this evidence is the evaluator's, unlike anything in the workspace.

:func:`process_evidence` lists every tool call of the trajectory (step, tool, the command or file it names,
cut to :data:`MAX_COMMAND_CHARS`) and classifies it into *actions* by the rules of :data:`ACTION_RULES`; each
action bears on the SAEO items of :data:`ACTION_ITEMS` (``items`` maps an item to the steps that evidence
it), with the head of the output the CLI sent back. The final agent message is the evidence of O5 (final
claim). An action is what a command *names* (``echo gmx mdrun`` names ``run_md``), not proof that it ran or
succeeded: the output head and the workspace audit say that. Nothing here rates an item: the evidence is
recorded beside the audit (``EP/audit/process_evidence.json``, ``result.json`` ``audit.process_evidence``)
for the judge — rule-based, external or expert — to cite.

A trajectory that is missing, not a regular file, too large or malformed gives ``None`` or a ``refused``
reason; never an exception.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mdbench import untrusted

#: Largest trajectory read [bytes] (the proxy's own log caps what it holds well below it).
MAX_TRAJECTORY_BYTES = 256 * 1024 * 1024
#: A command (or file path) is kept to this many characters in the evidence.
MAX_COMMAND_CHARS = 500
#: The head of a tool call's output kept beside it [characters].
MAX_OUTPUT_CHARS = 300
#: At most this many tool calls are listed (the counts cover all of them).
MAX_ACTIONS = 2000

#: action → pattern searched in the command text of a tool call (case-sensitive, as a shell sees it).
ACTION_RULES: dict[str, re.Pattern[str]] = {
    "read_inputs": re.compile(r"agent_input|PROMPT\.md|BENCHMARK_CONTRACT"),
    "build_system": re.compile(r"\bpackmol\b|\bgmx(?:_mpi)?\s+(?:grompp|editconf|solvate|insert-molecules|pdb2gmx)\b"),
    "run_md": re.compile(r"\bgmx(?:_mpi)?\s+mdrun\b"),
    "analyse": re.compile(r"\bgmx(?:_mpi)?\s+(?:msd|rdf|energy|density|trjconv|current|velacc)\b|mdbench[- ]analy"),
    "write_run_record": re.compile(r"\brun_record/"),
    "network": re.compile(r"\b(?:curl|wget|nc|ncat|ssh|scp|pip\s+install|npm\s+install)\b|https?://"),
}
#: action → the SAEO items (:data:`mdbench.audit.model.ITEMS`) it is evidence for.
ACTION_ITEMS: dict[str, tuple[str, ...]] = {
    "read_inputs": ("E1",),
    "build_system": ("Sim1",),
    "run_md": ("Sim2", "Sim3", "Sim4"),
    "analyse": ("A1",),
    "write_run_record": ("E3",),
    "network": (),
    "final_message": ("O5",),
}


def _command(args: Any) -> str:
    """The command text of a tool call's arguments (Codex ``cmd``/``command``, OpenCode ``command``, file tools'
    ``path``/``filePath`` with their content's head), else the arguments as JSON."""
    if not isinstance(args, dict):
        return json.dumps(args, default=str)[:MAX_COMMAND_CHARS]
    for key in ("cmd", "command", "script"):
        v = args.get(key)
        if isinstance(v, list):
            v = " ".join(str(x) for x in v)
        if isinstance(v, str) and v:
            return v[:MAX_COMMAND_CHARS]
    for key in ("path", "filePath", "file_path"):
        v = args.get(key)
        if isinstance(v, str) and v:
            return f"write {v}"[:MAX_COMMAND_CHARS]
    if isinstance(args.get("input"), str):   # Codex apply_patch (free-form tool)
        return args["input"][:MAX_COMMAND_CHARS]
    return json.dumps(args, default=str)[:MAX_COMMAND_CHARS]


def _outputs(step: dict[str, Any]) -> dict[str, str]:
    """tool call id → the head of the output the CLI sent back for it (the step's ATIF observation)."""
    obs = step.get("observation")
    results = obs.get("results") if isinstance(obs, dict) else None
    out: dict[str, str] = {}
    for r in results if isinstance(results, list) else []:
        if isinstance(r, dict) and isinstance(r.get("content"), str) and r.get("source_call_id") is not None:
            out[str(r["source_call_id"])] = r["content"][:MAX_OUTPUT_CHARS]
    return out


def classify(command: str) -> list[str]:
    """The actions of :data:`ACTION_RULES` a command shows, in the rules' order."""
    return [kind for kind, rx in ACTION_RULES.items() if rx.search(command)]


def evidence_from_trajectory(traj: Any) -> dict[str, Any]:
    """The process evidence of an ATIF trajectory document (see the module docstring); never raises."""
    steps = traj.get("steps") if isinstance(traj, dict) else None
    steps = [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []
    actions: list[dict[str, Any]] = []
    by_action: dict[str, set[int]] = {k: set() for k in ACTION_ITEMS}
    n_calls = 0
    final: dict[str, Any] | None = None
    for st in steps:
        if st.get("source") != "agent":
            continue
        sid = st.get("step_id") if isinstance(st.get("step_id"), int) else None
        calls = [c for c in st.get("tool_calls") or [] if isinstance(c, dict)] if isinstance(
            st.get("tool_calls"), list) else []
        outputs = _outputs(st)
        for c in calls:
            n_calls += 1
            cmd = _command(c.get("arguments"))
            kinds = classify(cmd)
            for k in kinds:
                if sid is not None:
                    by_action[k].add(sid)
            if len(actions) < MAX_ACTIONS:
                actions.append({"step_id": sid, "tool": str(c.get("function_name") or "unknown")[:100],
                                "command": cmd, "actions": kinds,
                                "output_head": outputs.get(str(c.get("tool_call_id"))) if c.get("tool_call_id")
                                else None})
        msg = st.get("message")
        side = isinstance(st.get("extra"), dict) and st["extra"].get("side_call")
        if not calls and isinstance(msg, str) and msg.strip() and not side:
            final = {"step_id": sid, "message": msg[:2000]}
    if final is not None and final["step_id"] is not None:
        by_action["final_message"].add(final["step_id"])
    items: dict[str, set[int]] = {}
    for kind, sids in by_action.items():
        for item in ACTION_ITEMS[kind]:
            items.setdefault(item, set()).update(sids)
    return {"agent_steps": sum(1 for s in steps if s.get("source") == "agent"), "tool_calls": n_calls,
            "actions_listed": len(actions), "actions": actions,
            "steps_by_action": {k: sorted(v) for k, v in by_action.items() if v},
            "items": {k: sorted(v) for k, v in items.items() if v}, "final_message": final,
            "rules": {k: rx.pattern for k, rx in ACTION_RULES.items()}}


def process_evidence(trajectory: Path) -> dict[str, Any] | None:
    """The process evidence of ``EP/trajectory.json``; ``None`` when there is none (not a harness episode, or
    no model call was answered); ``{"refused": reason}`` when it cannot be read as a JSON document."""
    path = Path(trajectory)
    try:
        traj = untrusted.read_json(path, max_bytes=MAX_TRAJECTORY_BYTES, max_depth=512)
    except untrusted.Refused as exc:
        if exc.reason == "missing":
            return None
        return {"source": path.name, "refused": exc.reason, "detail": str(exc)[:300]}
    if not isinstance(traj, dict) or not isinstance(traj.get("steps"), list):
        return {"source": path.name, "refused": "not_atif", "detail": "no steps list: not an ATIF trajectory"}
    agent = traj.get("agent") if isinstance(traj.get("agent"), dict) else {}
    return {"source": path.name, "origin": "evaluator (metering proxy log → ATIF)",
            "agent": {k: agent.get(k) for k in ("name", "version", "model_name")},
            **evidence_from_trajectory(traj)}


#: Tool calls repeated in ``result.json`` (the file holds up to :data:`MAX_ACTIONS`).
MAX_ACTIONS_IN_RESULT = 50


def write_process_evidence(episode_dir: Path, out_dir: Path) -> dict[str, Any] | None:
    """:func:`process_evidence` of ``episode_dir/trajectory.json`` written to ``out_dir/process_evidence.json``
    (when there is any); returns it for ``result.json`` — the first :data:`MAX_ACTIONS_IN_RESULT` actions, and
    ``path``, the file relative to ``episode_dir``."""
    ev = process_evidence(Path(episode_dir) / "trajectory.json")
    if ev is None:
        return None
    out = Path(out_dir)
    short = {k: v for k, v in ev.items() if k not in ("actions", "rules")}
    short["actions"] = list(ev.get("actions") or [])[:MAX_ACTIONS_IN_RESULT]
    try:
        out.mkdir(parents=True, exist_ok=True)
        untrusted.write_new(out / "process_evidence.json", json.dumps(ev, indent=1, default=str) + "\n")
        short["path"] = str((out / "process_evidence.json").relative_to(Path(episode_dir)))
    except (OSError, ValueError, untrusted.Refused) as exc:
        short["write_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return short
