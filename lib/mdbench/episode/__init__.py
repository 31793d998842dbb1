"""Agent episodes on the electrolyte study (seed 000): prepare, run, score, aggregate.

An *episode* is one agent given the frozen input bundle and the prompt, run under the seed's limits, and
audited. Its folder ``EP/`` holds::

    episode.json          what was prepared: id, preset, bundle sha256, configuration, limits, versions
    bundle/               the evaluator's pristine copy of the bundle (the audit's reference)
    workspace/            the agent's working directory and run directory
      agent_input/        the bundle, read-only (files 0444, folders 0555)
      PROMPT.md           the bundle's prompt
    agent/                the agent's stdout/stderr (capped), the sandbox's account, copied cost files
    home/                 a harness's private HOME (only with --harness)
    previous/<n>/         an earlier run moved away by --force (its result, logs, audit and workspace)
    integrity/            evidence of any change to agent_input/ (only when there is one)
    audit/                the SAEO audit of the workspace (saeo.json, findings.md)
    result.json           status, limits, toolchain, measured and self-reported costs, score, input integrity

Everything but ``workspace/`` is invisible to the agent (:mod:`mdbench.sandbox`), and so is this installation:
the agent gets the agent toolchain (:mod:`~mdbench.episode.toolchain`); the trust model is ``docs/security.md``.
Rooms:
:mod:`~mdbench.episode.workspace` (prepare, integrity), :mod:`~mdbench.episode.runner` (run),
:mod:`~mdbench.episode.agents` and :mod:`~mdbench.episode.defects` (reference agents),
:mod:`~mdbench.episode.collect` (what an episode cost), :mod:`~mdbench.episode.aggregate` (figures),
:mod:`~mdbench.episode.harbor` (the episode as a Harbor task).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "prepare_episode": "mdbench.episode.workspace",
    "load_episode": "mdbench.episode.workspace",
    "check_integrity": "mdbench.episode.workspace",
    "run_episode": "mdbench.episode.runner",
    "apply_defect": "mdbench.episode.defects",
    "DEFECTS": "mdbench.episode.defects",
    "load_episodes": "mdbench.episode.aggregate",
    "render_report": "mdbench.episode.aggregate",
    "write_harbor_task": "mdbench.episode.harbor",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'mdbench.episode' has no attribute {name!r}")
