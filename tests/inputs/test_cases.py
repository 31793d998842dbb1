"""Cases and presets: counts, ratios, atom totals, and refusal of boxes that are too small."""

import shutil

import pytest

from mdbench.errors import InputError
from mdbench.inputs import cases, forcefield
from mdbench.paths import PARAMS_DIR


def test_atoms_per_molecule():
    assert {s: forcefield.n_atoms(s) for s in forcefield.SPECIES_ORDER} == {"Li": 1, "FSI": 9, "DMC": 12, "TTE": 18}


def test_paper_preset_is_table_1():
    p = cases.load_preset("paper")
    assert p.counts == {"DE": {"Li": 384, "FSI": 384, "DMC": 3840, "TTE": 0},
                        "HCE": {"Li": 1470, "FSI": 1470, "DMC": 2940, "TTE": 0},
                        "LHCE": {"Li": 960, "FSI": 960, "DMC": 1920, "TTE": 960}}
    assert p.atoms == {"DE": 49920, "HCE": 49980, "LHCE": 49920}


@pytest.mark.parametrize("name, lo, hi", [("micro", 900, 1100), ("tiny", 1900, 2200), ("small", 5800, 6500)])
def test_smaller_presets_sizes_and_ratios(name, lo, hi):
    p = cases.load_preset(name)
    for case in cases.CASES:
        c = p.counts[case]
        # atoms = sum N_s * atoms_s, computed by hand here
        assert p.atoms[case] == c["Li"] + 9 * c["FSI"] + 12 * c["DMC"] + 18 * c["TTE"]
        assert lo <= p.atoms[case] <= hi
        ratio = cases.load_case(case).ratio
        k = c["Li"] / ratio["Li"]
        assert all(c[s] == k * ratio[s] for s in cases.SPECIES)
        assert p.box_nm[case] >= p.min_box_nm


def test_cases_target_state():
    for name in cases.CASES:
        c = cases.load_case(name)
        assert (c.temperature_K, c.pressure_bar) == (298.15, 1.0)
    assert cases.load_case("LHCE").ratio == {"Li": 1, "FSI": 1, "DMC": 2, "TTE": 1}


@pytest.fixture()
def params_copy(tmp_path):
    dest = tmp_path / "params"
    shutil.copytree(PARAMS_DIR / "systems", dest / "systems")
    shutil.copytree(PARAMS_DIR / "presets", dest / "presets")
    return dest


def test_preset_with_too_small_box_is_refused(params_copy):
    path = params_copy / "presets" / "micro.yaml"
    path.write_text(path.read_text().replace("cutoff_nm: 1.0", "cutoff_nm: 1.2"))
    with pytest.raises(InputError, match="preset refused") as err:
        cases.load_preset("micro", params_copy)
    assert str(path) in str(err.value)


def test_preset_breaking_ratio_is_refused(params_copy):
    path = params_copy / "presets" / "tiny.yaml"
    path.write_text(path.read_text().replace("DMC: 160", "DMC: 150"))
    with pytest.raises(InputError, match="ratio"):
        cases.load_preset("tiny", params_copy)


def test_malformed_yaml_names_file_and_line(params_copy):
    path = params_copy / "systems" / "DE.yaml"
    path.write_text("name: DE\nratio: {Li: 1, FSI: 1\n")
    with pytest.raises(InputError) as err:
        cases.load_case("DE", params_copy)
    assert str(path) in str(err.value) and ":" in str(err.value)


def test_unknown_names():
    with pytest.raises(InputError, match="unknown case"):
        cases.load_case("XYZ")
    with pytest.raises(InputError, match="unknown preset"):
        cases.load_preset("huge")
