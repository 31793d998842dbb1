"""Li+ coordination and CIP/SSIP/AGG: our analysis vs solvation_analysis on the same frames and cutoffs.

solvation_analysis (Cohen et al., J. Open Source Softw. 8, 5409 (2023), doi:10.21105/joss.05409) finds the
solvent molecules within a radius of each solute atom (MDAnalysis capped_distance, minimum image) and
counts each solvent molecule once per solute atom. Both sides count partner molecules (any listed site
within the cutoff), so on identical frames and cutoffs the numbers must agree to rounding; a difference
is a definition difference and fails the test.
"""

from __future__ import annotations

import numpy as np
import pytest

from _peers import dump, observable

#: the shared micro production (built once per session, ~2 min on an idle core) counts against the first test
pytestmark = pytest.mark.timeout(2400)

#: our channel -> (resname, atom names) of the sites (names as in the frozen itp files)
SITES = {"FSI:O": ("FSI", "O1 O3 O7 O8"), "DMC:O_carbonyl": ("DMC", "O4"), "DMC:O_ether": ("DMC", "O2 O5")}


@pytest.fixture(scope="module")
def universe(micro_de):
    import MDAnalysis as mda

    return mda.Universe(str(micro_de["tpr"]), str(micro_de["xtc"]))


def _frames(doc):
    """(start, stop, step) of the frames our structure results use."""
    every = int(doc["system"]["structure_every_n_frames"] or 1)
    return 0, int(doc["system"]["n_frames"]), every


def _sites(u, channel):
    res, names = SITES[channel]
    return u.select_atoms(f"resname {res} and name {names}")


@pytest.mark.parametrize("channel", sorted(SITES))
def test_li_coordination_numbers_agree(micro_de, universe, channel):
    from solvation_analysis.solute import Solute

    doc = micro_de["results"]
    ob = observable(doc, f"coordination/{channel}@first_min")
    cutoff_nm = ob["details"]["cutoff_nm"]
    start, stop, step = _frames(doc)
    li = universe.select_atoms("resname LI")
    solute = Solute.from_atoms(li, {"X": _sites(universe, channel)}, radii={"X": cutoff_nm * 10.0},
                               skip_rdf=True, analysis_classes=["coordination"])
    solute.run(start=start, stop=stop, step=step)
    theirs = float(solute.coordination.coordination_numbers["X"])
    dump(f"CN Li-{channel}", {"ours": ob["value"], "solvation_analysis": theirs, "cutoff_nm": cutoff_nm,
                               "frames": solute.n_frames})
    assert solute.n_frames == doc["system"]["n_structure_frames"]
    assert theirs == pytest.approx(ob["value"], abs=1e-6)


def test_ion_association_classes_agree(micro_de, universe):
    """Anion-centred classes from the Li neighbours of every FSI O, counted once per Li per FSI."""
    from solvation_analysis.solute import Solute

    doc = micro_de["results"]
    assoc = doc["association"]["FSI"]
    cutoff_nm = assoc["cutoff_nm"]
    start, stop, step = _frames(doc)
    fsi_o = _sites(universe, "FSI:O")
    solute = Solute.from_atoms(fsi_o, {"Li": universe.select_atoms("resname LI")},
                               radii={"Li": cutoff_nm * 10.0}, skip_rdf=True, analysis_classes=["coordination"])
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
    for c in theirs:
        assert theirs[c] == pytest.approx(ours[c], abs=1e-6), c
    assert per_li == pytest.approx(assoc["anions_per_cation"]["value"], abs=1e-6)
