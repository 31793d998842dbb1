"""The ``execute`` room: papermill orchestration per (run, system, stage)."""
