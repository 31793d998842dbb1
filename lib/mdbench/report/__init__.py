"""The ``report`` room of mdbench."""
