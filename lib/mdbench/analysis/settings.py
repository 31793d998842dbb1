"""Analysis settings: one object, read from ``params/analysis/``, that feeds the registrations and the estimators.

``params/analysis/default.yaml`` holds every estimator setting and adequacy threshold, grouped in sections;
``params/analysis/<preset>.yaml`` (optional) overlays it for one preset. :meth:`AnalysisSettings.from_yaml`
reads them, :func:`mdbench.analysis.definitions.registration_definitions` turns the object into the
definitions registered in the run record before any result, and the pipeline hands the *same* fields to
every estimator, so what is registered is what is used. :meth:`AnalysisSettings.digest` keys the results
cache: a results.json made with other settings is never reused.

The dataclass has no literal defaults of its own: an unset field takes its value from the default file
(read once per process), so the YAML file is the single place a default lives.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdbench.errors import InputError

#: The shipped settings file and the folder of per-preset overlays.
SETTINGS_DIR_NAME = "analysis"


def settings_dir() -> Path:
    """``params/analysis/`` of the project."""
    from mdbench.paths import PARAMS_DIR

    return PARAMS_DIR / SETTINGS_DIR_NAME


@functools.lru_cache(maxsize=1)
def _default_values() -> dict[str, Any]:
    """Flat field → value of ``params/analysis/default.yaml`` (read once per process)."""
    path = settings_dir() / "default.yaml"
    if not path.is_file():
        raise InputError("the analysis settings file is missing; run from the repository, or set MDBENCH_ROOT "
                         "to it (params/analysis/default.yaml holds every default)", str(path))
    return _read_flat(path)


def _default(name: str, section: str, unit: str = "") -> Any:
    """A dataclass field whose default is read from the default file (``section`` says where it lives)."""
    return field(default_factory=lambda: _copy(_default_values()[name]),
                 metadata={"section": section, "unit": unit})


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


def registered(value: Any, name: str) -> Any:
    """``value``, or when it is None the shipped default of the setting ``name`` (``params/analysis/default.yaml``):
    library functions take None for a threshold the settings hold, so the YAML file stays the one place a
    default lives.

    >>> registered(0.3, "diffusion_max_rel_half_width")
    0.3
    >>> registered(None, "n_blocks") == AnalysisSettings().n_blocks
    True
    """
    if value is not None:
        return value
    if name not in _default_values():
        raise KeyError(f"{name!r} is not a setting of params/analysis/default.yaml")
    return _copy(_default_values()[name])


@dataclass
class AnalysisSettings:
    """Registered analysis settings (every field is part of a registration and reaches an estimator).

    Fields are grouped as in ``params/analysis/default.yaml``; units are in the names. See that file for
    the meaning of each; :func:`registration_definitions` for how they are registered.
    """

    # species
    neutral_charge_tolerance_e: float = _default("neutral_charge_tolerance_e", "species", "e")
    # guard_and_blocks
    guard_ps: float | None = _default("guard_ps", "guard_and_blocks", "ps")
    n_blocks: int = _default("n_blocks", "guard_and_blocks")
    # rdf_and_coordination
    rdf_rmax_nm: float = _default("rdf_rmax_nm", "rdf_and_coordination", "nm")
    rdf_bin_nm: float = _default("rdf_bin_nm", "rdf_and_coordination", "nm")
    r_store_nm: float = _default("r_store_nm", "rdf_and_coordination", "nm")
    rdf_first_min_max_nm: float = _default("rdf_first_min_max_nm", "rdf_and_coordination", "nm")
    rdf_first_peak_min_height: float = _default("rdf_first_peak_min_height", "rdf_and_coordination")
    rdf_first_min_min_depth: float = _default("rdf_first_min_min_depth", "rdf_and_coordination")
    structure_max_frames: int | None = _default("structure_max_frames", "rdf_and_coordination")
    fixed_cn_cutoff_nm: float = _default("fixed_cn_cutoff_nm", "rdf_and_coordination", "nm")
    # contacts
    contact_cutoffs_nm: dict[str, float] = _default("contact_cutoffs_nm", "contacts", "nm")
    contact_channels: dict[str, list[str]] = _default("contact_channels", "contacts")
    # diffusion
    diffusion_beta_range: tuple[float, float] = _default("diffusion_beta_range", "diffusion")
    diffusion_min_decades: float = _default("diffusion_min_decades", "diffusion")
    diffusion_max_lag_fraction: float = _default("diffusion_max_lag_fraction", "diffusion")
    # transport
    onsager_fit_window_fraction: tuple[float, float] = _default("onsager_fit_window_fraction", "transport")
    onsager_beta_range: tuple[float, float] = _default("onsager_beta_range", "transport")
    solvent_reference: str | None = _default("solvent_reference", "transport")
    temperature_K: float | None = _default("temperature_K", "transport", "K")
    # green_kubo
    viscosity_plateau_width_tau: float = _default("viscosity_plateau_width_tau", "green_kubo")
    viscosity_plateau_start_tau: float = _default("viscosity_plateau_start_tau", "green_kubo")
    viscosity_plateau_rel_tol: float = _default("viscosity_plateau_rel_tol", "green_kubo")
    viscosity_plateau_min_width_fraction: float = _default("viscosity_plateau_min_width_fraction", "green_kubo")
    # shell_dynamics
    lifetime_tolerance_ps: float = _default("lifetime_tolerance_ps", "shell_dynamics", "ps")
    lifetime_max_lag_fraction: float = _default("lifetime_max_lag_fraction", "shell_dynamics")
    # adequacy (sampling-check thresholds)
    thermo_min_effective_samples: float = _default("thermo_min_effective_samples", "adequacy")
    thermo_drift_sigma: float = _default("thermo_drift_sigma", "adequacy")
    block_trend_alpha: float = _default("block_trend_alpha", "adequacy")
    cn_max_rel_half_width: float = _default("cn_max_rel_half_width", "adequacy")
    cn_abs_half_width_ok: float = _default("cn_abs_half_width_ok", "adequacy")
    rdf_block_first_min_tolerance_nm: float = _default("rdf_block_first_min_tolerance_nm", "adequacy", "nm")
    association_fraction_max_half_width: float = _default("association_fraction_max_half_width", "adequacy")
    diffusion_max_rel_half_width: float = _default("diffusion_max_rel_half_width", "adequacy")
    sigma_t_plus_max_rel_half_width: float = _default("sigma_t_plus_max_rel_half_width", "adequacy")
    t_plus_max_abs_half_width: float = _default("t_plus_max_abs_half_width", "adequacy")
    ionicity_max_abs_half_width: float = _default("ionicity_max_abs_half_width", "adequacy")
    viscosity_max_rel_half_width: float = _default("viscosity_max_rel_half_width", "adequacy")
    viscosity_max_component_spread: float = _default("viscosity_max_component_spread", "adequacy")
    lifetime_max_rel_half_width: float = _default("lifetime_max_rel_half_width", "adequacy")
    lifetime_min_frames_per_tau: float = _default("lifetime_min_frames_per_tau", "adequacy")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # YAML/JSON lists → the tuples the estimators take
            value = getattr(self, f.name)
            if isinstance(value, list) and str(f.type).startswith("tuple"):
                setattr(self, f.name, tuple(value))
        _check_value("n_blocks", self.n_blocks, None)

    # ----------------------------------------------------------------------------------------- reading
    @classmethod
    def from_yaml(cls, *paths: str | Path, **overrides: Any) -> AnalysisSettings:
        """Settings from the default file overlaid by each of ``paths`` in turn, then ``overrides``.

        Raises
        ------
        InputError
            A key unknown to the settings or in the wrong section, naming the file and the fix.
        """
        values = dict(_default_values())
        for p in paths:
            values.update(_read_flat(Path(p)))
        values.update(overrides)
        return cls(**_copy_values(values))

    @classmethod
    def for_preset(cls, preset: str | None = None, *paths: str | Path, **overrides: Any) -> AnalysisSettings:
        """The default file overlaid by ``params/analysis/<preset>.yaml`` when that file exists, then by
        ``paths`` and ``overrides``."""
        overlay = settings_dir() / f"{preset}.yaml" if preset else None
        return cls.from_yaml(*([overlay] if overlay is not None and overlay.is_file() else []), *paths, **overrides)

    # ----------------------------------------------------------------------------------------- using
    def replace(self, **changes: Any) -> AnalysisSettings:
        """A copy with some fields changed (``guard_ps`` given to a template or the CLI, say)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (field → value; tuples as lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def digest(self) -> str:
        """sha256 of the canonical JSON of every field: the key under which results are cached."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()

    @classmethod
    def sections(cls) -> dict[str, list[str]]:
        """Section → field names, in the order of the default file."""
        out: dict[str, list[str]] = {}
        for f in dataclasses.fields(cls):
            out.setdefault(f.metadata["section"], []).append(f.name)
        return out


def _copy_values(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _copy(v) for k, v in values.items()}


def _read_flat(path: Path) -> dict[str, Any]:
    """Field → value of one settings file, checking that every key is a known field in its own section."""
    from mdbench.yamlio import load_yaml

    doc = load_yaml(path) or {}
    if not isinstance(doc, dict):
        raise InputError("an analysis settings file is a mapping of sections (guard_and_blocks, "
                         "rdf_and_coordination, ...)",
                         str(path))
    hints = typing.get_type_hints(AnalysisSettings)
    where = {f.name: f.metadata["section"] for f in dataclasses.fields(AnalysisSettings)}
    flat: dict[str, Any] = {}
    for section, body in doc.items():
        if not isinstance(body, dict):
            raise InputError(f"section {section!r} must be a mapping of setting: value", str(path))
        for key, value in body.items():
            if key not in where:
                raise InputError(f"unknown analysis setting {key!r} in section {section!r}; known: "
                                 f"{', '.join(sorted(where))}", str(path))
            if where[key] != section:
                raise InputError(f"setting {key!r} belongs in section {where[key]!r}, not {section!r}", str(path))
            _check_type(key, value, hints[key], path)
            _check_value(key, value, path)
            flat[key] = value
    return flat


def _check_value(key: str, value: Any, path: Path | None) -> None:
    """Values the contract fixes (four blocks: the seed's analysis and results.schema.json require them)."""
    if key == "n_blocks" and value != 4:
        raise InputError(f"n_blocks = {value}: the seed's analysis uses four blocks (results.schema.json requires "
                         "4); set n_blocks: 4", None if path is None else str(path))


_KINDS: dict[Any, tuple[type, ...]] = {float: (int, float), int: (int,), str: (str,), dict: (dict,), list: (list,),
                                       tuple: (list, tuple), type(None): (type(None),)}


def _check_type(key: str, value: Any, hint: Any, path: Path) -> None:
    """A one-line error for a value of the wrong kind (a number given as text, a list for a number, ...)."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    kinds = tuple(k for t in options for k in _KINDS[typing.get_origin(t) or t])
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise InputError(f"setting {key!r} = {value!r} has the wrong type; expected {hint}", str(path))
