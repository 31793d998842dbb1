"""Loader of the Precursor Genome ledger (Walters et al. 2026; Zenodo doi 10.5281/zenodo.21285546, CC BY 4.0).

The archive is not shipped (users download it). This reads ``ledger_precursor_genome.json`` — from the file
itself, a folder holding it, or a ``.zip`` archive holding it — with the standard :mod:`json` module only.
Refinement pickles (``refinement_pkls.zip``) are **never** opened or unpickled: the ledger already carries the
phase weights. Pointing the loader at a pickle is an error.

Mapping onto :class:`~mdbench.sdl.ledger.Ledger` (key paths after third-party format notes; alternatives
are tried where the notes are unverified, and a descriptor that is absent stays absent):

* pre-result descriptors: ``precursor_1``/``precursor_2`` (``precursors[].formula``), ``target``,
  ``heating_temperature_C``, ``heating_time_h``, ``reaction_energy_eV_per_atom``;
* outcome: ``physical_failure`` → invalid (no category); otherwise ``outcome.reaction_category`` in
  {completely_reacted, transformed, partially_reacted, unreacted}; K = 5 joint outcomes;
* evidence tier ``xrd_scan`` — one per ``characterization.xrd.scans[]`` (payload: filename and status,
  payload_ref ``raw_scans.zip:<filename>``; supports the validity axis); a sample without scans gets one
  *missing* scan item whose reason is ``outcome.phases_unavailable_reason``;
* evidence tier ``automated_refinement`` — one per refinement case with ``origin`` ``automated_db``
  (payload: phase weights and Rwp; supports no scored axis — a numerical fit alone does not establish phase
  identity);
* expert reviews — one per refinement case carrying ``verification`` (quality tier = the recorded
  ``human_quality_score``; payload: acceptance, score, the verified phase weights and, when accepted, the
  expert-validated reaction category; supports the category axis when accepted).
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

from mdbench.errors import InputError
from mdbench.sdl.ledger import EvidenceItem, Experiment, ExpertReview, Ledger, Outcome

CATEGORIES = ("completely_reacted", "transformed", "partially_reacted", "unreacted")
LEDGER_NAME = "ledger_precursor_genome.json"
_PICKLE_SUFFIXES = (".pkl", ".pickle", ".pckl")

_DESCRIPTOR_PATHS: dict[str, tuple[str, ...]] = {
    "target": ("target", "target_compound", "target_formula", "synthesis.target"),
    "heating_temperature_C": ("heating_temperature_C", "heating_temperature", "temperature_C", "temperature",
                              "synthesis.heating_temperature", "synthesis.temperature"),
    "heating_time_h": ("heating_time_h", "heating_time", "time_h", "dwell_time_h",
                       "synthesis.heating_time", "synthesis.time"),
    "reaction_energy_eV_per_atom": ("reaction_energy_eV_per_atom", "reaction_energy", "computed_reaction_energy",
                                    "thermodynamics.reaction_energy"),
}


def _get(d: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def _first(d: dict[str, Any], paths: tuple[str, ...]) -> Any:
    for p in paths:
        v = _get(d, p)
        if v is not None:
            return v
    return None


def read_ledger_text(path: str | Path) -> tuple[str, str]:
    """Return ``(json_text, source_label)`` of the ledger at ``path`` (file, folder or zip); never unpickles."""
    path = Path(path)
    if path.suffix.lower() in _PICKLE_SUFFIXES:
        raise InputError("refusing to read a pickle: pass ledger_precursor_genome.json (or the archive holding it); "
                         "mdbench never unpickles refinement files", str(path))
    if path.is_dir():
        path = path / LEDGER_NAME
    if not path.exists():
        raise InputError(f"not found — download the Precursor Genome archive and pass {LEDGER_NAME}", str(path))
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            names = [n for n in zf.namelist() if n.rsplit("/", 1)[-1] == LEDGER_NAME]
            if not names:
                raise InputError(f"archive has no {LEDGER_NAME}", str(path))
            return zf.read(names[0]).decode("utf-8"), f"{path}!{names[0]}"
    return path.read_text(encoding="utf-8"), str(path)


def load_precursor_genome(path: str | Path) -> Ledger:
    """Load the Precursor Genome ledger JSON as a :class:`Ledger`.

    Parameters
    ----------
    path : path
        ``ledger_precursor_genome.json``, the folder holding it, or a zip archive holding it.

    Returns
    -------
    Ledger
        One experiment per sample (id = ``sample_id``), categories :data:`CATEGORIES`, validity axis on
        (K = 5), evidence tiers ``xrd_scan`` and ``automated_refinement``, expert reviews where recorded.

    Raises
    ------
    InputError
        Naming the file and the sample / key that is malformed.
    """
    text, label = read_ledger_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg}", label, exc.lineno) from exc
    samples = data.get("samples") if isinstance(data, dict) else None
    if not isinstance(samples, list) or not samples:
        raise InputError("expected a top-level object with a non-empty 'samples' list", label)
    experiments: list[Experiment] = []
    qtiers: set[str] = set()
    seen: set[str] = set()
    for i, s in enumerate(samples):
        where = f"samples[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("sample_id"), str):
            raise InputError(f"{where}: missing string 'sample_id'", label)
        sid = s["sample_id"]
        where = f"samples[{i}] ({sid})"
        if sid in seen:
            raise InputError(f"{where}: duplicate sample_id", label)
        seen.add(sid)
        precs = s.get("precursors")
        if not isinstance(precs, list) or not precs or not all(isinstance(p, dict) and "formula" in p for p in precs):
            raise InputError(f"{where}: 'precursors' must be a list of objects with 'formula'", label)
        desc: dict[str, Any] = {f"precursor_{k + 1}": str(p["formula"]) for k, p in enumerate(precs)}
        for name, paths in _DESCRIPTOR_PATHS.items():
            v = _first(s, paths)
            if v is not None:
                desc[name] = v if isinstance(v, str) else float(v)
        failure = s.get("physical_failure")
        if not isinstance(failure, bool):
            raise InputError(f"{where}: 'physical_failure' must be true or false", label)
        outcome_d = s.get("outcome") or {}
        cat = outcome_d.get("reaction_category")
        if failure:
            outcome = Outcome(False, None)
        else:
            if cat not in CATEGORIES:
                raise InputError(f"{where}: outcome.reaction_category '{cat}' is not one of {list(CATEGORIES)}",
                                 label)
            outcome = Outcome(True, cat)
        evidence: list[EvidenceItem] = []
        reviews: list[ExpertReview] = []
        scans = _get(s, "characterization.xrd.scans") or []
        if not isinstance(scans, list):
            raise InputError(f"{where}: characterization.xrd.scans must be a list", label)
        if not scans:
            evidence.append(EvidenceItem(
                evidence_id=f"{sid}:scan0", tier="xrd_scan", payload_ref=None, payload=None,
                missing_reason=str(outcome_d.get("phases_unavailable_reason") or "no XRD scan recorded"),
                supports=()))
        for j, scan in enumerate(scans):
            fname = scan.get("filename")
            evidence.append(EvidenceItem(
                evidence_id=f"{sid}:scan{j}", tier="xrd_scan",
                payload_ref=f"raw_scans.zip:{fname}" if fname else None,
                payload={"filename": fname, "status": scan.get("status")},
                supports=("validity",)))
            for k, case in enumerate(scan.get("refinement_cases") or []):
                ref = f"{where}.characterization.xrd.scans[{j}].refinement_cases[{k}]"
                if not isinstance(case, dict):
                    raise InputError(f"{ref}: must be an object", label)
                if case.get("origin", "automated_db") != "manual":
                    evidence.append(EvidenceItem(
                        evidence_id=f"{sid}:scan{j}:ref{k}", tier="automated_refinement", payload_ref=ref,
                        payload={"phase_weights": case.get("phase_weights"), "rwp": case.get("rwp"),
                                 "origin": case.get("origin")},
                        supports=()))
                ver = case.get("verification")
                if isinstance(ver, dict):
                    score = ver.get("human_quality_score")
                    tier = None if score is None else str(score)
                    if tier is not None:
                        qtiers.add(tier)
                    accepted = bool(ver.get("is_accepted"))
                    payload = {"is_accepted": accepted, "human_quality_score": score,
                               "phase_weights": case.get("phase_weights"), "origin": case.get("origin")}
                    if accepted and outcome.valid:
                        payload["reaction_category"] = outcome.category
                    reviews.append(ExpertReview(review_id=f"{sid}:scan{j}:ref{k}:review", quality_tier=tier,
                                                payload=payload, supports=("category",) if accepted else ()))
        experiments.append(Experiment(sid, desc, outcome, tuple(evidence), tuple(reviews)))
    provenance = {"source": "The Precursor Genome (Walters et al. 2026)", "doi": "10.5281/zenodo.21285546",
                  "licence": "CC BY 4.0", "file_name": LEDGER_NAME,
                  "file_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    return Ledger(name="precursor_genome", categories=CATEGORIES, validity_axis=True,
                  evidence_tiers=("xrd_scan", "automated_refinement"),
                  review_quality_tiers=tuple(sorted(qtiers)), experiments=tuple(experiments),
                  provenance=provenance)
