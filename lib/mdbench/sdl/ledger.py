"""The generic experiment ledger that campaigns are compiled from.

A ledger is a recorded map of experiments that were physically run. Each :class:`Experiment` carries

* ``descriptors`` — information available *before* the result (what a coordinator may see),
* ``outcome`` — the recorded result: physical validity and, when valid, one reaction/outcome category,
* ``evidence`` — evidence items, each with a tier (e.g. ``xrd_scan``), a payload reference and the payload;
  an item whose payload is missing stays missing (``payload is None`` with a ``missing_reason``),
* ``reviews`` — optional expert reviews with a quality tier.

Outcomes, evidence payloads and reviews are evaluator-private: only :mod:`mdbench.sdl.environment` decides
when any of them enters the policy-visible state.

The outcome space has ``K = len(categories) + 1`` outcomes when the ledger has a validity axis (an
experiment may fail physically and then has no category) and ``K = len(categories)`` otherwise.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdbench.errors import InputError

#: Claim axes a piece of evidence can support (used by claim calibration).
CLAIM_AXES = ("validity", "category")


@dataclass(frozen=True)
class EvidenceItem:
    """One recorded evidence item of an experiment.

    Attributes
    ----------
    evidence_id : str
        Unique within the experiment.
    tier : str
        Evidence tier, one of the ledger's ``evidence_tiers``.
    payload_ref : str or None
        Where the payload lives in the source record (file in an archive, key path); never dereferenced.
    payload : dict or None
        The evidence content; ``None`` means the evidence is missing and stays missing.
    missing_reason : str or None
        Why the payload is missing (from the record), shown when a missing item is inspected.
    supports : tuple of str
        Claim axes (``validity``, ``category``) this evidence establishes under the evidence contract.
    """

    evidence_id: str
    tier: str
    payload_ref: str | None
    payload: dict[str, Any] | None
    missing_reason: str | None = None
    supports: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExpertReview:
    """An optional expert review of an experiment (``payload is None`` when the review is unavailable)."""

    review_id: str
    quality_tier: str | None
    payload: dict[str, Any] | None
    supports: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """The recorded outcome: ``valid`` (physically valid and characterizable) and ``category`` when valid."""

    valid: bool
    category: str | None


@dataclass(frozen=True)
class Experiment:
    """One physically run experiment: pre-result descriptors, recorded outcome, evidence, reviews."""

    experiment_id: str
    descriptors: dict[str, Any]
    outcome: Outcome
    evidence: tuple[EvidenceItem, ...] = ()
    reviews: tuple[ExpertReview, ...] = ()


@dataclass(frozen=True)
class Ledger:
    """A recorded experiment map.

    Attributes
    ----------
    name : str
        Short name (``vapdiff_crystal``, ``precursor_genome``).
    categories : tuple of str
        Outcome categories of valid experiments.
    validity_axis : bool
        True when experiments can be physically invalid (then ``K = len(categories) + 1``).
    evidence_tiers : tuple of str
        Evidence tiers a coordinator may inspect.
    review_quality_tiers : tuple of str
        Quality tiers an expert review can carry (empty when the record has no reviews).
    experiments : tuple of Experiment
    provenance : dict
        Source, licence, commit/DOI of the record.
    """

    name: str
    categories: tuple[str, ...]
    validity_axis: bool
    evidence_tiers: tuple[str, ...]
    review_quality_tiers: tuple[str, ...]
    experiments: tuple[Experiment, ...]
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def n_outcomes(self) -> int:
        """``K``: number of distinct joint outcomes (categories, plus "invalid" when there is a validity axis)."""
        return len(self.categories) + (1 if self.validity_axis else 0)

    @property
    def has_reviews(self) -> bool:
        """Whether any experiment carries an expert review."""
        return any(e.reviews for e in self.experiments)

    def by_id(self) -> dict[str, Experiment]:
        """Experiments keyed by id (cached; do not mutate)."""
        cached = self.__dict__.get("_by_id")
        if cached is None:
            cached = {e.experiment_id: e for e in self.experiments}
            object.__setattr__(self, "_by_id", cached)
        return cached

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the on-disk ledger format read by :func:`ledger_from_dict`)."""
        return {
            "format": "mdbench-sdl-ledger/1",
            "name": self.name,
            "categories": list(self.categories),
            "validity_axis": self.validity_axis,
            "evidence_tiers": list(self.evidence_tiers),
            "review_quality_tiers": list(self.review_quality_tiers),
            "provenance": self.provenance,
            "experiments": [_experiment_to_dict(e) for e in self.experiments],
        }

    def sha256(self) -> str:
        """sha256 of the canonical JSON of the whole ledger (binds an assignment to its record; cached)."""
        cached = self.__dict__.get("_sha256")
        if cached is None:
            cached = sha256_json(self.to_dict())
            object.__setattr__(self, "_sha256", cached)
        return cached


