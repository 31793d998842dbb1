"""An external policy: a confined process spoken to over JSON lines (``mdbench sdl run --policy-cmd CMD``).

Protocol ``mdbench-sdl-policy/2``: mdbench starts ``CMD`` (split with :func:`shlex.split`, no shell) as a
confined process (:mod:`mdbench.sdl.confine`: separate user, mount/PID/network namespaces, evaluator files
hidden), writes one JSON object per line to its stdin and reads exactly one JSON object per line from its
stdout for every request. Its stderr is kept: the tail goes into the trace. Requests::

    {"type": "hello", "protocol": "mdbench-sdl-policy/2", "seed": 0, "action_schema": {...},
     "forecast_row_schema": {...}}                       → {"ok": true, "name": "my-policy"}
    {"type": "act", "state": STATE}                       → one action object (ACTION_SCHEMA)
    {"type": "forecast", "purpose": "heldout_checkpoint" | "future_decision" | "local", "state": STATE,
     "experiment_ids": [...]}                             → {"forecasts": [row, ...]}
    {"type": "review_expectation", "state": STATE, "experiment_id": ID}
                                                          → {"forecast_changes_conclusion": p,
                                                             "forecast_quality_tier": "..."}
    {"type": "bye"}                                       → (no reply; the process should exit)

``STATE`` is the policy-visible state (:meth:`mdbench.sdl.environment.CampaignEnv.visible_state`); ids in it
are the compile's salted public ids. Every branch and every evaluator call (held-out checkpoint, future
decision) starts a *fresh* process. A malformed action is rejected by the environment like any invalid
action; a reply that is not JSON, a dead process or a timeout raises :class:`PolicyProcessError` and ends
the branch (or invalidates the evaluator call), recorded in its trace.
"""

from __future__ import annotations

import json
import queue
import shlex
import tempfile
import threading
from pathlib import Path
from typing import Any

from mdbench.errors import MdbenchError
from mdbench.sdl.confine import CoordinatorProcess, CoordinatorSandbox
from mdbench.sdl.environment import ACTION_SCHEMA, FORECAST_ROW_SCHEMA, PROTOCOL

#: Longest reply line accepted [characters].
MAX_REPLY_CHARS = 8_000_000
#: Characters of the process's stderr kept in the trace.
STDERR_TAIL_CHARS = 6000


class PolicyProcessError(MdbenchError):
    """The external policy process died, timed out or answered with something that is not one JSON line."""


def _purpose(state: dict[str, Any]) -> str:
    return {"heldout_forecast": "heldout_checkpoint", "future_forecast": "future_decision"}.get(
        state.get("phase"), "local")


