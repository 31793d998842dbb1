"""The ``engine`` room of mdbench."""