def canonical_json(obj: Any) -> str:
    """Canonical JSON text (sorted keys, no spaces, no NaN) used for every hash in the room."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_json(obj: Any) -> str:
    """sha256 hex digest of :func:`canonical_json` of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode("ascii")).hexdigest()


def _experiment_to_dict(e: Experiment) -> dict[str, Any]:
    return {
        "experiment_id": e.experiment_id,
        "descriptors": e.descriptors,
        "outcome": {"valid": e.outcome.valid, "category": e.outcome.category},
        "evidence": [
            {"evidence_id": x.evidence_id, "tier": x.tier, "payload_ref": x.payload_ref, "payload": x.payload,
             "missing_reason": x.missing_reason, "supports": list(x.supports)}
            for x in e.evidence
        ],
        "reviews": [
            {"review_id": r.review_id, "quality_tier": r.quality_tier, "payload": r.payload,
             "supports": list(r.supports)}
            for r in e.reviews
        ],
    }


def _need(d: Any, key: str, typ: type | tuple[type, ...], where: str, path: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise InputError(f"{where}: missing key '{key}' — add it (see mdbench.sdl.ledger)", path)
    val = d[key]
    if not isinstance(val, typ):
        raise InputError(f"{where}.{key}: expected {typ}, got {type(val).__name__}", path)
    return val


def ledger_from_dict(data: dict[str, Any], path: str = "<ledger>") -> Ledger:
    """Build and validate a :class:`Ledger` from its JSON form; errors name the file and the key path."""
    if not isinstance(data, dict) or data.get("format") != "mdbench-sdl-ledger/1":
        raise InputError("not an mdbench SDL ledger: expected \"format\": \"mdbench-sdl-ledger/1\"", path)
    categories = tuple(_need(data, "categories", list, "ledger", path))
    validity_axis = bool(_need(data, "validity_axis", bool, "ledger", path))
    tiers = tuple(_need(data, "evidence_tiers", list, "ledger", path))
    qtiers = tuple(data.get("review_quality_tiers", []))
    if len(categories) < 2 or len(set(categories)) != len(categories):
        raise InputError("ledger.categories: need at least two distinct categories", path)
    exps = []
    seen: set[str] = set()
    for i, ed in enumerate(_need(data, "experiments", list, "ledger", path)):
        where = f"experiments[{i}]"
        eid = _need(ed, "experiment_id", str, where, path)
        if eid in seen:
            raise InputError(f"{where}: duplicate experiment_id '{eid}'", path)
        seen.add(eid)
        out = _need(ed, "outcome", dict, where, path)
        valid = _need(out, "valid", bool, where + ".outcome", path)
        cat = out.get("category")
        if valid and cat not in categories:
            raise InputError(f"{where}.outcome.category: '{cat}' is not one of {list(categories)}", path)
        if not valid and cat is not None:
            raise InputError(f"{where}.outcome: an invalid experiment has no category (got '{cat}')", path)
        if not valid and not validity_axis:
            raise InputError(f"{where}.outcome: invalid experiment but the ledger has no validity axis", path)
        evidence = []
        for j, xd in enumerate(ed.get("evidence", [])):
            w = f"{where}.evidence[{j}]"
            tier = _need(xd, "tier", str, w, path)
            if tier not in tiers:
                raise InputError(f"{w}.tier: '{tier}' is not one of evidence_tiers {list(tiers)}", path)
            evidence.append(EvidenceItem(
                evidence_id=_need(xd, "evidence_id", str, w, path), tier=tier,
                payload_ref=xd.get("payload_ref"), payload=xd.get("payload"),
                missing_reason=xd.get("missing_reason"), supports=tuple(xd.get("supports", ()))))
        reviews = []
        for j, rd in enumerate(ed.get("reviews", [])):
            w = f"{where}.reviews[{j}]"
            reviews.append(ExpertReview(
                review_id=_need(rd, "review_id", str, w, path), quality_tier=rd.get("quality_tier"),
                payload=rd.get("payload"), supports=tuple(rd.get("supports", ()))))
        exps.append(Experiment(eid, dict(_need(ed, "descriptors", dict, where, path)), Outcome(valid, cat),
                               tuple(evidence), tuple(reviews)))
    if not exps:
        raise InputError("ledger.experiments is empty", path)
    return Ledger(name=str(data.get("name", Path(path).stem)), categories=categories, validity_axis=validity_axis,
                  evidence_tiers=tiers, review_quality_tiers=qtiers, experiments=tuple(exps),
                  provenance=dict(data.get("provenance", {})))


def load_ledger_json(path: str | Path) -> Ledger:
    """Read an mdbench ledger JSON file (as written by :func:`save_ledger_json`)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read ledger ({exc.strerror})", str(path)) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg}", str(path), exc.lineno) from exc
    return ledger_from_dict(data, str(path))


def save_ledger_json(ledger: Ledger, path: str | Path) -> Path:
    """Write ``ledger`` as JSON; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(ledger.to_dict(), indent=1, sort_keys=True), encoding="utf-8")
    return path
