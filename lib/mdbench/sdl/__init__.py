"""The ``sdl`` room: replay of recorded self-driving-laboratory campaigns (after Dynamical-SDL-1).

A recorded experiment map (:mod:`~mdbench.sdl.ledger`; loaders :mod:`~mdbench.sdl.vapdiff` for the shipped
vapdiff_crystal record and :mod:`~mdbench.sdl.precursor_genome` for the downloadable Precursor Genome) is
compiled into frozen, sha256-hashed, counterbalanced assignments (:mod:`~mdbench.sdl.compiler`). A policy
(:mod:`~mdbench.sdl.policies`, or an external program via :mod:`~mdbench.sdl.external`) runs each campaign in
the replay environment (:mod:`~mdbench.sdl.environment`), which keeps outcomes, unrevealed evidence and scores
evaluator-private, enforces the action protocol and budgets, and hash-chains every action.
:mod:`~mdbench.sdl.campaign` adds the schedule-matched random and call-matched no-evidence controls;
:mod:`~mdbench.sdl.scoring` and :mod:`~mdbench.sdl.metrics` score forecasts (joint log loss with a declared
floor, learning curves, adaptive AUC, selection/evidence lift, acceleration, calibration);
:mod:`~mdbench.sdl.leaderboard` and :mod:`~mdbench.sdl.report` rank systems and render the HTML report.
CLI: ``mdbench sdl compile | run | score | leaderboard``.
"""
