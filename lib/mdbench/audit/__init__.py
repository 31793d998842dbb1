"""The ``audit`` room of mdbench."""
