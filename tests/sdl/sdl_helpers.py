"""Shared constants and helpers of the sdl room's tests."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from mdbench.sdl.compiler import EvaluatorKeys

HERE = Path(__file__).parent
PG_FIXTURE = HERE / "data" / "ledger_precursor_genome.json"
SMALL_ROLES = {"initial_context": 1, "candidates": 1, "heldout": 2, "future": 2}
KEYS = EvaluatorKeys.for_tests("sdl")


#: The folder granted to the test policies (``CoordinatorSandbox.policy_dir``, ``--policy-dir``).
POLICY_DIR = HERE


def policy_cmd(script: str, *extra: str) -> str:
    """Command line running one of this folder's policy programs with the project's interpreter."""
    return " ".join(shlex.quote(x) for x in (sys.executable, str(HERE / script), *extra))
