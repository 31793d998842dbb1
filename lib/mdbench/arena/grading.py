"""Verifier support for arena tasks: deterministic checks, process criteria, Harbor reward files.

A task's ``tests/verify.py`` builds a :class:`Grader`, adds one check per deterministic criterion and
calls :meth:`Grader.finish`. That writes, in the Harbor verifier log folder (``/logs/verifier`` in a
container, ``$ARENA_VERIFIER_DIR`` in the local runner):

- ``reward.json``: a flat object of numbers, ``{"correctness": k/n}`` plus ``"process"`` when process
  criteria were scored;
- ``reward-details.json``: per reward key ``{score, criteria: [{name, value, raw, weight, description,
  reasoning, error}], kind}`` with ``kind`` ``programmatic`` (deterministic checks) or ``command``/``expert``/``llm``
  (process criteria scored by a judge program, an expert score file or an LLM endpoint, :mod:`mdbench.arena.judge`);
  the process entry also has ``state`` (``scored`` | ``unscorable``) and, when unscorable, ``reason``.

Correctness is the fraction of satisfied criteria, :math:`c = \\sum_i w_i v_i / \\sum_i w_i` with
:math:`v_i \\in \\{0, 1\\}`. Presence-only criteria (``output_exists``) carry weight 0: they are reported,
but a wrong answer in the right file scores 0.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from mdbench import untrusted
from mdbench.arena.criterion import Criterion, weighted_score
from mdbench.arena.folders import HARBOR_PATHS, agent_dir, app_dir, harbor_path, tests_dir, verifier_dir
from mdbench.arena.judge import judge_process
from mdbench.untrusted import write_new

#: Names task verifiers import from here (folders and criteria are defined in :mod:`mdbench.arena.folders`
#: and :mod:`mdbench.arena.criterion`).
__all__ = ["HARBOR_PATHS", "Criterion", "Grader", "agent_dir", "app_dir", "harbor_path", "read_json", "read_text",
           "read_xvg", "tests_dir", "verifier_dir", "weighted_score"]

log = logging.getLogger(__name__)


@dataclass
class Grader:
    """Collects the deterministic checks of one task and writes Harbor reward files.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> out = Path(tempfile.mkdtemp())
    >>> g = Grader("scale-charges-072")
    >>> g.check("file_exists", lambda: (out / "charges.itp").exists(), "the output file exists")
    False
    >>> g.finish(out)["correctness"]  # prints each criterion and the rewards, as a verifier log shows them
    [FAIL] file_exists: the output file exists
    {"correctness": 0.0}
    0.0
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
        """Write ``reward.json`` and ``reward-details.json``; judge the process criteria when configured.

        Process criteria (``tests/process.toml``) are judged (:func:`mdbench.arena.judge.judge_process`)
        when ``ARENA_JUDGE_CMD`` (a judge program), ``ARENA_PROCESS_SCORES`` (an expert score file) or
        ``ARENA_JUDGE_LLM_URL`` (an LLM endpoint) is set. A scored process adds the ``process`` reward;
        an unscorable one (no trajectory) adds none, and ``reward-details.json`` records the state and the
        reason.

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
        judged = judge_process(process_file, self.task) if process_file.exists() else None
        if judged is not None and judged.state == "scored":
            rewards["process"] = round(weighted_score(judged.criteria), 6)
            details["process"] = {"score": rewards["process"], "state": "scored", "kind": judged.kind,
                                  "criteria": [asdict(c) for c in judged.criteria]}
        elif judged is not None:
            details["process"] = {"score": None, "state": judged.state, "kind": judged.kind,
                                  "reason": judged.reason, "criteria": []}
        # created fresh (O_CREAT|O_EXCL|O_NOFOLLOW after removing whatever is at the name): never written
        # through a link, even where the folder is shared with an agent
        write_new(out_dir / "reward-details.json", json.dumps(details, indent=2) + "\n")
        write_new(out_dir / "reward.json", json.dumps(rewards, indent=2) + "\n")
        for c in self.criteria:
            mark = "PASS" if c.value == 1.0 else "FAIL"
            # stdout of test.sh is the verifier's log (Harbor keeps it as test-stdout.txt)
            sys.stdout.write(f"[{mark}] {c.name}: {c.description}" + (f" ({c.error})" if c.error else "") + "\n")
        if judged is not None and judged.state != "scored":
            sys.stdout.write(f"[----] process: {judged.state} ({judged.reason})\n")
        sys.stdout.write(json.dumps(rewards) + "\n")
        return rewards


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def read_json(path: Path) -> Any:
    """Read an agent's JSON output (helper for verifiers) through :mod:`mdbench.untrusted`: a regular file
    only (no link followed, no FIFO opened), 16 MiB at most, finite numbers, bounded nesting; anything else
    raises :class:`mdbench.untrusted.Refused` (the check then fails with that reason)."""
    return untrusted.read_json(path)


def read_text(path: Path, *, max_bytes: int = untrusted.MAX_BYTES) -> str:
    """Read an agent's text output through :mod:`mdbench.untrusted` (regular file, size-capped)."""
    return untrusted.read_text(path, max_bytes=max_bytes)


def read_xvg(path: Path):
    """Read a GROMACS ``.xvg`` table (``#`` and ``@`` lines skipped) into a 2-D numpy array."""
    import numpy as np

    rows = []
    for line in untrusted.read_text(path).splitlines():
        s = line.strip()
        if not s or s[0] in "#@":
            continue
        rows.append([float(x) for x in s.split()])
    return np.asarray(rows, dtype=float)
