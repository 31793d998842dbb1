"""The topology of a GROMACS run input (``.tpr``), parsed once per process and file version.

The audit's setup and production checks and its canonical reanalysis read the same production ``.tpr``;
MDAnalysis' TPR parser is a fixed cost of each read (~25 ms for a 2,000-atom tiny case, seconds at paper
size). Each caller gets its own copy of the parsed :class:`~MDAnalysis.core.topology.Topology`, so a
Universe built on it cannot change another caller's atoms.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

from mdbench.trajcheck import check_tpr

#: Parsed topologies by (real path, device, inode, size, mtime) — a rewritten file is parsed anew.
_TOPOLOGY_CACHE: OrderedDict[tuple, Any] = OrderedDict()
_TOPOLOGY_CACHE_SIZE = 4


def read_tpr_topology(tpr: str | Path) -> Any:
    """A private copy of the MDAnalysis ``Topology`` of ``tpr`` (TPR parser; nothing is executed).

    Raises whatever MDAnalysis' parser raises for an unreadable file (callers turn it into their error).
    """
    from MDAnalysis.topology.TPRParser import TPRParser  # noqa: PLC0415 - MDAnalysis takes seconds to import

    st = os.stat(tpr)
    key = (os.path.realpath(tpr), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    top = _TOPOLOGY_CACHE.get(key)
    if top is None:
        check_tpr(tpr)  # issue 48: a declared size beyond plausibility is refused before the parser allocates
        with TPRParser(str(tpr)) as parser:
            top = parser.parse()
        _TOPOLOGY_CACHE[key] = top
        while len(_TOPOLOGY_CACHE) > _TOPOLOGY_CACHE_SIZE:
            _TOPOLOGY_CACHE.popitem(last=False)
    else:
        _TOPOLOGY_CACHE.move_to_end(key)
    return top.copy()


def tpr_universe(tpr: str | Path, *coordinates: str | Path) -> Any:
    """An MDAnalysis Universe of ``tpr`` (cached topology, :func:`read_tpr_topology`) with optional
    trajectory files."""
    import MDAnalysis as mda  # noqa: PLC0415 - as above: only a cache miss reads the tpr

    return mda.Universe(read_tpr_topology(tpr), *map(str, coordinates))
