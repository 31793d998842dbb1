"""Physical constants and unit conversions used by the analysis estimators (one place for all of them).

GROMACS units (nm, ps, bar, kJ/mol, K, amu, e) are canonical inside the estimators; results are reported
in SI (or the customary unit named in the field name, e.g. ``viscosity_mPa_s``). Every conversion is an
explicit float64 constant: never build ``V * k_B`` in float32 (it underflows to 0 → inf/nan).

Constants are the exact 2019 SI values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Boltzmann constant [J/K]
KB_J_PER_K: float = 1.380649e-23
#: Elementary charge [C]
E_CHARGE_C: float = 1.602176634e-19
#: Avogadro constant [1/mol]
AVOGADRO_PER_MOL: float = 6.02214076e23
#: Faraday constant [C/mol]
FARADAY_C_PER_MOL: float = 96485.33212
#: Atomic mass unit [kg]
AMU_KG: float = 1.66053906660e-27
#: Boltzmann constant in GROMACS units [kJ/(mol K)]
KB_KJ_PER_MOL_K: float = KB_J_PER_K * AVOGADRO_PER_MOL / 1000.0

#: 1 nm [m]
NM_M: float = 1e-9
#: 1 nm^2 [m^2]
NM2_M2: float = 1e-18
#: 1 nm^3 [m^3]
NM3_M3: float = 1e-27
#: 1 ps [s]
PS_S: float = 1e-12
#: 1 bar [Pa]
BAR_PA: float = 1e5
#: 1 nm^2/ps in m^2/s
NM2_PER_PS_TO_M2_PER_S: float = NM2_M2 / PS_S  # 1e-6
#: 1 Angstrom^2/ps in m^2/s
A2_PER_PS_TO_M2_PER_S: float = 1e-8
#: 1 Pa s in mPa s
PA_S_TO_MPA_S: float = 1e3
#: 1 S/m in mS/cm
S_PER_M_TO_MS_PER_CM: float = 10.0
#: 1 amu/nm^3 in kg/m^3
AMU_PER_NM3_TO_KG_PER_M3: float = AMU_KG / NM3_M3


def as_float64(values: Any, name: str = "array") -> np.ndarray:
    """Return ``values`` as a float64 ndarray (a copy when the input was another dtype).

    Parameters
    ----------
    values : array_like
        Any numeric array (float32 trajectories and volumes are common).
    name : str
        Name used in error messages.

    Returns
    -------
    numpy.ndarray
        float64 array of the same shape.
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf":
        from mdbench.errors import InputError

        raise InputError(f"{name} must be numeric, got dtype {arr.dtype}")
    return arr.astype(np.float64, copy=False)


def count_non_finite(values: np.ndarray) -> int:
    """Number of NaN / ±inf entries of a float array.

    One summing pass decides the usual case (a sum is finite only if every entry is: NaN and inf
    propagate); only a non-finite sum pays for the element-wise count. A float overflow of the sum is
    counted element-wise too, so the count is always exact.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.sum(values)):
            return 0
    return int(np.size(values) - np.count_nonzero(np.isfinite(values)))
