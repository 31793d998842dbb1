"""Li+ first-shell speciation: added through the registry alone, and checked against solvation_analysis.

The registry entry alone puts it in the registration, the figures, results.json, the report's tables and
evidence figures and the audit's coordination group (the first part). On the peers' micro DE production
(``tests/peers/conftest.py``, built once and cached) our fractions are compared with solvation_analysis'
``Speciation`` on the same structure frames and the same per-channel cutoffs (the second part): its
``Solute`` finds the Li+ neighbours of each of our site channels (the channel's radius), the rows are
relabelled from channel to species with each molecule kept once, and its own speciation code counts the
species. A (Li, site) pair within 1e-5 nm of a cutoff may fall on either side (xtc grid and float32
rounding, as in test_solvation_analysis.py): each such pair may move one (Li, frame) between two species.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from mdbench.analysis import observables as registry
from mdbench.analysis.definitions import registration_definitions
from mdbench.analysis.settings import AnalysisSettings
from mdbench.audit.runread import group_entries
from mdbench.report.science import EVIDENCE_FIGURES, CaseResults, cross_system

_spec = importlib.util.spec_from_file_location("peers_conftest", Path(__file__).parents[1] / "peers" / "conftest.py")
_peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_peers)
micro_de = _peers.micro_de  # the shared micro production (a fixture)

#: our channel -> (resname, atom names) of its sites (the frozen itp files' names)
SITES = {"FSI:O": ("FSI", "O1 O3 O7 O8"), "FSI:N": ("FSI", "N5"), "DMC:O_carbonyl": ("DMC", "O4"),
         "DMC:O_ether": ("DMC", "O2 O5")}
BOUNDARY_NM = 1e-5


def _composition(label: str) -> frozenset:
    return frozenset((sp, int(n)) for sp, n in re.findall(r"([A-Za-z]+)(\d+)", label))


def test_the_registry_entry_puts_speciation_everywhere():
    entry = registry.get("speciation/FSI2_DMC2")
    assert entry is registry.SPECIATION and registry.group_of("speciation/FSI2") == "coordination"
    assert "analysis_speciation" in registration_definitions(AnalysisSettings())
    assert entry.figure in dict(EVIDENCE_FIGURES)
    assert "analysis/51_structure" in registry.analysis_templates()
    doc = {"observables": {"speciation/FSI2_DMC2": {"category": "speciation", "value": 0.5, "state": "C",
                                                    "unit": "fraction of cations", "blocks": [0.5] * 4}}}
    table = cross_system([CaseResults("r", "DE", Path("."), doc)])
    assert "Li+ first shell FSI2_DMC2 (fraction of cations)" in set(table["quantity"])
    assert "speciation/FSI2_DMC2" in str(group_entries(doc)["coordination"])


@pytest.mark.timeout(2400)
def test_speciation_agrees_with_solvation_analysis(micro_de):
    import MDAnalysis as mda
    from MDAnalysis.lib.distances import distance_array
    from solvation_analysis.solute import Solute
    from solvation_analysis.speciation import Speciation

    if shutil.which("gmx") is None:
        pytest.skip("needs gmx")
    doc = micro_de["results"]
    ours = {k.split("/", 1)[1]: v for k, v in doc["observables"].items() if k.startswith("speciation/")}
    assert ours, "results.json has no speciation results"
    first = next(iter(ours.values()))
    cutoffs = first["details"]["cutoffs_nm"]
    assert set(cutoffs) == set(SITES)
    u = mda.Universe(str(micro_de["tpr"]), str(micro_de["xtc"]))
    every = int(doc["system"]["structure_every_n_frames"] or 1)
    t0, t1 = doc["windows"]["whole_range_ps"]
    times = np.array([ts.time for ts in u.trajectory])
    idx = np.flatnonzero((times > t0 - 0.5 * doc["windows"]["dt_ps"]) & (times < t1 + 0.5 * doc["windows"]["dt_ps"]))
    start, stop = int(idx[0]), int(idx[-1]) + 1
    li = u.select_atoms("resname LI")
    sites = {ch.replace(":", "_"): u.select_atoms(f"resname {r} and name {n}") for ch, (r, n) in SITES.items()}
    solute = Solute.from_atoms(li, sites, radii={ch.replace(":", "_"): cutoffs[ch] * 10.0 for ch in SITES},
                               skip_rdf=True, analysis_classes=["coordination"])
    solute.run(start=start, stop=stop, step=every)
    data = solute.solvation_data.reset_index()
    data["solvent"] = data["solvent"].str.split("_").str[0]  # channel -> species
    data = data.drop_duplicates(["frame", "solute_ix", "solvent", "solvent_ix"])
    theirs_df = Speciation(data, solute.n_frames, solute.n_solutes).speciation_fraction
    species = [c for c in theirs_df.columns if c != "fraction"]
    theirs = {frozenset((sp, int(row[sp])) for sp in species if row[sp]): float(row["fraction"])
              for _, row in theirs_df.iterrows()}
    ambiguous = 0
    for ts in u.trajectory[start:stop:every]:
        for ch, (r, n) in SITES.items():
            other = sites[ch.replace(":", "_")].positions.astype(np.float64)
            d = distance_array(li.positions.astype(np.float64), other,
                               box=ts.dimensions.astype(np.float64)) / 10.0
            ambiguous += int(np.count_nonzero(np.abs(d - cutoffs[ch]) <= BOUNDARY_NM))
    n_pairs = li.n_atoms * solute.n_frames
    print(f"\n[peer] speciation: ours {({k: v['value'] for k, v in ours.items()})}, solvation_analysis "
          f"{({'_'.join(f'{s}{n}' for s, n in sorted(k)): v for k, v in theirs.items()})}, ambiguous pairs {ambiguous}")
    compared = 0
    for label, ob in ours.items():
        if label == "none":
            continue
        theirs_value = theirs.get(_composition(label), 0.0)
        assert abs(ob["value"] - theirs_value) * n_pairs <= ambiguous + 1e-6, (label, ob["value"], theirs_value)
        compared += 1
    assert compared >= 1
    distribution = first["details"]["distribution"]
    assert abs(sum(distribution.values()) - 1.0) < 1e-9
    assert ambiguous <= 0.01 * n_pairs
