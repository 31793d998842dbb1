"""One streaming pass over a trajectory: per-molecule unwrapped centres of mass and neighbour data.

Every later estimator (self-diffusion, Onsager transport, RDF, coordination, association) works from the
:class:`ReducedTrajectory` this module produces, so the atoms × frames trajectory is read exactly once and
memory grows with molecules × frames — or, with ``series_dir`` (what the analysis pipeline passes), not
even that: the unwrapped COMs go to a float32 scratch file read back per molecule chunk (``series``).

Per frame the pass

1. computes float64 centres of mass of whole molecules: for molecules with consecutive atoms in an
   orthorhombic box (every GROMACS topology here), one sparse mass-weight product of the wrapped positions
   plus, for each consecutive-atom vector that crosses the boundary (mdrun puts every atom in the box on
   its own), the box shift times the mass fraction of the molecule's later atoms; otherwise each atom's
   minimum-image vector to its molecule's first atom makes the molecule whole (valid for molecules shorter
   than half the box, which holds for every species of this project);
2. unwraps the centres of mass with the *displacement* scheme that is correct under NPT box changes
   (von Bülow, Bullerjahn & Hummer, J. Chem. Phys. 153, 021101 (2020), doi:10.1063/5.0008316):
   ``r_u(t) = r_u(t-1) + [r_w(t) - r_w(t-1)]_MI(h_t)`` where ``[·]_MI(h_t)`` is the minimum image in the
   box ``h_t`` of the current frame (fractional coordinates, so triclinic boxes work). A particle at rest
   in a fluctuating box has zero displacement, and no box-scaling jump is ever added to a displacement;
3. accumulates pair histograms between centre atoms (cations, e.g. Li) and every registered site channel
   (e.g. O(FSI), N(FSI), O(DMC carbonyl), O(TTE ether)) for g(r), and keeps, for every centre molecule
   and partner molecule closer than ``r_store_nm``, the minimum centre–site distance per channel; this is
   the neighbour table from which coordination numbers at any cutoff ≤ ``r_store_nm`` and the contact
   graphs of :mod:`mdbench.analysis.association` are computed without a second pass.

Frames are read in chunks and each chunk is reduced with whole-array operations. A plain MDAnalysis XTC
reader's frames are decoded by MDAnalysis' own ``XTCFile.read_direct_x`` straight into the chunk buffer
(nm, no Timestep copy or Å conversion); any other reader is iterated as usual. Step 3 can run on every
k-th frame only (``structure_max_frames``; the ``structure_view`` of the result holds those frames),
steps 1–2 always run on every frame.

On a multi-core machine the pass is split into contiguous ranges of frames, one per forked worker process
(``workers``, :mod:`mdbench.analysis.concurrency`): each opens its own reader, writes its frames' rows into
arrays in shared memory and unwraps from its range's first frame; the parent then shifts every later range
by the displacement step between the last frame of the previous range and its first frame (step 2 across
the seam), so the result equals the one-process pass to float rounding.

One job per module:

=============  =====================================================================================
``model``      :class:`Channel` and :class:`ReducedTrajectory` (what the estimators read)
``boxes``      box vectors ↔ MDAnalysis dimensions, the minimum image
``sites``      site channels from elements and bonds of the topology
``pairs``      centre–site pairs within a cutoff (dense numpy or a periodic k-d tree)
``molecules``  centres of mass of whole molecules
``unwrap``     NPT-safe displacement unwrapping, the time axis
``xtc``        frames read straight from an xtc file (the only use of MDAnalysis internals)
``frames``     the per-frame reduction of a range of frames, chunk by chunk
``series``     the file-backed float32 COM series of long trajectories (``series_dir``), read lazily
``onepass``    :func:`reduce_universe` / :func:`reduce_files`: topology → channels → frames → result
=============  =====================================================================================

Why the code is written as it is — the measurements behind each choice — is in docs/performance.md.

Units: nm, ps, amu, e (GROMACS units); MDAnalysis's Å (reader path) are converted on the way.
"""

from __future__ import annotations

from mdbench.analysis.reduce.boxes import A_TO_NM, box_dimensions, box_matrix_nm, minimum_image
from mdbench.analysis.reduce.model import Channel, ReducedTrajectory
from mdbench.analysis.reduce.onepass import (MAX_DEFAULT_WORKERS, PARALLEL_MIN_ATOM_FRAMES, reduce_files,
                                             reduce_universe)
from mdbench.analysis.reduce.pairs import divmod_by_scalar
from mdbench.analysis.reduce.series import COM_DTYPE, ComSeries
from mdbench.analysis.reduce.sites import SITE_LABELS, classify_sites
from mdbench.analysis.reduce.unwrap import regularise_time

__all__ = ["A_TO_NM", "COM_DTYPE", "ComSeries", "MAX_DEFAULT_WORKERS", "PARALLEL_MIN_ATOM_FRAMES", "SITE_LABELS", "Channel",
           "ReducedTrajectory", "box_dimensions", "box_matrix_nm", "classify_sites", "divmod_by_scalar",
           "minimum_image", "reduce_files", "reduce_universe", "regularise_time"]
