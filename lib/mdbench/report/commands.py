"""CLI commands of the ``report`` room."""

from mdbench.cli import not_built

report = not_built("report", "issue 6")
