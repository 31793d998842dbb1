"""The ``inputs`` room of mdbench."""
