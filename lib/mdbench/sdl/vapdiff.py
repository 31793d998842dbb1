"""Loader of the shipped ``vapdiff_crystal`` record (Olympus, MIT) into a :class:`~mdbench.sdl.ledger.Ledger`.

918 robotic vapour-diffusion crystallisation experiments of metal-halide perovskites, each physically run;
the outcome is the ordinal ``crystal_score`` with 4 classes. The record has no physical-failure axis, no
scans and no expert reviews: the only evidence an experiment can reveal is its recorded outcome measurement
(tier ``outcome_measurement``), which supports both claim axes. Pre-result descriptors are the ten
experimental parameters (units in the names) plus the per-organic and per-solvent molecular descriptors of
``descriptors.csv``. Data are read from the package (``mdbench/sdl/data/vapdiff_crystal``), see
``PROVENANCE.md`` and ``LICENSE`` there.
"""

from __future__ import annotations

import csv
import json
from importlib import resources
from pathlib import Path

from mdbench.errors import InputError
from mdbench.sdl.ledger import EvidenceItem, Experiment, Ledger, Outcome

CATEGORIES = ("clear_solution", "fine_powder", "small_crystallites", "large_crystallites")
#: data.csv columns (no header) → descriptor names with units.
COLUMNS = ("organic", "organic_molarity_M", "solvent", "solvent_molarity_M", "inorganic_molarity_M",
           "acid_molarity_M", "alpha_vial_volume_L", "beta_vial_volume_L", "reaction_time_s",
           "reaction_temperature_C", "crystal_score")


def data_dir() -> Path:
    """Folder of the packaged record."""
    return Path(str(resources.files("mdbench.sdl") / "data" / "vapdiff_crystal"))


def load_vapdiff(folder: str | Path | None = None) -> Ledger:
    """Load the vapdiff_crystal record as a ledger.

    Parameters
    ----------
    folder : path, optional
        Folder with ``data.csv`` and ``descriptors.csv``; default: the copy shipped in the package.

    Returns
    -------
    Ledger
        918 experiments ``VD_0000`` … ``VD_0917`` (row order of ``data.csv``), 4 categories, no validity
        axis (``K = 4``), one evidence tier ``outcome_measurement``, no reviews.
    """
    folder = Path(folder) if folder is not None else data_dir()
    desc_path = folder / "descriptors.csv"
    data_path = folder / "data.csv"
    mol_desc: dict[tuple[str, str], dict[str, float]] = {}
    try:
        with desc_path.open(newline="", encoding="utf-8") as fh:
            for lineno, row in enumerate(csv.reader(fh), start=1):
                if len(row) != 4:
                    raise InputError(f"expected 4 columns (parameter, option, descriptor, value), got {len(row)}",
                                     str(desc_path), lineno)
                mol_desc.setdefault((row[0], row[1]), {})[f"{row[0]}:{row[2]}"] = float(row[3])
        experiments = []
        with data_path.open(newline="", encoding="utf-8") as fh:
            for lineno, row in enumerate(csv.reader(fh), start=1):
                if len(row) != len(COLUMNS):
                    raise InputError(f"expected {len(COLUMNS)} columns, got {len(row)}", str(data_path), lineno)
                rec = dict(zip(COLUMNS, row))
                score = rec.pop("crystal_score")
                if score not in CATEGORIES:
                    raise InputError(f"crystal_score '{score}' is not one of {CATEGORIES}", str(data_path), lineno)
                desc: dict[str, object] = {"organic": rec["organic"], "solvent": rec["solvent"]}
                for key in COLUMNS[1:-1]:
                    if key != "solvent":
                        try:
                            desc[key] = float(rec[key])
                        except ValueError as exc:
                            raise InputError(f"column {key}: not a number ({rec[key]!r})",
                                             str(data_path), lineno) from exc
                for param in ("organic", "solvent"):
                    extra = mol_desc.get((param, rec[param]))
                    if extra is None:
                        raise InputError(f"no descriptors for {param} '{rec[param]}' in descriptors.csv",
                                         str(data_path), lineno)
                    desc.update(extra)
                eid = f"VD_{lineno - 1:04d}"
                evidence = (EvidenceItem(
                    evidence_id=f"{eid}:outcome", tier="outcome_measurement",
                    payload_ref=f"data.csv:{lineno}:crystal_score",
                    payload={"crystal_score": score, "valid": True, "category": score},
                    supports=("validity", "category")),)
                experiments.append(Experiment(eid, desc, Outcome(True, score), evidence, ()))
    except OSError as exc:
        raise InputError(f"cannot read the vapdiff_crystal record ({exc.strerror})", str(folder)) from exc
    provenance = {
        "source": "aspuru-guzik-group/olympus, dataset vapdiff_crystal", "experimental": True,
        "commit": "440b6b58",
        "licence": "MIT (Copyright (c) 2020 Aspuru-Guzik group repo)",
        "files_sha256": _sha_files(folder, ("data.csv", "descriptors.csv", "config.json", "LICENSE")),
    }
    return Ledger(name="vapdiff_crystal", categories=CATEGORIES, validity_axis=False,
                  evidence_tiers=("outcome_measurement",), review_quality_tiers=(),
                  experiments=tuple(experiments), provenance=provenance)


def _sha_files(folder: Path, names: tuple[str, ...]) -> dict[str, str]:
    import hashlib

    out = {}
    for n in names:
        p = folder / n
        if p.exists():
            out[n] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def config() -> dict:
    """The record's ``config.json`` (parameter types and ranges)."""
    return json.loads((data_dir() / "config.json").read_text(encoding="utf-8"))
