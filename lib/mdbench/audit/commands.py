"""CLI commands of the ``audit`` room."""

from mdbench.cli import not_built

audit = not_built("audit", "issue 6")
