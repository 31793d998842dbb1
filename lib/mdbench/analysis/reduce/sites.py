"""Site channels from elements and bonds of the topology (not from atom names)."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import numpy as np

from mdbench.analysis.reduce.model import Channel

log = logging.getLogger(__name__)

#: Site labels and their meaning (documented in the registration of atom selections).
SITE_LABELS = {
    "O_carbonyl": "oxygen with one bonded heavy atom, a carbon (C=O), e.g. DMC carbonyl O",
    "O_ether": "oxygen bonded to two carbons (C–O–C), e.g. DMC ester O, TTE ether O",
    "O": "any other oxygen (e.g. FSI sulfonyl O, water O)",
    "N": "nitrogen (e.g. FSI N)",
    "ion": "the atom of a single-atom ion",
}


def element_of(u: Any) -> np.ndarray:
    """Element symbols (upper case) from the topology, else guessed from masses."""
    try:
        elements = u.atoms.elements
    except (AttributeError, MemoryError):  # pragma: no cover - topologies without elements
        table = {1: "H", 7: "LI", 12: "C", 14: "N", 16: "O", 19: "F", 23: "NA", 32: "S", 35: "CL"}
        return np.array([table.get(int(round(m)), "X") for m in u.atoms.masses])
    # upper-cased once per distinct symbol, not once per atom
    distinct, inverse = np.unique(np.asarray(elements).astype(str), return_inverse=True)
    return np.char.upper(distinct)[inverse.reshape(-1)]


def parsed_bonds(u: Any) -> np.ndarray:
    """Bonded atom pairs (B, 2) from the topology's parsed bond list (``u._topology.bonds.values``).

    The fast path of :func:`bond_indices`: it skips building ``u.bonds`` (a TopologyGroup, ≈ 0.5 s for a
    50,000-atom tpr). Private to MDAnalysis: raises AttributeError/TypeError/ValueError when its shape
    changes; ``tests/analysis_structure/test_structure_reduce.py`` checks it against ``u.bonds`` on a tpr.
    """
    values = u._topology.bonds.values  # noqa: SLF001 - parsed (i, j) tuples, no TopologyGroup
    # pairs by construction (MDAnalysis checks every bond when it parses them), flattened through an iterator
    return np.fromiter(itertools.chain.from_iterable(values), dtype=np.int64, count=2 * len(values)).reshape(-1, 2)


def bond_indices(u: Any) -> np.ndarray:
    """Bonded atom pairs (B, 2) of the topology; empty when it has no bonds.

    :func:`parsed_bonds` when MDAnalysis' parsed topology offers it, else the public ``u.bonds``.
    """
    try:
        return parsed_bonds(u)
    except (AttributeError, MemoryError, ValueError, TypeError):
        log.info("parsed bond list unavailable in this MDAnalysis: building u.bonds (slower)")
        try:
            return np.asarray(u.bonds.indices, dtype=np.int64).reshape(-1, 2)
        except (AttributeError, MemoryError):
            return np.empty((0, 2), dtype=np.int64)


def classify_sites(u: Any, mol_of_atom: np.ndarray, mol_species: np.ndarray,
                   mol_charge_e: np.ndarray, centre_species: list[str]) -> list[Channel]:
    """Site channels for the neighbour data, from elements and bonds (not atom names).

    Rules (registered as the atom-selection definition): a single-atom molecule that is not a centre is an
    ``ion`` site; otherwise oxygens are ``O_carbonyl`` (one bonded heavy atom, a carbon), ``O_ether``
    (two bonded carbons) or ``O``; nitrogens are ``N``. Centre species are excluded (centre–centre pairs
    are handled separately). Without bond information every oxygen is ``O``.
    """
    elements = element_of(u)
    n_atoms = len(elements)
    bonds = bond_indices(u)
    mol_size = np.bincount(mol_of_atom)
    atom_species = np.asarray(mol_species)[mol_of_atom]
    is_centre = np.isin(atom_species, centre_species)
    labels = np.full(n_atoms, "", dtype=object)
    labels[(mol_size[mol_of_atom] == 1) & ~is_centre] = "ion"
    labels[(elements == "N") & (labels == "") & ~is_centre] = "N"
    # per oxygen: number of bonded atoms, of bonded heavy atoms and of bonded carbons
    i, j = np.concatenate([bonds[:, 0], bonds[:, 1]]), np.concatenate([bonds[:, 1], bonds[:, 0]])
    n_nb = np.bincount(i, minlength=n_atoms)
    n_heavy = np.bincount(i, weights=elements[j] != "H", minlength=n_atoms)
    n_carbon = np.bincount(i, weights=elements[j] == "C", minlength=n_atoms)
    oxygen = (elements == "O") & (labels == "") & ~is_centre
    labels[oxygen] = "O"
    labels[oxygen & (n_heavy == 1) & (n_carbon == 1) & (n_nb == 1)] = "O_carbonyl"
    labels[oxygen & (n_heavy == 2) & (n_carbon == 2)] = "O_ether"
    # channels in order of their first atom; atoms of a channel ascending
    sites = np.flatnonzero(labels != "")
    if sites.size == 0:
        return []
    _, first, inverse = np.unique(_pair_codes(atom_species[sites], labels[sites]), return_index=True,
                                  return_inverse=True)
    out = []
    for c in np.argsort(first):  # a handful of channels: one comparison over the sites each
        idx = sites[inverse.reshape(-1) == c].astype(np.int64)
        sp, lab = str(atom_species[idx[0]]), str(labels[idx[0]])
        out.append(Channel(f"{sp}:{lab}", sp, lab, idx))
    return out


def _pair_codes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One integer per distinct (a, b) pair of two equally long arrays of labels."""
    code_a = np.unique(np.asarray(a).astype(str), return_inverse=True)[1].reshape(-1).astype(np.int64)
    code_b = np.unique(np.asarray(b).astype(str), return_inverse=True)[1].reshape(-1).astype(np.int64)
    return code_a * (int(code_b.max()) + 1 if code_b.size else 1) + code_b
