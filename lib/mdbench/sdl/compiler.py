"""Compile a ledger into frozen, hashed, counterbalanced campaign assignments.

A seeded panel of ``n_blocks * block_size`` experiments is drawn from the ledger and cut into ``n_blocks``
blocks of ``block_size``. The role *slots* of one assignment are, in order, ``initial_context``,
``candidates``, ``heldout`` and ``future`` with ``role_blocks`` blocks each (default 1, 1, 2, 2 → 6 blocks of
32 → a 192-experiment panel, 32 candidates, as in Dynamical-SDL-1). Rotation ``r`` puts block
``(j + r) mod n_blocks`` into slot ``j`` (a cyclic Latin square), so the ``n_blocks`` rotations pass every
experiment of the panel through every slot exactly once: a complete counterbalanced panel. Roles of one
assignment never overlap because they are disjoint blocks.

Each rotation is compiled at every *horizon* (experiment budget) of ``horizons``; evidence and review
budgets scale with the horizon. The default — 6 rotations × horizons 12, 10, 8, 6, 4, 2 — gives the 36
assignments of Dynamical-SDL-1, of which the six at the full horizon (``full_length``; ids ``…-a0`` …
``…-a5``) form the complete counterbalanced panel used for long-horizon evaluation.

Roles:

* ``initial_context`` — experiments whose descriptors *and* recorded outcomes the policy sees from the start;
* ``candidates`` — experiments the policy may select (descriptors only; outcome and evidence private);
* ``heldout`` — the query panel forecast before the campaign and after each closed experiment;
* ``future`` — future decisions: never shown during the campaign; after it ends, separate evaluator calls
  forecast them from the saved pre-campaign and final states (transfer of what the campaign taught).

Information boundary at compile time: every experiment id a coordinator sees is a *public id*,
``X`` + 10 hex digits of HMAC-SHA256(compile salt, assignment id + ledger id) — salted *per assignment*, so the
same experiment has unrelated ids in different assignments of one compile (a rotation's held-out panel is
another rotation's initial context: with shared ids a coordinator that saw several assignments could look the
outcomes up). The salt and the key that signs trace chains are drawn fresh for every compile
(:class:`EvaluatorKeys`) and stay in the evaluator tree, so neither the public CSV row numbers, nor the ids of
another assignment, nor those of another compile say anything about an experiment.

Each assignment is frozen: its canonical JSON (roles, public ids, budgets, scoring rule, ledger sha256,
the sha256 of the evaluator key, compile parameters) is hashed with sha256 before any run, and
:func:`assignment_from_dict` refuses a file whose content no longer matches its hash. The scoring rule —
probability floor and what an invalid forecast scores — is part of that hashed content, i.e. registered
before the run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mdbench.errors import InputError
from mdbench.sdl.ledger import Ledger, sha256_json
from mdbench.sdl.scoring import DEFAULT_FLOOR, INVALID_FORECAST_RULES, check_floor

ROLES = ("initial_context", "candidates", "heldout", "future")
FORMAT = "mdbench-sdl-assignment/3"   # /3: public ids salted per assignment


@dataclass(frozen=True)
class Budgets:
    """Campaign budgets: experiments selected, evidence inspections, expert reviews (separate pools)."""

    experiments: int = 12
    evidence: int = 36
    reviews: int = 3

    def to_dict(self) -> dict[str, int]:
        """``{"experiments", "evidence", "reviews"}``."""
        return {"experiments": self.experiments, "evidence": self.evidence, "reviews": self.reviews}

    def at_horizon(self, horizon: int) -> "Budgets":
        """Budgets of a shorter campaign: evidence and reviews scaled by ``horizon / experiments`` (half up)."""
        f = horizon / self.experiments
        return Budgets(horizon, int(np.floor(self.evidence * f + 0.5)), int(np.floor(self.reviews * f + 0.5)))


@dataclass(frozen=True)
class EvaluatorKeys:
    """Per-compile secrets: the id salt and the key that signs every trace's chain head (HMAC-SHA256)."""

    salt: str
    chain_key: str

    @classmethod
    def generate(cls) -> "EvaluatorKeys":
        """Fresh random keys (what ``mdbench sdl compile`` uses)."""
        return cls(secrets.token_hex(16), secrets.token_hex(32))

    @classmethod
    def for_tests(cls, label: str) -> "EvaluatorKeys":
        """Deterministic keys derived from ``label`` — for reproducible tests only, never for a published run."""
        h = hashlib.sha256(f"mdbench-sdl-test-keys:{label}".encode()).hexdigest()
        return cls(h[:32], hashlib.sha256(h.encode()).hexdigest())

    @property
    def key_sha256(self) -> str:
        """sha256 of the chain key (recorded in every assignment; binds traces to this compile's key)."""
        return hashlib.sha256(self.chain_key.encode("ascii")).hexdigest()

    def public_id(self, ledger_id: str, scope: str) -> str:
        """The salted id a coordinator sees for a ledger experiment in assignment ``scope`` (its assignment id)."""
        msg = f"{scope}\x1f{ledger_id}".encode("utf-8")
        return "X" + hmac.new(self.salt.encode("ascii"), msg, hashlib.sha256).hexdigest()[:10]

    def sign(self, head_sha256: str) -> str:
        """HMAC-SHA256 of a chain head under the chain key."""
        return hmac.new(self.chain_key.encode("ascii"), head_sha256.encode("ascii"), hashlib.sha256).hexdigest()

    def sign_manifest(self, body: dict[str, Any]) -> str:
        """HMAC-SHA256 of a run or campaign manifest (its canonical JSON, ``hmac`` field excluded)."""
        text = "mdbench-sdl-manifest\x1f" + sha256_json({k: v for k, v in body.items() if k != "hmac"})
        return hmac.new(self.chain_key.encode("ascii"), text.encode("ascii"), hashlib.sha256).hexdigest()

    def to_dict(self) -> dict[str, str]:
        return {"salt": self.salt, "chain_key": self.chain_key}


