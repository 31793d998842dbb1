"""CLI commands of the ``analysis`` room."""

from mdbench.cli import not_built

analyze = not_built("analyze", "issue 5")
analyze_files = not_built("analyze-files", "issue 5")
