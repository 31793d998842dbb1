"""The ``analysis`` room of mdbench."""
