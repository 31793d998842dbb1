r"""A numpy reader of GROMACS energy files (``.edr``, file version 5), exact against pyedr.

Why our own reader beside pyedr: pyedr parses every value in pure Python (``xdrlib`` per float, ≈ 0.05–0.1 ms
per frame), which made it ≈ 1 s of the SAEO audit's ≈ 2.9 s on the tiny demo and many minutes per file at paper
size (100 ns with a frequent ``nstenergy`` for Green–Kubo). Here only frame *headers* are walked with
:mod:`struct`, and a run of frames that share one layout is checked and read as one strided numpy view of the
file: ``benchmarks/energy_read.py`` measured pyedr / this reader ≈ 88× on the demo's six equilibration and
production files (0.62 s → 0.007 s), ≈ 75× on a 200,000-frame file (6.5 s → 0.09 s; ``docs/performance.md``).

pyedr remains the reference and the fallback: :func:`read_edr` handles only what it can reproduce bit for bit
(the same times, values, names, units, the same frames), and raises :class:`Unsupported` for everything else —
old file versions, char/string subblocks, a frame whose term count differs from the file's, anything pyedr
would reject — so the caller reads that file with pyedr and gets exactly today's result or error. The one
exception is :class:`Corrupt`: a frame count so large that pyedr would allocate without bound before failing.

Format (GROMACS ``src/gromacs/fileio/enxio.cpp``, as pyedr reads it; XDR, big-endian, 4-byte units):

* file header: magic ``-55555``, file version, ``nre``, then ``nre`` × (name, unit) XDR strings;
* each frame: a real ``-7777777.0`` (float in single, double in double precision: a frame is single when the
  int after its first 4 bytes is the frame magic), the frame magic ``-7777777``, version, time (double), step
  (int64), ``nsum`` (int), ``nsteps`` (int64), ``dt`` (double), ``nre``, a reserved int, ``nblock``; per block
  its id, ``nsub`` and ``nsub`` × (type, count); ``e_size`` and two reserved ints; then ``nre`` reals (× 3:
  value, average, sum, when ``nsum > 0``), then the subblock data (int, float, double or int64 items).

pyedr stops without an error where the file ends inside a frame (a torn last frame after a kill): it returns
the complete frames before it. This reader does the same, reading the torn frame field by field in pyedr's
order so that a check pyedr would make before running out of bytes is made here too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: First int of an energy file (GROMACS >= 4.5) and of every frame header.
FILE_MAGIC: int = -55555
FRAME_MAGIC: int = -7777777
#: The file/frame version GROMACS >= 4.6 writes (``enx_version``), the only one read here.
FILE_VERSION: int = 5
#: Bytes per item of a subblock by XDR data type (int, float, double, int64); char (4) and string (5) are left
#: to pyedr.
SUBBLOCK_ITEM_BYTES: dict[int, int] = {0: 4, 1: 4, 2: 8, 3: 8}


class Unsupported(Exception):
    """A file or layout this reader does not reproduce exactly: read the file with pyedr instead."""


class Corrupt(ValueError):
    """A frame header whose count (terms, blocks, subblocks) cannot fit in the rest of the file and is so large
    that pyedr, which allocates per count before reading, would exhaust memory: an error, never a fallback."""


#: Counts below this stay pyedr's to handle (it allocates at most ~100 MB for them, then stops at the file's end).
HUGE_COUNT: int = 1 << 20


class _Torn(Exception):
    """The file ends inside a frame (pyedr stops there and drops that frame)."""


@dataclass(frozen=True)
class EnergyTable:
    """The energy frames of a file, as pyedr's ``read_edr`` returns them.

    Attributes
    ----------
    names, units : list of str
        Energy terms in file order (without ``Time``) and their units.
    time_ps : numpy.ndarray, shape (F,)
        Frame times [ps] (float64).
    columns : numpy.ndarray, shape (len(names), F)
        Instantaneous values, one row per term (float64; single-precision values converted exactly).
    torn_bytes : int
        Bytes after the last complete frame (a frame cut by a kill or a full disk); 0 for a complete file.
    """

    names: list[str]
    units: list[str]
    time_ps: np.ndarray
    columns: np.ndarray
    torn_bytes: int = 0


@dataclass(frozen=True)
class _Layout:
    """What fixes a frame's byte layout: frames with equal headers (but for time, step, nsum, nsteps, dt) and
    the same ``nsum > 0`` share it."""

    real_bytes: int  # 4 single, 8 double precision
    header_bytes: int  # up to the first energy value
    n_terms: int  # this frame's nre (0: a frame of blocks only, no energies)
    with_sums: bool  # nsum > 0: (value, average, sum) per term
    frame_bytes: int

    @property
    def time_offset(self) -> int:
        return self.real_bytes + 8

    @property
    def fixed_spans(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Header byte ranges every frame of a run repeats: up to the time; from ``nre`` to the energies."""
        return (0, self.real_bytes + 8), (self.real_bytes + 44, self.header_bytes)


