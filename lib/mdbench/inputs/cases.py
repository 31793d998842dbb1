"""Case definitions (``params/systems/<CASE>.yaml``) and size presets (``params/presets/<P>.yaml``).

A *case* fixes the composition ratio LiFSI:DMC:TTE and the target state (298.15 K, 1 bar; seed 000,
section 3.1). A *preset* fixes molecule counts per case (ratio-preserving), the non-bonded cut-off the
boxes must accommodate and the protocol lengths. ``paper`` is Table 1 of the seed exactly.

A preset is refused when, at the case's expected density, the cubic box edge

.. math:: L = \\left(\\frac{\\sum_s N_s M_s}{N_A\\,\\rho}\\right)^{1/3}

is smaller than :math:`2 r_c + \\delta` (``cutoff_nm``, ``box_margin_nm``): the minimum-image
convention would break.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from mdbench.choices import preset_names
from mdbench.errors import InputError
from mdbench.inputs import forcefield, units
from mdbench.paths import PARAMS_DIR
from mdbench.yamlio import load_yaml

CASES = ("DE", "HCE", "LHCE")
PRESETS = preset_names()  # params/presets/<name>.yaml, smallest first
SPECIES = forcefield.SPECIES_ORDER


@dataclass(frozen=True)
class Case:
    """One electrolyte case.

    Attributes
    ----------
    name : str
        ``DE``, ``HCE`` or ``LHCE``.
    ratio : dict[str, int]
        Molar ratio Li : FSI : DMC : TTE.
    temperature_K, pressure_bar : float
        Target state.
    expected_density_g_cm3 : float
        Density estimate used only for box sizing and the cut-off check [g/cm^3].
    initial_density_g_cm3 : float
        Default packing density [g/cm^3].
    path : str
        The YAML file it was read from.
    """

    name: str
    description: str
    ratio: dict[str, int]
    temperature_K: float
    pressure_bar: float
    expected_density_g_cm3: float
    initial_density_g_cm3: float
    path: str


@dataclass(frozen=True)
class Preset:
    """A size preset: molecule counts per case and the protocol lengths.

    Attributes
    ----------
    counts : dict[str, dict[str, int]]
        case -> species -> number of molecules (species order Li, FSI, DMC, TTE).
    atoms : dict[str, int]
        case -> total number of atoms.
    cutoff_nm, box_margin_nm : float
        Every box edge must exceed ``2 * cutoff_nm + box_margin_nm`` [nm].
    protocol : dict[str, float]
        ``dt_fs``, ``equilibration_nvt_ps``, ``equilibration_npt_ps``, ``production_ps``,
        ``xtc_interval_ps``, ``energy_interval_ps``.
    box_nm : dict[str, float]
        case -> cubic box edge at the expected density [nm].
    episode_timeout_min : float or None
        Default wall-clock limit of an agent episode on this preset [min] (this project's guard, not a seed
        limit: the seed limits MD nanoseconds and threads); None where the preset gives none.
    """

    name: str
    counts: dict[str, dict[str, int]]
    atoms: dict[str, int]
    cutoff_nm: float
    box_margin_nm: float
    protocol: dict[str, float]
    box_nm: dict[str, float] = field(default_factory=dict)
    path: str = ""
    episode_timeout_min: float | None = None

    @property
    def min_box_nm(self) -> float:
        """Smallest admissible box edge, 2 r_c + margin [nm]."""
        return 2.0 * self.cutoff_nm + self.box_margin_nm


PROTOCOL_KEYS = ("dt_fs", "equilibration_nvt_ps", "equilibration_npt_ps", "production_ps", "xtc_interval_ps",
                 "energy_interval_ps")


def _require(data: Any, key: str, kind: type | tuple, path: Path) -> Any:
    if not isinstance(data, dict) or key not in data:
        raise InputError(f"missing key `{key}`", str(path))
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"`{key}` must be {getattr(kind, '__name__', kind)}, got {value!r}", str(path))
    return value


def load_case(name: str, params_dir: str | Path | None = None) -> Case:
    """Load ``params/systems/<name>.yaml``.

    Raises
    ------
    InputError
        Unknown case, missing or malformed keys (the message names the file).
    """
    pdir = Path(params_dir) if params_dir else PARAMS_DIR
    path = pdir / "systems" / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"unknown case {name!r}; expected one of {list(CASES)}", str(path))
    raw = load_yaml(path)
    ratio = _require(raw, "ratio", dict, path)
    if sorted(ratio) != sorted(SPECIES) or any(not isinstance(v, int) or v < 0 for v in ratio.values()):
        raise InputError(f"`ratio` must give non-negative integers for {list(SPECIES)}", str(path))
    if ratio["Li"] != ratio["FSI"]:
        raise InputError("`ratio` must have Li == FSI (neutral salt)", str(path))
    num = (int, float)
    return Case(name=_require(raw, "name", str, path), description=str(raw.get("description", "")),
                ratio={s: ratio[s] for s in SPECIES},
                temperature_K=float(_require(raw, "temperature_K", num, path)),
                pressure_bar=float(_require(raw, "pressure_bar", num, path)),
                expected_density_g_cm3=float(_require(raw, "expected_density_g_cm3", num, path)),
                initial_density_g_cm3=float(_require(raw, "initial_density_g_cm3", num, path)),
                path=str(path))


def case_mass_u(counts: dict[str, int]) -> float:
    """Total mass [u] of a box with ``counts`` molecules per species."""
    return sum(n * forcefield.molar_mass_u(s) for s, n in counts.items() if n)


def case_atoms(counts: dict[str, int]) -> int:
    """Total number of atoms of a box with ``counts`` molecules per species."""
    return sum(n * forcefield.n_atoms(s) for s, n in counts.items())


def load_preset(name: str, params_dir: str | Path | None = None) -> Preset:
    """Load ``params/presets/<name>.yaml`` and check ratios and box size for every case.

    Raises
    ------
    InputError
        Unknown preset, malformed counts, a count that breaks the case ratio, or a box that would be
        smaller than ``2 * cutoff_nm + box_margin_nm`` at the case's expected density.
    """
    pdir = Path(params_dir) if params_dir else PARAMS_DIR
    path = pdir / "presets" / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"unknown preset {name!r}; expected one of "
                         f"{sorted(p.stem for p in (pdir / 'presets').glob('*.yaml'))}", str(path))
    raw = load_yaml(path)
    counts_raw = _require(raw, "counts", dict, path)
    cutoff = float(_require(raw, "cutoff_nm", (int, float), path))
    margin = float(_require(raw, "box_margin_nm", (int, float), path))
    proto = _require(raw, "protocol", dict, path)
    for key in PROTOCOL_KEYS:
        _require(proto, key, (int, float), path)
    counts: dict[str, dict[str, int]] = {}
    atoms: dict[str, int] = {}
    box: dict[str, float] = {}
    for case_name in CASES:
        case = load_case(case_name, pdir)
        c = _require(counts_raw, case_name, dict, path)
        if sorted(c) != sorted(SPECIES) or any(not isinstance(v, int) or v < 0 for v in c.values()):
            raise InputError(f"counts.{case_name} must give non-negative integers for {list(SPECIES)}", str(path))
        c = {s: c[s] for s in SPECIES}
        scale = {Fraction(c[s], case.ratio[s]) for s in SPECIES if case.ratio[s]}
        if len(scale) != 1 or any(c[s] for s in SPECIES if not case.ratio[s]):
            raise InputError(f"counts.{case_name} {c} do not keep the case ratio {case.ratio} "
                             f"({case.path})", str(path))
        counts[case_name] = c
        atoms[case_name] = case_atoms(c)
        box[case_name] = units.cubic_box_nm(case_mass_u(c), case.expected_density_g_cm3)
        if box[case_name] < 2 * cutoff + margin:
            raise InputError(
                f"preset refused: the {case_name} box at its expected density {case.expected_density_g_cm3} g/cm^3 "
                f"is {box[case_name]:.3f} nm, smaller than 2 x cutoff_nm + box_margin_nm = {2 * cutoff + margin:.3f} nm; "
                "add molecules or lower cutoff_nm", str(path))
    timeout = raw.get("episode_timeout_min")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise InputError(f"episode_timeout_min must be a positive number of minutes, not {timeout!r}", str(path))
    return Preset(name=_require(raw, "name", str, path), counts=counts, atoms=atoms, cutoff_nm=cutoff,
                  box_margin_nm=margin, protocol={k: float(proto[k]) for k in PROTOCOL_KEYS}, box_nm=box,
                  path=str(path), episode_timeout_min=None if timeout is None else float(timeout))
