"""Step accounting of MD segments: what each attempt computed, what a continuation recomputed, what is kept.

A *segment* is one ``mdrun -deffnm`` output set (``cases/DE/prod/prod``) that one or more attempts build
towards its target step. Each attempt runs steps ``start_step → end_step``: its ledger charge is
``completed_steps = end_step − start_step``, every step it computed, whatever happened to it (the seed's budget
counts compute: "all newly completed MD steps count toward the budget, including failed or discarded
attempts"). A continuation resumes from a checkpoint, usually older than the kill, so it computes again the
steps from its checkpoint to where the killed attempt stopped; those steps of the killed attempt are
*superseded*: charged (they were computed) but not in the trajectory (``mdrun -append`` cut the files back to
the checkpoint). A restart supersedes every earlier step of the segment. Hence two sums per segment:

* charged = computed: each attempt's ``completed_steps`` equals ``end_step − start_step``;
* kept = nsteps: the steps kept in the trajectory, Σ (completed − superseded), tile ``[base, target]`` with no
  gap (steps lost) and no overlap (steps counted twice).

The continuation's reservation row names what it supersedes (``supersedes``: attempt, from/to step, steps),
so the ledger stays append-only: no earlier row is rewritten. Ledgers written before these fields existed
(no ``segment``/``start_step``/``end_step``) are read as before and their segments are not checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Ledger fields the accounting needs (rows without them come from ledgers older than this accounting).
STEP_FIELDS = ("segment", "start_step", "target_step")


def _end(row: dict) -> int | None:
    """Last step an attempt reached (None while it is open)."""
    if row.get("status") == "reserved":
        return None
    if isinstance(row.get("end_step"), int):
        return row["end_step"]
    if isinstance(row.get("start_step"), int) and isinstance(row.get("completed_steps"), int):
        return row["start_step"] + row["completed_steps"]
    return None


def superseded_by(prior: list[dict], start_step: int) -> list[dict]:
    """What an attempt starting at ``start_step`` supersedes of the earlier attempts ``prior`` of its segment.

    ``prior`` are the latest ledger rows of the segment's attempts, in reservation order (each with
    ``start_step``, an end — ``end_step`` or ``start_step + completed_steps`` — and its own ``supersedes``).
    Returns ``[{"attempt_id", "from_step", "to_step", "steps"}]`` for every earlier attempt whose kept steps
    reach past ``start_step``.
    """
    kept_end = _kept_ends(prior)
    out = []
    for row in prior:
        end = kept_end.get(row["id"])
        if end is None:
            continue
        lo = max(int(row["start_step"]), int(start_step))
        if end > lo:
            out.append({"attempt_id": row["id"], "from_step": lo, "to_step": end, "steps": end - lo})
    return out


def _kept_ends(rows: list[dict]) -> dict[str, int]:
    """Attempt id → last step of it kept in the trajectory, after every later attempt's ``supersedes``."""
    kept: dict[str, int] = {}
    for row in rows:
        for s in row.get("supersedes") or []:
            if s.get("attempt_id") in kept and isinstance(s.get("from_step"), int):
                kept[s["attempt_id"]] = min(kept[s["attempt_id"]], s["from_step"])
        end = _end(row)
        if end is not None:
            kept[row["id"]] = end
    return kept


@dataclass
class SegmentAccount:
    """The step sums of one segment (see the module docstring)."""

    segment: str
    attempts: list[str]
    base_step: int
    target_step: int
    complete: bool
    charged_steps: int = 0
    computed_steps: int = 0
    superseded_steps: int = 0
    kept_steps: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)  # (attempt id, message)

    def as_dict(self) -> dict:
        return {"segment": self.segment, "attempts": self.attempts, "base_step": self.base_step,
                "target_step": self.target_step, "complete": self.complete, "charged_steps": self.charged_steps,
                "computed_steps": self.computed_steps, "superseded_steps": self.superseded_steps,
                "kept_steps": self.kept_steps}


