"""Li+ coordination and CIP/SSIP/AGG: our analysis vs solvation_analysis on the same frames and cutoffs.

solvation_analysis (Cohen et al., J. Open Source Softw. 8, 5409 (2023), doi:10.21105/joss.05409) finds the
solvent molecules within a radius of each solute atom (MDAnalysis capped_distance, minimum image) and
counts each solvent molecule once per solute atom. Both sides count partner molecules (any listed site
within the cutoff), so on identical frames and cutoffs the counts must agree except for pairs whose distance
lies within :data:`BOUNDARY_NM` of the cutoff: xtc coordinates sit on a 0.001 nm grid, so distances are
discrete and a pair on the grid point next to the cutoff can fall on either side depending on float32
rounding (MDAnalysis works in Angstrom, our reduction in nm). The tests allow exactly that many differing
counts, counted on the same frames in float64; anything more is a definition difference and fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from _peers import dump, observable

#: the shared micro production (built once per session, ~2 min on an idle core) counts against the first test
pytestmark = pytest.mark.timeout(2400)

#: half-width of the band around a cutoff where float32 rounding can flip a contact [nm] (10 x the largest
#: coordinate rounding difference of ~1e-6 nm between Angstrom and nm float32 positions)
BOUNDARY_NM = 1e-5
#: our channel -> (resname, atom names) of the sites (names as in the frozen itp files)
SITES = {"FSI:O": ("FSI", "O1 O3 O7 O8"), "DMC:O_carbonyl": ("DMC", "O4"), "DMC:O_ether": ("DMC", "O2 O5")}


@pytest.fixture(scope="module")
def universe(micro_de):
    import MDAnalysis as mda

    return mda.Universe(str(micro_de["tpr"]), str(micro_de["xtc"]))


def _frames(doc, universe):
    """(start, stop, step) of the frames our whole-interval structure results use: the union of the four
    blocks (equal blocks drop the remainder frames at the end), every k-th frame when strided."""
    every = int(doc["system"]["structure_every_n_frames"] or 1)
    t0, t1 = doc["windows"]["whole_range_ps"]
    half = 0.5 * float(doc["windows"]["dt_ps"])  # xtc times are float32
    times = np.array([ts.time for ts in universe.trajectory])
    idx = np.flatnonzero((times > t0 - half) & (times < t1 + half))
    return int(idx[0]), int(idx[-1]) + 1, every


def _sites(u, channel):
    res, names = SITES[channel]
    return u.select_atoms(f"resname {res} and name {names}")


def boundary_pairs(u, a, b, cutoff_nm: float, frames: range) -> int:
    """Number of (a atom, b atom, frame) pairs with | d - cutoff | <= BOUNDARY_NM (minimum image, float64)."""
    from MDAnalysis.lib.distances import distance_array

    n = 0
    for ts in u.trajectory[frames.start:frames.stop:frames.step]:
        d = distance_array(a.positions.astype(np.float64), b.positions.astype(np.float64),
                           box=ts.dimensions.astype(np.float64)) / 10.0
        n += int(np.count_nonzero(np.abs(d - cutoff_nm) <= BOUNDARY_NM))
    return n


@pytest.mark.parametrize("channel", sorted(SITES))
def test_li_coordination_numbers_agree(micro_de, universe, channel):
    from solvation_analysis.solute import Solute

    doc = micro_de["results"]
    ob = observable(doc, f"coordination/{channel}@first_min")
    cutoff_nm = ob["details"]["cutoff_nm"]
    start, stop, step = _frames(doc, universe)
    li = universe.select_atoms("resname LI")
    solute = Solute.from_atoms(li, {"X": _sites(universe, channel)}, radii={"X": cutoff_nm * 10.0},
                               skip_rdf=True, analysis_classes=["coordination"])
    solute.run(start=start, stop=stop, step=step)
    theirs = float(solute.coordination.coordination_numbers["X"])
    n_counts = li.n_atoms * solute.n_frames
    differing = round(abs(theirs - ob["value"]) * n_counts)
    ambiguous = boundary_pairs(universe, li, _sites(universe, channel), cutoff_nm, range(start, stop, step))
    dump(f"CN Li-{channel}", {"ours": ob["value"], "solvation_analysis": theirs, "cutoff_nm": cutoff_nm,
                               "frames": solute.n_frames, "differing_counts": differing,
                               "pairs_within_1e-5_nm_of_cutoff": ambiguous})
    assert differing <= ambiguous, (ob["value"], theirs, differing, ambiguous)
    assert ambiguous <= 0.01 * ob["value"] * n_counts  # the allowance stays small


def test_ion_association_classes_agree(micro_de, universe):
    """Anion-centred classes from the Li neighbours of every FSI O, counted once per Li per FSI."""
    from solvation_analysis.solute import Solute

    doc = micro_de["results"]
    assoc = doc["association"]["FSI"]
    cutoff_nm = assoc["cutoff_nm"]
    start, stop, step = _frames(doc, universe)
    fsi_o = _sites(universe, "FSI:O")
    # skip_rdf=False: solvation_analysis 0.4.2 indexes the (then missing) RDF data of multi-atom solutes
    solute = Solute.from_atoms(fsi_o, {"Li": universe.select_atoms("resname LI")},
                               radii={"Li": cutoff_nm * 10.0}, analysis_classes=["coordination"])
    solute.run(start=start, stop=stop, step=step)
    data = solute.solvation_data.reset_index()
    n_fsi = fsi_o.n_residues
    # distinct Li per (frame, FSI): the merged solvation data lists one row per (FSI O atom, Li)
    distinct = data.groupby(["frame", "solute_ix"])["solvent_ix"].nunique()
    n_frames = solute.n_frames
    counts = np.zeros((n_frames, n_fsi), dtype=int)
    frame_pos = {f: i for i, f in enumerate(range(start, stop, step))}
    res_pos = {r: i for i, r in enumerate(fsi_o.residues.ix)}
    for (frame, res), n in distinct.items():
        counts[frame_pos[int(frame)], res_pos[int(res)]] = n
    theirs = {"free_or_SSIP": float(np.mean(counts == 0)), "CIP": float(np.mean(counts == 1)),
              "AGG": float(np.mean(counts >= 2))}
    ours = {c: observable(doc, f"association/FSI/{c}")["value"] for c in theirs}
    # cation-centred: mean number of distinct FSI per Li (solvation_analysis coordination number)
    li_solute = Solute.from_atoms(universe.select_atoms("resname LI"), {"FSI": fsi_o},
                                  radii={"FSI": cutoff_nm * 10.0}, skip_rdf=True, analysis_classes=["coordination"])
    li_solute.run(start=start, stop=stop, step=step)
    per_li = float(li_solute.coordination.coordination_numbers["FSI"])
    dump("association", {"ours": ours, "solvation_analysis": theirs, "cutoff_nm": cutoff_nm,
                         "anions_per_cation_ours": assoc["anions_per_cation"]["value"],
                         "anions_per_cation_solvation_analysis": per_li})
    li = universe.select_atoms("resname LI")
    ambiguous = boundary_pairs(universe, li, fsi_o, cutoff_nm, range(start, stop, step))
    dump("association boundary", {"pairs_within_1e-5_nm_of_cutoff": ambiguous})
    for c in theirs:  # one flipped Li-O pair changes at most one anion's class in one frame
        assert abs(theirs[c] - ours[c]) * n_fsi * n_frames <= ambiguous + 1e-6, (c, ours, theirs, ambiguous)
    assert abs(per_li - assoc["anions_per_cation"]["value"]) * li.n_atoms * n_frames <= ambiguous + 1e-6
