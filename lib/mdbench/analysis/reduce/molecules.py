"""Centres of mass of whole molecules, frame chunk by frame chunk (molecules split by the box made whole)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mdbench.analysis.reduce.boxes import A_TO_NM, box_matrix_nm, minimum_image
from mdbench.analysis.reduce.pairs import divmod_by_scalar

@dataclass
class Topology:
    """Per-atom and per-molecule arrays the reduction needs (built once)."""

    n_atoms: int
    n_mol: int
    first_atom: np.ndarray
    ref_atom: np.ndarray          # first atom of each atom's molecule
    weights: Any                  # scipy CSR (M × N) float32: m_a / M_mol for atom a of molecule mol
    contiguous: bool = False      # every molecule's atoms are consecutive (as in GROMACS topologies)
    mol_of_atom: np.ndarray | None = None
    # for atom a (0..N-2) of a contiguous topology: mass fraction of its molecule in the atoms after a
    tail_fraction: np.ndarray | None = None
    _stacked: dict = field(default_factory=dict)

    @classmethod
    def build(cls, mol_of_atom: np.ndarray, masses: np.ndarray) -> Topology:
        """From each atom's molecule (numbered 0..M-1 in order of first appearance) and mass [amu]."""
        from scipy.sparse import csr_matrix

        n_atoms = mol_of_atom.size
        first_atom = np.unique(mol_of_atom, return_index=True)[1]
        mol_mass = np.bincount(mol_of_atom, weights=masses)
        weights = csr_matrix(((masses / mol_mass[mol_of_atom]).astype(np.float32), (mol_of_atom, np.arange(n_atoms))),
                             shape=(first_atom.size, n_atoms))
        contiguous = bool(np.all(np.diff(mol_of_atom) >= 0))
        tail = None
        if contiguous:
            cum = np.cumsum(masses, dtype=np.float64)
            last = np.append(first_atom[1:] - 1, n_atoms - 1)  # last atom of each molecule
            tail = ((cum[last][mol_of_atom] - cum) / mol_mass[mol_of_atom])[:-1]
        return cls(n_atoms=n_atoms, n_mol=first_atom.size, first_atom=first_atom, ref_atom=first_atom[mol_of_atom],
                   weights=weights, contiguous=contiguous, mol_of_atom=np.asarray(mol_of_atom, dtype=np.int64),
                   tail_fraction=tail)

    def junctions(self, k: int) -> np.ndarray:
        """Flat indices, in a (k, N-1, 3) array of consecutive-atom vectors, of the vectors that join the last
        atom of a molecule to the first atom of the next one (a flat index list: cheaper to assign than rows)."""
        key = ("junctions", k)
        if key not in self._stacked:
            rows = (np.arange(k)[:, None] * (self.n_atoms - 1) + (self.first_atom[1:] - 1)[None]).ravel()
            self._stacked[key] = (rows[:, None] * 3 + np.arange(3)).ravel()
        return self._stacked[key]

    def stacked_weights(self, k: int) -> Any:
        """Block-diagonal weights for k frames stacked as (k·N, 3): one sparse product per chunk."""
        if k not in self._stacked:
            from scipy.sparse import csr_matrix

            # frame f's block: the same rows shifted by f·M, columns by f·N (built from the CSR arrays
            # directly: scipy's block_diag goes through COO)
            w = self.weights
            nnz = w.indptr[-1]
            indices = (w.indices[None, :] + (np.arange(k) * self.n_atoms)[:, None]).ravel()
            indptr = np.append((w.indptr[None, :-1] + (np.arange(k) * nnz)[:, None]).ravel(), k * nnz)
            self._stacked[k] = csr_matrix((np.tile(w.data, k), indices, indptr),
                                          shape=(k * self.n_mol, k * self.n_atoms))
        return self._stacked[k]


def chain_steps(pos: np.ndarray, top: Topology) -> np.ndarray:
    """Wrapped vectors between consecutive atoms, (K, N-1, 3), with the vectors that join one molecule to the
    next set to zero (contiguous topologies)."""
    step = np.subtract(pos[:, 1:], pos[:, :-1])
    step.reshape(-1)[top.junctions(pos.shape[0])] = 0.0
    return step


