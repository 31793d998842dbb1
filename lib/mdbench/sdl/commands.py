"""CLI commands of the ``sdl`` room."""

from mdbench.cli import not_built

sdl = not_built("sdl", "issue 8")
