"""Checkpoint cadence: how often ``mdrun -cpt`` writes a checkpoint, scaled to the segment it runs.

GROMACS checkpoints every 15 wall-clock minutes by default, so a segment killed in its first quarter hour
restarts from step 0. The cadence here aims at ``per_segment`` checkpoints per segment:

.. math::

    \\Delta t_\\mathrm{cpt} = \\min\\bigl(t_\\max,\\ \\max(t_\\min,\\ \\hat t_\\mathrm{wall} / n)\\bigr),
    \\qquad \\hat t_\\mathrm{wall} = N_\\mathrm{steps} / r

where :math:`N_\\mathrm{steps}` are the steps the attempt will run and :math:`r` [steps/min] is the speed
this case's latest MD attempt reached (steps completed over mdrun wall time, from the run record). A
case's first MD segment, before any speed is known, uses ``first_interval_min``. The rule and its numbers
(``params/protocols/common.yaml``, ``checkpoint:``) are registered in the run record before the first
segment uses them; each attempt's interval is kept in its ``mdrun_finished`` event and its command line.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from mdbench.errors import InputError

RULE = ("interval = min(max_interval_min, max(min_interval_min, expected wall time / per_segment)); expected "
        "wall time = steps of the attempt / steps per minute of the case's latest MD attempt (steps completed / "
        "mdrun wall time); first_interval_min before any speed is known")


@dataclass(frozen=True)
class CheckpointCadence:
    """The registered checkpoint cadence.

    Attributes
    ----------
    per_segment : int
        Checkpoints aimed at per segment.
    min_interval_min : float
        Shortest interval [min] (a checkpoint costs a file write).
    max_interval_min : float
        Longest interval [min] (GROMACS' own default is 15).
    first_interval_min : float
        Interval of a case's first MD segment, before its speed is known [min].
    """

    per_segment: int = 10
    min_interval_min: float = 0.05
    max_interval_min: float = 15.0
    first_interval_min: float = 0.5

    @classmethod
    def from_mapping(cls, block: dict[str, Any] | None, where: str = "protocol") -> CheckpointCadence:
        """From a protocol's ``checkpoint:`` mapping (missing keys keep their defaults)."""
        block = dict(block or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(block) - known)
        if unknown:
            raise InputError(f"unknown checkpoint option(s) {unknown}; allowed: {sorted(known)}", where)
        try:
            cad = cls(**{k: (int(v) if k == "per_segment" else float(v)) for k, v in block.items()})
        except (TypeError, ValueError) as exc:
            raise InputError(f"checkpoint options must be numbers ({exc})", where) from exc
        if not (cad.per_segment >= 1 and 0 < cad.min_interval_min <= cad.first_interval_min <= cad.max_interval_min
                and cad.min_interval_min <= cad.max_interval_min):
            raise InputError("checkpoint options need per_segment >= 1 and 0 < min_interval_min <= "
                             "first_interval_min <= max_interval_min", where)
        return cad

    def definition(self) -> dict[str, Any]:
        """What is registered: the numbers and the rule."""
        return {"rule": "checkpoint_cadence", **asdict(self), "method": RULE}

    def interval_min(self, steps: int, steps_per_min: float | None) -> float:
        """Checkpoint interval [min] for an attempt of ``steps`` steps at ``steps_per_min`` (None: unknown)."""
        if not steps_per_min or steps_per_min <= 0:
            return self.first_interval_min
        expected_min = max(steps, 1) / steps_per_min
        return min(self.max_interval_min, max(self.min_interval_min, expected_min / self.per_segment))


def measured_speed(rec, case: str) -> float | None:
    """Steps per minute of the case's latest MD attempt that completed steps (None before any)."""
    walls: dict = {}
    for e in rec.events():  # an attempt run in slices (threads following the work) has one event per slice
        if e.get("type") == "mdrun_finished":
            key = e["payload"].get("attempt_id")
            walls[key] = (walls.get(key) or 0.0) + float(e["payload"].get("wall_s") or 0.0)
    for attempt in reversed(rec.attempts()):
        wall = walls.get(attempt["id"])
        if attempt.get("case") == case and attempt.get("completed_steps", 0) > 0 and wall and wall > 0:
            return attempt["completed_steps"] / (wall / 60.0)
    return None


def register_cadence(rec, cadence: CheckpointCadence) -> str:
    """Registration id of ``cadence`` in the run record (registered on first use; a change revises it)."""
    return rec.register_once("checkpoint_cadence", cadence.definition(), key="rule")
