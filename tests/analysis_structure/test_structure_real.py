"""Cross-checks on a real GROMACS trajectory (SPC/E water + NaCl, see conftest.py) against reference tools."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from mdbench.analysis.blocks import block_windows
from mdbench.analysis.coordination import coordination
from mdbench.analysis.rdf import rdf_curve
from mdbench.analysis.reduce import minimum_image, reduce_files

pytestmark = pytest.mark.gromacs  # every test reads the GROMACS trajectory of conftest.py


@pytest.fixture(scope="module")
def reduced(water_nacl):
    return reduce_files(water_nacl["tpr"], water_nacl["xtc"])


@pytest.fixture(scope="module")
def universe(water_nacl):
    import MDAnalysis as mda

    return mda.Universe(str(water_nacl["tpr"]), str(water_nacl["xtc"]))


def test_species_and_channels_from_the_tpr(reduced):
    assert reduced.species == ["SOL", "NA", "CL"]
    assert reduced.centre_species == ["NA"]
    assert sorted(c.name for c in reduced.channels) == ["CL:ion", "SOL:O"]
    assert np.sum(reduced.mol_charge_e) == pytest.approx(0.0, abs=1e-4)


@pytest.mark.parametrize("channel,selection", [("SOL:O", "resname SOL and element O"),
                                               ("CL:ion", "resname CL")])
def test_rdf_matches_mdanalysis_interrdf(reduced, universe, channel, selection):
    """Same bins, same frames, NVT: our one-pass g(r) equals InterRDF.

    Tolerance: equal to 1e-6 relative in at least 95 % of bins (the box volume: we take the xtc's float32
    nm box lengths, InterRDF MDAnalysis's float32 Å ones, which differ by float32 rounding, ≈ 1e-7); elsewhere
    a single pair sits within float32 rounding of a bin edge (we compute distances in float64) and lands in
    the neighbouring bin, so the pair counts per bin differ by at most 2 and the running pair count by at
    most 2 at every r.
    """
    from MDAnalysis.analysis.rdf import InterRDF

    edges = reduced.rdf_edges_nm
    ref = InterRDF(universe.select_atoms("resname NA"), universe.select_atoms(selection),
                   nbins=edges.size - 1, range=(0.0, edges[-1] * 10.0)).run()
    ours = rdf_curve(reduced, channel)
    same = np.isclose(ours.g, ref.results.rdf, rtol=1e-6, atol=1e-9)
    assert same.mean() >= 0.95  # float32 distances at bin edges move a pair to the next bin (0.97 seen); counts below bound it
    counts = reduced.rdf_counts[channel].sum(axis=0)
    assert np.max(np.abs(counts - ref.results.count)) <= 2
    assert np.max(np.abs(np.cumsum(counts) - np.cumsum(ref.results.count))) <= 2
    assert counts.sum() > 1000  # the comparison is not vacuous
    np.testing.assert_allclose(ours.r_nm * 10.0, ref.results.bins, atol=1e-9)


def test_na_water_first_shell_is_physical_and_cn_matches_integral(reduced):
    """Na⁺–O(water): first minimum near 0.32 nm, CN≈5–6; one O per water ⇒ CN = ρ∫4πr²g exactly."""
    w = block_windows(reduced.time_ps, 5.0)
    curve = rdf_curve(reduced, "SOL:O", w.whole)
    assert 0.28 < curve.first_min_nm < 0.36
    res = coordination(reduced, w, "SOL", ["SOL:O"], curve.first_min_nm, "first minimum")
    assert 4.5 < res.cn.whole < 6.5
    # the histogram integral counts distances < upper bin edge; evaluate at the bin edge of r_c
    edge = reduced.rdf_edges_nm[np.searchsorted(reduced.rdf_edges_nm, curve.first_min_nm)]
    cn_edge = coordination(reduced, w, "SOL", ["SOL:O"], edge, "bin edge").cn.whole
    assert cn_edge == pytest.approx(curve.n_sites_within(edge), rel=1e-9)


def test_com_of_whole_molecules_matches_mdanalysis_unwrap(reduced, universe):
    """Per-residue COM after MDAnalysis make-whole equals ours (mod box) on frames with straddlers."""
    for frame in (0, 150, 300):
        ts = universe.trajectory[frame]
        ag = universe.atoms
        ref = ag.center_of_mass(compound="residues", unwrap=True) / 10.0
        box = np.diag(ts.dimensions[:3].astype(np.float64) / 10.0)
        diff = minimum_image(reduced.com_nm[frame] - ref, box)
        assert np.max(np.abs(diff)) < 2e-5
        # and some water really straddles the boundary in this frame
        pos = ag.positions / 10.0
        spread = np.array([np.ptp(pos[r.atoms.indices], axis=0).max() for r in universe.residues[:300]])
        assert np.any(spread > 0.5 * box[0, 0])


def test_msd_matches_gmx_msd(reduced, water_nacl, tmp_path):
    """Water COM MSD vs ``gmx msd -mol`` over lags 1..150 frames: relative agreement 1e-4.

    GROMACS 2022.5 ``gmx msd`` aborts (std::length_error) on frame spacings that are not whole ps, so
    the xtc is re-stamped to 1 ps per frame with ``gmx trjconv -timestep 1``; MSD per frame lag is
    unchanged by the relabelling.
    """
    d = water_nacl["dir"]
    subprocess.run(["gmx", "-quiet", "trjconv", "-s", str(d / "md.tpr"), "-f", str(d / "md.xtc"), "-o",
                    str(tmp_path / "int.xtc"), "-timestep", "1"], input="0\n", text=True, check=True,
                   capture_output=True)
    subprocess.run(["gmx", "-quiet", "msd", "-s", str(d / "md.tpr"), "-f", str(tmp_path / "int.xtc"),
                    "-sel", "resname SOL", "-mol", str(tmp_path / "mol.xvg"), "-o", str(tmp_path / "msd.xvg"),
                    "-trestart", "1"], text=True, check=True, capture_output=True)
    ref = np.loadtxt([ln for ln in (tmp_path / "msd.xvg").read_text().splitlines() if ln[:1] not in "#@"])
    x = reduced.com_nm[:, reduced.mol_species == "SOL"]
    lags = np.arange(1, 151)
    ours = np.array([np.mean(np.sum((x[k:] - x[:-k]) ** 2, axis=-1)) for k in lags])
    np.testing.assert_allclose(ours, ref[1:151, 1], rtol=1e-4)


def _assert_same_reduction(a, b, *, dist_atol_nm: float = 0.0):
    """Two reductions of one trajectory agree: COMs, boxes, every histogram and the neighbour table."""
    np.testing.assert_allclose(a.com_nm, b.com_nm, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(a.volume_nm3, b.volume_nm3)
    assert a.rdf_counts.keys() == b.rdf_counts.keys()
    for ch in a.rdf_counts:
        diff = np.abs(a.rdf_counts[ch].astype(np.int64) - b.rdf_counts[ch])
        # float32 (dense) vs float32→float64 (grid) distances may put a pair at a bin edge one bin over
        assert diff.sum() <= (0 if dist_atol_nm == 0 else 4), ch
    for key in ("frame", "centre", "partner", "channel"):
        np.testing.assert_array_equal(a.contacts[key], b.contacts[key])
    np.testing.assert_allclose(a.contacts["dmin_nm"], b.contacts["dmin_nm"], rtol=0, atol=dist_atol_nm)


def test_chunk_size_does_not_change_the_reduction(water_nacl, monkeypatch):
    """Frames are reduced in chunks; a 7-frame chunk (carrying unwrapping across chunk edges) = whole."""
    from mdbench.analysis.reduce import onepass as reduce_mod

    whole = reduce_files(water_nacl["tpr"], water_nacl["xtc"], stop=60)
    n_atoms = whole.source["n_atoms"]
    monkeypatch.setattr(reduce_mod, "CHUNK_ATOM_FRAMES", 7 * n_atoms)
    monkeypatch.setattr(reduce_mod, "CHUNK_MIN_FRAMES", 1)
    chunked = reduce_files(water_nacl["tpr"], water_nacl["xtc"], stop=60)
    assert chunked.source["chunk_frames"] == 7 and whole.source["chunk_frames"] == 60
    _assert_same_reduction(whole, chunked)


def test_worker_processes_give_the_one_pass_result(water_nacl):
    """Three forked workers reduce three frame ranges (strided structure frames crossing range edges); the
    stitched COMs, pair histograms and neighbour table equal one pass."""
    one = reduce_files(water_nacl["tpr"], water_nacl["xtc"], stop=90, structure_max_frames=40, workers=1)
    three = reduce_files(water_nacl["tpr"], water_nacl["xtc"], stop=90, structure_max_frames=40, workers=3)
    assert one.source["reduction_workers"] == 1 and three.source["reduction_workers"] == 3
    assert three.structure_every == 3  # ranges 0–29, 30–59, 60–89: structure frames 0, 3, …, 87
    _assert_same_reduction(one, three)
    np.testing.assert_array_equal(three.time_ps, one.time_ps)
    np.testing.assert_array_equal(three.box_nm, one.box_nm)
    np.testing.assert_allclose(three.com_nm, one.com_nm, rtol=0, atol=1e-9)
    # the stitching is needed: a reduction started afresh at frame 30 differs by box vectors somewhere
    fresh = reduce_files(water_nacl["tpr"], water_nacl["xtc"], start=30, stop=60)
    half_box = 0.5 * np.diag(one.box_nm[30])
    assert np.any(np.abs(fresh.com_nm[0] - one.com_nm[30]) > half_box)


def test_frames_read_straight_from_the_xtc_equal_the_mdanalysis_reader(water_nacl):
    """The direct xtc path (nm, no Timestep) gives the reader's reduction; a reader it cannot mirror (a
    transformation, a dt override) keeps the reader's path.

    Tolerances: COMs 1e-6 nm and boxes 1e-6 relative (the reader's Å are the xtc's float32 nm × 10 rounded
    to float32), so a pair within that rounding of a bin edge may move one bin (at most 4 such moves per
    channel); the neighbour table identical.
    """
    import MDAnalysis as mda

    from mdbench.analysis.reduce import reduce_universe

    tpr, xtc = str(water_nacl["tpr"]), str(water_nacl["xtc"])
    direct = reduce_files(tpr, xtc, stop=60, step=2, workers=1)
    u = mda.Universe(tpr, xtc)
    u.trajectory.add_transformations(lambda ts: ts)  # an identity transformation: the reader must run it
    via_reader = reduce_universe(u, stop=60, step=2, workers=1)
    assert direct.source["frame_reader"].startswith("MDAnalysis XTCFile.read_direct_x")
    assert via_reader.source["frame_reader"] == "MDAnalysis XTCReader"
    np.testing.assert_array_equal(direct.time_ps, via_reader.time_ps)
    np.testing.assert_allclose(direct.com_nm, via_reader.com_nm, rtol=0, atol=1e-6)
    np.testing.assert_allclose(direct.box_nm, via_reader.box_nm, rtol=1e-6, atol=0)
    for ch in direct.rdf_counts:
        assert direct.rdf_counts[ch].sum() == via_reader.rdf_counts[ch].sum() > 0
        assert np.abs(direct.rdf_counts[ch].astype(np.int64) - via_reader.rdf_counts[ch]).sum() <= 8, ch
    for key in ("frame", "centre", "partner", "channel"):
        np.testing.assert_array_equal(direct.contacts[key], via_reader.contacts[key])
    np.testing.assert_allclose(direct.contacts["dmin_nm"], via_reader.contacts["dmin_nm"], rtol=0, atol=1e-6)
    # a dt override changes the frame times the reader reports: the direct path must not be taken
    u_dt = mda.Universe(tpr, xtc, dt=0.25)
    times = reduce_universe(u_dt, stop=8, workers=1)
    assert times.source["frame_reader"] == "MDAnalysis XTCReader"
    np.testing.assert_allclose(times.time_ps, 0.25 * np.arange(8))


def test_coordination_counts_do_not_depend_on_the_contact_order(reduced):
    """cn_per_frame takes a linear path for the sorted table the reduction writes; shuffled = sorted."""
    import dataclasses

    from mdbench.analysis.coordination import cn_per_frame

    order = np.random.default_rng(3).permutation(reduced.contacts["frame"].size)
    shuffled = dataclasses.replace(reduced, contacts={k: v[order] for k, v in reduced.contacts.items()})
    for cut in (0.25, 0.35):
        expect = cn_per_frame(reduced, ["SOL:O", "CL:ion"], cut)
        assert expect.mean() > 0
        np.testing.assert_array_equal(cn_per_frame(shuffled, ["SOL:O", "CL:ion"], cut), expect)
        single = cn_per_frame(reduced, ["SOL:O"], cut)  # one channel: its cached rows only
        np.testing.assert_array_equal(cn_per_frame(shuffled, ["SOL:O"], cut), single)


def test_coordination_of_each_channel_equals_a_count_of_distinct_molecules_in_the_table(reduced):
    """Per channel and cutoff, cn_per_frame = distinct (centre, partner molecule) pairs per frame with a row
    of that channel closer than the cutoff, counted with Python sets, / number of centres."""
    from mdbench.analysis.coordination import cn_per_frame

    ct = reduced.contacts
    rows = list(zip(ct["frame"].tolist(), ct["centre"].tolist(), ct["partner"].tolist(),
                    ct["channel"].tolist(), ct["dmin_nm"].astype(np.float64).tolist()))
    for code, ch in enumerate(reduced.channels):
        for cut in (0.25, 0.33):
            pairs = {(f, c, p) for f, c, p, k, d in rows if k == code and d < cut}
            expect = np.zeros(reduced.n_frames)
            for f, _, _ in pairs:
                expect[f] += 1.0 / reduced.centre_mol.size
            np.testing.assert_allclose(cn_per_frame(reduced, [ch.name], cut), expect, rtol=0, atol=1e-12)


def test_association_does_not_depend_on_the_contact_order(reduced):
    """association_frames takes the linear distinct-edge path on the sorted table; shuffled = sorted."""
    import dataclasses

    from mdbench.analysis.association import association_frames
    from mdbench.analysis.coordination import distinct_keys

    order = np.random.default_rng(5).permutation(reduced.contacts["frame"].size)
    shuffled = dataclasses.replace(reduced, contacts={k: v[order] for k, v in reduced.contacts.items()})
    expect = association_frames(reduced, "CL", ["CL:ion"], 0.6)
    got = association_frames(shuffled, "CL", ["CL:ion"], 0.6)
    assert expect.anions_per_cation.sum() > 0  # Na–Cl contacts exist: the comparison is not vacuous
    for c in expect.class_fraction:
        np.testing.assert_array_equal(got.class_fraction[c], expect.class_fraction[c])
    np.testing.assert_array_equal(got.anions_per_cation, expect.anions_per_cation)
    np.testing.assert_array_equal(got.largest_cluster_fraction, expect.largest_cluster_fraction)
    keys = np.array([5, 1, 5, 3, 1])
    np.testing.assert_array_equal(distinct_keys(keys), [1, 3, 5])
    np.testing.assert_array_equal(distinct_keys(np.sort(keys)), [1, 3, 5])


def test_dense_and_grid_pair_search_agree(water_nacl, monkeypatch):
    """The dense numpy search (few centres) and MDAnalysis ``capped_distance`` find the same pairs."""
    from mdbench.analysis.reduce import onepass as reduce_mod

    dense = reduce_files(water_nacl["tpr"], water_nacl["xtc"], stop=30)
    monkeypatch.setattr(reduce_mod, "BRUTE_FORCE_MAX_PAIRS", 0)
    grid = reduce_files(water_nacl["tpr"], water_nacl["xtc"], stop=30)
    assert dense.source["pair_search"].startswith("dense") and grid.source["pair_search"].startswith("periodic k-d tree")
    assert dense.contacts["frame"].size > 1000
    _assert_same_reduction(dense, grid, dist_atol_nm=2e-6)


def test_structure_stride_equals_reducing_those_frames(water_nacl):
    """structure_max_frames: neighbour data on every k-th frame, COMs on all; the view = a strided reduction."""
    strided = reduce_files(water_nacl["tpr"], water_nacl["xtc"], stop=90, structure_max_frames=30)
    assert strided.structure_every == 3 and strided.n_frames == 90
    direct = reduce_files(water_nacl["tpr"], water_nacl["xtc"], stop=90, step=3)
    view = strided.structure_view()
    assert view.n_frames == 30 and view.structure_every == 1
    np.testing.assert_allclose(view.time_ps, direct.time_ps)
    for ch in direct.rdf_counts:
        np.testing.assert_array_equal(view.rdf_counts[ch], direct.rdf_counts[ch])
    for key in ("frame", "centre", "partner", "channel", "dmin_nm"):
        np.testing.assert_array_equal(view.contacts[key], direct.contacts[key])
    # frames between structure frames carry no neighbour data, but every frame has its COMs
    assert strided.rdf_counts["SOL:O"][1].sum() == 0 and strided.rdf_counts["SOL:O"][3].sum() > 0
    full = reduce_files(water_nacl["tpr"], water_nacl["xtc"], stop=90)
    np.testing.assert_allclose(strided.com_nm, full.com_nm, rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="strided"):
        strided.subset(slice(0, 10)).structure_view()