@dataclass(frozen=True)
class CompileSpec:
    """Parameters of :func:`compile_assignments` (defaults after Dynamical-SDL-1).

    Attributes
    ----------
    rotations : int
        Counterbalanced rotations per horizon (``<= n_blocks``; equal gives a complete counterbalanced panel).
    horizons : tuple of int
        Experiment budgets to compile; must include ``budgets.experiments`` (the full length) and be distinct.
    block_size : int
        Experiments per block = number of candidates when ``role_blocks["candidates"] == 1``.
    role_blocks : dict
        Blocks per role slot.
    budgets : Budgets
        Full-length budgets. Reviews are set to 0 when the ledger has no expert reviews.
    seed : int
        Seed of the panel draw.
    floor : float
        Declared probability floor of the scoring rule.
    invalid_forecast : str
        What an invalid held-out forecast scores (:data:`mdbench.sdl.scoring.INVALID_FORECAST_RULES`).
    """

    rotations: int = 6
    horizons: tuple[int, ...] = (12, 10, 8, 6, 4, 2)
    block_size: int = 32
    role_blocks: dict[str, int] = field(default_factory=lambda: {"initial_context": 1, "candidates": 1,
                                                                  "heldout": 2, "future": 2})
    budgets: Budgets = field(default_factory=Budgets)
    seed: int = 0
    floor: float = DEFAULT_FLOOR
    invalid_forecast: str = "max_loss"

    @property
    def n_blocks(self) -> int:
        """Total blocks in the panel."""
        return sum(self.role_blocks[r] for r in ROLES)

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: str = "<params>") -> "CompileSpec":
        """Build from a params dict (``params/sdl/*.yaml``); unknown keys are an error naming the file."""
        allowed = {"rotations", "horizons", "block_size", "role_blocks", "budgets", "seed", "floor",
                   "invalid_forecast"}
        unknown = set(d) - allowed
        if unknown:
            raise InputError(f"unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}", path)
        kw: dict[str, Any] = {k: d[k] for k in ("rotations", "block_size", "seed", "floor", "invalid_forecast")
                              if k in d}
        if "horizons" in d:
            h = d["horizons"]
            if not isinstance(h, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in h):
                raise InputError("horizons must be a list of experiment budgets (integers)", path)
            kw["horizons"] = tuple(h)
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
    """One frozen campaign assignment (see module docstring). ``sha256`` covers everything else.

    ``roles`` hold ledger ids (evaluator side); ``public_ids`` maps each of them to the id a coordinator sees.
    """

    assignment_id: str
    index: int
    ledger_name: str
    ledger_sha256: str
    roles: dict[str, tuple[str, ...]]
    public_ids: dict[str, str]
    budgets: Budgets
    floor: float
    invalid_forecast: str
    horizon: int
    rotation: int
    full_length: bool
    evaluator_key_sha256: str
    compile_params: dict[str, Any]
    sha256: str = ""

    def content(self) -> dict[str, Any]:
        """The hashed content (everything but the hash)."""
        return {
            "format": FORMAT, "assignment_id": self.assignment_id, "index": self.index,
            "ledger": {"name": self.ledger_name, "sha256": self.ledger_sha256},
            "roles": {r: list(self.roles[r]) for r in ROLES}, "public_ids": dict(sorted(self.public_ids.items())),
            "budgets": self.budgets.to_dict(),
            "scoring": {"floor": self.floor, "invalid_forecast": self.invalid_forecast},
            "horizon": self.horizon, "rotation": self.rotation, "full_length": self.full_length,
            "evaluator_key_sha256": self.evaluator_key_sha256, "compile": self.compile_params,
        }

    def compute_sha256(self) -> str:
        """sha256 of the canonical JSON of :meth:`content`."""
        return sha256_json(self.content())

    def to_dict(self) -> dict[str, Any]:
        """Content plus ``sha256``."""
        return {**self.content(), "sha256": self.sha256}

    def public(self, role: str) -> list[str]:
        """Public ids of a role, in a stable order (sorted by public id: reveals nothing of the ledger order)."""
        return sorted(self.public_ids[i] for i in self.roles[role])

    def ledger_id(self, public_id: str) -> str:
        """The ledger id behind a public id of this assignment (KeyError if it is not one)."""
        inv = self.__dict__.get("_inverse")
        if inv is None:
            inv = {p: i for i, p in self.public_ids.items()}
            object.__setattr__(self, "_inverse", inv)
        return inv[public_id]


