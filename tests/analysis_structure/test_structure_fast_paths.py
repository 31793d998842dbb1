"""Every MDAnalysis private attribute the trajectory pass reads is checked here: with the installed
MDAnalysis the fast path is the one taken, and it gives what the public API gives."""

from __future__ import annotations

import logging

import MDAnalysis as mda
import numpy as np

from mdbench.analysis.reduce import reduce_files
from mdbench.analysis.reduce.sites import bond_indices, parsed_bonds
from mdbench.analysis.reduce.xtc import direct_xtc


def test_the_parsed_bond_list_is_used_and_equals_u_bonds(water_nacl, caplog):
    u = mda.Universe(str(water_nacl["tpr"]))
    fast = parsed_bonds(u)  # u._topology.bonds.values
    public = np.asarray(u.bonds.indices, dtype=np.int64)
    assert fast.shape == public.shape and len(fast) > 0
    assert {tuple(sorted(p)) for p in fast.tolist()} == {tuple(sorted(p)) for p in public.tolist()}
    with caplog.at_level(logging.INFO, logger="mdbench.analysis.reduce.sites"):
        np.testing.assert_array_equal(bond_indices(mda.Universe(str(water_nacl["tpr"]))), fast)
    assert not [r for r in caplog.records if "unavailable" in r.getMessage()]  # no fallback taken


def test_the_direct_xtc_reader_is_used_for_a_plain_xtc(water_nacl, caplog):
    u = mda.Universe(str(water_nacl["tpr"]), str(water_nacl["xtc"]))
    with caplog.at_level(logging.INFO, logger="mdbench.analysis.reduce.xtc"):
        found = direct_xtc(u.trajectory, 0)  # reads traj._xdr.offsets, _sub, _kwargs, _ts_kwargs
    assert found is not None and found[0] == str(water_nacl["xtc"]) and len(found[1]) == len(u.trajectory)
    assert not caplog.records
    rd = reduce_files(water_nacl["tpr"], water_nacl["xtc"], stop=20, workers=1)
    assert rd.source["frame_reader"].startswith("MDAnalysis XTCFile.read_direct_x")


def test_a_transformed_trajectory_keeps_the_readers_path(water_nacl):
    from MDAnalysis.transformations import translate

    u = mda.Universe(str(water_nacl["tpr"]), str(water_nacl["xtc"]))
    u.trajectory.add_transformations(translate([0.0, 0.0, 0.0]))
    assert direct_xtc(u.trajectory, 0) is None
    u2 = mda.Universe(str(water_nacl["tpr"]), str(water_nacl["xtc"]), dt=0.5)
    assert direct_xtc(u2.trajectory, 0) is None
