"""The ``arena`` room of mdbench."""
