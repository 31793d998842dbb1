"""Every unit conversion the force-field assembly uses, in one place.

GROMACS units are canonical inside mdbench: kJ/mol, nm, degrees for equilibrium angles, radians in
force constants, e (elementary charge), u (g/mol). Source files use other conventions:

* CL&P ``il.ff`` and fftool: kJ/mol, Angstrom, degrees; bond/angle constants k in E = k/2 (x - x0)^2
  (the GROMACS form), so bond k [kJ/mol/A^2] x 100 -> kJ/mol/nm^2; OPLS dihedral V1..V4 in kJ/mol.
* OPLS-AA BOSS files (``oplsaa2023.par``/``.sb``): kcal/mol, Angstrom; stretch/bend constants in
  E = K (x - x0)^2, so GROMACS k = 2 K (times 4.184, and x 100 for bonds per nm^2); torsions
  V1..V4 in kcal/mol.

References: GROMACS 2022 reference manual, "Bonded interactions" (Fourier and Ryckaert-Bellemans
dihedrals); thermochemical calorie 4.184 J exactly; Angstrom = 0.1 nm exactly.
"""

from __future__ import annotations

import math

#: thermochemical calorie: 1 kcal = 4.184 kJ (exact)
KCAL_TO_KJ: float = 4.184
#: 1 Angstrom = 0.1 nm (exact)
ANGSTROM_TO_NM: float = 0.1
#: Avogadro constant [1/mol] (SI 2019, exact)
AVOGADRO_PER_MOL: float = 6.02214076e23
#: 1 u / nm^3 expressed in g/cm^3: (1 g / N_A) / (1e-21 cm^3) = 1e21 / N_A (about 1.6605e-3)
AMU_PER_NM3_TO_G_PER_CM3: float = 1e21 / AVOGADRO_PER_MOL


def kcal_to_kj(energy_kcal_mol: float) -> float:
    """Energy [kcal/mol] -> [kJ/mol]."""
    return energy_kcal_mol * KCAL_TO_KJ


def angstrom_to_nm(length_A: float) -> float:
    """Length [Angstrom] -> [nm]."""
    return length_A * ANGSTROM_TO_NM


def half_k_bond_A_to_nm(k_kJ_mol_A2: float) -> float:
    """Bond constant in E = k/2 (r - r0)^2 from [kJ/mol/A^2] (CL&P, fftool) to [kJ/mol/nm^2]."""
    return k_kJ_mol_A2 / ANGSTROM_TO_NM**2


def boss_bond_k_to_gmx(k_kcal_mol_A2: float) -> float:
    """BOSS stretch constant (E = K (r - r0)^2, kcal/mol/A^2) -> GROMACS kb (E = kb/2 (r - r0)^2, kJ/mol/nm^2).

    kb = 2 K * 4.184 / 0.01.
    """
    return 2.0 * kcal_to_kj(k_kcal_mol_A2) / ANGSTROM_TO_NM**2


def boss_angle_k_to_gmx(k_kcal_mol_rad2: float) -> float:
    """BOSS bend constant (E = K (th - th0)^2, kcal/mol/rad^2) -> GROMACS (E = k/2 (th - th0)^2, kJ/mol/rad^2)."""
    return 2.0 * kcal_to_kj(k_kcal_mol_rad2)


def lj_epsilon_kcal_to_kj(eps_kcal_mol: float) -> float:
    """Lennard-Jones epsilon [kcal/mol] -> [kJ/mol]."""
    return kcal_to_kj(eps_kcal_mol)


def fourier_to_rb(v1: float, v2: float, v3: float, v4: float) -> tuple[float, ...]:
    """OPLS Fourier coefficients -> Ryckaert-Bellemans C0..C5 (same energy unit).

    The OPLS form E = V1/2 (1 + cos phi) + V2/2 (1 - cos 2phi) + V3/2 (1 + cos 3phi) + V4/2 (1 - cos 4phi)
    equals E = sum_n C_n cos^n(psi) with psi = phi - 180 deg (GROMACS manual, eq. for dihedral type 5):
    C0 = V2 + (V1 + V3)/2, C1 = (-V1 + 3 V3)/2, C2 = -V2 + 4 V4, C3 = -2 V3, C4 = -4 V4, C5 = 0.
    """
    return (v2 + 0.5 * (v1 + v3), 0.5 * (-v1 + 3.0 * v3), -v2 + 4.0 * v4, -2.0 * v3, -4.0 * v4, 0.0)


def fourier_energy(phi_deg: float, v1: float, v2: float, v3: float, v4: float) -> float:
    """OPLS Fourier dihedral energy at dihedral angle ``phi_deg`` (IUPAC convention, trans = 180 deg)."""
    p = math.radians(phi_deg)
    return 0.5 * (v1 * (1 + math.cos(p)) + v2 * (1 - math.cos(2 * p)) + v3 * (1 + math.cos(3 * p))
                  + v4 * (1 - math.cos(4 * p)))


def rb_energy(phi_deg: float, c: tuple[float, ...]) -> float:
    """Ryckaert-Bellemans energy sum_n C_n cos^n(phi - 180 deg) (GROMACS dihedral type 3)."""
    x = math.cos(math.radians(phi_deg - 180.0))
    return sum(cn * x**n for n, cn in enumerate(c))


def density_g_cm3(mass_u: float, volume_nm3: float) -> float:
    """Mass density [g/cm^3] of ``mass_u`` atomic mass units in ``volume_nm3`` cubic nanometres."""
    return mass_u / volume_nm3 * AMU_PER_NM3_TO_G_PER_CM3


def cubic_box_nm(mass_u: float, density_g_cm3_: float) -> float:
    """Edge [nm] of the cube that holds ``mass_u`` at ``density_g_cm3_``: L = (m / rho)^(1/3)."""
    return (mass_u * AMU_PER_NM3_TO_G_PER_CM3 / density_g_cm3_) ** (1.0 / 3.0)
