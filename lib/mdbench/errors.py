"""One base exception for the project; subclasses carry the fields a user needs to fix the problem."""

from __future__ import annotations


class MdbenchError(Exception):
    """Base class of every error mdbench raises on purpose."""


class InputError(MdbenchError):
    """A user-provided file or value is malformed; ``path`` and ``line`` say where (when known)."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)


