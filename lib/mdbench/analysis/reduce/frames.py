"""The per-frame reduction of a range of frames, chunk by chunk (what each worker process runs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from mdbench.analysis.reduce.boxes import A_TO_NM, box_dimensions, box_matrix_nm
from mdbench.analysis.reduce.molecules import Topology, whole_molecule_coms
from mdbench.analysis.reduce.pairs import dense_pairs_within, divmod_by_scalar, tree_pairs_within
from mdbench.analysis.reduce.series import BlockWriter, ComSeriesFile
from mdbench.analysis.reduce.unwrap import unwrap
from mdbench.analysis.reduce.xtc import read_direct

#: Atom-frames read into one chunk. Frames are processed a chunk at a time, so numpy's per-call overhead
#: is paid per chunk, not per frame, and memory is bounded by the chunk whatever the trajectory length.
#: The float32 position buffer is 12 bytes × this: cache-sized (larger chunks were slower).
CHUNK_ATOM_FRAMES = 100_000
#: ... but at least this many frames per chunk (per-chunk call overhead on large systems).
CHUNK_MIN_FRAMES = 4


@dataclass
class FramePass:
    """One pass over frames: the per-frame reduction, its inputs and the per-frame arrays it fills.

    :meth:`run` reduces a contiguous range of the frame slice; several ranges can run in forked worker
    processes, writing into the same (shared-memory) arrays, because every output row belongs to one frame.
    Centres of mass are unwrapped from the range's first frame; :func:`reduce_universe` stitches ranges.
    They go to ``com`` (in memory, float64) or, without it, to the scratch file ``store`` (float32
    displacements, :mod:`mdbench.analysis.reduce.series`); either way ``sums`` receives, per frame, the
    float64 sums ``weights @ com`` (one row per species, then the mass-weighted sum) and ``bad`` the number
    of non-finite COM coordinates. ``hist`` and ``hist_cc`` hold one row per structure frame (row
    ``f // every`` for frame ``f``), not one per frame. Ranges are given in units of ``range_unit`` frames (a time block of the
    store, so that each block has one writer).
    """

    reader: Any
    frames: range
    top: Topology
    centre_atoms: np.ndarray
    site_atoms: np.ndarray
    site_channel: np.ndarray
    site_mol: np.ndarray
    n_ch: int
    nbins: int
    rdf_bin_nm: float
    rmax: float
    r_store: float
    dense_ok: bool
    every: int
    chunk: int
    time_ps: np.ndarray
    box_nm: np.ndarray
    volume: np.ndarray
    com: np.ndarray | None
    hist: np.ndarray
    hist_cc: np.ndarray
    weights: np.ndarray                       # (S + 1, M): species indicator rows, then molecular masses
    sums: np.ndarray                          # (F, S + 1, 3) float64
    bad: np.ndarray                           # (F,) int64
    store: ComSeriesFile | None = None
    range_unit: int = 1
    unit_nm: float = A_TO_NM                  # length unit of positions and boxes as read, in nm
    xtc: tuple[str, np.ndarray] | None = None  # (xtc file, frame offsets): read frames straight from it

    def run(self, a: int, b: int, on_chunk: Any = None, reader: Any = None) -> dict[str, Any]:
        """Reduce frames ``a``..``b-1`` of the slice (positions in ``frames``) with ``reader`` (default own).

        Returns the range, its contact rows, the wrapped COMs of its last frame, the (range-local) unwrapped
        COMs of its first and last frames and the input dtype.
        """
        reader = self.reader if reader is None else reader
        n_atoms = self.top.n_atoms
        pos_buf = np.empty((self.chunk, n_atoms, 3), dtype=np.float32)
        dims_buf = np.empty((self.chunk, 6), dtype=np.float64)
        # the direct xtc path keeps each frame's box matrix and converts a chunk of them at once
        vec_buf = np.empty((self.chunk, 3, 3), dtype=np.float32) if self.xtc is not None else None
        cont: dict[str, list[np.ndarray]] = {k: [] for k in ("frame", "centre", "partner", "channel", "dmin_nm")}
        state: dict[str, Any] = {"prev_w": None, "prev_u": None, "first_u": None, "input_dtype": None,
                                 "writer": BlockWriter(self.store, a) if self.store is not None else None}
        sub = self.frames[a:b]
        filled, f0 = 0, a
        for f, time_ps in enumerate(self._read(reader, sub, pos_buf, dims_buf, vec_buf, state), start=a):
            self.time_ps[f] = time_ps
            filled += 1
            if filled == self.chunk or f == b - 1:
                if vec_buf is not None:
                    dims_buf[:filled] = box_dimensions(vec_buf[:filled])
                self._process(f0, pos_buf[:filled], dims_buf[:filled], state, cont)
                if on_chunk is not None:
                    on_chunk(filled)
                f0, filled = f0 + filled, 0
        if state["writer"] is not None:
            state["writer"].flush()
        return {"range": (a, b), "contacts": cont, "last_wrapped": state["prev_w"], "first_u": state["first_u"],
                "last_u": state["prev_u"], "input_dtype": state["input_dtype"]}

    def run_forked(self, slot: int, a: int, b: int, progress: np.ndarray) -> dict[str, Any]:
        """Worker-process body (:func:`mdbench.analysis.concurrency.run_forked_ranges`): frames ``a``..``b-1``
        with an own reader (own file handle) of the trajectory, counting frames done in ``progress[slot]``
        (``a``, ``b`` in units of :attr:`range_unit` frames)."""
        a, b = a * self.range_unit, min(b * self.range_unit, len(self.frames))
        reader = self.reader.copy() if self.xtc is None else None  # the direct xtc path opens its own file

        def tick(n: int) -> None:
            progress[slot] += n

        try:
            return self.run(a, b, on_chunk=tick, reader=reader)
        finally:
            if reader is not None:
                reader.close()

    def _read(self, reader: Any, sub: range, pos_buf: np.ndarray, dims_buf: np.ndarray,
              vec_buf: np.ndarray | None, state: dict[str, Any]) -> Iterator[float]:
        """Yield the time [ps] of each frame of ``sub`` once its positions and box are in row ``i % chunk``
        of the buffers (``i``: the frame's place in ``sub``), read by ``reader`` (box dimensions into
        ``dims_buf``) or straight from the xtc (box matrix into ``vec_buf``, converted by the caller)."""
        chunk = self.chunk
        if self.xtc is None:
            for i, ts in enumerate(reader[sub.start:sub.stop:sub.step]):
                if state["input_dtype"] is None:
                    state["input_dtype"] = str(ts.positions.dtype)
                pos_buf[i % chunk] = ts.positions
                dims_buf[i % chunk] = ts.dimensions
                yield ts.time
            return
        state["input_dtype"] = "float32"
        yield from read_direct(self.xtc, sub, pos_buf, vec_buf, chunk)

    def _process(self, f0: int, pos: np.ndarray, dims: np.ndarray, state: dict[str, Any],
                 cont: dict[str, list[np.ndarray]]) -> None:
        """Reduce the k frames f0..f0+k-1 held in ``pos`` / ``dims`` (MDAnalysis-style box; lengths in the
        read unit, :attr:`unit_nm` nm): boxes and volumes, unwrapped molecular centres, and on the structure
        frames the centre–site and centre–centre neighbour data."""
        k = pos.shape[0]
        ortho, lengths_nm = self._store_boxes(f0, dims)
        # 1.–2. whole molecules → wrapped COMs → displacement unwrapping in each current box
        self._unwrap_coms(f0, pos, dims, state, lengths_nm if ortho else self.box_nm[f0:f0 + k], ortho)
        # 3. neighbour data (in the trajectory's unit until the distances are known) on structure frames
        dense = ortho and self.dense_ok
        sf = np.flatnonzero((np.arange(f0, f0 + k) % self.every) == 0)  # structure frames of the chunk
        if sf.size == 0:
            return
        rows = (f0 + sf) // self.every  # their rows of the histograms
        if self.centre_atoms.size and self.n_ch:
            self._site_pairs(f0, pos, dims, sf, rows, dense, cont)
        if self.centre_atoms.size > 1:
            self._centre_pairs(pos, dims, sf, rows, dense)

    def _store_boxes(self, f0: int, dims: np.ndarray) -> tuple[bool, np.ndarray | None]:
        """Box matrices [nm] and volumes [nm^3] of frames f0.. into :attr:`box_nm` / :attr:`volume`; returns
        (all boxes orthorhombic, their edge lengths [nm] when they are)."""
        k = dims.shape[0]
        unit_nm, box_nm, volume = self.unit_nm, self.box_nm, self.volume
        if bool(np.all(dims[:, 3:] == 90.0)):
            lengths_nm = dims[:, :3] * unit_nm
            box_nm[f0:f0 + k] = lengths_nm[:, :, None] * np.eye(3)[None]
            volume[f0:f0 + k] = np.prod(lengths_nm, axis=1)
            return True, lengths_nm
        for i in range(k):
            box_nm[f0 + i] = box_matrix_nm(dims[i], unit_nm)
        volume[f0:f0 + k] = np.abs(np.linalg.det(box_nm[f0:f0 + k]))
        return False, None

    def _unwrap_coms(self, f0: int, pos: np.ndarray, dims: np.ndarray, state: dict[str, Any], box: np.ndarray,
                     ortho: bool) -> None:
        """Whole molecules → wrapped centres of mass → unwrapped by displacements in each current ``box``
        (edge lengths when ``ortho``, else matrices) [nm]; species sums, non-finite counts and the COM file."""
        k = pos.shape[0]
        com_w = whole_molecule_coms(pos, dims, self.top, self.unit_nm)
        com_u = self.com[f0:f0 + k] if self.com is not None else np.empty_like(com_w)
        unwrap(com_w, box, ortho, state["prev_w"], state["prev_u"], out=com_u)
        if state["first_u"] is None:
            state["first_u"] = com_u[0].copy()
        state["prev_w"], state["prev_u"] = com_w[-1], com_u[-1].copy()
        np.matmul(self.weights, com_u, out=self.sums[f0:f0 + k])  # float64 species sums and barycentre
        with np.errstate(over="ignore", invalid="ignore"):
            if not np.isfinite(self.sums[f0:f0 + k]).all():
                self.bad[f0:f0 + k] = com_u.size // k - np.count_nonzero(np.isfinite(com_u), axis=(1, 2))
        if state["writer"] is not None:
            state["writer"].write(f0, com_u)

    def _site_pairs(self, f0: int, pos: np.ndarray, dims: np.ndarray, sf: np.ndarray, rows: np.ndarray,
                    dense: bool, cont: dict[str, list[np.ndarray]]) -> None:
        """Centre–site pairs within :attr:`rmax` [nm] on the structure frames ``sf`` of the chunk: their
        histograms into ``hist[rows]`` and, below :attr:`r_store`, each (frame, centre, partner molecule,
        channel)'s minimum distance [nm] appended to ``cont``."""
        k = pos.shape[0]
        n_ch, nbins, n_mol, n_centre = self.n_ch, self.nbins, self.top.n_mol, self.centre_atoms.size
        unit_nm, rdf_bin_nm, rmax_u = self.unit_nm, self.rdf_bin_nm, self.rmax / self.unit_nm
        cen, sit = pos[np.ix_(sf, self.centre_atoms)], pos[np.ix_(sf, self.site_atoms)]
        ff, ii, jj, rr = (dense_pairs_within(cen, sit, dims[sf, :3], rmax_u) if dense
                          else tree_pairs_within(cen, sit, dims[sf].astype(np.float32), rmax_u))
        ff = sf[ff]
        dist = rr.astype(np.float64)
        dist *= unit_nm
        inside = dist < self.rmax
        if not inside.all():  # float32 distances just below the cutoff in the read unit
            ff, ii, jj, dist = ff[inside], ii[inside], jj[inside], dist[inside]
        ch = self.site_channel[jj]
        b = (dist / rdf_bin_nm).astype(np.int64)
        np.minimum(b, nbins - 1, out=b)
        b += (ff * n_ch + ch) * nbins
        self.hist[rows] = np.bincount(b, minlength=k * n_ch * nbins).reshape(k, n_ch * nbins)[sf]
        near = np.flatnonzero(dist < self.r_store)  # one index list, taken from each array
        if not near.size:
            return
        key = ff.take(near)
        key += f0
        key *= n_centre
        key += ii.take(near)
        key *= n_mol
        key += self.site_mol.take(jj.take(near))
        key *= n_ch
        key += ch.take(near)
        o = np.argsort(key, kind="stable")
        ks = key[o]
        first = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        ukey = ks[first]
        dmin = np.minimum.reduceat(dist.take(near)[o], first)
        rest, channel = divmod_by_scalar(ukey, n_ch)
        rest, partner = divmod_by_scalar(rest, n_mol)
        frame, centre = divmod_by_scalar(rest, n_centre)
        cont["frame"].append(frame.astype(np.int32))
        cont["channel"].append(channel.astype(np.int16))
        cont["partner"].append(partner.astype(np.int32))
        cont["centre"].append(centre.astype(np.int32))
        cont["dmin_nm"].append(dmin.astype(np.float32))

    def _centre_pairs(self, pos: np.ndarray, dims: np.ndarray, sf: np.ndarray, rows: np.ndarray,
                      dense: bool) -> None:
        """Centre–centre pairs within :attr:`rmax` [nm] on the structure frames ``sf``: their histogram (each
        pair counted for both centres) into ``hist_cc[rows]``."""
        k, nbins = pos.shape[0], self.nbins
        rmax_u = self.rmax / self.unit_nm
        cen = pos[np.ix_(sf, self.centre_atoms)]
        ff, _, _, rr = (dense_pairs_within(cen, cen, dims[sf, :3], rmax_u, same=True) if dense
                        else tree_pairs_within(cen, cen, dims[sf].astype(np.float32), rmax_u, same=True))
        ff = sf[ff]
        dist = rr.astype(np.float64) * self.unit_nm
        inside = dist < self.rmax
        b = np.minimum((dist[inside] / self.rdf_bin_nm).astype(np.int64), nbins - 1)
        self.hist_cc[rows] = 2 * np.bincount(ff[inside] * nbins + b, minlength=k * nbins).reshape(k, nbins)[sf]
