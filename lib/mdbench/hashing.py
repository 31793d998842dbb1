"""File digests, below every room: the one :func:`sha256_file` the record, the audit and the pipeline share."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """sha256 hex digest of a file, read in chunks of ``chunk_bytes`` bytes (constant memory).

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile(delete=False) as fh:
    ...     _ = fh.write(b"abc")
    >>> sha256_file(fh.name)[:16]
    'ba7816bf8f01cfea'
    >>> os.remove(fh.name)
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()
