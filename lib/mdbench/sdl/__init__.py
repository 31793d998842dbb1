"""The ``sdl`` room: replay of recorded self-driving-laboratory campaigns (after Dynamical-SDL-1).

A recorded experiment map (:mod:`~mdbench.sdl.ledger`; loaders :mod:`~mdbench.sdl.vapdiff` for the shipped
vapdiff_crystal record, :mod:`~mdbench.sdl.precursor_genome` for the downloadable Precursor Genome, and the
generated :mod:`~mdbench.sdl.synthetic` evidence record) is compiled into frozen, sha256-hashed,
counterbalanced assignments with public ids salted per assignment (:mod:`~mdbench.sdl.compiler`), written as an
agent tree and an evaluator tree (:mod:`~mdbench.sdl.bundle`); a coordinator session sees one assignment file. A coordinator — a trusted built-in
(:mod:`~mdbench.sdl.policies`), a confined external process (:mod:`~mdbench.sdl.external` on
:mod:`~mdbench.sdl.confine` and :mod:`mdbench.sandbox`) or an LLM behind an endpoint
(:mod:`~mdbench.sdl.llm_policy` on :mod:`mdbench.llm`) — runs each campaign in the replay environment
(:mod:`~mdbench.sdl.environment`), which keeps outcomes, unrevealed evidence and scores evaluator-private,
enforces the action protocol and budgets, and hash-chains every action and forecast.
:mod:`~mdbench.sdl.campaign` adds the schedule-matched random controls (seeded draws) and the exactly
call-matched no-evidence control (which does not announce itself), fresh evaluator sessions on saved states and
the future decisions; :mod:`~mdbench.sdl.runner` signs per-campaign and per-run manifests and
:mod:`~mdbench.sdl.verify` checks traces and whole runs against them; :mod:`~mdbench.sdl.scoring` and
:mod:`~mdbench.sdl.metrics` score forecasts from the chain; :mod:`~mdbench.sdl.leaderboard`,
:mod:`~mdbench.sdl.figures` and :mod:`~mdbench.sdl.report` rank systems that ran identical assignment sets and
render the leaderboard page. Trust model: ``docs/security.md`` (campaign replay). CLI: ``mdbench sdl compile | run | score | leaderboard``.
"""
