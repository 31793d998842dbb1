"""Write a file so that a reader sees the old version or the new one, never a part: temp file, then rename.

A process killed while it writes ``saeo.json``, an HTML report or a state file otherwise leaves a torn
file behind that looks finished. Here the bytes go to a temporary file in the same directory (same file
system, so :func:`os.replace` is an atomic rename on POSIX), are flushed and fsynced, and only then take
the final name. A kill before the rename leaves the previous version (or nothing) and at most a stray
``.<name>.*.partial`` file, which no reader opens.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

#: Suffix of the temporary files (readers and inventories ignore them).
PARTIAL_SUFFIX = ".partial"


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on a clean exit it is fsynced and renamed to ``path``.

    On an exception the temporary file is removed and ``path`` is left as it was. Use it for writers
    that want a file name (``savefig``, ``nbformat.write``); :func:`atomic_write_text` for a string.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX, dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see the module docstring); returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see the module docstring); returns ``path``."""
    return atomic_write_bytes(path, text.encode(encoding))
