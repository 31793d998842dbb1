"""Integrity of a GROMACS ``.xtc`` trajectory read from its frame headers: complete frames, and where it was cut.

A killed ``mdrun`` leaves its trajectory cut mid-frame, and agents' run directories hold such files too.
MDAnalysis and mdtraj then fail on the torn last frame (``OSError: XTC read error = compression``), and on
a file that is no trajectory at all MDAnalysis' reader prints an ``Exception ignored … '_xdr'`` message
while it is garbage-collected. Neither library reports *how much* of a trajectory is usable, so this module
walks the frame headers itself (no coordinates are decompressed):

Each xtc frame is XDR (big-endian): ``magic = 1995``, ``natoms``, ``step``, ``time`` [ps], the box (9
floats), ``natoms`` again, then for more than 9 atoms the precision, the integer bounds (6 ints), the
small-index and the byte count ``n`` of the compressed coordinates, which follow padded to 4 bytes — a
frame is :math:`92 + 4\\lceil n/4 \\rceil` bytes (``xdrfile``'s ``xtc_coord`` layout; GROMACS 2022 writes
it). A frame is *complete* when its header is valid and all its bytes are in the file.

:func:`scan_xtc` returns an :class:`XtcIntegrity`; :func:`complete_frames` gives a path whose frames are all
complete (the file itself, or a temporary copy of its complete frames) for readers that cannot stop early.
"""

from __future__ import annotations

import math
import shutil
import struct
import tempfile
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mdbench.errors import InputError
from mdbench import untrusted

#: Magic number that opens every frame of the classic XTC format.
XTC_MAGIC = 1995
#: Magic of GROMACS ≥ 2023's large-frame variant (64-bit byte count); recognised, not walked.
XTC_LARGE_MAGIC = 2023
#: Most atoms a run input (``.tpr``) or a trajectory frame may declare before anything is built from it: the
#: study's electrolyte boxes hold a few thousand atoms, the paper-size ones tens of thousands; parsers allocate
#: per declared atom (a ``.tpr`` patched to claim 2,000,000 molecules drove one to 8.5 GB), so a larger claim is
#: refused first.
MAX_ATOMS = 1_000_000
#: Bytes from a frame's start to the end of its compressed-coordinate byte count (natoms > 9).
_HEADER_BYTES = 92
#: The first 16 bytes: magic, natoms, step (int32) and time (float32).
_LEAD = struct.Struct(">iiif")
#: The box (9 float32, nm) after the lead, then natoms again and, for more than 9 atoms, the precision.
_BOX_PRECISION = struct.Struct(">9fif")


class TrajectoryError(InputError):
    """A trajectory file is not a readable xtc (no complete frame); the message names the file and why."""


@dataclass(frozen=True)
class XtcIntegrity:
    """What the frame headers of one xtc file show.

    Attributes
    ----------
    path : str
        The file scanned.
    file_bytes : int
        Size of the file [bytes].
    n_frames : int or None
        Complete frames from the start of the file (None when ``checked`` is False).
    complete_bytes : int
        Bytes those frames occupy; equal to ``file_bytes`` for a whole file.
    n_atoms : int
        Atoms per frame (from the first frame).
    first_time_ps, last_time_ps : float or None
        Time of the first and of the last complete frame [ps].
    last_step : int or None
        MD step of the last complete frame.
    problem : str or None
        ``None`` for a whole file; otherwise what follows the last complete frame (a frame cut short, or
        bytes that are not a frame header).
    checked : bool
        False when the format variant is recognised but not walked (``magic`` 2023); then nothing is claimed.
    first_box_nm : tuple of 9 float or None
        Box vectors of the first frame [nm], row-major (GROMACS ``box[3][3]``).
    bad_precision_frames : int
        Complete frames (with more than 9 atoms) whose coordinate precision is not a finite positive number:
        their decompressed coordinates (integers / precision) are not finite. With a finite positive precision
        every coordinate of a frame that decompresses is finite.
    non_finite_box_frames : int
        Complete frames whose box holds a non-finite number.
    """

    path: str
    file_bytes: int
    n_frames: int | None
    complete_bytes: int
    n_atoms: int
    first_time_ps: float | None
    last_time_ps: float | None
    last_step: int | None
    problem: str | None = None
    checked: bool = True
    first_box_nm: tuple[float, ...] | None = None
    bad_precision_frames: int = 0
    non_finite_box_frames: int = 0

    @property
    def truncated(self) -> bool:
        """True when bytes follow the last complete frame (the file was cut mid-frame or has garbage)."""
        return self.checked and self.complete_bytes < self.file_bytes

    @property
    def dropped_bytes(self) -> int:
        """Bytes after the last complete frame [bytes]."""
        return self.file_bytes - self.complete_bytes

    def describe(self) -> str:
        """One line a chemist reads: frames kept, time reached, what was cut (without the path)."""
        if not self.checked:
            return f"xtc variant with magic {XTC_LARGE_MAGIC}; frame integrity not checked"
        span = f"{self.n_frames} complete frame(s), t = {self.first_time_ps:g}–{self.last_time_ps:g} ps"
        if not self.truncated:
            return f"whole, {span}"
        return (f"truncated — {span} used; {self.dropped_bytes} byte(s) after the last complete frame ignored "
                f"({self.problem})")

    def summary(self) -> str:
        """``path: describe()``."""
        return f"{self.path}: {self.describe()}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with ``truncated``, ``dropped_bytes`` and the one-line ``summary``."""
        d = asdict(self)
        d["first_box_nm"] = None if self.first_box_nm is None else list(self.first_box_nm)  # JSON's own type
        return {**d, "truncated": self.truncated, "dropped_bytes": self.dropped_bytes, "summary": self.summary()}


