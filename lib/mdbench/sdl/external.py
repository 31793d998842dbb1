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
are the assignment's salted public ids. Every branch and every evaluator call (held-out checkpoint, future
decision) starts a *fresh* process (:mod:`mdbench.sdl.confine`: fresh HOME, /tmp, /dev/shm, IPC namespace).

Replies are data. Each reply line is parsed by :func:`mdbench.untrusted.loads` (size, nesting depth,
integer length capped; NaN/Infinity/overflowing numbers refused). A reply to ``act`` that is not acceptable
JSON becomes an :class:`~mdbench.sdl.environment.InvalidReply` with the reason, which the environment rejects
like any invalid action; a forecast reply that is not acceptable is an invalid forecast with its reason. A
dead process or a timeout raises :class:`PolicyProcessError` (one line: the cause and the last line the process
wrote to stderr) and ends the branch, or invalidates the evaluator call, with that cause in the trace.

Timing: ``startup_timeout_s`` covers the sandbox start-up and the ``hello`` reply; ``timeout_s`` counts for
every later request from the moment mdbench starts writing it, and covers the write and the reply together.
Every pipe operation has that deadline: requests are written without blocking (:func:`write_all`, ``select``
on a non-blocking pipe), so a coordinator that never reads its stdin cannot stall the runner in a write of a
large state; replies are read by a thread into a bounded queue. A coordinator that never reads, closes its
stdout, or floods it (a line nobody asked for ahead of a request, more than :data:`MAX_UNREAD_LINES` of them,
or one endless line) ends the session with a :class:`PolicyProcessError` within the timeout; the session is
then ended without the voluntary exit wait. Every session folder (HOME, view, stderr capture) is removed when
the session ends (:mod:`mdbench.sdl.confine`).
"""

from __future__ import annotations

import errno
import json
import os
import queue
import re
import select
import shlex
import threading
import time
from typing import Any

from mdbench.errors import MdbenchError
from mdbench.sdl.confine import CoordinatorProcess, CoordinatorSandbox, remove_session_folder, session_folder
from mdbench.sdl.environment import ACTION_SCHEMA, FORECAST_ROW_SCHEMA, PROTOCOL, InvalidReply
from mdbench.untrusted import Refused, loads

#: Longest reply line accepted [characters].
MAX_REPLY_CHARS = 8_000_000
#: Deepest reply nesting and longest integer literal accepted.
MAX_REPLY_DEPTH = 64
MAX_REPLY_INT_DIGITS = 64
_NOT_UTF8 = "\x00not-utf8\x00"   # reader sentinel (never equal to a real line: compared by identity)
#: Characters of the process's stderr kept in the trace.
STDERR_TAIL_CHARS = 6000
#: Reply lines a coordinator may write ahead of the requests before the session is ended as a flood.
MAX_UNREAD_LINES = 64
#: Seconds the closing ``bye`` may take to write.
BYE_TIMEOUT_S = 1.0
_FLOOD = "\x00flood\x00"   # reader sentinel (compared by identity)


def write_all(fd: int, data: bytes, deadline: float) -> None:
    """Write ``data`` to the pipe ``fd`` (set non-blocking here) before the monotonic ``deadline``.

    Raises :class:`TimeoutError` when the reader does not take it in time, :class:`BrokenPipeError` when the
    reader is gone. Never blocks past the deadline.
    """
    os.set_blocking(fd, False)
    view = memoryview(data)
    while view:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{len(view)} of {len(data)} bytes not taken")
        _, ready, _ = select.select([], [fd], [], left)
        if not ready:
            continue
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            continue
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise BrokenPipeError(errno.EPIPE, "the process closed its stdin") from None
            raise
        view = view[n:]


class PolicyProcessError(MdbenchError):
    """The external policy process died, timed out or could not be started (one line)."""


class ReplyRefused(MdbenchError):
    """A reply line that is not acceptable JSON (``reason`` is one line: not JSON, too deep, …)."""

    def __init__(self, request: str, reason: str):
        self.request = request
        self.reason = reason
        super().__init__(f"reply to '{request}' refused: {reason}")


def one_line(text: str, limit: int = 300) -> str:
    """``text`` as one line of at most ``limit`` characters (whitespace runs collapsed)."""
    t = re.sub(r"\s+", " ", str(text)).strip()
    return t if len(t) <= limit else t[: limit - 1] + "…"


def parse_reply(line: str | bytes, request: str = "reply") -> Any:
    """The one parser of coordinator and LLM replies: :func:`mdbench.untrusted.loads` with the reply limits.

    Raises :class:`ReplyRefused` with a one-line reason; never anything else.
    """
    try:
        return loads(line, max_bytes=MAX_REPLY_CHARS, max_depth=MAX_REPLY_DEPTH, max_int_digits=MAX_REPLY_INT_DIGITS,
                     path=f"reply to '{request}'")
    except Refused as exc:
        raise ReplyRefused(request, one_line(f"{exc.reason}: {exc.detail}" if exc.detail else exc.reason)) from None
    except Exception as exc:  # noqa: BLE001 — a reply must never crash the runner
        raise ReplyRefused(request, one_line(f"{type(exc).__name__}: {exc}")) from None


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
        Seconds to wait for each reply after ``hello``, counted from when the request is written [s].
    sandbox : CoordinatorSandbox, optional
        Confinement settings (default: confined, nothing extra exposed).
    startup_timeout_s : float, optional
        Seconds for the sandbox start-up and the ``hello`` reply [s] (default ``max(60, timeout_s)``).
    """

    def __init__(self, cmd: str, timeout_s: float = 120.0, name: str | None = None,
                 sandbox: CoordinatorSandbox | None = None, startup_timeout_s: float | None = None):
        self.cmd = cmd
        self.argv = shlex.split(cmd)
        if not self.argv:
            raise PolicyProcessError("--policy-cmd is empty")
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s if startup_timeout_s is not None else max(60.0, timeout_s)
        self.name = name or "external"
        self.sandbox = sandbox or CoordinatorSandbox()
        self._proc: CoordinatorProcess | None = None
        self._lines: queue.Queue[str | None] = queue.Queue(MAX_UNREAD_LINES)
        self._stderr_dir = None
        self._stderr = None
        self._tail = ""
        self._broken = False
        self._record: dict[str, Any] = {"name": self.name, "command": cmd, "isolation": {}}

    # -- process plumbing
    def _start(self) -> None:
        self._stderr_dir = session_folder("stderr")
        self._stderr = self._stderr_dir / "stderr.log"
        self._tail, self._broken = "", False
        try:
            self._proc = self.sandbox.spawn(self.argv, self._stderr)
        except (OSError, MdbenchError) as exc:
            self._drop_stderr()
            raise PolicyProcessError(one_line(f"start: cannot start policy command {self.cmd!r}: {exc}")) from exc
        self._record["isolation"] = self._proc.method
        self._lines = queue.Queue(MAX_UNREAD_LINES)
        threading.Thread(target=self._reader, args=(self._proc, self._lines), daemon=True).start()

    @staticmethod
    def _reader(proc: CoordinatorProcess, q: "queue.Queue[str | None]") -> None:
        """Lines of the process's stdout into ``q``; a full queue (a flood) or an endless line ends reading
        (the channel is closed: the process's next write fails)."""
        end: str | None = None
        try:
            while True:
                line = proc.stdout.readline(MAX_REPLY_CHARS + 1)
                if not line:
                    break
                if len(line) > MAX_REPLY_CHARS and not line.endswith("\n"):
                    q.put_nowait(line)   # refused by request(); the channel is out of step: stop reading
                    break
                q.put_nowait(line)
        except queue.Full:
            end = _FLOOD
        except UnicodeDecodeError:
            end = _NOT_UTF8
        except (OSError, ValueError):
            pass
        try:
            proc.stdout.close()
        except (OSError, ValueError):
            pass
        if end is _FLOOD:   # what was queued is no reply anybody asked for: the next request sees the flood
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        while True:   # the end marker always gets in
            try:
                q.put_nowait(end)
                break
            except queue.Full:
                try:
                    q.get_nowait()
                except queue.Empty:
                    pass

    def stderr_tail(self) -> str:
        """The last :data:`STDERR_TAIL_CHARS` characters the process wrote to stderr (read from the end only;
        kept when the session ends)."""
        if self._stderr is None:
            return self._tail
        try:
            with self._stderr.open("rb") as fh:
                size = fh.seek(0, 2)
                fh.seek(max(0, size - STDERR_TAIL_CHARS))
                data = fh.read(STDERR_TAIL_CHARS)
        except OSError:
            return ""
        return data.decode("utf-8", "replace")

    def _err(self) -> str:
        lines = [ln for ln in self.stderr_tail().splitlines() if ln.strip()]
        return f"; last stderr line: {one_line(lines[-1], 200)}" if lines else ""

    def request(self, msg: dict[str, Any]) -> Any:
        """Send one request and return the parsed reply (:func:`parse_reply`).

        Raises :class:`PolicyProcessError` (dead, timed out) or :class:`ReplyRefused` (not acceptable JSON).
        """
        if self._proc is None:
            raise PolicyProcessError("policy process not started (call reset first)")
        if self._broken:
            raise PolicyProcessError("the channel to the policy process is closed after an earlier failure")
        with self._lines.mutex:
            ahead = [x for x in self._lines.queue if isinstance(x, str) and x is not _NOT_UTF8 and x is not _FLOOD]
        if ahead:
            self._broken = True
            raise PolicyProcessError(f"unsolicited: the process wrote {len(ahead)} line(s) to stdout before the "
                                     f"'{msg['type']}' request (one reply line per request); the channel is closed")
        timeout = self.startup_timeout_s if msg["type"] == "hello" else self.timeout_s
        deadline = time.monotonic() + timeout
        try:
            try:
                write_all(self._proc.stdin.fileno(), (json.dumps(msg) + "\n").encode("utf-8"), deadline)
            except TimeoutError as exc:
                raise PolicyProcessError(f"timeout: the process did not read the '{msg['type']}' request within "
                                         f"{timeout:g} s ({exc}){self._err()}") from None
            except (OSError, ValueError) as exc:
                raise PolicyProcessError(f"exit: policy process {self.cmd!r} is gone ({exc}){self._err()}") from exc
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise PolicyProcessError(f"timeout: no reply to '{msg['type']}' within {timeout:g} s"
                                         f"{self._err()}") from None
        except PolicyProcessError:
            self._broken = True
            raise
        if line is _FLOOD:
            self._broken = True
            raise PolicyProcessError(f"flood: the process wrote more than {MAX_UNREAD_LINES} lines nobody asked "
                                     f"for before answering '{msg['type']}'; the channel is closed")
        if line is _NOT_UTF8:
            self._broken = True
            raise PolicyProcessError(f"not_utf8: the reply to '{msg['type']}' is not UTF-8 text; the channel is "
                                     "closed")
        if line is None:
            self._broken = True
            raise PolicyProcessError(f"exit: the process ended (code {self._proc.poll()}) before answering "
                                     f"'{msg['type']}'{self._err()}")
        if len(line) > MAX_REPLY_CHARS:
            self._broken = True
            raise ReplyRefused(msg["type"], f"too_large: a reply line of more than {MAX_REPLY_CHARS} characters")
        return parse_reply(line, msg["type"])

    # -- Policy interface
    def reset(self, seed: int) -> None:
        """(Re)start the process and greet it with the protocol, seed and schemas."""
        self.close()
        self._start()
        try:
            reply = self.request({"type": "hello", "protocol": PROTOCOL, "seed": seed, "action_schema": ACTION_SCHEMA,
                                  "forecast_row_schema": FORECAST_ROW_SCHEMA})
        except ReplyRefused:
            reply = None          # a garbled greeting is not fatal: the name stays the default
        if isinstance(reply, dict) and isinstance(reply.get("name"), str):
            self.name = reply["name"][:200]
            self._record["name"] = self.name

    def act(self, state: dict[str, Any]) -> Any:
        """Ask for one action (validated by the environment, not here); an unparsable reply is an
        :class:`InvalidReply`."""
        try:
            return self.request({"type": "act", "state": state})
        except ReplyRefused as exc:
            return InvalidReply(exc.reason)

    def forecast(self, state: dict[str, Any], experiment_ids: list[str]) -> Any:
        """Ask for forecast rows (validated by the environment); raises :class:`ReplyRefused` with the reason
        for a reply that is not acceptable JSON or not ``{"forecasts": [rows]}``."""
        reply = self.request({"type": "forecast", "purpose": _purpose(state), "state": state,
                              "experiment_ids": list(experiment_ids)})
        if not isinstance(reply, dict) or not isinstance(reply.get("forecasts"), list):
            raise ReplyRefused("forecast", f"expected {{\"forecasts\": [rows]}}, got {type(reply).__name__}")
        return reply["forecasts"]

    def review_expectation(self, state: dict[str, Any], experiment_id: str) -> dict[str, Any]:
        """Ask for the pre-review forecasts (an unusable reply gives ``None`` values: the action is rejected)."""
        try:
            reply = self.request({"type": "review_expectation", "state": state, "experiment_id": experiment_id})
        except ReplyRefused:
            reply = None
        if not isinstance(reply, dict):
            reply = {}
        return {k: reply.get(k) for k in ("forecast_changes_conclusion", "forecast_quality_tier")}

    def close(self) -> None:
        """Say bye and end the process tree; keep its exit record and stderr tail, remove its folders.

        A healthy session gets :data:`BYE_TIMEOUT_S` to take the ``bye`` and a few seconds to exit on its own;
        a session whose channel failed (timeout, flood, dead, not UTF-8) is ended at once.
        """
        proc, self._proc = self._proc, None
        if proc is None:
            return
        broken = self._broken
        if not broken:
            try:
                write_all(proc.stdin.fileno(), (json.dumps({"type": "bye"}) + "\n").encode(),
                          time.monotonic() + BYE_TIMEOUT_S)
            except (OSError, ValueError):
                broken = True
        try:
            proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            self._record["process"] = proc.finish(wait_s=0.0 if broken else 5.0)
        finally:
            self._tail = self.stderr_tail()
            self._drop_stderr()

    def _drop_stderr(self) -> None:
        d, self._stderr_dir, self._stderr = self._stderr_dir, None, None
        if d is not None:
            remove_session_folder(d)

    def session_record(self) -> dict[str, Any]:
        """Name, command, isolation method enforced, exit record and stderr tail of the last session."""
        return {**self._record, "stderr_tail": self.stderr_tail()}


def external_factory_for(cmd: str, sandbox: CoordinatorSandbox, **kw: Any):
    """``assignment -> session factory`` for :func:`mdbench.sdl.runner.run_system` (``factory_for``): every
    session of an assignment sees that assignment's file only (:meth:`CoordinatorSandbox.for_assignment`).
    ``kw`` goes to :class:`ExternalPolicy` (``timeout_s``, ``startup_timeout_s``, ``name``)."""

    def factory_for(asg: Any):
        view = sandbox.for_assignment(asg.assignment_id)
        return lambda: ExternalPolicy(cmd, sandbox=view, **kw)

    return factory_for