def compile_assignments(ledger: Ledger, spec: CompileSpec | None = None,
                        keys: EvaluatorKeys | None = None) -> list[Assignment]:
    """Compile ``ledger`` into ``spec.rotations × len(spec.horizons)`` frozen, hashed assignments.

    Full-length assignments come first (indices ``0 .. rotations-1``), then shorter horizons in the order given.

    Raises
    ------
    InputError
        When the ledger is too small for the panel or the spec is inconsistent.
    """
    spec = spec or CompileSpec()
    keys = keys or EvaluatorKeys.generate()
    check_floor(spec.floor, ledger.n_outcomes)
    if spec.invalid_forecast not in INVALID_FORECAST_RULES:
        raise InputError(f"invalid_forecast must be one of {list(INVALID_FORECAST_RULES)}, "
                         f"got {spec.invalid_forecast!r}")
    nb = spec.n_blocks
    if spec.block_size < 1 or any(spec.role_blocks[r] < 1 for r in ROLES):
        raise InputError("block_size and every role_blocks entry must be >= 1")
    if not 1 <= spec.rotations <= nb:
        raise InputError(f"rotations must be in 1..{nb} (the number of blocks) for counterbalancing")
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
    horizons = list(spec.horizons)
    if len(set(horizons)) != len(horizons) or b.experiments not in horizons or \
            any(not 1 <= h <= b.experiments for h in horizons):
        raise InputError(f"horizons must be distinct, in 1..{b.experiments}, and include the full length "
                         f"{b.experiments} (budgets.experiments); got {horizons}")
    horizons = [b.experiments] + [h for h in horizons if h != b.experiments]
    full = Budgets(b.experiments, b.evidence, b.reviews if ledger.has_reviews else 0)
    rng = np.random.default_rng(spec.seed)
    ids = [e.experiment_id for e in ledger.experiments]
    order = rng.permutation(len(ids))[:panel_size]
    panel = [ids[i] for i in order]
    blocks = [panel[k * spec.block_size:(k + 1) * spec.block_size] for k in range(nb)]
    slots = [r for r in ROLES for _ in range(spec.role_blocks[r])]
    params = {"seed": spec.seed, "rotations": spec.rotations, "horizons": horizons, "block_size": spec.block_size,
              "role_blocks": {r: spec.role_blocks[r] for r in ROLES}, "panel_size": panel_size,
              "counterbalanced": spec.rotations == nb}
    ledger_sha = ledger.sha256()
    out = []
    for h in horizons:
        for r in range(spec.rotations):
            roles: dict[str, list[str]] = {role: [] for role in ROLES}
            for j, role in enumerate(slots):
                roles[role].extend(blocks[(j + r) % nb])
            index = len(out)
            aid = f"{ledger.name}-s{spec.seed}-a{index}"
            public = {i: keys.public_id(i, aid) for v in roles.values() for i in v}
            if len(set(public.values())) != len(public):
                raise InputError(f"public id collision in assignment {aid}; compile again (a fresh salt is drawn)")
            asg = Assignment(
                assignment_id=aid, index=index, ledger_name=ledger.name,
                ledger_sha256=ledger_sha, roles={k: tuple(sorted(v)) for k, v in roles.items()},
                public_ids=public, budgets=full.at_horizon(h),
                floor=spec.floor, invalid_forecast=spec.invalid_forecast, horizon=h, rotation=r,
                full_length=h == b.experiments, evaluator_key_sha256=keys.key_sha256, compile_params=params)
            out.append(Assignment(**{**asg.__dict__, "sha256": asg.compute_sha256()}))
    return out


