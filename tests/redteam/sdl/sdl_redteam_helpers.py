"""Helpers of the sdl red-team tests."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

HERE = Path(__file__).parent


def cheat_cmd(mode: str, *extra: str) -> str:
    """Command line of the cheat coordinator (cheat_coordinator.py) in ``mode``."""
    return " ".join(shlex.quote(x) for x in (sys.executable, str(HERE / "cheat_coordinator.py"), "--mode", mode,
                                             *extra))