def chain_whole_coms(pos: np.ndarray, lengths: np.ndarray, top: Topology, weights: Any) -> np.ndarray:
    """Centres of mass of the molecules made whole along their atom chain, orthorhombic boxes, contiguous
    topology; (K, M, 3) float64 in the unit of ``pos``.

    One sparse mass-weight product of the wrapped positions, plus a correction for each consecutive-atom
    vector that crosses the boundary: the true vector is the wrapped one shifted by a box length, which moves
    every later atom of the molecule by that shift, and so its centre of mass by the shift times the mass
    fraction of those atoms (:attr:`Topology.tail_fraction`). Exact for any molecule whose consecutive atoms
    are closer than half the box; a fraction of the cost of the general per-atom minimum-image path.
    """
    k_frames, n_atoms = pos.shape[0], pos.shape[1]
    com = (weights @ pos.reshape(k_frames * n_atoms, 3)).reshape(k_frames, top.n_mol, 3).astype(np.float64)
    if n_atoms < 2:
        return com
    step = chain_steps(pos, top)
    half_min = 0.5 * float(lengths.min())
    if step.max() < half_min and step.min() > -half_min:  # nothing split in this chunk
        return com
    flat = step.reshape(-1)
    np.abs(flat, out=flat)
    idx = np.flatnonzero(flat > half_min)  # candidates; the exact test is each frame's own box length
    frame, rest = divmod_by_scalar(idx, (n_atoms - 1) * 3)
    atom, axis = divmod_by_scalar(rest, 3)
    lk = lengths[frame, axis].astype(np.float64)
    wrapped_step = pos[frame, atom + 1, axis].astype(np.float64) - pos[frame, atom, axis]
    shift = -lk * np.rint(wrapped_step / lk)  # true step − wrapped step
    key = (frame * top.n_mol + top.mol_of_atom[atom]) * 3 + axis
    com.reshape(-1)[:] += np.bincount(key, weights=shift * top.tail_fraction[atom], minlength=com.size)
    return com


def whole_molecule_coms(pos: np.ndarray, dims: np.ndarray, top: Topology, unit_nm: float = A_TO_NM) -> np.ndarray:
    """Wrapped centres of mass of whole molecules for a chunk of frames.

    Orthorhombic boxes and molecules with consecutive atoms (every GROMACS topology): one sparse mass-weight
    product of the positions, corrected for the consecutive-atom vectors that cross the boundary
    (:func:`chain_whole_coms`). Otherwise each atom's minimum-image vector to its molecule's first atom
    makes the molecule whole (valid for molecules shorter than half the box) and the mass-weighted mean of
    those vectors is added to the first atom; only the few components longer than half the box are wrapped.
    Arithmetic in the input's float32 (≈ 1e-6 nm, three orders below the xtc precision); the result is
    float64 nm.

    Parameters
    ----------
    pos : ndarray (K, N, 3)  [unit]
    dims : ndarray (K, 6)  MDAnalysis-style box [unit, degrees]
    unit_nm : float
        Length of the input unit in nm (0.1 for MDAnalysis Å, 1 for positions read straight from an xtc).

    Returns
    -------
    ndarray (K, M, 3)  [nm], float64
    """
    k_frames, n_atoms = pos.shape[0], pos.shape[1]
    ortho = bool(np.all(dims[:, 3:] == 90.0))
    weights = top.weights if k_frames == 1 else top.stacked_weights(k_frames)
    if ortho:
        lengths = dims[:, :3].astype(pos.dtype)
        half_min = 0.5 * lengths.min()
        if top.contiguous:
            com = chain_whole_coms(pos, lengths, top, weights)
            com *= unit_nm
            return com
    d = np.take(pos, top.ref_atom, axis=1)  # np.take: cheaper than fancy indexing of (K, N, 3) float32
    np.subtract(pos, d, out=d)
    if ortho:
        # two cheap reductions decide whether any molecule of the chunk can be broken; only then locate the
        # components longer than half their box length
        idx = (np.flatnonzero(np.abs(d) > 0.5 * lengths[:, None, :])
               if d.max() > half_min or d.min() < -half_min else np.empty(0, np.int64))
        if idx.size:  # broken molecules: wrap those components only
            flat = d.reshape(-1)
            frame, axis = idx // (n_atoms * 3), idx % 3
            lk = lengths[frame, axis]
            flat[idx] -= lk * np.rint(flat[idx] / lk)
    else:
        for k in range(k_frames):
            d[k] = minimum_image(d[k].astype(np.float64), box_matrix_nm(dims[k], 1.0))  # box in the read unit
    offset = weights @ d.reshape(k_frames * n_atoms, 3)
    com = np.take(pos, top.first_atom, axis=1).astype(np.float64)
    com += offset.reshape(k_frames, top.n_mol, 3)
    com *= unit_nm
    return com
