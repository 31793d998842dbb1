"""Read-only, bounded access to an untrusted run directory.

The audit never executes anything from the run directory. Every read goes through :class:`RunFS`:
paths are resolved inside the run directory (a symlink leaving it is reported and not followed),
files larger than a limit are refused with a finding (checksums are streamed), and JSON/JSONL parse
errors and non-finite numbers become findings with line numbers instead of exceptions.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import stat
from pathlib import Path
from typing import Any, Iterable, Iterator

from mdbench.audit.model import Finding
from mdbench.hashing import sha256_file as sha256_file  # re-export: the one definition is below every room
from mdbench.untrusted import Refused, Walk, walk

log = logging.getLogger(__name__)

#: Largest JSON/text file parsed in memory [bytes]; larger ones are refused with a finding.
MAX_PARSE_BYTES = 64 * 1024 * 1024
#: Deepest folder nesting and most entries of a run directory the audit walks.
MAX_TREE_DEPTH, MAX_TREE_ENTRIES = 64, 200_000
#: Largest file whose sha256 is computed (streamed) [bytes], by its *logical* size (a sparse file is as big as
#: it says): above it the artifact gets a ``file_too_large`` finding, not a hash. 8 GiB is several times the
#: largest trajectory of a full study (100 ns per case, frames every ps, ~10^4 atoms).
MAX_HASH_BYTES = 8 * 1024 * 1024 * 1024
#: Most bytes one audit hashes in all [bytes] (the default workspace quota of an episode): past it, each further
#: artifact gets a ``hash_budget_exhausted`` finding, not a hash. The audit's hashing time is bounded by
#: this over the disk's read rate whatever the run directory holds.
MAX_HASH_TOTAL_BYTES = 32 * 1024 * 1024 * 1024


class _NonFinite(float):
    """Marker float for NaN/Infinity tokens found while parsing JSON."""


def _parse_constant(token: str) -> float:
    return _NonFinite({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[token])


def nonfinite_paths(obj: Any, prefix: str = "") -> list[str]:
    """Key paths (``a.b[2]``) of every NaN or infinite number inside a parsed JSON value."""
    out: list[str] = []
    if isinstance(obj, float):
        if not math.isfinite(obj):
            out.append(prefix or "$")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(nonfinite_paths(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(nonfinite_paths(v, f"{prefix}[{i}]"))
    return out


class RunFS:
    """A run directory opened for auditing.

    Parameters
    ----------
    root : path
        The run directory.
    max_parse_bytes : int
        Files above this size [bytes] are not parsed; a finding is recorded instead.
    """

    def __init__(self, root: str | Path, max_parse_bytes: int = MAX_PARSE_BYTES):
        self.root = Path(root).resolve()
        self.max_parse_bytes = max_parse_bytes
        self.findings: list[Finding] = []
        self._escaping: set[str] = set()
        self._json_cache: dict[str, Any] = {}
        self._hashes: dict[tuple, str] = {}
        self.hashed_bytes = 0

    # ------------------------------------------------------------------ paths
    def rel(self, path: str | Path) -> str:
        """Path relative to the run directory, POSIX style (for evidence references)."""
        p = Path(path)
        try:
            return p.relative_to(self.root).as_posix()
        except ValueError:
            return p.as_posix()

    def add(self, code: str, message: str, path: str | None = None, line: int | None = None,
            item: str | None = None, case: str | None = None) -> Finding:
        f = Finding(code=code, message=message, path=path, line=line, item=item, case=case)
        self.findings.append(f)
        return f

    def resolve(self, rel: str | Path, *, item: str | None = None) -> Path | None:
        """The real path of ``rel`` if it exists and stays inside the run directory, else ``None``.

        A path that is (or passes through) a symlink pointing outside the run directory is reported
        once with code ``symlink_escape`` and is never opened.
        """
        p, code, message, key = self._locate(rel)
        if code == "symlink_escape":
            if key not in self._escaping:
                self._escaping.add(key)
                self.add(code, message, key, item=item or "E2")
        elif code is not None:
            self.add(code, message, str(rel), item=item)
        return p

    def _locate(self, rel: str | Path) -> tuple[Path | None, str | None, str, str]:
        """(path inside the run or None, finding code or None, message, run-relative key) — no finding made."""
        raw = Path(rel)
        if raw.is_absolute():
            try:
                raw = raw.relative_to(self.root)
            except ValueError:
                return None, "path_outside_run", f"absolute path outside the run directory: {rel}", str(rel)
        if ".." in raw.parts:
            return None, "path_outside_run", f"path climbs out of the run directory: {rel}", str(rel)
        p = self.root / raw
        if not os.path.lexists(p):
            return None, None, "", raw.as_posix()
        real = Path(os.path.realpath(p))
        if real != self.root and self.root not in real.parents:
            return (None, "symlink_escape", f"symlink leaves the run directory (→ {real}); not followed",
                    raw.as_posix())
        return p, None, "", raw.as_posix()

    def exists(self, rel: str | Path) -> bool:
        return self.resolve(rel) is not None

    def scan_symlinks(self) -> None:
        """Walk the run directory without following links and report links that leave it."""
        tree = _walk(self.root)
        if tree.truncated:
            self.add("tree_truncated", f"the run directory was walked only partly: {tree.reason}", ".", item="E3")
        for entry in tree.entries:
            if entry.kind != "symlink":
                continue
            full = self.root / entry.relpath
            if self.resolve(entry.relpath) is None:
                continue  # leaves the run directory: reported by resolve
            try:
                os.stat(full)
            except OSError as exc:
                loop = exc.errno == errno.ELOOP
                self.add("symlink_loop" if loop else "dangling_symlink",
                         "symlink loop; not followed" if loop else
                         f"dangling symlink (→ {os.readlink(full)}); not followed", entry.relpath, item="E3")

    def glob(self, rel_dir: str, pattern: str) -> list[str]:
        """Relative paths of files in ``rel_dir`` matching ``pattern`` (no recursion, links checked)."""
        d = self.resolve(rel_dir)
        if d is None or not d.is_dir():
            return []
        out = []
        for p in sorted(d.glob(pattern)):
            relp = f"{rel_dir.rstrip('/')}/{p.name}"
            if self.resolve(relp) is not None and Path(os.path.realpath(p)).is_file():
                out.append(relp)
        return out

    # ------------------------------------------------------------------ reading
    def _check_size(self, p: Path, rel: str, item: str | None, max_bytes: int | None = None) -> bool:
        size = p.stat().st_size
        limit = self.max_parse_bytes if max_bytes is None else min(max_bytes, self.max_parse_bytes)
        if size > limit:
            self.add("file_too_large", f"{size} bytes exceeds the {limit}-byte parse limit; "
                     "not parsed", rel, item=item or "E3")
            return False
        return True

    def read_text(self, rel: str, *, item: str | None = None, follow_symlinks: bool = True,
                  max_bytes: int | None = None) -> str | None:
        """Text of a file (UTF-8, undecodable bytes replaced), or ``None`` with a finding.

        With ``follow_symlinks=False`` a path that is, or passes through, a symbolic link is not opened
        (one ``symlink_not_followed`` finding), nor is anything but a regular file (a FIFO, a device), and
        the file is opened without following a link swapped in meanwhile (``O_NOFOLLOW``). ``max_bytes``
        lowers the parse limit for this read."""
        p = self.resolve(rel, item=item)
        if p is None:
            return None
        if not follow_symlinks:
            return self._read_nofollow(p, rel, item, max_bytes)
        if not p.is_file():
            return None
        if not self._check_size(p, rel, item, max_bytes):
            return None
        try:
            return p.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            self.add("unreadable", f"cannot read ({exc.strerror})", rel, item=item or "E3")
            return None

    def _read_nofollow(self, p: Path, rel: str, item: str | None, max_bytes: int | None) -> str | None:
        here = self.root
        for part in p.relative_to(self.root).parts:
            here = here / part
            if here.is_symlink():
                self.add("symlink_not_followed", f"{here.relative_to(self.root).as_posix()} is a symbolic link; "
                         "not followed", rel, item=item or "E3")
                return None
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            self.add("unreadable", f"cannot open ({exc.strerror})", rel, item=item or "E3")
            return None
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                self.add("unreadable", "not a regular file; not read", rel, item=item or "E3")
                return None
            limit = self.max_parse_bytes if max_bytes is None else min(max_bytes, self.max_parse_bytes)
            data = fh.read(limit + 1)
        if len(data) > limit:
            self.add("file_too_large", f"more than the {limit}-byte parse limit; not parsed", rel, item=item or "E3")
            return None
        return data.decode("utf-8", errors="replace")

    def read_json(self, rel: str, *, item: str = "E3", required: bool = False) -> Any:
        """Parsed JSON of ``rel`` or ``None``; parse errors and NaN/inf become findings with lines (once per
        file: a file read again comes from the cache, so its findings are not repeated)."""
        key = Path(rel).as_posix()
        if key in self._json_cache:
            return self._json_cache[key]
        data = self._read_json(rel, item=item, required=required)
        self._json_cache[key] = data
        return data

    def _read_json(self, rel: str, *, item: str, required: bool) -> Any:
        text = self.read_text(rel, item=item)
        if text is None:
            if required:
                self.add("missing", "required file is missing", rel, item=item)
            return None
        try:
            data = json.loads(text, parse_constant=_parse_constant)
        except json.JSONDecodeError as exc:
            self.add("malformed_json", f"malformed JSON: {exc.msg} (column {exc.colno})", rel, exc.lineno,
                     item=item)
            return None
        except RecursionError:
            self.add("malformed_json", "JSON nested too deeply", rel, item=item)
            return None
        for kp in nonfinite_paths(data):
            self.add("non_finite", f"non-finite number at {kp}", rel, item="A3" if "analysis/" in rel else item)
        return data

    def read_jsonl(self, rel: str, *, item: str = "E3", required: bool = False) -> list[tuple[int, Any]]:
        """``(line_number, object)`` for every parseable line; malformed lines become findings."""
        text = self.read_text(rel, item=item)
        if text is None:
            if required:
                self.add("missing", "required file is missing", rel, item=item)
            return []
        out: list[tuple[int, Any]] = []
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line, parse_constant=_parse_constant)
            except (json.JSONDecodeError, RecursionError) as exc:
                msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
                self.add("malformed_jsonl", f"malformed JSON line: {msg}", rel, n, item=item)
                continue
            if not isinstance(obj, dict):
                self.add("malformed_jsonl", "line is not a JSON object", rel, n, item=item)
                continue
            for kp in nonfinite_paths(obj):
                self.add("non_finite", f"non-finite number at {kp}", rel, n, item=item)
            out.append((n, obj))
        return out

    def sha256(self, rel: str, *, item: str = "E2") -> str | None:
        """Streamed sha256 of a file inside the run directory, or ``None``."""
        p = self.resolve(rel, item=item)
        if p is None or not p.is_file():
            return None
        size = p.stat().st_size
        if size > MAX_HASH_BYTES:
            self.add("file_too_large", f"{size} bytes (logical size), above the {MAX_HASH_BYTES}-byte cap of an "
                     "artifact's checksum; not checksummed", rel, item=item)
            return None
        digest = self._digest(p)
        if digest is None:
            self.add("hash_budget_exhausted", f"the audit has already checksummed {self.hashed_bytes} bytes (cap "
                     f"{MAX_HASH_TOTAL_BYTES}); this {size}-byte file is not checksummed", rel, item=item)
        return digest

    def _digest(self, p: Path) -> str | None:
        """sha256 of ``p``, computed once per file version in this audit (None past :data:`MAX_HASH_TOTAL_BYTES`)."""
        key = _version(p)
        if key not in self._hashes:
            if self.hashed_bytes + key[3] > MAX_HASH_TOTAL_BYTES:
                return None
            self.hashed_bytes += key[3]
            self._hashes[key] = sha256_file(p)
        return self._hashes[key]

    def prefetch_sha256(self, rels: Iterable[str]) -> None:
        """Checksum these files now, quietly (no finding): :meth:`sha256` later reports what it finds as
        always and takes the digest of an unchanged file from here. The audit hashes the inventory while its
        reanalysis runs in another process."""
        for rel in rels:
            try:
                p = self._locate(rel)[0]
                if p is not None and p.is_file() and p.stat().st_size <= MAX_HASH_BYTES:
                    self._digest(p)
            except (OSError, TypeError, ValueError):
                continue  # the real check reports it

    def iter_files(self, rel_dir: str = ".") -> Iterator[str]:
        """Every regular file below ``rel_dir`` (links not followed), as relative paths."""
        base = self.resolve(rel_dir) if rel_dir != "." else self.root
        if base is None:
            return
        prefix = base.relative_to(self.root).as_posix() if base != self.root else ""
        for entry in _walk(base).entries:
            if entry.kind == "file":
                yield f"{prefix}/{entry.relpath}" if prefix and prefix != "." else entry.relpath


def _walk(root: Path) -> Walk:
    """The run directory's tree without following links, capped in depth and entries (a hostile run may hold
    a 1,100-level tree: ``os.walk`` recurses and would raise ``RecursionError``)."""
    try:
        return walk(root, max_depth=MAX_TREE_DEPTH, max_entries=MAX_TREE_ENTRIES)
    except Refused as exc:
        return Walk(root=str(root), truncated=True, reason=exc.detail or exc.reason)


def _version(p: Path) -> tuple:
    """(real path, device, inode, size, mtime) of a file: a file changed on disk is hashed anew."""
    st = os.stat(p)
    return (os.path.realpath(p), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


