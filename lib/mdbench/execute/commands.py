"""CLI commands of the ``execute`` room."""

from mdbench.cli import not_built

run_template = not_built("run-template", "issue 2")
batch = not_built("batch", "issue 2")
