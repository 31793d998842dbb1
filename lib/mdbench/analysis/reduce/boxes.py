"""Periodic boxes: MDAnalysis ``[a, b, c, α, β, γ]`` ↔ box matrices, and the minimum image."""

from __future__ import annotations

import numpy as np

#: MDAnalysis length unit (Å) → nm.
A_TO_NM = 0.1


def box_matrix_nm(dimensions: np.ndarray, unit_nm: float = A_TO_NM) -> np.ndarray:
    """Box matrix (rows = box vectors) [nm] from MDAnalysis ``[a, b, c, α, β, γ]`` (``unit_nm`` nm per
    length unit: Å by default; degrees)."""
    from MDAnalysis.lib.mdamath import triclinic_vectors

    return np.asarray(triclinic_vectors(np.asarray(dimensions, dtype=np.float64)), dtype=np.float64) * unit_nm


def box_dimensions(vectors: np.ndarray) -> np.ndarray:
    """MDAnalysis ``[a, b, c, α, β, γ]`` (float32, degrees) of a stack of box matrices (K, 3, 3), rows = box
    vectors: :func:`MDAnalysis.lib.mdamath.triclinic_box` for K boxes at once (one call per frame costs a
    tenth of decoding a small frame). Same rules: float64 arithmetic, and an invalid box
    (a length ≤ 0, an angle outside (0°, 180°)) gives zeros."""
    v = np.asarray(vectors, dtype=np.float64).reshape(-1, 3, 3)
    lengths = np.sqrt(np.einsum("kij,kij->ki", v, v))
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    lx, ly, lz = lengths[:, 0], lengths[:, 1], lengths[:, 2]
    with np.errstate(invalid="ignore", divide="ignore"):
        angles = np.rad2deg(np.arccos(np.stack([np.einsum("ki,ki->k", y, z) / (ly * lz),
                                                 np.einsum("ki,ki->k", x, z) / (lx * lz),
                                                 np.einsum("ki,ki->k", x, y) / (lx * ly)], axis=1)))
    dims = np.concatenate([lengths, angles], axis=1).astype(np.float32)
    with np.errstate(invalid="ignore"):
        valid = np.all(dims > 0.0, axis=1) & np.all(angles < 180.0, axis=1)
    dims[~valid] = 0.0
    return dims


def minimum_image(vectors_nm: np.ndarray, box_nm: np.ndarray) -> np.ndarray:
    """Minimum-image convention in fractional coordinates of ``box_nm`` (exact for orthorhombic boxes).

    Parameters
    ----------
    vectors_nm : ndarray (..., 3)
        Displacement vectors [nm], float64.
    box_nm : ndarray (3, 3)
        Box matrix with box vectors as rows [nm].

    Returns
    -------
    ndarray (..., 3)
        ``v - round(v h⁻¹) h``.
    """
    if np.allclose(box_nm, np.diag(np.diag(box_nm))):
        lengths = np.diag(box_nm)
        return vectors_nm - lengths * np.round(vectors_nm / lengths)
    frac = vectors_nm @ np.linalg.inv(box_nm)
    frac -= np.round(frac)
    return frac @ box_nm