def read_edr(path: str | Path) -> EnergyTable:
    """Read an energy file; :class:`Unsupported` where pyedr must read it (see the module docstring)."""
    buf = Path(path).read_bytes()
    names, units, offset = _file_header(buf)
    all_runs = _frame_runs(buf, offset, len(names))
    end = (all_runs[-1][0] + all_runs[-1][2] * all_runs[-1][1].frame_bytes) if all_runs else offset
    runs = [run for run in all_runs if run[1].n_terms]  # pyedr: frames with energies
    n_frames = sum(count for _, _, count in runs)
    time_ps, columns = np.empty(n_frames), np.empty((len(names), n_frames))
    row = 0
    for start, layout, count in runs:  # one strided view of the file per run, converted into place
        size, rs = layout.frame_bytes, layout.real_bytes
        time_ps[row:row + count] = np.ndarray((count,), ">f8", buffer=buf, offset=start + layout.time_offset,
                                              strides=(size,))
        columns[:, row:row + count] = np.ndarray((layout.n_terms, count), f">f{rs}", buffer=buf,
                                                 offset=start + layout.header_bytes,
                                                 strides=(rs * (3 if layout.with_sums else 1), size))
        row += count
    return EnergyTable(names, units, time_ps, columns, torn_bytes=len(buf) - end)


def _file_header(buf: bytes) -> tuple[list[str], list[str], int]:
    """Term names, units and the offset of the first frame."""
    if len(buf) < 12:
        raise Unsupported("shorter than a file header")
    magic, version, n_terms = struct.unpack_from(">iii", buf, 0)
    if magic != FILE_MAGIC or version != FILE_VERSION or n_terms <= 0:
        raise Unsupported(f"file magic {magic}, version {version}, {n_terms} terms")
    strings, offset = [], 12
    for _ in range(2 * n_terms):
        if offset + 4 > len(buf):
            raise Unsupported("file ends inside the term names")
        (n,) = struct.unpack_from(">I", buf, offset)
        end = offset + 4 + (n + 3) // 4 * 4
        if end > len(buf):
            raise Unsupported("file ends inside the term names")
        try:
            strings.append(buf[offset + 4:offset + 4 + n].decode("ascii"))
        except UnicodeDecodeError as exc:
            raise Unsupported("a term name is not ASCII") from exc
        offset = end
    return strings[0::2], strings[1::2], offset


def _frame_runs(buf: bytes, offset: int, n_names: int) -> list[tuple[int, _Layout, int]]:
    """Consecutive frames as (offset of the first, layout, count); a torn last frame is left out."""
    runs: list[tuple[int, _Layout, int]] = []
    window = 16  # frames checked per vectorised look-ahead: grows while a layout repeats
    while offset < len(buf):
        try:
            layout = _frame_layout(buf, offset, n_names)
        except _Torn:
            break
        count = _same_layout_count(buf, offset, layout, window)
        runs.append((offset, layout, count))
        offset += count * layout.frame_bytes
        window = min(window * 8, 1 << 16) if count == window else 16
    return runs


