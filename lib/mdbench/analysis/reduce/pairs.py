"""Pair search: every (frame, centre, site) triple closer than a cutoff under the minimum image.

Two ways, chosen by :func:`mdbench.analysis.reduce.onepass.reduce_universe`: dense numpy arrays for few
centre × site pairs in orthorhombic boxes, a periodic k-d tree otherwise (docs/performance.md says why).
"""

from __future__ import annotations

import numpy as np

#: Centre × site pairs per frame up to which distances are computed densely with numpy for orthorhombic
#: boxes (faster than a tree for few centres); above it, and for triclinic boxes, a periodic k-d tree
#: (:func:`tree_pairs_within`) runs frame by frame.
BRUTE_FORCE_MAX_PAIRS = 400_000

#: Elements of one dense r² work array: frames are done a few at a time so the arrays stay in cache
#: (faster per frame than one array for the whole chunk).
DENSE_BLOCK_ELEMENTS = 32_768


def dense_pairs_within(centres: np.ndarray, sites: np.ndarray, lengths: np.ndarray, rmax: float,
                        *, same: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All (frame, centre, site) triples closer than ``rmax`` under the minimum image, for a chunk of frames.

    Parameters
    ----------
    centres : ndarray (K, C, 3), sites : ndarray (K, S, 3)
        Positions in the trajectory's unit and dtype (float32 Å: as precise as the stored coordinates and
        faster than float64).
    lengths : ndarray (K, 3)
        Orthorhombic box lengths per frame, same unit.
    rmax : float
        Cutoff, same unit.
    same : bool
        ``sites is centres``: keep each unordered pair once (i < j) and never i = j.

    Returns
    -------
    (frame, i, j, r) : four ndarrays (P,), r in the input unit and dtype.
    """
    dtype = centres.dtype
    k_frames, n_c, n_s = centres.shape[0], centres.shape[1], sites.shape[1]
    per_frame = max(n_c * n_s, 1)
    kb = max(1, min(k_frames, DENSE_BLOCK_ELEMENTS // per_frame))
    # one coordinate axis at a time from contiguous rows: (3, K, C) and (3, K, S) copies make the broadcast
    # differences faster than strided reads of the (K, ·, 3) inputs
    cen_t = np.ascontiguousarray(centres.transpose(2, 0, 1))
    sit_t = cen_t if same else np.ascontiguousarray(sites.transpose(2, 0, 1))
    r2 = np.empty((kb, n_c, n_s), dtype=dtype)
    dk = np.empty_like(r2)
    tmp = np.empty_like(r2)
    within = np.empty((kb, n_c, n_s), dtype=bool)
    upper = np.triu(np.ones((n_c, n_s), dtype=bool), k=1)[None] if same else None
    rmax2 = dtype.type(rmax * rmax)
    lengths = np.asarray(lengths, dtype=dtype)
    inv = (dtype.type(1.0) / lengths).astype(dtype)
    out_flat, out_r = [], []
    for f0 in range(0, k_frames, kb):
        n = min(kb, k_frames - f0)
        r2_, dk_, tmp_, within_ = r2[:n], dk[:n], tmp[:n], within[:n]
        for k in range(3):
            lk = lengths[f0:f0 + n, k, None, None]
            # site minus centre as two broadcast copies and one contiguous subtraction (no zero-stride operand)
            np.copyto(dk_, sit_t[k, f0:f0 + n, None, :])
            np.copyto(tmp_, cen_t[k, f0:f0 + n, :, None])
            dk_ -= tmp_
            np.multiply(dk_, inv[f0:f0 + n, k, None, None], out=tmp_)
            np.rint(tmp_, out=tmp_)
            tmp_ *= lk
            dk_ -= tmp_
            if k == 0:
                np.multiply(dk_, dk_, out=r2_)
            else:
                np.multiply(dk_, dk_, out=tmp_)
                r2_ += tmp_
        np.less(r2_, rmax2, out=within_)
        if upper is not None:
            within_ &= upper
        flat = np.flatnonzero(within_)
        out_r.append(r2_.ravel()[flat])
        flat += f0 * per_frame
        out_flat.append(flat)
    flat = np.concatenate(out_flat)  # (frame, centre, site) decoded once for the whole chunk
    f, rest = divmod_by_scalar(flat, per_frame)
    i, j = divmod_by_scalar(rest, n_s)
    r = np.concatenate(out_r)
    return f, i, j, np.sqrt(r, out=r)


def divmod_by_scalar(x: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.divmod(x, d)`` for non-negative integers and a scalar divisor, faster: numpy's ``//`` by a
    scalar uses a multiply-shift division, its ``%`` and ``divmod`` divide element by element."""
    q = x // d
    r = q * d
    np.subtract(x, r, out=r)
    return q, r


def tree_pairs_within(centres: np.ndarray, sites: np.ndarray, dims: np.ndarray, rmax: float,
                       *, same: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """As :func:`dense_pairs_within`, frame by frame with a periodic k-d tree (many centres).

    Orthorhombic boxes use ``scipy.spatial.cKDTree`` with ``boxsize`` (faster than MDAnalysis
    ``capped_distance`` at paper size); triclinic boxes use ``capped_distance``.
    """
    from MDAnalysis.lib.distances import capped_distance, self_capped_distance
    from scipy.spatial import cKDTree

    out_f, out_i, out_j, out_r = [], [], [], []
    for k in range(centres.shape[0]):
        if np.all(dims[k, 3:] == 90.0):
            lengths = dims[k, :3].astype(np.float64)

            def wrapped(x: np.ndarray) -> np.ndarray:
                w = x.astype(np.float64)
                w -= lengths * np.floor(w / lengths)
                w[w >= lengths] = 0.0  # a coordinate at exactly L after rounding is the image at 0
                return w

            # sliding-midpoint trees (balanced_tree=False) build faster here and search as fast
            tc = cKDTree(wrapped(centres[k]), boxsize=lengths, balanced_tree=False)
            if same:
                pairs = tc.query_pairs(rmax, output_type="ndarray")
                i, j = pairs[:, 0], pairs[:, 1]
                d = centres[k, j].astype(np.float64) - centres[k, i]
                d -= lengths * np.rint(d / lengths)
                r = np.sqrt(np.einsum("pk,pk->p", d, d))
            else:
                ts = cKDTree(wrapped(sites[k]), boxsize=lengths, balanced_tree=False)
                m = tc.sparse_distance_matrix(ts, rmax, output_type="ndarray")
                i, j, r = m["i"], m["j"], m["v"]
        else:
            if same:
                pairs, r = self_capped_distance(centres[k], rmax, box=dims[k])
            else:
                pairs, r = capped_distance(centres[k], sites[k], rmax, box=dims[k])
            i, j = pairs[:, 0], pairs[:, 1]
        keep = r < rmax
        out_f.append(np.full(int(keep.sum()), k, dtype=np.int64))
        out_i.append(i[keep].astype(np.int64))
        out_j.append(j[keep].astype(np.int64))
        out_r.append(r[keep])
    return (np.concatenate(out_f), np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_r))
