"""The ``sdl`` room of mdbench."""
