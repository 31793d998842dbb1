"""Unwrapping of molecular centres of mass by the displacement scheme (NPT-safe), and the time axis.

``r_u(t) = r_u(t-1) + [r_w(t) - r_w(t-1)]_MI(h_t)`` with the minimum image in the box ``h_t`` of the
*current* frame (von Bülow, Bullerjahn & Hummer, J. Chem. Phys. 153, 021101 (2020),
doi:10.1063/5.0008316): a particle at rest in a fluctuating box has zero displacement.
"""

from __future__ import annotations

import numpy as np

from mdbench.analysis.reduce.boxes import minimum_image

def unwrap(com_w: np.ndarray, lengths_or_boxes: np.ndarray, ortho: bool, prev_w: np.ndarray | None,
            prev_u: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
    """Displacement unwrapping of a chunk of wrapped COMs (minimum image in each *current* frame's box).

    ``prev_w``/``prev_u`` are the wrapped and unwrapped COMs of the frame before the chunk (None for the
    first chunk, whose first frame is its own reference). ``out`` (same shape as ``com_w``) receives the
    result when given.
    """
    steps = np.empty_like(com_w) if out is None else out
    if prev_w is None:
        steps[0] = com_w[0]
    else:
        np.subtract(com_w[0], prev_w, out=steps[0])
    np.subtract(com_w[1:], com_w[:-1], out=steps[1:])
    lo = 0 if prev_w is not None else 1
    if ortho:
        lengths = np.asarray(lengths_or_boxes[lo:, None, :], dtype=np.float64)
        shift = steps[lo:] * (1.0 / lengths)
        np.rint(shift, out=shift)
        shift *= lengths
        steps[lo:] -= shift
    else:
        for k in range(lo, com_w.shape[0]):
            steps[k] = minimum_image(steps[k], lengths_or_boxes[k])
    if prev_u is not None:
        steps[0] += prev_u
    for k in range(1, steps.shape[0]):  # running sum frame by frame: faster than np.cumsum over axis 0
        steps[k] += steps[k - 1]
    return steps


def regularise_time(time_ps: np.ndarray, rel_tol: float = 1e-3) -> tuple[np.ndarray, bool]:
    """Replace float32-rounded frame times by an exact uniform grid when they are uniform within ``rel_tol``.

    xtc files store times in float32 (0.1 ps steps are not representable), which breaks the exact-spacing
    test of FFT estimators. When every spacing is within ``rel_tol`` × dt of the mean spacing, the times are
    replaced by ``t0 + k·dt`` (float64); otherwise they are returned unchanged.

    Returns
    -------
    (time_ps, regularised) : (ndarray, bool)
    """
    t = np.asarray(time_ps, dtype=np.float64)
    if t.size < 3:
        return t, False
    dt = (t[-1] - t[0]) / (t.size - 1)
    if dt <= 0 or np.max(np.abs(np.diff(t) - dt)) > rel_tol * dt:
        return t, False
    # round dt to 1e-9 ps of its own precision: 0.0999999 → 0.1 exactly representable in float64
    dt = float(np.round(dt, 9))
    return t[0] + dt * np.arange(t.size), True
