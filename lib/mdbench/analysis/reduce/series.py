"""The unwrapped-COM time series on disk: float32 displacements in time blocks, read per molecule chunk.

A 60,000-frame production of 5,000 molecules holds 60,000 × 5,000 × 3 COM coordinates: 7 GB in float64,
more than the analysis may keep in memory (docs/performance.md, "Long productions"). With a ``series_dir``
the one pass (:func:`mdbench.analysis.reduce.reduce_universe`) writes them to an anonymous scratch file
there instead (``tempfile.TemporaryFile``: unlinked at creation, so neither a finished nor a killed
analysis leaves it behind; the disk space is freed when the last process closes it), and the estimators
read it back a molecule chunk at a time (:func:`mdbench.analysis.diffusion.msd_fft_windows` asks for
``x[frames, molecules, :]`` blocks of 256 frames × 16 molecules), so the memory they use does not grow
with frames × molecules.

Layout. Frames are grouped into time blocks of :data:`BLOCK_FRAMES`; block ``k`` is one contiguous
``(M, BLOCK_FRAMES, 3)`` float32 record (molecule-major inside the block), so a molecule chunk of a block is
one contiguous ``pread``. The file is read with ``os.pread`` (never memory-mapped: mapped pages would count
in the process' resident set; read pages stay in the kernel's reclaimable page cache).

Precision. The pass unwraps in float64 exactly as before; what is stored in float32 is the displacement
``d(t) = r_u(t) − r_u(a)`` from the first frame ``a`` of the pass range that wrote it, and the reader adds
the float64 reference back: ``r_u(t) = base_r + d(t)`` with ``base_r`` (M, 3) float64 per range. The
rounding error of every returned coordinate is therefore at most half a float32 ulp of the displacement
(``|d| · 2**-24``), independent of where the box is and with no accumulation over frames (an unwrapping
*in* float32 would add a rounding error per frame). ``tests/analysis_structure/test_com_series_precision.py``
bounds the MSD, D and Onsager coefficients by it. The collective coordinates of the Onsager estimator
(``Σ_α r_α`` per species) and the system barycentre are summed by the pass in float64 and never rounded.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

#: Element type of the stored COM series (displacements; see the module docstring for the precision).
COM_DTYPE = np.float32
#: Frames per time block of the file (a block's molecule chunk is one read; the pass's ranges start on
#: block boundaries so that each block has one writer). Matches the MSD's transposition block.
BLOCK_FRAMES = 256


class ComSeriesFile:
    """The scratch file and its layout: ``n_blocks`` records of ``(n_mol, BLOCK_FRAMES, 3)`` float32."""

    def __init__(self, directory: str | Path, n_frames: int, n_mol: int, block_frames: int = BLOCK_FRAMES):
        self.n_frames, self.n_mol, self.block_frames = int(n_frames), int(n_mol), int(block_frames)
        self.n_blocks = -(-self.n_frames // self.block_frames)
        Path(directory).mkdir(parents=True, exist_ok=True)
        self._file = tempfile.TemporaryFile(dir=str(directory), prefix="com_series_", suffix=".f32")
        self.fd = self._file.fileno()
        self.itemsize = np.dtype(COM_DTYPE).itemsize
        self.block_bytes = self.n_mol * self.block_frames * 3 * self.itemsize
        os.ftruncate(self.fd, self.n_blocks * self.block_bytes)  # sparse until written

    @property
    def nbytes(self) -> int:
        """Bytes of the file (blocks padded to whole blocks)."""
        return self.n_blocks * self.block_bytes

    def write_block(self, k: int, block_fmc: np.ndarray) -> None:
        """Store block ``k`` from a ``(BLOCK_FRAMES, M, 3)`` array of displacements (cast to float32)."""
        rec = np.ascontiguousarray(np.asarray(block_fmc, dtype=COM_DTYPE).transpose(1, 0, 2))
        view = memoryview(rec).cast("B")
        done, offset = 0, k * self.block_bytes
        while done < view.nbytes:
            done += os.pwrite(self.fd, view[done:], offset + done)

    def read(self, k: int, m0: int, m1: int) -> np.ndarray:
        """Molecules ``m0..m1-1`` of block ``k``: ``(m1 - m0, BLOCK_FRAMES, 3)`` float32."""
        row = self.block_frames * 3 * self.itemsize
        n = (m1 - m0) * row
        buf = bytearray(n)
        view, done, offset = memoryview(buf), 0, k * self.block_bytes + m0 * row
        while done < n:
            got = os.preadv(self.fd, [view[done:]], offset + done)
            if got <= 0:
                raise OSError(f"short read of the COM series file at block {k}")
            done += got
        return np.frombuffer(buf, dtype=COM_DTYPE).reshape(m1 - m0, self.block_frames, 3)

    def close(self) -> None:
        """Close (and so delete) the scratch file."""
        self._file.close()


class BlockWriter:
    """What one pass range writes: its unwrapped float64 COMs, buffered one time block at a time, stored as
    float32 displacements from the range's first frame (:meth:`ComSeriesFile.write_block`)."""

    def __init__(self, store: ComSeriesFile, first_frame: int):
        if first_frame % store.block_frames:
            raise ValueError("a pass range must start on a time-block boundary")
        self.store, self.ref = store, None
        self.buf = np.zeros((store.block_frames, store.n_mol, 3), dtype=COM_DTYPE)
        self.block = first_frame // store.block_frames
        self.filled = 0

    def write(self, f0: int, com_u: np.ndarray) -> None:
        """Frames ``f0..f0+k-1`` (consecutive with the previous call) of unwrapped COMs (k, M, 3) float64."""
        if self.ref is None:
            self.ref = com_u[0].copy()
        B = self.store.block_frames
        i = 0
        while i < com_u.shape[0]:
            row = (f0 + i) - self.block * B
            n = min(B - row, com_u.shape[0] - i)
            np.subtract(com_u[i:i + n], self.ref, out=self.buf[row:row + n], casting="same_kind")
            self.filled = row + n
            i += n
            if self.filled == B:
                self.flush()

    def flush(self) -> None:
        """Write the buffered (possibly partial) block."""
        if self.filled:
            self.store.write_block(self.block, self.buf)
            self.buf.fill(0)
            self.block += 1
            self.filled = 0


