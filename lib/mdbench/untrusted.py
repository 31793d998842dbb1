"""Read what an untrusted party left behind — an agent's workspace, a coordinator's reply, a run directory.

Every room that reads files an agent, a coordinator or a foreign run could have written goes through this module.
The party may have planted a symbolic link to a host file, a FIFO that blocks any reader forever, a device, a
file of many gigabytes, JSON nested 200,000 levels deep, a 5,000-digit integer, ``1e999``, ``NaN``, or a
directory tree 1,100 levels deep. None of these may crash, hang or mislead the evaluator; each becomes a
:class:`Refused` with a short reason code that the caller records as a finding.

Rules
-----
* Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat``-ed before a byte is read: only regular files
  are read (a FIFO, socket or device is refused without blocking; a link is refused, never followed).
* Sizes are capped (``max_bytes``); the cap is enforced on what is read, not on what ``stat`` claims.
* JSON must be finite (``NaN``, ``Infinity`` and overflowing literals such as ``1e999`` are refused), nested at
  most ``max_depth`` levels (checked by a linear scan *before* the recursive parser runs, so no
  ``RecursionError``) and hold integers of at most ``max_int_digits`` digits.
* Directory walks never follow links and stop at a depth and entry cap, saying so.
* :func:`write_new` creates a file where an agent may have planted a link, without writing through it.

Reason codes: ``missing``, ``symlink``, ``not_regular``, ``is_directory``, ``too_large``, ``unreadable``,
``not_utf8``, ``not_json``, ``too_deep``, ``non_finite``, ``int_too_long``, ``bad_number``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdbench.errors import MdbenchError

__all__ = ["Refused", "Entry", "Walk", "MAX_BYTES", "MAX_DEPTH", "MAX_INT_DIGITS", "open_regular", "read_bytes",
           "read_text", "loads", "read_json", "try_read_json", "walk", "number", "try_number", "write_new"]

#: Default largest file read into memory [bytes].
MAX_BYTES = 16 * 1024 * 1024
#: Default deepest JSON nesting (arrays and objects) accepted.
MAX_DEPTH = 64
#: Default longest integer literal accepted [decimal digits].
MAX_INT_DIGITS = 64

_O_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


class Refused(MdbenchError):
    """An untrusted file or value was not accepted.

    Attributes
    ----------
    path : str
        The file (or ``"<data>"`` for an in-memory reply).
    reason : str
        Short code (see the module docstring).
    detail : str
        One line for a person.
    """

    def __init__(self, path: Any, reason: str, detail: str = ""):
        self.path = str(path)
        self.reason = reason
        self.detail = detail
        super().__init__(f"{self.path}: refused ({reason}){': ' + detail if detail else ''}")


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "other"


# ------------------------------------------------------------------------------------------------------ files

def open_regular(path: str | os.PathLike, *, dir_fd: int | None = None) -> int:
    """Open ``path`` for reading if, and only if, it is a regular file; return the descriptor (blocking mode).

    The final component is never followed if it is a link (``O_NOFOLLOW``); a FIFO opens without blocking
    (``O_NONBLOCK``) and is then refused by ``fstat``. The caller closes the descriptor.
    """
    try:
        fd = os.open(path, _O_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise Refused(path, "missing", "no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(path, "symlink", "a symbolic link; links are never followed") from None
        if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket, or a FIFO without writer on some kernels
            raise Refused(path, "not_regular", "not a regular file") from None
        raise Refused(path, "unreadable", exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _kind(st.st_mode)
            raise Refused(path, "is_directory" if kind == "dir" else "not_regular", f"a {kind}, not a regular file")
        os.set_blocking(fd, True)  # O_NONBLOCK served its purpose (a FIFO could not block the open)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike, *, max_bytes: int = MAX_BYTES, dir_fd: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` bytes (:class:`Refused` otherwise)."""
    fd = open_regular(path, dir_fd=dir_fd)
    try:
        if os.fstat(fd).st_size > max_bytes:
            raise Refused(path, "too_large", f"{os.fstat(fd).st_size} bytes > limit {max_bytes}")
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            except OSError as exc:
                raise Refused(path, "unreadable", exc.strerror or str(exc)) from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # the file grew while we read it
                raise Refused(path, "too_large", f"more than {max_bytes} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, *, max_bytes: int = MAX_BYTES, errors: str = "replace") -> str:
    """The text (UTF-8) of a regular file; undecodable bytes replaced unless ``errors="strict"``."""
    data = read_bytes(path, max_bytes=max_bytes)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise Refused(path, "not_utf8", str(exc)) from None


# ------------------------------------------------------------------------------------------------------- JSON

def _nesting_depth(text: str, limit: int) -> int:
    """Deepest bracket nesting outside strings; stops counting once past ``limit``. Linear, no recursion."""
    depth = best = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > best:
                best = depth
                if best > limit:
                    return best
        elif ch in "]}":
            depth -= 1
    return best


def loads(data: str | bytes, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
          max_int_digits: int = MAX_INT_DIGITS, path: str = "<data>") -> Any:
    """Parse untrusted JSON: finite numbers, bounded nesting and integers, bounded size.

    Raises
    ------
    Refused
        ``too_large``, ``not_utf8``, ``too_deep``, ``not_json``, ``non_finite`` or ``int_too_long``.
    """
    if len(data) > max_bytes:
        raise Refused(path, "too_large", f"{len(data)} bytes > limit {max_bytes}")
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Refused(path, "not_utf8", str(exc)) from None
    elif isinstance(data, str):
        text = data
    else:
        raise Refused(path, "not_json", f"expected text, got {type(data).__name__}")
    depth = _nesting_depth(text, max_depth)
    if depth > max_depth:
        raise Refused(path, "too_deep", f"nested more than {max_depth} levels")

    def parse_int(token: str) -> int:
        if len(token.lstrip("-")) > max_int_digits:
            raise Refused(path, "int_too_long", f"an integer of {len(token.lstrip('-'))} digits (limit {max_int_digits})")
        return int(token)

    def parse_float(token: str) -> float:
        value = float(token)
        if not math.isfinite(value):
            raise Refused(path, "non_finite", f"the number {token[:40]} overflows to {value}")
        return value

    def parse_constant(token: str) -> float:
        raise Refused(path, "non_finite", f"{token} is not a finite number")

    try:
        return json.loads(text, parse_int=parse_int, parse_float=parse_float, parse_constant=parse_constant)
    except Refused:
        raise
    except RecursionError:  # defensive: the depth scan should have caught it
        raise Refused(path, "too_deep", "nested too deeply") from None
    except (ValueError, TypeError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise Refused(path, "not_json", msg[:200]) from None


def read_json(path: str | os.PathLike, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
              max_int_digits: int = MAX_INT_DIGITS) -> Any:
    """:func:`read_bytes` then :func:`loads` (errors name ``path``)."""
    return loads(read_bytes(path, max_bytes=max_bytes), max_bytes=max_bytes, max_depth=max_depth,
                 max_int_digits=max_int_digits, path=str(path))


def try_read_json(path: str | os.PathLike, **limits: Any) -> tuple[Any | None, Refused | None]:
    """``(value, None)`` or ``(None, refusal)``; never raises for what the file holds."""
    try:
        return read_json(path, **limits), None
    except Refused as exc:
        return None, exc


# ------------------------------------------------------------------------------------------------------ walks

@dataclass(frozen=True)
class Entry:
    """One entry met by :func:`walk`: ``relpath`` uses ``/``; ``size`` in bytes (0 for non-files)."""

    relpath: str
    kind: str
    size: int
    mode: int


@dataclass
class Walk:
    """What :func:`walk` saw; ``truncated`` with a ``reason`` when a cap stopped it."""

    root: str
    entries: list[Entry] = field(default_factory=list)
    truncated: bool = False
    reason: str | None = None

    def files(self) -> list[Entry]:
        return [e for e in self.entries if e.kind == "file"]


def walk(root: str | os.PathLike, *, max_depth: int = 32, max_entries: int = 100_000) -> Walk:
    """List a directory tree without following any link, breadth-first, with depth and entry caps.

    Directories are opened relative to their parent's descriptor with ``O_NOFOLLOW | O_DIRECTORY``, so a
    directory swapped for a link during the walk is refused rather than followed. ``root`` itself must be a
    real directory (:class:`Refused` otherwise).
    """
    root = os.fspath(root)
    out = Walk(root=root)
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        top = os.open(root, dir_flags)
    except FileNotFoundError:
        raise Refused(root, "missing", "no such directory") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(root, "not_regular", "not a real directory (a link or a file)") from None
        raise Refused(root, "unreadable", exc.strerror or str(exc)) from None
    queue: list[tuple[int, str, int]] = [(top, "", 0)]
    try:
        while queue:
            fd, rel, depth = queue.pop(0)
            try:
                try:
                    names = sorted(os.listdir(fd))
                except OSError:
                    continue
                for name in names:
                    if len(out.entries) >= max_entries:
                        out.truncated, out.reason = True, f"more than {max_entries} entries"
                        return out
                    relpath = f"{rel}/{name}" if rel else name
                    try:
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue
                    kind = _kind(st.st_mode)
                    out.entries.append(Entry(relpath, kind, st.st_size if kind == "file" else 0, st.st_mode))
                    if kind == "dir":
                        if depth + 1 >= max_depth:
                            out.truncated, out.reason = True, f"deeper than {max_depth} levels"
                            continue
                        try:
                            queue.append((os.open(name, dir_flags, dir_fd=fd), relpath, depth + 1))
                        except OSError:
                            continue
            finally:
                os.close(fd)
    finally:
        for fd, _, _ in queue:
            os.close(fd)
    return out


# ---------------------------------------------------------------------------------------------------- numbers

def try_number(value: Any, *, name: str = "value", minimum: float | None = 0.0,
               maximum: float | None = None) -> tuple[float | None, str | None]:
    """``(float, None)`` for a finite real number within the bounds, else ``(None, why)``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"{name} is {type(value).__name__}, not a number"
    try:
        x = float(value)
    except (OverflowError, ValueError):
        return None, f"{name} does not fit a float"
    if not math.isfinite(x):
        return None, f"{name} = {value!r} is not finite"
    if minimum is not None and x < minimum:
        return None, f"{name} = {x:g} is below {minimum:g}"
    if maximum is not None and x > maximum:
        return None, f"{name} = {x:g} is above {maximum:g}"
    return x, None


def number(value: Any, *, name: str = "value", minimum: float | None = 0.0, maximum: float | None = None) -> float:
    """A finite real number within ``[minimum, maximum]`` (:class:`Refused` ``bad_number`` otherwise)."""
    x, why = try_number(value, name=name, minimum=minimum, maximum=maximum)
    if why is not None:
        raise Refused("<data>", "bad_number", why)
    return x  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------------- writing

def shown(text: Any, *, max_chars: int = 300) -> str:
    """``text`` as one printable line for a terminal or a log: every control or unprintable character (a newline
    in a file name, an ANSI escape) written as its Python escape (``\\n``, ``\\x1b``), at most ``max_chars``
    characters of the original."""
    s = str(text)
    cut = "…" if len(s) > max_chars else ""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s[:max_chars]) + cut


def write_new(path: str | os.PathLike, data: bytes | str, *, mode: int = 0o644, attempts: int = 5) -> None:
    """Create ``path`` afresh and write ``data``, whatever an untrusted party left at that name.

    A file, link, FIFO or socket at ``path`` is removed (never followed), then the file is created with
    ``O_CREAT | O_EXCL | O_NOFOLLOW``: if something reappears in between (a race with the agent), creation
    fails and is retried, never writing through a planted link. A directory at ``path`` is :class:`Refused`.
    The parent directory itself must be trusted (the caller's choice).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    last: OSError | None = None
    for _ in range(max(1, attempts)):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise Refused(path, "is_directory", "a directory stands where a file is to be written")
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        except FileExistsError as exc:
            last = exc
            continue
        try:
            view = memoryview(payload)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            os.close(fd)
        return
    raise Refused(path, "unreadable", f"could not create the file afresh ({last})")
