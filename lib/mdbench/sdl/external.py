"""An external policy process spoken to over JSON lines (``mdbench sdl run --policy-cmd CMD``).

Protocol ``mdbench-sdl-policy/1``: mdbench starts ``CMD`` (split with :func:`shlex.split`, no shell), writes one
JSON object per line to its stdin and reads exactly one JSON object per line from its stdout for every request.
The process's stderr is kept for error messages. Requests::

    {"type": "hello", "protocol": "mdbench-sdl-policy/1", "seed": 0, "action_schema": {...},
     "forecast_row_schema": {...}}                       → {"ok": true, "name": "my-policy"}
    {"type": "act", "state": STATE}                       → one action object (ACTION_SCHEMA)
    {"type": "forecast", "purpose": "heldout_checkpoint" | "local", "state": STATE,
     "experiment_ids": [...]}                             → {"forecasts": [row, ...]}
    {"type": "review_expectation", "state": STATE, "experiment_id": ID}
                                                          → {"forecast_changes_conclusion": p,
                                                             "forecast_quality_tier": "..."}
    {"type": "bye"}                                       → (no reply; the process should exit)

``STATE`` is the policy-visible state of :meth:`mdbench.sdl.environment.CampaignEnv.visible_state`. Every branch
(adaptive, random control, no-evidence control) starts a fresh process. A malformed action is rejected by the
environment like any invalid action; a reply that is not JSON, a dead process or a timeout raises
:class:`PolicyProcessError` and ends the branch, recorded in its trace.
"""

from __future__ import annotations

import json
import queue
import shlex
import subprocess
import tempfile
import threading
from typing import Any

from mdbench.errors import MdbenchError
from mdbench.sdl.environment import ACTION_SCHEMA, FORECAST_ROW_SCHEMA

PROTOCOL = "mdbench-sdl-policy/1"


class PolicyProcessError(MdbenchError):
    """The external policy process died, timed out or answered with something that is not one JSON line."""


class ExternalPolicy:
    """A policy living in a subprocess (see module docstring).

    Parameters
    ----------
    cmd : str
        Command line of the policy program.
    timeout_s : float
        Seconds to wait for each reply [s].
    """

    def __init__(self, cmd: str, timeout_s: float = 120.0, name: str | None = None):
        self.cmd = cmd
        self.argv = shlex.split(cmd)
        if not self.argv:
            raise PolicyProcessError("--policy-cmd is empty")
        self.timeout_s = timeout_s
        self.name = name or "external"
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr = tempfile.TemporaryFile(mode="w+b")

    # -- process plumbing
    def _start(self) -> None:
        try:
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._stderr, text=True, bufsize=1)
        except OSError as exc:
            raise PolicyProcessError(f"cannot start policy command {self.cmd!r}: {exc.strerror}") from exc
        self._lines = queue.Queue()
        threading.Thread(target=self._reader, args=(self._proc, self._lines), daemon=True).start()

    @staticmethod
    def _reader(proc: subprocess.Popen, q: "queue.Queue[str | None]") -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            q.put(line)
        q.put(None)

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        tail = self._stderr.read()[-800:].decode("utf-8", "replace").strip()
        return f"; policy stderr: {tail}" if tail else ""

    def request(self, msg: dict[str, Any]) -> Any:
        """Send one request and return the decoded one-line JSON reply."""
        if self._proc is None:
            raise PolicyProcessError("policy process not started (call reset first)")
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(msg) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise PolicyProcessError(f"policy process {self.cmd!r} is gone ({exc}){self._stderr_tail()}") from exc
        try:
            line = self._lines.get(timeout=self.timeout_s)
        except queue.Empty as exc:
            raise PolicyProcessError(f"policy process {self.cmd!r} gave no reply to '{msg['type']}' within "
                                     f"{self.timeout_s} s{self._stderr_tail()}") from exc
        if line is None:
            raise PolicyProcessError(f"policy process {self.cmd!r} exited (code {self._proc.poll()}) before "
                                     f"answering '{msg['type']}'{self._stderr_tail()}")
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
            self.name = reply["name"]

    def act(self, state: dict[str, Any]) -> dict[str, Any]:
        """Ask for one action (validated by the environment, not here)."""
        return self.request({"type": "act", "state": state})

    def forecast(self, state: dict[str, Any], experiment_ids: list[str]) -> list[dict[str, Any]]:
        """Ask for forecast rows (validated by the environment)."""
        purpose = "heldout_checkpoint" if state.get("phase") == "heldout_forecast" else "local"
        reply = self.request({"type": "forecast", "purpose": purpose, "state": state,
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
        """Say bye and end the process (killing it if it lingers)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.write(json.dumps({"type": "bye"}) + "\n")
                proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
