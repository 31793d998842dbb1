"""The ``arena`` room of mdbench: a Harbor-format MD task suite (MDArena style).

Modules: :mod:`~mdbench.arena.task` (task folders, ``task.toml`` schema, validation),
:mod:`~mdbench.arena.grading` (verifier support: deterministic checks, process criteria, reward files),
:mod:`~mdbench.arena.runner` (local runner without Docker, Harbor-shaped trial and job folders),
:mod:`~mdbench.arena.aggregate` (Strict-Pass@1 tables, figures, HTML report), ``commands`` (CLI).
The tasks live in ``templates/arena/tasks/``.
"""