class ExternalPolicy:
    """A policy living in a confined subprocess (see module docstring).

    Parameters
    ----------
    cmd : str
        Command line of the policy program.
    timeout_s : float
        Seconds to wait for each reply [s].
    sandbox : CoordinatorSandbox, optional
        Confinement settings (default: confined, nothing extra exposed).
    """

    def __init__(self, cmd: str, timeout_s: float = 120.0, name: str | None = None,
                 sandbox: CoordinatorSandbox | None = None):
        self.cmd = cmd
        self.argv = shlex.split(cmd)
        if not self.argv:
            raise PolicyProcessError("--policy-cmd is empty")
        self.timeout_s = timeout_s
        self.name = name or "external"
        self.sandbox = sandbox or CoordinatorSandbox()
        self._proc: CoordinatorProcess | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr_dir = Path(tempfile.mkdtemp(prefix="mdbench-sdl-stderr-"))
        self._stderr = self._stderr_dir / "stderr.log"
        self._record: dict[str, Any] = {"name": self.name, "command": cmd, "isolation": {}}

    # -- process plumbing
    def _start(self) -> None:
        try:
            self._proc = self.sandbox.spawn(self.argv, self._stderr)
        except (OSError, MdbenchError) as exc:
            raise PolicyProcessError(f"cannot start policy command {self.cmd!r}: {exc}") from exc
        self._record["isolation"] = self._proc.method
        self._lines = queue.Queue()
        threading.Thread(target=self._reader, args=(self._proc, self._lines), daemon=True).start()

    @staticmethod
    def _reader(proc: CoordinatorProcess, q: "queue.Queue[str | None]") -> None:
        try:
            while True:
                line = proc.stdout.readline(MAX_REPLY_CHARS + 1)
                if not line:
                    break
                q.put(line)
        except (OSError, ValueError):
            pass
        q.put(None)

    def stderr_tail(self) -> str:
        """The last :data:`STDERR_TAIL_CHARS` characters the process wrote to stderr."""
        try:
            data = self._stderr.read_bytes()
        except OSError:
            return ""
        return data[-STDERR_TAIL_CHARS:].decode("utf-8", "replace")

    def _err(self) -> str:
        tail = self.stderr_tail().strip()[-800:]
        return f"; policy stderr: {tail}" if tail else ""

    def request(self, msg: dict[str, Any]) -> Any:
        """Send one request and return the decoded one-line JSON reply."""
        if self._proc is None:
            raise PolicyProcessError("policy process not started (call reset first)")
        try:
            self._proc.stdin.write(json.dumps(msg) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise PolicyProcessError(f"policy process {self.cmd!r} is gone ({exc}){self._err()}") from exc
        try:
            line = self._lines.get(timeout=self.timeout_s)
        except queue.Empty as exc:
            raise PolicyProcessError(f"policy process {self.cmd!r} gave no reply to '{msg['type']}' within "
                                     f"{self.timeout_s} s{self._err()}") from exc
        if line is None:
            raise PolicyProcessError(f"policy process {self.cmd!r} exited (code {self._proc.poll()}) before "
                                     f"answering '{msg['type']}'{self._err()}")
        if len(line) > MAX_REPLY_CHARS:
            raise PolicyProcessError(f"policy reply to '{msg['type']}' is longer than {MAX_REPLY_CHARS} characters")
        try:
            return json.loads(line)
        except json.JSONDecodeError as exc:
            raise PolicyProcessError(f"policy reply to '{msg['type']}' is not one JSON line: {line[:200]!r}") from exc

    # -- Policy interface
    def reset(self, seed: int) -> None:
        """(Re)start the process and greet it with the protocol, seed and schemas."""
        self.close()
        self._start()
        reply = self.request({"type": "hello", "protocol": PROTOCOL, "seed": seed, "action_schema": ACTION_SCHEMA,
                              "forecast_row_schema": FORECAST_ROW_SCHEMA})
        if isinstance(reply, dict) and isinstance(reply.get("name"), str):
            self.name = reply["name"][:200]
            self._record["name"] = self.name

    def act(self, state: dict[str, Any]) -> Any:
        """Ask for one action (validated by the environment, not here)."""
        return self.request({"type": "act", "state": state})

    def forecast(self, state: dict[str, Any], experiment_ids: list[str]) -> list[dict[str, Any]]:
        """Ask for forecast rows (validated by the environment)."""
        reply = self.request({"type": "forecast", "purpose": _purpose(state), "state": state,
                              "experiment_ids": list(experiment_ids)})
        if not isinstance(reply, dict) or not isinstance(reply.get("forecasts"), list):
            raise PolicyProcessError("forecast reply must be {\"forecasts\": [rows]}")
        return reply["forecasts"]

    def review_expectation(self, state: dict[str, Any], experiment_id: str) -> dict[str, Any]:
        """Ask for the pre-review forecasts."""
        reply = self.request({"type": "review_expectation", "state": state, "experiment_id": experiment_id})
        if not isinstance(reply, dict):
            raise PolicyProcessError("review_expectation reply must be an object")
        return {k: reply.get(k) for k in ("forecast_changes_conclusion", "forecast_quality_tier")}

    def close(self) -> None:
        """Say bye and end the process tree (terminating it if it lingers); keep its exit record."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.write(json.dumps({"type": "bye"}) + "\n")
            proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass
        self._record["process"] = proc.finish()

    def session_record(self) -> dict[str, Any]:
        """Name, command, isolation method enforced, exit record and stderr tail of the last session."""
        return {**self._record, "stderr_tail": self.stderr_tail()}

    def __del__(self) -> None:
        import shutil

        shutil.rmtree(getattr(self, "_stderr_dir", ""), ignore_errors=True)
