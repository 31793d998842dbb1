"""Unit conversions against exact arithmetic and against values GROMACS ships in oplsaa.ff."""

import math

import pytest

from mdbench.inputs import units


def test_exact_constants():
    assert units.kcal_to_kj(1.0) == 4.184
    assert units.angstrom_to_nm(3.5) == pytest.approx(0.35, abs=1e-15)
    assert units.half_k_bond_A_to_nm(5331.0) == pytest.approx(533100.0)


@pytest.mark.parametrize("k_boss, k_gmx", [(320.0, 267776.0), (340.0, 284512.0), (367.0, 307105.6)])
def test_boss_bond_constant_matches_oplsaa_ff(k_boss, k_gmx):
    # oplsaa2023.sb CT-OS 320, CT-HC 340, CT-F 367 kcal/mol/A^2 vs GROMACS ffbonded.itp kb
    assert units.boss_bond_k_to_gmx(k_boss) == pytest.approx(k_gmx, rel=1e-12)


@pytest.mark.parametrize("k_boss, k_gmx", [(35.0, 292.880), (83.0, 694.544), (77.0, 644.336)])
def test_boss_angle_constant_matches_oplsaa_ff(k_boss, k_gmx):
    assert units.boss_angle_k_to_gmx(k_boss) == pytest.approx(k_gmx, rel=1e-12)


def test_fourier_to_rb_matches_oplsaa_ff():
    # OPLS torsion 147 HC-CT-CT-F: V3 = 0.400 kcal/mol; ffbonded.itp:1757 F CT CT HC RB coefficients
    c = units.fourier_to_rb(0.0, 0.0, units.kcal_to_kj(0.400), 0.0)
    assert c == pytest.approx((0.83680, 2.51040, 0.0, -3.34720, 0.0, 0.0), abs=1e-12)


@pytest.mark.parametrize("v", [(11.445, -15.186, -3.212, 0.0), (0.0, 20.92, 0.0, 0.0), (1.0, -2.0, 3.0, -4.0)])
def test_fourier_and_rb_energies_agree(v):
    c = units.fourier_to_rb(*v)
    for phi in range(-180, 181, 15):
        assert units.rb_energy(phi, c) == pytest.approx(units.fourier_energy(phi, *v), abs=1e-9)


def test_density_and_box_roundtrip():
    # one mole of water-like mass 18.015 u per 0.029915 nm^3 is ~1.0 g/cm^3
    assert units.density_g_cm3(18.015, 0.029915) == pytest.approx(1.0, rel=1e-3)
    L = units.cubic_box_nm(10000.0, 1.2)
    assert units.density_g_cm3(10000.0, L**3) == pytest.approx(1.2, rel=1e-12)
    assert math.isclose(units.AMU_PER_NM3_TO_G_PER_CM3, 1.66053906717e-3, rel_tol=1e-9)
