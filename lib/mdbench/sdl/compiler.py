"""Compile a ledger into frozen, hashed, counterbalanced campaign assignments.

A seeded panel of ``n_blocks * block_size`` experiments is drawn from the ledger and cut into ``n_blocks``
blocks of ``block_size``. The role *slots* of one assignment are, in order, ``initial_context``,
``candidates``, ``heldout`` and ``future`` with ``role_blocks`` blocks each (default 1, 1, 2, 2 → 6 blocks of
32 → a 192-experiment panel, 32 candidates, as in Dynamical-SDL-1). Assignment ``a`` puts block
``(j + a) mod n_blocks`` into slot ``j`` (a cyclic Latin square), so with ``n_assignments == n_blocks`` every
experiment of the panel passes through every slot exactly once: a complete counterbalanced panel. Roles of
one assignment never overlap because they are disjoint blocks.

Roles:

* ``initial_context`` — experiments whose descriptors *and* recorded outcomes the policy sees from the start;
* ``candidates`` — experiments the policy may select (descriptors only; outcome and evidence private);
* ``heldout`` — the query panel forecast before the campaign and after each closed experiment;
* ``future`` — reserved future decisions, never shown during the campaign.

Each assignment is frozen: its canonical JSON (roles, budgets, floor, ledger sha256, compile parameters) is
hashed with sha256 before any run, and :func:`load_assignment` refuses a file whose content no longer matches
its hash or whose ledger differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mdbench.errors import InputError
from mdbench.sdl.ledger import Ledger, sha256_json
from mdbench.sdl.scoring import DEFAULT_FLOOR, check_floor

ROLES = ("initial_context", "candidates", "heldout", "future")
FORMAT = "mdbench-sdl-assignment/1"


@dataclass(frozen=True)
class Budgets:
    """Campaign budgets: experiments selected, evidence inspections, expert reviews (separate pools)."""

    experiments: int = 12
    evidence: int = 36
    reviews: int = 3

    def to_dict(self) -> dict[str, int]:
        """``{"experiments", "evidence", "reviews"}``."""
        return {"experiments": self.experiments, "evidence": self.evidence, "reviews": self.reviews}


@dataclass(frozen=True)
class CompileSpec:
    """Parameters of :func:`compile_assignments` (defaults after Dynamical-SDL-1).

    Attributes
    ----------
    n_assignments : int
        Assignments to emit (``<= n_blocks``; equal gives a complete counterbalanced panel).
    block_size : int
        Experiments per block = number of candidates when ``role_blocks["candidates"] == 1``.
    role_blocks : dict
        Blocks per role slot.
    budgets : Budgets
        Reviews are set to 0 when the ledger has no expert reviews.
    seed : int
        Seed of the panel draw.
    floor : float
        Declared probability floor of the scoring rule.
    """

    n_assignments: int = 6
    block_size: int = 32
    role_blocks: dict[str, int] = field(default_factory=lambda: {"initial_context": 1, "candidates": 1,
                                                                  "heldout": 2, "future": 2})
    budgets: Budgets = field(default_factory=Budgets)
    seed: int = 0
    floor: float = DEFAULT_FLOOR

    @property
    def n_blocks(self) -> int:
        """Total blocks in the panel."""
        return sum(self.role_blocks[r] for r in ROLES)

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: str = "<params>") -> "CompileSpec":
        """Build from a params dict (``params/sdl/*.yaml``); unknown keys are an error naming the file."""
        allowed = {"n_assignments", "block_size", "role_blocks", "budgets", "seed", "floor"}
        unknown = set(d) - allowed
        if unknown:
            raise InputError(f"unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}", path)
        kw: dict[str, Any] = {k: d[k] for k in ("n_assignments", "block_size", "seed", "floor") if k in d}
        if "role_blocks" in d:
            rb = d["role_blocks"]
            if not isinstance(rb, dict) or set(rb) != set(ROLES):
                raise InputError(f"role_blocks must give blocks for exactly {list(ROLES)}", path)
            kw["role_blocks"] = {r: int(rb[r]) for r in ROLES}
        if "budgets" in d:
            b = d["budgets"]
            if not isinstance(b, dict) or not set(b) <= {"experiments", "evidence", "reviews"}:
                raise InputError("budgets must be a mapping with experiments / evidence / reviews", path)
            kw["budgets"] = Budgets(**{k: int(v) for k, v in b.items()})
        return cls(**kw)


@dataclass(frozen=True)
class Assignment:
    """One frozen campaign assignment (see module docstring). ``sha256`` covers everything else."""

    assignment_id: str
    index: int
    ledger_name: str
    ledger_sha256: str
    roles: dict[str, tuple[str, ...]]
    budgets: Budgets
    floor: float
    compile_params: dict[str, Any]
    sha256: str = ""

    def content(self) -> dict[str, Any]:
        """The hashed content (everything but the hash)."""
        return {
            "format": FORMAT, "assignment_id": self.assignment_id, "index": self.index,
            "ledger": {"name": self.ledger_name, "sha256": self.ledger_sha256},
            "roles": {r: list(self.roles[r]) for r in ROLES}, "budgets": self.budgets.to_dict(),
            "floor": self.floor, "compile": self.compile_params,
        }

    def compute_sha256(self) -> str:
        """sha256 of the canonical JSON of :meth:`content`."""
        return sha256_json(self.content())

    def to_dict(self) -> dict[str, Any]:
        """Content plus ``sha256``."""
        return {**self.content(), "sha256": self.sha256}


def compile_assignments(ledger: Ledger, spec: CompileSpec | None = None) -> list[Assignment]:
    """Compile ``ledger`` into ``spec.n_assignments`` frozen, hashed, counterbalanced assignments.

    Raises
    ------
    InputError
        When the ledger is too small for the panel or the spec is inconsistent.
    """
    spec = spec or CompileSpec()
    check_floor(spec.floor, ledger.n_outcomes)
    nb = spec.n_blocks
    if spec.block_size < 1 or any(spec.role_blocks[r] < 1 for r in ROLES):
        raise InputError("block_size and every role_blocks entry must be >= 1")
    if not 1 <= spec.n_assignments <= nb:
        raise InputError(f"n_assignments must be in 1..{nb} (the number of blocks) for counterbalancing")
    panel_size = nb * spec.block_size
    if panel_size > len(ledger.experiments):
        raise InputError(f"panel of {panel_size} experiments requested but the ledger has "
                         f"{len(ledger.experiments)}; lower block_size or role_blocks")
    b = spec.budgets
    if b.experiments < 1 or b.evidence < 0 or b.reviews < 0:
        raise InputError("budgets: experiments >= 1, evidence >= 0, reviews >= 0")
    n_cand = spec.role_blocks["candidates"] * spec.block_size
    if b.experiments > n_cand:
        raise InputError(f"experiment budget {b.experiments} exceeds the {n_cand} candidates")
    budgets = Budgets(b.experiments, b.evidence, b.reviews if ledger.has_reviews else 0)
    rng = np.random.default_rng(spec.seed)
    ids = [e.experiment_id for e in ledger.experiments]
    order = rng.permutation(len(ids))[:panel_size]
    panel = [ids[i] for i in order]
    blocks = [panel[k * spec.block_size:(k + 1) * spec.block_size] for k in range(nb)]
    slots = [r for r in ROLES for _ in range(spec.role_blocks[r])]
    params = {"seed": spec.seed, "n_assignments": spec.n_assignments, "block_size": spec.block_size,
              "role_blocks": {r: spec.role_blocks[r] for r in ROLES}, "panel_size": panel_size,
              "counterbalanced": spec.n_assignments == nb}
    ledger_sha = ledger.sha256()
    out = []
    for a in range(spec.n_assignments):
        roles: dict[str, list[str]] = {r: [] for r in ROLES}
        for j, role in enumerate(slots):
            roles[role].extend(blocks[(j + a) % nb])
        asg = Assignment(
            assignment_id=f"{ledger.name}-s{spec.seed}-a{a}", index=a, ledger_name=ledger.name,
            ledger_sha256=ledger_sha, roles={r: tuple(sorted(v)) for r, v in roles.items()}, budgets=budgets,
            floor=spec.floor, compile_params=params)
        out.append(Assignment(**{**asg.__dict__, "sha256": asg.compute_sha256()}))
    return out


def assignment_from_dict(d: dict[str, Any], path: str = "<assignment>") -> Assignment:
    """Rebuild an assignment from JSON and verify its sha256 (a changed file is refused)."""
    try:
        asg = Assignment(
            assignment_id=d["assignment_id"], index=int(d["index"]), ledger_name=d["ledger"]["name"],
            ledger_sha256=d["ledger"]["sha256"], roles={r: tuple(d["roles"][r]) for r in ROLES},
            budgets=Budgets(**d["budgets"]), floor=float(d["floor"]), compile_params=d["compile"],
            sha256=d["sha256"])
    except (KeyError, TypeError) as exc:
        raise InputError(f"not an SDL assignment (missing {exc}); write it with `mdbench sdl compile`", path) from exc
    if d.get("format") != FORMAT:
        raise InputError(f"format must be {FORMAT}", path)
    if asg.compute_sha256() != asg.sha256:
        raise InputError("assignment content does not match its sha256: the frozen file was changed; "
                         "recompile it with `mdbench sdl compile`", path)
    return asg


def save_assignments(assignments: list[Assignment], folder: str | Path) -> list[Path]:
    """Freeze assignments as ``<folder>/<assignment_id>.json`` plus ``index.json`` (id → sha256)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for a in assignments:
        p = folder / f"{a.assignment_id}.json"
        p.write_text(json.dumps(a.to_dict(), indent=1, sort_keys=True), encoding="utf-8")
        paths.append(p)
    (folder / "index.json").write_text(json.dumps({a.assignment_id: a.sha256 for a in assignments}, indent=1),
                                       encoding="utf-8")
    return paths


def load_assignment(path: str | Path, ledger: Ledger | None = None) -> Assignment:
    """Load and verify a frozen assignment; with ``ledger`` also check the ledger hash and the ids."""
    path = Path(path)
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read assignment ({exc.strerror})", str(path)) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg}", str(path), exc.lineno) from exc
    asg = assignment_from_dict(d, str(path))
    if ledger is not None:
        check_against_ledger(asg, ledger, str(path))
    return asg


def check_against_ledger(asg: Assignment, ledger: Ledger, where: str = "<assignment>") -> None:
    """Refuse an assignment compiled from a different ledger or with overlapping / unknown roles."""
    if asg.ledger_sha256 != ledger.sha256():
        raise InputError(f"assignment was compiled from ledger sha256 {asg.ledger_sha256[:12]}…, but the ledger "
                         f"given has {ledger.sha256()[:12]}…; compile against this ledger", where)
    known = set(ledger.by_id())
    seen: set[str] = set()
    for r in ROLES:
        ids = set(asg.roles[r])
        if ids & seen:
            raise InputError(f"role {r} overlaps another role", where)
        if ids - known:
            raise InputError(f"role {r} names experiments not in the ledger: {sorted(ids - known)[:3]}", where)
        seen |= ids
