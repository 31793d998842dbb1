"""CLI commands of the ``arena`` room."""

from mdbench.cli import not_built

arena = not_built("arena", "issue 7")