def _frame_layout(buf: bytes, o: int, n_names: int) -> _Layout:
    """Walk one frame header in pyedr's read order; :class:`_Torn` where the bytes run out first."""
    n = len(buf)

    def need(end: int) -> None:
        if end > n:
            raise _Torn

    def bounded(count: int, what: str) -> None:
        if count >= HUGE_COUNT and count * 4 > n - p:
            raise Corrupt(f"frame at byte {o}: {count} {what} cannot fit in the {n - p} bytes left")

    need(o + 8)  # pyedr peeks at the int after the first 4 bytes to tell single from double precision
    single = struct.unpack_from(">i", buf, o + 4)[0] == FRAME_MAGIC
    rs = 4 if single else 8
    (first_real,) = struct.unpack_from(">f" if single else ">d", buf, o)
    if first_real > -1e-10:  # pyedr: the header of a version-1 file
        raise Unsupported(f"frame at byte {o}: old-format header")
    p = o + rs
    need(p + 4)
    if struct.unpack_from(">i", buf, p)[0] != FRAME_MAGIC:
        raise Unsupported(f"frame at byte {o}: bad frame magic")
    need(p + 8)
    if struct.unpack_from(">i", buf, p + 4)[0] != FILE_VERSION:
        raise Unsupported(f"frame at byte {o}: frame version is not {FILE_VERSION}")
    p += 8
    need(p + 48)
    _t, step, nsum, _nsteps, _dt, n_terms, _reserved, n_blocks = struct.unpack_from(">dqiqdiii", buf, p)
    p += 48
    bounded(n_blocks, "blocks")
    if n_blocks < 0:
        raise Unsupported(f"frame at byte {o}: negative block count")
    subblocks = []
    for _ in range(n_blocks):
        need(p + 8)
        _block_id, n_sub = struct.unpack_from(">ii", buf, p)
        p += 8
        bounded(n_sub, "subblocks")
        if n_sub < 0:
            raise Unsupported(f"frame at byte {o}: negative subblock count")
        for _ in range(n_sub):
            need(p + 8)
            kind, count = struct.unpack_from(">ii", buf, p)
            p += 8
            if kind not in SUBBLOCK_ITEM_BYTES or count < 0:
                raise Unsupported(f"frame at byte {o}: subblock of type {kind} × {count}")
            subblocks.append(SUBBLOCK_ITEM_BYTES[kind] * count)
    need(p + 12)  # e_size and two reserved ints
    p += 12
    header_bytes = p - o
    if step < 0 or not (n_terms > 0 or subblocks):
        raise Unsupported(f"frame at byte {o}: negative step or empty frame")  # pyedr: 'Something went wrong'
    bounded(n_terms, "energy terms")
    if n_terms not in (0, n_names):
        raise Unsupported(f"frame at byte {o}: {n_terms} terms, the file names {n_names}")
    with_sums = nsum > 0
    p += n_terms * rs * (3 if with_sums else 1)
    need(p)
    for size in subblocks:
        p += size
        need(p)
    return _Layout(rs, header_bytes, n_terms, with_sums, p - o)


def _same_layout_count(buf: bytes, o: int, layout: _Layout, window: int) -> int:
    """How many consecutive frames from ``o`` (at most ``window``, at least this one) share its layout.

    A frame shares it when its fixed header bytes equal this frame's (so every check pyedr makes on them
    passes alike), its step is non-negative and its ``nsum > 0`` agrees; it then also has this frame's size.
    """
    size = layout.frame_bytes
    k = min(window, (len(buf) - o) // size)
    if k <= 1:
        return 1
    frames = np.frombuffer(buf, np.uint8, count=k * size, offset=o).reshape(k, size)
    same = np.ones(k, dtype=bool)
    for lo, hi in layout.fixed_spans:
        same &= (frames[:, lo:hi] == frames[0, lo:hi]).all(axis=1)
    base = o + layout.real_bytes + 16
    step = np.ndarray((k,), ">i8", buffer=buf, offset=base, strides=(size,))
    nsum = np.ndarray((k,), ">i4", buffer=buf, offset=base + 8, strides=(size,))
    same &= (step >= 0) & ((nsum > 0) == layout.with_sums)
    return k if same.all() else int(np.argmin(same))
