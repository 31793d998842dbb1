"""The ``engine`` room: GROMACS stages with gates, budget, lineage and recovery.

Modules (imported on use, so ``import mdbench.engine`` stays cheap):

* :mod:`mdbench.engine.runner` — the :class:`~mdbench.engine.runner.Runner` interface; CLI and gmxapi adapters.
* :mod:`mdbench.engine.threads` — machine-wide thread cap (file-lock semaphore).
* :mod:`mdbench.engine.hardware` — start-up hardware/software audit event.
* :mod:`mdbench.engine.protocols` — ``params/protocols/*.yaml`` → ``.mdp``.
* :mod:`mdbench.engine.gates` — minimisation and equilibration gates (pymbar ``detect_equilibration``).
* :mod:`mdbench.engine.segments` — one MD segment: reserve → mdrun → charge; resume from checkpoints.
* :mod:`mdbench.engine.cadence` — the registered checkpoint cadence (``mdrun -cpt``), scaled to each segment.
* :mod:`mdbench.engine.recovery` — what an interrupted stage left, set aside with the inventory kept true.
* :mod:`mdbench.engine.stages` — :func:`~mdbench.engine.stages.minimize`, :func:`~mdbench.engine.stages.equilibrate`,
  :func:`~mdbench.engine.stages.produce`, called by ``templates/study/{20_minimize,30_equilibrate,40_production}``.
* :mod:`mdbench.engine.progress` — ns done / ns planned per system, read from the run record.
* :mod:`mdbench.engine.commands` — ``mdbench study run``.
"""