def select_panel(assignments: list[Assignment], panel: str) -> list[Assignment]:
    """``full`` — the full-length counterbalanced panel; ``all`` — every assignment."""
    if panel == "all":
        return list(assignments)
    if panel == "full":
        return [a for a in assignments if a.full_length]
    raise InputError(f"unknown panel {panel!r}; use 'full' (the full-length counterbalanced panel) or 'all'")


def assignment_from_dict(d: dict[str, Any], path: str = "<assignment>") -> Assignment:
    """Rebuild an assignment from JSON and verify its sha256 (a changed file is refused)."""
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise InputError(f"not an SDL assignment of format {FORMAT}; write it with `mdbench sdl compile`", path)
    try:
        asg = Assignment(
            assignment_id=d["assignment_id"], index=int(d["index"]), ledger_name=d["ledger"]["name"],
            ledger_sha256=d["ledger"]["sha256"], roles={r: tuple(d["roles"][r]) for r in ROLES},
            public_ids=dict(d["public_ids"]), budgets=Budgets(**d["budgets"]),
            floor=float(d["scoring"]["floor"]), invalid_forecast=str(d["scoring"]["invalid_forecast"]),
            horizon=int(d["horizon"]), rotation=int(d["rotation"]), full_length=bool(d["full_length"]),
            evaluator_key_sha256=str(d["evaluator_key_sha256"]), compile_params=d["compile"], sha256=d["sha256"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"not an SDL assignment (missing or malformed {exc}); write it with `mdbench sdl compile`",
                         path) from exc
    if asg.compute_sha256() != asg.sha256:
        raise InputError("assignment content does not match its sha256: the frozen file was changed; "
                         "recompile it with `mdbench sdl compile`", path)
    return asg


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
    """Refuse an assignment compiled from a different ledger, with overlapping / unknown roles or bad ids."""
    if asg.ledger_sha256 != ledger.sha256():
        raise InputError(f"assignment was compiled from ledger sha256 {asg.ledger_sha256[:12]}…, but the ledger "
                         f"given has {ledger.sha256()[:12]}…; compile against this ledger", where)
    if asg.compute_sha256() != asg.sha256:
        raise InputError("assignment content does not match its frozen sha256", where)
    known = set(ledger.by_id())
    seen: set[str] = set()
    for r in ROLES:
        ids = set(asg.roles[r])
        if ids & seen:
            raise InputError(f"role {r} overlaps another role", where)
        if ids - known:
            raise InputError(f"role {r} names experiments not in the ledger: {sorted(ids - known)[:3]}", where)
        seen |= ids
    if set(asg.public_ids) != seen or len(set(asg.public_ids.values())) != len(seen):
        raise InputError("public_ids must map every experiment of the assignment to a distinct id", where)
