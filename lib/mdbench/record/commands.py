"""CLI commands of the ``record`` room."""

from mdbench.cli import not_built

record = not_built("record", "issue 2")
