"""CLI commands of the ``inputs`` room."""

from mdbench.cli import not_built

bundle = not_built("bundle", "issue 3")