def segment_accounts(attempts: list[dict]) -> dict[str, SegmentAccount]:
    """Per segment, the sums and the problems of its ledger rows (``attempts``: latest row per attempt, in
    reservation order). Segments with a row lacking the step fields are left out (older ledgers)."""
    by_segment: dict[str, list[dict]] = {}
    for row in attempts:
        if isinstance(row.get("segment"), str):
            by_segment.setdefault(row["segment"], []).append(row)
    out = {}
    for seg, rows in by_segment.items():
        if not all(isinstance(r.get(k), int) for r in rows for k in STEP_FIELDS[1:]):
            continue
        out[seg] = _account(seg, rows)
    return out


def _account(seg: str, rows: list[dict]) -> SegmentAccount:
    last = rows[-1]
    acc = SegmentAccount(seg, [r["id"] for r in rows], base_step=rows[0]["start_step"],
                         target_step=last["target_step"], complete=last.get("status") == "completed")
    for j, row in enumerate(rows):
        expected = {(s["attempt_id"], s["from_step"], s["to_step"]) for s in superseded_by(rows[:j], row["start_step"])}
        recorded = {(s.get("attempt_id"), s.get("from_step"), s.get("to_step")) for s in row.get("supersedes") or []}
        if expected != recorded:
            n_exp = sum(t - f for _, f, t in expected)
            n_rec = sum((t - f) for _, f, t in recorded if isinstance(f, int) and isinstance(t, int))
            what = ("counts steps twice (kept in the trajectory by the attempt it resumed and by itself)"
                    if n_rec < n_exp else "marks kept steps as superseded")
            acc.problems.append((row["id"], f"attempt {row['id']} starts at step {row['start_step']} and records "
                                 f"superseding {n_rec} step(s) {sorted(recorded)}, but the earlier attempts keep "
                                 f"{n_exp} step(s) past it {sorted(expected)}: the ledger {what}"))
        for s in row.get("supersedes") or []:
            if s.get("steps") != (s.get("to_step") or 0) - (s.get("from_step") or 0):
                acc.problems.append((row["id"], f"attempt {row['id']}: supersedes entry {s} has steps ≠ to − from"))
        end = _end(row)
        if end is None:
            continue
        computed = end - row["start_step"]
        acc.charged_steps += int(row.get("completed_steps", 0))
        acc.computed_steps += max(0, computed)
        if computed < 0 or row.get("completed_steps") != computed:
            acc.problems.append((row["id"], f"attempt {row['id']} charged {row.get('completed_steps')} step(s) but ran "
                                 f"steps {row['start_step']}→{end} ({computed} computed): charged ≠ computed"))
    kept = _kept_ends(rows)
    intervals = sorted((r["start_step"], kept[r["id"]], r["id"]) for r in rows
                       if r["id"] in kept and kept[r["id"]] > r["start_step"])
    acc.kept_steps = sum(hi - lo for lo, hi, _ in intervals)
    acc.superseded_steps = acc.computed_steps - acc.kept_steps
    reach = acc.base_step
    for lo, hi, aid in intervals:
        if lo > reach:
            acc.problems.append((aid, f"segment {seg}: steps {reach}→{lo} lost (no attempt keeps them; {aid} starts "
                                 f"at {lo})"))
        elif lo < reach:
            acc.problems.append((aid, f"segment {seg}: steps {lo}→{min(hi, reach)} kept twice ({aid} and an earlier "
                                 f"attempt)"))
        reach = max(reach, hi)
    if acc.complete and acc.kept_steps != acc.target_step - acc.base_step:
        acc.problems.append((last["id"], f"segment {seg}: {acc.kept_steps} distinct step(s) kept in the trajectory, "
                             f"but it ran {acc.base_step}→{acc.target_step} ({acc.target_step - acc.base_step} steps)"))
    return acc
