"""Hand-built MDAnalysis universes with in-memory trajectories (units: MDAnalysis Å internally)."""

from __future__ import annotations

import numpy as np


def make_universe(resnames: list[str], atoms_per_res: list[list[tuple[str, float, float]]],
                  coords_nm: np.ndarray, box_nm: np.ndarray, dt_ps: float = 1.0,
                  bonds: list[tuple[int, int]] | None = None):
    """Universe with one residue (= molecule) per entry of ``resnames``.

    Parameters
    ----------
    resnames : list of str
        Residue name of each molecule.
    atoms_per_res : list of list of (element, mass_amu, charge_e)
        Atoms of each molecule.
    coords_nm : ndarray (F, N, 3)
        Positions [nm] (wrapped or not, as the test wants).
    box_nm : ndarray (F, 3)
        Orthorhombic box lengths [nm] per frame.
    """
    import MDAnalysis as mda
    from MDAnalysis.coordinates.memory import MemoryReader

    resindex = np.concatenate([[i] * len(a) for i, a in enumerate(atoms_per_res)])
    flat = [a for res in atoms_per_res for a in res]
    n_atoms = len(flat)
    u = mda.Universe.empty(n_atoms, n_residues=len(resnames), atom_resindex=resindex, trajectory=False)
    u.add_TopologyAttr("resnames", resnames)
    u.add_TopologyAttr("names", [f"{e}{i}" for i, (e, _, _) in enumerate(flat)])
    u.add_TopologyAttr("elements", [e for e, _, _ in flat])
    u.add_TopologyAttr("masses", [m for _, m, _ in flat])
    u.add_TopologyAttr("charges", [q for _, _, q in flat])
    if bonds:
        u.add_TopologyAttr("bonds", bonds)
    coords = np.asarray(coords_nm, dtype=np.float32) * 10.0
    n_frames = coords.shape[0]
    dims = np.zeros((n_frames, 6), dtype=np.float32)
    dims[:, :3] = np.asarray(box_nm) * 10.0
    dims[:, 3:] = 90.0
    u.load_new(coords, format=MemoryReader, dimensions=dims, dt=dt_ps)
    return u
