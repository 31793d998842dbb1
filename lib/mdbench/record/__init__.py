"""The ``record`` room: the run-record contract (schema version 1.2)."""
