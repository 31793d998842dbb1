"""The run-input topology is parsed once per process and file version, and every caller gets its own copy."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from mdbench.analysis.reduce import topology

pytestmark = pytest.mark.gromacs


def test_cached_topology_is_the_parsers_and_private_to_each_universe(water_nacl, tmp_path, monkeypatch):
    import MDAnalysis as mda

    tpr = tmp_path / "md.tpr"
    shutil.copy2(water_nacl["tpr"], tpr)
    monkeypatch.setattr(topology, "_TOPOLOGY_CACHE", type(topology._TOPOLOGY_CACHE)())
    parsed = mda.Universe(str(tpr), str(water_nacl["xtc"]))          # MDAnalysis reading the file itself
    a = topology.tpr_universe(tpr, water_nacl["xtc"])
    b = topology.tpr_universe(tpr, water_nacl["xtc"])
    assert len(topology._TOPOLOGY_CACHE) == 1                        # parsed once
    for attr in ("names", "resnames", "charges", "masses", "molnums", "moltypes", "types", "resids"):
        assert np.array_equal(getattr(a.atoms, attr), getattr(parsed.atoms, attr)), attr
    assert len(a.bonds) == len(parsed.bonds) and a.trajectory.n_frames == parsed.trajectory.n_frames
    assert np.allclose(a.atoms.positions, parsed.atoms.positions)
    a.atoms.charges = np.zeros(len(a.atoms))                          # one caller changing its copy ...
    assert np.array_equal(b.atoms.charges, parsed.atoms.charges)      # ... changes nobody else's
    assert np.array_equal(topology.tpr_universe(tpr).atoms.charges, parsed.atoms.charges)
    st = os.stat(tpr)
    os.utime(tpr, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))       # the file rewritten: parsed anew
    topology.tpr_universe(tpr)
    assert len(topology._TOPOLOGY_CACHE) == 2