class ComSeries:
    """Unwrapped COMs ``(F, M, 3)`` [nm] read from a :class:`ComSeriesFile`, float64 on reading.

    Indexing ``series[frames, molecules, ...]`` (an int or a slice of frames; an int, a slice or an index
    array of molecules) reads only the blocks and molecules asked for; ``np.asarray(series)`` reads all
    (small systems and tests only). :meth:`species` and :meth:`take_frames` give views without reading.

    Parameters
    ----------
    store : ComSeriesFile
    range_starts : ndarray (R,)
        First frame of each pass range (ascending, starting at 0).
    base_nm : ndarray (R, M, 3)
        float64 reference added to the stored displacements of each range.
    molecule_sums_nm : dict[str, ndarray (F, 3)]
        float64 sums of the unwrapped COMs over each species' molecules, per frame (from the pass).
    mol_species : ndarray (M,) of str
    non_finite : int
        Non-finite COM coordinates met by the pass.
    """

    ndim = 3
    dtype = np.dtype(np.float64)

    def __init__(self, store: ComSeriesFile, range_starts: np.ndarray, base_nm: np.ndarray,
                 molecule_sums_nm: dict[str, np.ndarray], mol_species: np.ndarray, non_finite: int = 0,
                 frames: np.ndarray | None = None, molecules: np.ndarray | None = None,
                 species_name: str | None = None):
        self.store, self.range_starts, self.base_nm = store, np.asarray(range_starts), base_nm
        self.molecule_sums_nm, self.mol_species, self.non_finite = molecule_sums_nm, mol_species, int(non_finite)
        self._frames = np.arange(store.n_frames) if frames is None else np.asarray(frames, dtype=np.int64)
        self._mols = np.arange(store.n_mol) if molecules is None else np.asarray(molecules, dtype=np.int64)
        self.species_name = species_name

    # --- array protocol -------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int, int]:
        return (int(self._frames.size), int(self._mols.size), 3)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def __len__(self) -> int:
        return int(self._frames.size)

    @property
    def stored_bytes_per_frame(self) -> int:
        """Bytes of the stored series per frame of the whole trajectory (M × 3 × 4)."""
        return self.store.n_mol * 3 * self.store.itemsize

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._read(self._frames, self._mols)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> np.ndarray:
        if not isinstance(key, tuple):
            key = (key,)
        key = tuple(k for k in key if k is not Ellipsis)
        fkey = key[0] if key else slice(None)
        mkey = key[1] if len(key) > 1 else slice(None)
        rest = key[2:]
        frames = self._frames[fkey]
        mols = self._mols[mkey]
        out = self._read(np.atleast_1d(frames), np.atleast_1d(mols))
        if np.ndim(mols) == 0:
            out = out[:, 0]
        if np.ndim(frames) == 0:
            out = out[0]
        return out[(Ellipsis, *rest)] if rest else out

    # --- views ----------------------------------------------------------------------------------------
    def species(self, name: str) -> ComSeries:
        """The molecules of one species (a view; reads nothing)."""
        idx = np.flatnonzero(self.mol_species[self._mols] == name)
        return ComSeries(self.store, self.range_starts, self.base_nm, self.molecule_sums_nm, self.mol_species,
                         self.non_finite, self._frames, self._mols[idx], species_name=name)

    def take_frames(self, idx: Any) -> ComSeries:
        """The frames ``idx`` (a slice or index array; a view; reads nothing)."""
        return ComSeries(self.store, self.range_starts, self.base_nm, self.molecule_sums_nm, self.mol_species,
                         self.non_finite, self._frames[idx], self._mols, species_name=self.species_name)

    def count_non_finite(self) -> int:
        """Non-finite coordinates met by the pass (in the whole trajectory)."""
        return self.non_finite

    def molecule_sum_nm(self) -> np.ndarray:
        """Σ over this view's molecules of the unwrapped COMs per frame, (F, 3) float64 [nm]: the pass's
        float64 species sum when the view is one species, else summed here chunk by chunk."""
        name = self.species_name
        if name is not None and name in self.molecule_sums_nm and \
                self._mols.size == int(np.count_nonzero(self.mol_species == name)):
            return self.molecule_sums_nm[name][self._frames]
        out = np.zeros((self._frames.size, 3))
        for a in range(0, self._mols.size, 256):
            out += self._read(self._frames, self._mols[a:a + 256]).sum(axis=1)
        return out

    # --- reading --------------------------------------------------------------------------------------
    def _read(self, frames: np.ndarray, mols: np.ndarray) -> np.ndarray:
        """float64 ``(len(frames), len(mols), 3)`` of stored frames ``frames`` and molecules ``mols``."""
        out = np.empty((frames.size, mols.size, 3))
        if frames.size == 0 or mols.size == 0:
            return out
        m0, m1 = int(mols.min()), int(mols.max()) + 1
        consecutive = mols.size == m1 - m0 and bool(np.all(np.diff(mols) == 1))
        sel = None if consecutive else mols - m0
        B = self.store.block_frames
        blocks = frames // B
        ranges = np.searchsorted(self.range_starts, frames, side="right") - 1
        order_ok = frames.size == 1 or bool(np.all(np.diff(frames) > 0))
        if order_ok:
            cuts = np.flatnonzero(np.diff(blocks)) + 1
            groups = np.split(np.arange(frames.size), cuts)
        else:
            groups = [np.flatnonzero(blocks == k) for k in np.unique(blocks)]
        for rows in groups:
            k = int(blocks[rows[0]])
            rec = self.store.read(k, m0, m1)  # (m, B, 3) float32
            if sel is not None:
                rec = rec[sel]
            out[rows] = rec[:, frames[rows] - k * B].transpose(1, 0, 2)
        for r in np.unique(ranges):
            rows = np.flatnonzero(ranges == r)
            base = self.base_nm[r, m0:m1] if sel is None else self.base_nm[r, mols]
            out[rows] += base
        return out


def as_positions(values: Any, name: str = "positions_nm") -> Any:
    """``values`` unchanged when it is a :class:`ComSeries` (read lazily by the estimators), else a float64
    ndarray (:func:`mdbench.analysis.units.as_float64`)."""
    if isinstance(values, ComSeries):
        return values
    from mdbench.analysis.units import as_float64

    return as_float64(values, name)


def count_non_finite_positions(values: Any) -> int:
    """Non-finite entries of a positions array or :class:`ComSeries` (the pass counted the latter)."""
    if isinstance(values, ComSeries):
        return values.count_non_finite()
    from mdbench.analysis.units import count_non_finite

    return count_non_finite(values)


def molecule_sum(values: Any) -> np.ndarray:
    """Σ over molecules per frame, (F, 3) float64, of an (F, N, 3) array or :class:`ComSeries`."""
    if isinstance(values, ComSeries):
        return values.molecule_sum_nm()
    return np.einsum("fmk->fk", values)
