"""Coordination and association on hand-placed molecules: exact counts worked out by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: make the helper importable
from structure_synth import make_universe  # noqa: E402

from mdbench.analysis.association import association
from mdbench.analysis.blocks import block_windows
from mdbench.analysis.coordination import coordination
from mdbench.analysis.reduce import reduce_universe
from mdbench.analysis.rdf import first_minimum

LI = [("Li", 6.94, 0.72)]
# a toy "FSI": O S O N (bonded O-S, S-N); sites are its two O (label O) and its N (label N)
FSI = [("O", 16.0, -0.3), ("S", 32.0, 0.2), ("O", 16.0, -0.3), ("N", 14.0, -0.32)]
# a toy "DMC" carbonyl: C=O with one methyl-ish C (label O_carbonyl), plus an ether O (label O_ether)
DMC = [("C", 12.0, 0.5), ("O", 16.0, -0.5), ("O", 16.0, -0.3), ("C", 12.0, 0.3)]


def _fsi(centre, axis=np.array([1.0, 0.0, 0.0])):
    """O at centre, S at +0.15, O at +0.30, N at +0.15 +0.15y (nm)."""
    c = np.asarray(centre, dtype=float)
    return [c, c + 0.15 * axis, c + 0.30 * axis, c + 0.15 * axis + np.array([0.0, 0.15, 0.0])]


def _system():
    """Frame-independent hand-placed system in a 4 nm box.

    Li0 at (1,1,1): FSI0 with BOTH O at 0.25 nm from Li0 (bidentate) → CIP, counts once;
    Li1 at (2.5,1,1) and Li2 at (3.0,1,1): FSI1 between them with one O near each → AGG; Li1 also
    touches FSI2 → FSI2 is CIP; FSI3 far away → free. A DMC carbonyl O at 0.22 nm from Li0.
    """
    li = [np.array([1.0, 1.0, 1.0]), np.array([2.5, 1.0, 1.0]), np.array([3.1, 1.0, 1.0])]
    # FSI0: O atoms at (1,1.25,1) and (1,0.75,1)? place along y: O at y=1.25, S 1.1, O 0.95 → not 0.25
    fsi0 = [np.array([0.8, 1.15, 1.0]), np.array([1.0, 1.3, 1.0]), np.array([1.2, 1.15, 1.0]),
            np.array([1.0, 1.5, 1.0])]
    fsi1 = [np.array([2.55, 1.25, 1.0]), np.array([2.8, 1.35, 1.0]), np.array([3.05, 1.25, 1.0]),
            np.array([2.8, 1.6, 1.0])]
    fsi2 = [np.array([2.5, 0.75, 1.0]), np.array([2.5, 0.6, 1.0]), np.array([2.5, 0.45, 1.0]),
            np.array([2.65, 0.6, 1.0])]
    fsi3 = _fsi([1.0, 3.0, 3.0])
    dmc = [np.array([1.0, 0.6, 1.0]), np.array([1.0, 0.78, 1.0]), np.array([1.0, 0.45, 1.2]),
           np.array([1.0, 0.45, 1.4])]
    pos = li + fsi0 + fsi1 + fsi2 + fsi3 + dmc
    names = ["LI"] * 3 + ["FSI"] * 4 + ["DMC"]
    atoms = [LI] * 3 + [FSI] * 4 + [DMC]
    bonds = []
    base = 3
    for _ in range(4):
        bonds += [(base, base + 1), (base + 1, base + 2), (base + 1, base + 3)]
        base += 4
    bonds += [(base, base + 1), (base, base + 2), (base + 2, base + 3)]
    return names, atoms, np.array(pos), bonds


@pytest.fixture(scope="module")
def reduced():
    names, atoms, pos, bonds = _system()
    coords = np.repeat(pos[None], 8, axis=0)
    u = make_universe(names, atoms, coords, np.full((8, 3), 4.0), bonds=bonds)
    return reduce_universe(u)


def test_site_labels_come_from_elements_and_bonds(reduced):
    names = {c.name: c.atom_indices.size for c in reduced.channels}
    assert names == {"FSI:O": 8, "FSI:N": 4, "DMC:O_carbonyl": 1, "DMC:O_ether": 1}
    assert reduced.centre_species == ["LI"]


def test_cn_counts_distinct_molecules_not_atoms(reduced):
    w = block_windows(reduced.time_ps, 0.0)
    res = coordination(reduced, w, "FSI", ["FSI:O"], 0.30, "fixed")
    # Li0: FSI0 (two O) → 1; Li1: FSI1, FSI2 → 2; Li2: FSI1 → 1  ⇒ mean 4/3
    assert res.cn.whole == pytest.approx(4.0 / 3.0)
    assert all(b == pytest.approx(4.0 / 3.0) for b in res.cn.blocks)
    carbonyl = coordination(reduced, w, "DMC", ["DMC:O_carbonyl"], 0.30, "fixed")
    assert carbonyl.cn.whole == pytest.approx(1.0 / 3.0)


def test_bidentate_fsi_is_cip_not_agg_and_clusters_are_components(reduced):
    w = block_windows(reduced.time_ps, 0.0)
    res = association(reduced, w, "FSI", ["FSI:O"], 0.30, "registered 0.30 nm")
    f = {k: v.whole for k, v in res.fractions.items()}
    # FSI0 CIP (bidentate to one Li), FSI1 AGG (two Li), FSI2 CIP, FSI3 free
    assert f == pytest.approx({"free_or_SSIP": 0.25, "CIP": 0.5, "AGG": 0.25})
    # clusters: {Li0,FSI0}=2, {Li1,Li2,FSI1,FSI2}=4, {FSI3}=1 over 7 ions
    assert res.cluster_size_fraction == pytest.approx({1: 1 / 7, 2: 2 / 7, 4: 4 / 7})
    assert res.largest_cluster_fraction.whole == pytest.approx(4 / 7)
    assert res.anions_per_cation.whole == pytest.approx(4 / 3)
    assert res.state_inputs()["failures"] == []


def test_first_minimum_rule_on_an_analytic_curve():
    r = np.arange(0.0025, 1.0, 0.005)
    g = 1 + 2.0 * np.exp(-((r - 0.2) / 0.02) ** 2) - 0.5 * np.exp(-((r - 0.3) / 0.03) ** 2)
    g[r < 0.15] = 0.0
    peak, minimum = first_minimum(r, g)
    assert peak == pytest.approx(0.2, abs=0.006)
    assert minimum == pytest.approx(0.3, abs=0.01)
    # a minimum beyond 0.60 nm is not accepted by the registered rule
    g2 = 1 + 2.0 * np.exp(-((r - 0.5) / 0.02) ** 2) - 0.5 * np.exp(-((r - 0.7) / 0.03) ** 2)
    g2[r < 0.4] = 0.0
    assert np.isnan(first_minimum(r, g2)[1])


def _per_frame_reference(rd, anion, channels, cutoff_nm):
    """Plain per-frame union-find over the contact table: the definition, written the slow way."""
    names = [c.name for c in rd.channels]
    codes = {names.index(c) for c in channels}
    cations = sorted(set(rd.centre_mol.tolist()))
    anions = [int(m) for m in np.flatnonzero(rd.mol_species == anion)]
    out = []
    for f in range(rd.n_frames):
        edges = set()
        for k in np.flatnonzero(rd.contacts["frame"] == f):
            if int(rd.contacts["channel"][k]) in codes and rd.contacts["dmin_nm"][k] < cutoff_nm:
                edges.add((int(rd.centre_mol[rd.contacts["centre"][k]]), int(rd.contacts["partner"][k])))
        parent = {n: n for n in [("c", c) for c in cations] + [("a", a) for a in anions]}

        def find(x):
            while parent[x] != x:
                x = parent[x]
            return x

        for c, a in edges:
            parent[find(("c", c))] = find(("a", a))
        sizes = {}
        for n in parent:
            sizes[find(n)] = sizes.get(find(n), 0) + 1
        per_an = [sum(1 for c, a in edges if a == an) for an in anions]
        out.append({"CIP": np.mean([n == 1 for n in per_an]), "AGG": np.mean([n >= 2 for n in per_an]),
                    "largest": max(sizes.values()) / len(parent), "per_cat": len(edges) / len(cations)})
    return out


@pytest.mark.parametrize("batch_nodes", [1_000_000, 50], ids=["one_graph", "batches_of_2_frames"])
def test_vectorised_association_equals_per_frame_definition(batch_nodes, monkeypatch):
    """Random ion positions over 12 frames: class fractions and clusters equal the slow per-frame definition."""
    from mdbench.analysis import association as association_mod
    from mdbench.analysis.association import association_frames

    monkeypatch.setattr(association_mod, "GRAPH_BATCH_NODES", batch_nodes)

    rng = np.random.default_rng(11)
    n_li, n_an, n_frames, box = 12, 12, 12, 2.2
    names = ["LI"] * n_li + ["CL"] * n_an
    atoms = [LI] * n_li + [[("Cl", 35.45, -0.72)]] * n_an
    coords = rng.uniform(0.0, box, size=(n_frames, n_li + n_an, 3))
    rd = reduce_universe(make_universe(names, atoms, coords, np.full((n_frames, 3), box)))
    fr = association_frames(rd, "CL", ["CL:ion"], 0.55)
    ref = _per_frame_reference(rd, "CL", ["CL:ion"], 0.55)
    assert len({round(r["largest"], 6) for r in ref}) > 2  # the fixture has varied clusters
    for f, r in enumerate(ref):
        assert fr.class_fraction["CIP"][f] == pytest.approx(r["CIP"])
        assert fr.class_fraction["AGG"][f] == pytest.approx(r["AGG"])
        assert fr.largest_cluster_fraction[f] == pytest.approx(r["largest"])
        assert fr.anions_per_cation[f] == pytest.approx(r["per_cat"])
        assert fr.size_counts[f].sum() == pytest.approx(n_li + n_an)
