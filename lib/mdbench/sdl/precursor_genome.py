"""Loader of the Precursor Genome ledger (Walters et al. 2026; Zenodo doi 10.5281/zenodo.21285546, CC BY 4.0).

The archive is not shipped (users download it). This reads ``ledger_precursor_genome.json`` — from the file
itself, a folder holding it, or a ``.zip`` archive holding it — with the standard :mod:`json` module only.
Refinement pickles (``refinement_pkls.zip``) are **never** opened or unpickled: the ledger carries the
phase weights. Pointing the loader at a pickle is an error.

Layout (:data:`LAYOUT`). The upstream repository (``lauren-walters/precursor-genome``) and the archive could
not be read from this project's machines; the key paths below are the ones independent public readers of
the archive use, and their published audit counts (1,035 samples, 46 precursors, 1,009 classified + 26
physical failures, every sample with at least one of 1,351 XRD scans, 1,950 refinement cases) are what
:func:`layout_summary` reports. Because the layout is not confirmed at the source, the loader is strict: it
reads exactly these paths, never guesses alternatives, and stops with the sample and the key path named when
a required key is missing or has the wrong type. Units of the two synthesis numbers are not stated by the
readers consistently (°C and minutes are what they assume); the descriptors keep the record's names.

======================================================  ========  ====================================
key path (per ``samples[]`` entry)                      required  becomes
======================================================  ========  ====================================
``sample_id`` (str)                                     yes       experiment id
``precursors[].formula`` (exactly 2)                    yes       descriptors ``precursor_1/_2``
``target_compound`` (str)                               no        descriptor
``synthesis.heating_temperature`` (number)              no        descriptor ``heating_temperature``
``synthesis.heating_time`` (number)                     no        descriptor ``heating_time``
``reaction_energy_ev_per_atom`` (number)                no        descriptor ``reaction_energy_eV_per_atom``
``physical_failure`` (null/false, or a record/true)     no        invalid when truthy
``outcome.reaction_category`` (category or null)        yes       category; null exactly when invalid
``outcome.phases_unavailable_reason`` (str or null)     no        ``"physical_failure"`` → invalid
``active_scan_index`` (int)                             no        canonical scan first
``characterization.xrd.scans[]``                        yes       tier ``xrd_scan`` (one per scan)
``  .status``, ``.filename``, ``.xrd_settings``         no        scan payload / payload_ref
``  .active_case_index`` (int)                          no        canonical case first
``  .refinement_cases[].phase_weights`` (object)        yes       refinement / review payload
``  .refinement_cases[].rwp``, ``.origin``, ``.rank``   no        ``origin: manual`` / ``rank: -1`` = manual
``  .refinement_cases[].verification.is_accepted``      no        expert review
``  .refinement_cases[].verification.human_quality_score``  no    review quality tier (1 best)
======================================================  ========  ====================================

Mapping onto :class:`~mdbench.sdl.ledger.Ledger` (the evidence contract):

* validity (K = 5 joint outcomes): invalid when ``physical_failure`` is truthy or the phases are unavailable
  because of a physical failure; a sample must then have no category, and a valid sample must have one;
* tier ``execution_record`` — one per sample, the recorded execution outcome ``{"valid", "physical_failure",
  "reason"}``; supports the *validity* axis, derived from the recorded validity (not from whether a scan
  exists: every sample, failed ones included, has scans);
* tier ``xrd_scan`` — one per scan (status, 2θ range, number of refinements; never the file name, which is
  in ``payload_ref``); supports no scored axis on its own;
* tier ``automated_refinement`` — one per non-manual refinement case (phase weights, Rwp); supports no scored
  axis (a numerical fit alone does not establish phase identity);
* expert reviews — one per refinement case carrying ``verification`` (quality tier = the recorded
  ``human_quality_score``; payload: acceptance, score, the verified phase weights). A review never carries
  the scored ``reaction_category``: converting phases into the category is the coordinator's job. An
  accepted review supports the *category* axis.
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
#: (key path, required, type) of the accepted layout, per sample (see module docstring).
LAYOUT: tuple[tuple[str, bool, str], ...] = (
    ("sample_id", True, "str"), ("precursors[].formula", True, "str"), ("target_compound", False, "str"),
    ("synthesis.heating_temperature", False, "number"), ("synthesis.heating_time", False, "number"),
    ("reaction_energy_ev_per_atom", False, "number"), ("physical_failure", False, "record"),
    ("outcome.reaction_category", True, "str|null"), ("outcome.phases_unavailable_reason", False, "str|null"),
    ("active_scan_index", False, "int"), ("characterization.xrd.scans[]", True, "list"),
    ("characterization.xrd.scans[].refinement_cases[].phase_weights", True, "object"),
)
_NUMERIC = {"synthesis.heating_temperature": "heating_temperature", "synthesis.heating_time": "heating_time",
            "reaction_energy_ev_per_atom": "reaction_energy_eV_per_atom"}


def _get(d: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


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


class _Sample:
    """Strict reader of one ``samples[]`` entry; every error names the sample and the key path."""

    def __init__(self, s: Any, i: int, label: str):
        self.label = label
        if not isinstance(s, dict) or not isinstance(s.get("sample_id"), str):
            raise InputError(f"samples[{i}]: missing string 'sample_id'", label)
        self.s = s
        self.sid = s["sample_id"]
        self.where = f"samples[{i}] ({self.sid})"

    def fail(self, key: str, msg: str) -> InputError:
        return InputError(f"{self.where}.{key}: {msg} (layout: see mdbench.sdl.precursor_genome.LAYOUT)", self.label)

    def descriptors(self) -> dict[str, Any]:
        precs = self.s.get("precursors")
        if not isinstance(precs, list) or len(precs) != 2 or \
                not all(isinstance(p, dict) and isinstance(p.get("formula"), str) for p in precs):
            raise self.fail("precursors", "must be a list of exactly 2 objects with a string 'formula'")
        desc: dict[str, Any] = {"precursor_1": precs[0]["formula"], "precursor_2": precs[1]["formula"]}
        tc = self.s.get("target_compound")
        if tc is not None:
            if not isinstance(tc, str):
                raise self.fail("target_compound", f"expected a string, got {type(tc).__name__}")
            desc["target_compound"] = tc
        for key, name in _NUMERIC.items():
            v = _get(self.s, key)
            if v is None:
                continue
            if not _is_number(v):
                raise self.fail(key, f"expected a number, got {v!r}")
            desc[name] = float(v)
        return desc

    def outcome(self) -> tuple[Outcome, str | None]:
        out = self.s.get("outcome")
        if not isinstance(out, dict) or "reaction_category" not in out:
            raise self.fail("outcome.reaction_category", "required (a category, or null for a physical failure)")
        cat = out["reaction_category"]
        reason = out.get("phases_unavailable_reason")
        if reason is not None and not isinstance(reason, str):
            raise self.fail("outcome.phases_unavailable_reason", f"expected a string or null, got {reason!r}")
        failed = bool(self.s.get("physical_failure")) or reason == "physical_failure"
        if failed:
            if cat is not None:
                raise self.fail("outcome.reaction_category", f"'{cat}' given for a physical failure (must be null)")
            return Outcome(False, None), reason
        if cat not in CATEGORIES:
            raise self.fail("outcome.reaction_category", f"'{cat}' is not one of {list(CATEGORIES)} (null only for "
                                                         "a physical failure)")
        return Outcome(True, cat), reason

    def scans(self) -> list[tuple[int, dict[str, Any]]]:
        scans = _get(self.s, "characterization.xrd.scans")
        if not isinstance(scans, list):
            raise self.fail("characterization.xrd.scans", "required list of scans")
        for j, sc in enumerate(scans):
            if not isinstance(sc, dict):
                raise self.fail(f"characterization.xrd.scans[{j}]", "must be an object")
            cases = sc.get("refinement_cases", [])
            if not isinstance(cases, list):
                raise self.fail(f"characterization.xrd.scans[{j}].refinement_cases", "must be a list")
            for k, c in enumerate(cases):
                key = f"characterization.xrd.scans[{j}].refinement_cases[{k}]"
                if not isinstance(c, dict) or not isinstance(c.get("phase_weights"), dict) or \
                        not all(_is_number(w) for w in c["phase_weights"].values()):
                    raise self.fail(key, "needs 'phase_weights' mapping phases to numbers")
                if "verification" in c and c["verification"] is not None and not isinstance(c["verification"], dict):
                    raise self.fail(key + ".verification", "must be an object")
        order = list(range(len(scans)))
        active = self.s.get("active_scan_index")
        if active is not None:
            if not isinstance(active, int) or isinstance(active, bool) or not 0 <= active < len(scans):
                raise self.fail("active_scan_index", f"{active!r} does not index the {len(scans)} scans")
            order = [active] + [j for j in order if j != active]
        return [(j, scans[j]) for j in order]


def _cases(scan: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    cases = scan.get("refinement_cases", [])
    order = list(range(len(cases)))
    aci = scan.get("active_case_index")
    if isinstance(aci, int) and not isinstance(aci, bool) and 0 <= aci < len(cases):
        order = [aci] + [k for k in order if k != aci]
    return [(k, cases[k]) for k in order]


def _is_manual(case: dict[str, Any]) -> bool:
    return case.get("origin") == "manual" or case.get("rank") == -1


def _experiment(smp: _Sample, qtiers: set[str]) -> Experiment:
    sid = smp.sid
    desc = smp.descriptors()
    outcome, reason = smp.outcome()
    record = smp.s.get("physical_failure")
    evidence = [EvidenceItem(
        f"{sid}:execution", "execution_record", f"{smp.where}.physical_failure",
        {"valid": outcome.valid, "physical_failure": not outcome.valid,
         "reason": reason if not outcome.valid else None,
         "failure_record": record if isinstance(record, dict) and not outcome.valid else None}, None, ("validity",))]
    reviews: list[ExpertReview] = []
    scans = smp.scans()
    if not scans:
        evidence.append(EvidenceItem(f"{sid}:scan", "xrd_scan", None, None, reason or "no XRD scan recorded", ()))
    for j, scan in scans:
        settings = scan.get("xrd_settings") if isinstance(scan.get("xrd_settings"), dict) else {}
        fname = scan.get("filename")
        evidence.append(EvidenceItem(
            f"{sid}:scan{j}", "xrd_scan", f"raw_scans.zip:{fname}" if isinstance(fname, str) else None,
            {"status": scan.get("status"), "range_2theta": settings.get("range_2theta"),
             "n_refinement_cases": len(scan.get("refinement_cases", []))}, None, ()))
        for k, case in _cases(scan):
            ref = f"{smp.where}.characterization.xrd.scans[{j}].refinement_cases[{k}]"
            weights = {str(p): float(w) for p, w in case["phase_weights"].items()}
            if not _is_manual(case):
                evidence.append(EvidenceItem(f"{sid}:scan{j}:ref{k}", "automated_refinement", ref,
                                             {"phase_weights": weights, "rwp": case.get("rwp"),
                                              "origin": case.get("origin")}, None, ()))
            ver = case.get("verification")
            if isinstance(ver, dict):
                score = ver.get("human_quality_score")
                tier = None if score is None else str(score)
                if tier is not None:
                    qtiers.add(tier)
                accepted = ver.get("is_accepted") is True
                reviews.append(ExpertReview(
                    f"{sid}:scan{j}:ref{k}:review", tier,
                    {"is_accepted": accepted, "human_quality_score": score, "phase_weights": weights,
                     "origin": case.get("origin"), "manual": _is_manual(case)},
                    ("category",) if accepted else ()))
    return Experiment(sid, desc, outcome, tuple(evidence), tuple(reviews))


def load_precursor_genome(path: str | Path) -> Ledger:
    """Load the Precursor Genome ledger JSON as a :class:`Ledger` (strict; see module docstring).

    Parameters
    ----------
    path : path
        ``ledger_precursor_genome.json``, the folder holding it, or a zip archive holding it.

    Returns
    -------
    Ledger
        One experiment per sample (id = ``sample_id``), categories :data:`CATEGORIES`, validity axis on
        (K = 5), evidence tiers ``execution_record``, ``xrd_scan``, ``automated_refinement``, expert reviews
        where recorded.

    Raises
    ------
    InputError
        Naming the file, the sample and the key path that does not follow :data:`LAYOUT`.
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
        smp = _Sample(s, i, label)
        if smp.sid in seen:
            raise InputError(f"{smp.where}: duplicate sample_id", label)
        seen.add(smp.sid)
        experiments.append(_experiment(smp, qtiers))
    provenance = {"source": "The Precursor Genome (Walters et al. 2026)", "doi": "10.5281/zenodo.21285546",
                  "licence": "CC BY 4.0", "file_name": LEDGER_NAME, "experimental": True,
                  "layout": "key paths of independent public readers; not confirmed against the upstream repository",
                  "file_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    return Ledger(name="precursor_genome", categories=CATEGORIES, validity_axis=True,
                  evidence_tiers=("execution_record", "xrd_scan", "automated_refinement"),
                  review_quality_tiers=tuple(sorted(qtiers)), experiments=tuple(experiments),
                  provenance=provenance)


def layout_summary(ledger: Ledger) -> dict[str, Any]:
    """Counts to compare with the published audit of the archive (samples, precursors, categories, scans…)."""
    # published audit (third-party reader): 1035 samples, 46 precursors, 143/384/113/369 + 26 failures, 1351 scans
    cats = {c: 0 for c in CATEGORIES}
    n_fail = 0
    precs: set[str] = set()
    for e in ledger.experiments:
        precs |= {e.descriptors["precursor_1"], e.descriptors["precursor_2"]}
        if e.outcome.valid:
            cats[e.outcome.category] += 1
        else:
            n_fail += 1
    return {"samples": len(ledger.experiments), "precursors": len(precs), "categories": cats,
            "physical_failures": n_fail,
            "scans": sum(1 for e in ledger.experiments for x in e.evidence if x.tier == "xrd_scan" and x.payload),
            "automated_refinements": sum(
                1 for e in ledger.experiments for x in e.evidence if x.tier == "automated_refinement"),
            "reviews": sum(len(e.reviews) for e in ledger.experiments)}
