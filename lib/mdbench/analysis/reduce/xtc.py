"""Frames read straight from an xtc file into the pass's buffers (MDAnalysis' own decoder, nm).

The only module that touches private corners of MDAnalysis' XTC reader (``_xdr``, ``_sub``, ``_kwargs``,
``_ts_kwargs``); :func:`direct_xtc` checks them against the public reader on one frame and falls back to
the reader (None) on any surprise. ``tests/analysis_structure/test_structure_reduce.py`` checks that the
fast path is the one taken with the installed MDAnalysis.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

import numpy as np

from mdbench.analysis.reduce.boxes import A_TO_NM

log = logging.getLogger(__name__)


def direct_xtc(traj: Any, first: int) -> tuple[str, np.ndarray] | None:
    """(file name, frame offsets) when the frames of ``traj`` can be read straight into the pass's buffers.

    MDAnalysis' own xtc decoder (``XTCFile.read_direct_x``, nm) then fills the chunk buffer directly,
    without the reader's Timestep copy and Å conversion (docs/performance.md). Only for a plain ``XTCReader``: an atom subset, a transformation, unit conversion
    switched off or a dt / time-offset override keep the reader's path, and the frame ``first`` read both
    ways must give the same time and positions. None otherwise.
    """
    try:
        from MDAnalysis.coordinates.XTC import XTCReader
        from MDAnalysis.lib.formats.libmdaxdr import XTCFile
    except ImportError:
        return None
    if type(traj) is not XTCReader or not hasattr(XTCFile, "read_direct_x"):
        return None
    overrides = {**(getattr(traj, "_kwargs", None) or {}), **(getattr(traj, "_ts_kwargs", None) or {})}
    if (getattr(traj, "_sub", None) is not None or traj.transformations or not traj.convert_units
            or overrides.get("dt") is not None or overrides.get("time_offset")):
        return None
    try:
        fname, offsets = str(traj.filename), np.asarray(traj._xdr.offsets)
        x = np.empty((traj.n_atoms, 3), dtype=np.float32)
        with XTCFile(fname) as xdr:
            xdr.set_offsets(offsets)
            xdr.seek(first)
            frame = xdr.read_direct_x(x)
        ts = traj[first]
        same = (float(frame.time) == float(ts.time)
                and np.allclose(x / A_TO_NM, ts.positions, rtol=0, atol=1e-4)
                and np.allclose(np.asarray(ts.dimensions[:3]) * A_TO_NM,
                                np.linalg.norm(np.asarray(frame.box, dtype=np.float64), axis=1), rtol=1e-6))
    except Exception as exc:  # any surprise in a private corner of the reader: keep the reader's path
        log.info("direct xtc reading not used (the reader's slower path instead): %s", exc)
        return None
    return (fname, offsets) if same else None


def read_direct(xtc: tuple[str, np.ndarray], sub: range, pos_buf: np.ndarray, vec_buf: np.ndarray,
                chunk: int) -> Iterator[float]:
    """Yield the time [ps] of each frame of ``sub`` once its positions [nm] are in row ``i % chunk`` of
    ``pos_buf`` and its box matrix [nm] in the same row of ``vec_buf`` (``xtc`` from :func:`direct_xtc`)."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    fname, offsets = xtc
    xdr = XTCFile(fname)
    try:
        xdr.set_offsets(offsets)
        for i, f in enumerate(sub):
            if i == 0 or sub.step != 1:
                xdr.seek(f)
            frame = xdr.read_direct_x(pos_buf[i % chunk])
            vec_buf[i % chunk] = frame.box
            yield float(frame.time)
    finally:
        xdr.close()
