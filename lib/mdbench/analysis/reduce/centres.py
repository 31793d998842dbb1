"""The molecular centres of mass of one trajectory pass, kept in a file for a second reader.

The audit re-fits the canonical transport estimators on a run's own windows (:class:`mdbench.audit.transport.
WindowRefit`); they need only the unwrapped molecular centres of mass that the canonical reanalysis' one pass
already made. :func:`save_centres` writes them beside that reanalysis' ``results.json`` (``centres.npz``: times,
box volumes, the system's centre of mass and each species' molecules, float64, no pickled objects);
:func:`load_centres` gives them back as a :class:`Centres`, which offers the part of
:class:`~mdbench.analysis.reduce.model.ReducedTrajectory` those estimators read. Above :data:`MAX_CENTRES_BYTES`
nothing is written and the reader makes its own pass.
"""

from __future__ import annotations

import logging
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mdbench.analysis.reduce.model import SpeciesFrames

log = logging.getLogger(__name__)

#: Largest centres file written [bytes] (frames × molecules × 3 float64); a longer trajectory is not kept.
MAX_CENTRES_BYTES = 512 << 20
#: Name of the file beside a reanalysis' results.json.
CENTRES_FILE = "centres.npz"


@dataclass
class Centres(SpeciesFrames):
    """Unwrapped molecular centres of mass of a trajectory (what the transport estimators read)."""

    time_ps: np.ndarray
    volume_nm3: np.ndarray
    system_com_nm: np.ndarray
    mol_species: np.ndarray
    species: list[str]
    species_charge_e: dict[str, float]
    com_by_species: dict[str, np.ndarray]

    def species_com_nm(self, species: str) -> np.ndarray:
        """Unwrapped centres of mass of one species' molecules, (F, N_s, 3) [nm]."""
        return self.com_by_species[species]


def save_centres(rd: Any, path: str | Path, max_bytes: int = MAX_CENTRES_BYTES) -> bool:
    """Write the centres of ``rd`` (a :class:`~mdbench.analysis.reduce.model.ReducedTrajectory`) to ``path``;
    False (nothing written) when they would exceed ``max_bytes`` or cannot be written."""
    n_bytes = int(rd.n_frames) * int(len(rd.mol_species)) * 3 * 8
    if n_bytes > max_bytes:
        return False
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    try:
        arrays = {"time_ps": np.asarray(rd.time_ps, dtype=np.float64),
                  "volume_nm3": np.asarray(rd.volume_nm3, dtype=np.float64),
                  "system_com_nm": np.asarray(rd.system_com_nm, dtype=np.float64),
                  "mol_species": np.asarray(rd.mol_species).astype(str),
                  "species": np.asarray(list(rd.species), dtype=str),
                  "species_charge_e": np.asarray([float(rd.species_charge_e[sp]) for sp in rd.species])}
        for i, sp in enumerate(rd.species):
            arrays[f"com_{i}"] = np.asarray(rd.species_com_nm(sp), dtype=np.float64)
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
        return True
    except (OSError, ValueError, KeyError) as exc:
        log.info("centres not kept at %s: %s", path, exc)
        tmp.unlink(missing_ok=True)
        return False


def load_centres(path: str | Path) -> Centres | None:
    """The :class:`Centres` in ``path``, or None when it is absent or does not parse."""
    try:
        with np.load(path, allow_pickle=False) as z:
            species = [str(s) for s in z["species"]]
            charges = [float(q) for q in z["species_charge_e"]]
            return Centres(time_ps=z["time_ps"], volume_nm3=z["volume_nm3"], system_com_nm=z["system_com_nm"],
                           mol_species=z["mol_species"], species=species,
                           species_charge_e=dict(zip(species, charges)),
                           com_by_species={sp: z[f"com_{i}"] for i, sp in enumerate(species)})
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        log.debug("centres not read from %s: %s", path, exc)
        return None
