"""CLI commands of the ``engine`` room."""

from mdbench.cli import not_built

study = not_built("study", "issue 4")