def _frame_bytes(head: bytes, natoms: int) -> int | None:
    """Size of the frame whose header starts ``head`` [bytes]; ``None`` if the header is not a valid frame."""
    if natoms <= 9:
        return 56 + 12 * natoms  # lead (16) + box (36) + natoms (4) + uncompressed floats
    if len(head) < _HEADER_BYTES:
        return None
    (n_compressed,) = struct.unpack_from(">i", head, 88)
    if n_compressed < 0:
        return None
    return _HEADER_BYTES + 4 * ((n_compressed + 3) // 4)


def scan_xtc(path: str | Path) -> XtcIntegrity:
    """Walk the frame headers of an xtc file and report its complete frames.

    Parameters
    ----------
    path : path
        A GROMACS ``.xtc`` file.

    Returns
    -------
    XtcIntegrity
        ``truncated`` is True when bytes follow the last complete frame.

    Raises
    ------
    TrajectoryError
        The file is missing, empty, does not begin with an xtc frame header, or holds no complete frame.
    """
    path = Path(path)
    if not path.is_file():
        raise TrajectoryError("trajectory not found", str(path))
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(_HEADER_BYTES)
        if len(head) < _LEAD.size:
            raise TrajectoryError(f"cannot read this as an xtc trajectory: {size} byte(s), shorter than one frame "
                                  "header; give the .xtc mdrun wrote", str(path))
        magic, natoms, step, time_ps = _LEAD.unpack_from(head)
        if magic in (XTC_MAGIC, XTC_LARGE_MAGIC) and natoms > MAX_ATOMS:
            raise TrajectoryError(f"the xtc frame header declares {natoms} atoms (plausible: at most {MAX_ATOMS}); "
                                  "not read", str(path))
        if magic == XTC_LARGE_MAGIC:
            return XtcIntegrity(str(path), size, None, size, natoms, None, None, None, checked=False)
        if magic != XTC_MAGIC or natoms <= 0:
            raise TrajectoryError(f"cannot read this as an xtc trajectory: the file does not begin with an xtc "
                                  f"frame header (magic {magic}, expected {XTC_MAGIC}); give the .xtc mdrun wrote",
                                  str(path))
        offset, n_frames = 0, 0
        first_t = last_t = None
        last_step = None
        problem = None
        first_box: tuple[float, ...] | None = None
        bad_precision = bad_box = 0
        while offset < size:
            fh.seek(offset)
            head = fh.read(_HEADER_BYTES)
            if len(head) < _LEAD.size:
                problem = f"frame {n_frames} header cut after {len(head)} of its {_HEADER_BYTES} bytes"
                break
            magic, n, step, time_ps = _LEAD.unpack_from(head)
            if magic != XTC_MAGIC or n != natoms:
                problem = (f"bytes at offset {offset} are not an xtc frame header (magic {magic}, natoms {n}; "
                           f"expected {XTC_MAGIC}, {natoms})")
                break
            length = _frame_bytes(head, natoms)
            if length is None and len(head) < _HEADER_BYTES:
                problem = f"frame {n_frames} header cut after {len(head)} of its {_HEADER_BYTES} bytes"
                break
            if length is None:
                problem = f"frame {n_frames} header at offset {offset} has a negative byte count"
                break
            if offset + length > size:
                problem = (f"frame {n_frames} (step {step}, t = {time_ps:g} ps) cut after {size - offset} of its "
                           f"{length} bytes")
                break
            offset += length
            n_frames += 1
            first_t = float(time_ps) if first_t is None else first_t
            last_t, last_step = float(time_ps), int(step)
            if len(head) >= _LEAD.size + _BOX_PRECISION.size:
                *box, _n, precision = _BOX_PRECISION.unpack_from(head, _LEAD.size)
                first_box = tuple(box) if first_box is None else first_box
                bad_box += not all(math.isfinite(b) for b in box)
                bad_precision += natoms > 9 and not (math.isfinite(precision) and precision > 0)
    if n_frames == 0:
        raise TrajectoryError(f"xtc trajectory without a complete frame ({problem}); the run stopped before its "
                              "first frame was written", str(path))
    return XtcIntegrity(str(path), size, n_frames, offset, natoms, first_t, last_t, last_step, problem,
                        first_box_nm=first_box, bad_precision_frames=bad_precision, non_finite_box_frames=bad_box)


class CompleteFrames:
    """A path to an xtc whose frames are all complete, and the :class:`XtcIntegrity` of the original.

    For a whole file ``path`` is the file itself. For a truncated one it is a copy of the complete frames
    in a private temporary folder, removed by :meth:`close`, on leaving a ``with`` block, or when this
    object is garbage-collected — so a caller that keeps the object for as long as it reads ``path``
    needs no clean-up of its own.
    """

    def __init__(self, source: str | Path):
        self.integrity = scan_xtc(source)
        self.path = Path(source)
        self._cleanup = None
        if self.integrity.truncated:
            tmp = tempfile.mkdtemp(prefix="mdbench-xtc-")
            self._cleanup = weakref.finalize(self, shutil.rmtree, tmp, True)
            self.path = Path(tmp) / Path(source).name
            _copy_prefix(Path(source), self.path, self.integrity.complete_bytes)

    def close(self) -> None:
        """Remove the temporary copy (no-op for a whole file)."""
        if self._cleanup is not None:
            self._cleanup()

    def __enter__(self) -> CompleteFrames:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def complete_frames(xtc: str | Path) -> CompleteFrames:
    """:class:`CompleteFrames` of ``xtc``: read ``.path``, report ``.integrity`` (raises :class:`TrajectoryError`)."""
    return CompleteFrames(xtc)


def _copy_prefix(src: Path, dst: Path, n_bytes: int, chunk_bytes: int = 1 << 24) -> None:
    """Copy the first ``n_bytes`` of ``src`` to ``dst``."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        left = n_bytes
        while left > 0:
            block = fin.read(min(chunk_bytes, left))
            if not block:
                break
            fout.write(block)
            left -= len(block)


# ------------------------------------------------------------------------------------ tpr plausibility

#: Largest ``.tpr`` read for the check [bytes] (logical size): the topology of :data:`MAX_ATOMS` atoms fits.
MAX_TPR_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class TprCounts:
    """What a ``.tpr``'s header and molecule blocks declare (read without expanding any molecule).

    Attributes
    ----------
    natoms : int
        Atoms the header declares.
    molblocks : list of (str, int, int)
        (molecule type name, molecules, atoms per molecule) of each block, in topology order.
    """

    natoms: int
    molblocks: list[tuple[str, int, int]]

    @property
    def block_atoms(self) -> int:
        """Atoms the molecule blocks add up to (Σ molecules × atoms per molecule)."""
        return sum(n * a for _, n, a in self.molblocks)

    def molecules(self) -> dict[str, int]:
        """Molecules per molecule type [count]."""
        out: dict[str, int] = {}
        for name, n, _ in self.molblocks:
            out[name] = out.get(name, 0) + n
        return out


def tpr_counts(path: str | Path, *, max_bytes: int = MAX_TPR_BYTES) -> TprCounts:
    """The atom and molecule counts a GROMACS run input declares, read with MDAnalysis' TPR primitives up to
    the molecule blocks — no molecule is expanded, so nothing per atom of the claim is allocated.

    Raises
    ------
    TrajectoryError
        Not a regular file, larger than ``max_bytes`` (logical size), or not a readable ``.tpr``.
    """
    from MDAnalysis.topology.tpr import setting as S  # noqa: PLC0415 — MDAnalysis is slow to import
    from MDAnalysis.topology.tpr import utils as U  # noqa: PLC0415 — MDAnalysis is slow to import


    try:
        raw = untrusted.read_bytes(path, max_bytes=max_bytes)
    except untrusted.Refused as exc:
        raise TrajectoryError(f"{exc.detail or exc.reason} (a run input is read up to {max_bytes} bytes)",
                              str(path)) from None
    try:
        data = U.TPXUnpacker(raw)
        th = U.read_tpxheader(data)
        if th.fver >= S.tpxv_AddSizeField and th.fgen >= 27:
            data = U.TPXUnpacker2020.from_unpacker(data)
        if not th.bTop:
            raise ValueError("no topology in the file")
        if th.bBox:
            U.extract_box_info(data, th.fver)
        if th.ngtc > 0:
            if th.fver < 69:
                U.ndo_real(data, th.ngtc)
            U.ndo_real(data, th.ngtc)
        symtab = U.do_symtab(data)
        U.do_symstr(data, symtab)
        U.do_ffparams(data, th.fver)
        moltypes = [U.do_moltype(data, symtab, th.fver) for _ in range(data.unpack_int())]
        nblocks = data.unpack_int()
        if not 0 <= nblocks <= len(raw):
            raise ValueError(f"{nblocks} molecule blocks")
        blocks = []
        for _ in range(nblocks):
            mb = U.do_molblock(data)
            if not 0 <= mb.molb_type < len(moltypes):
                raise ValueError(f"molecule block of unknown type {mb.molb_type}")
            mt = moltypes[mb.molb_type]
            name = mt.name.decode("utf-8", "replace") if isinstance(mt.name, bytes) else str(mt.name)
            if mb.molb_natoms_mol != len(mt.atomkinds):
                raise ValueError(f"molecule block of {name!r}: {mb.molb_natoms_mol} atoms per molecule, its type "
                                 f"has {len(mt.atomkinds)}")
            blocks.append((name[:80], int(mb.molb_nmol), len(mt.atomkinds)))
    except TrajectoryError:
        raise
    except Exception as exc:  # noqa: BLE001 — whatever a garbage file makes the unpacker raise
        raise TrajectoryError(f"not a readable .tpr ({type(exc).__name__}: {str(exc)[:200]})",
                              str(path)) from None
    return TprCounts(int(th.natoms), blocks)


def check_tpr(path: str | Path, *, max_atoms: int = MAX_ATOMS,
              expected_molecules: dict[str, int] | None = None) -> TprCounts:
    """Refuse a run input whose declared size is implausible, before any parser allocates for it.

    Plausible: the header's atoms in [1, ``max_atoms``], every block's molecule count non-negative, the blocks
    adding up to the header's atoms, and — where ``expected_molecules`` (molecule type → count, from the
    evaluator's bundle) is given — no type holding more molecules than expected.

    Raises
    ------
    TrajectoryError
        Naming the file and the implausible count.
    """
    counts = tpr_counts(path)
    if not 1 <= counts.natoms <= max_atoms:
        raise TrajectoryError(f"declares {counts.natoms} atoms (plausible: 1 to {max_atoms}); not parsed",
                              str(path))
    if any(n < 0 for _, n, _ in counts.molblocks) or counts.block_atoms != counts.natoms:
        raise TrajectoryError(f"its molecule blocks declare {counts.block_atoms} atoms "
                              f"({', '.join(f'{n} × {name}' for name, n, _ in counts.molblocks[:6])}) but its "
                              f"header {counts.natoms}; not parsed", str(path))
    for name, n in counts.molecules().items():
        want = (expected_molecules or {}).get(name)
        if want is not None and n > want:
            raise TrajectoryError(f"declares {n} molecules of {name!r}, the bundle's composition {want}; "
                                  "not parsed", str(path))
    return counts
