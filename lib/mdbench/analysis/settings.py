"""Analysis settings: one object, read from ``params/analysis/``, that feeds the registrations and the estimators.

``params/analysis/default.yaml`` holds every estimator setting and adequacy threshold, grouped in sections;
``params/analysis/<preset>.yaml`` (optional) overlays it for one preset. :meth:`AnalysisSettings.from_yaml`
reads them, :func:`registration_definitions` turns the object into the definitions registered in the run
record before any result, and the pipeline hands the *same* fields to every estimator, so what is
registered is what is used. :meth:`AnalysisSettings.digest` keys the results cache: a results.json made
with other settings is never reused.

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


# --------------------------------------------------------------------------------------------- registrations
def registration_definitions(settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
    """The definitions registered before any result, keyed by registration kind (all read from ``settings``):
    the shared ones below, then each registered estimator's own (:meth:`EstimatorBase.definition
    <mdbench.analysis.estimator.EstimatorBase.definition>`), merged in registry order."""
    import importlib

    from mdbench.analysis.observables import REGISTRY

    out = _shared_definitions(settings)
    for path in dict.fromkeys(e.estimator for e in REGISTRY):
        module, _, name = path.partition(":")
        own = getattr(getattr(importlib.import_module(module), name), "definition", None)
        for kind, fields in (own(settings) if own is not None else {}).items():
            out.setdefault(kind, {}).update(fields)
    return out


def _shared_definitions(settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
    """The definitions shared by several estimators (guard and blocks, selections, fitting rules, ...)."""
    return {**_sampling_and_structure_definitions(settings), **_fitting_definitions(settings),
            **_shell_and_adequacy_definitions(settings)}


def _sampling_and_structure_definitions(s: AnalysisSettings) -> dict[str, dict[str, Any]]:
    """Guard and blocks, atom selections, RDF/coordination and contact definitions."""
    from mdbench.analysis.blocks import BLOCK_DEFINITION
    from mdbench.analysis.rdf import first_min_rule
    from mdbench.analysis.reduce import SITE_LABELS

    return {
        "analysis_guard_and_blocks": {
            "guard_ps": s.guard_ps,
            "guard_rule": ("given guard_ps" if s.guard_ps is not None else
                           "latest pymbar detect_equilibration t0 (coarse origin grid) over Potential and, "
                           "when present, Density of the energy file; one guard for every analysis"),
            "n_blocks": s.n_blocks, "uncertainty": BLOCK_DEFINITION,
        },
        "analysis_atom_selections": {
            "molecule": "GROMACS molecule (tpr molnums), species = residue name of its first atom",
            "centres": "atoms of species with positive net molecular charge (cations, e.g. LI)",
            "neutral_species": f"net molecular charge |q| < {s.neutral_charge_tolerance_e:g} e counts as 0 e "
                               "(rounded partial charges of a neutral solvent)",
            "neutral_charge_tolerance_e": s.neutral_charge_tolerance_e,
            "site_labels": SITE_LABELS,
            "site_rule": "labels from elements and bonds of the tpr, not from atom names",
            "com": "centre of mass of the whole molecule (atoms minimum-imaged to the first atom), float64",
            "unwrapping": "displacement scheme with minimum image in the current box (NPT-safe)",
        },
        "analysis_rdf_coordination": {
            "rdf_rmax_nm": s.rdf_rmax_nm, "rdf_bin_nm": s.rdf_bin_nm,
            "first_minimum_rule": first_min_rule(s.rdf_first_min_max_nm, min_peak_height=s.rdf_first_peak_min_height,
                                                 min_depth=s.rdf_first_min_min_depth),
            "cn_definition": "distinct partner molecules with any site of the channel within r_c",
            "cn_cutoffs": "first minimum of each channel's g(r) (registered rule); fixed "
                          f"{s.fixed_cn_cutoff_nm} nm reported for every channel as well",
            "cross_check": "rho * integral 4 pi r^2 g(r) dr (site count) at the same r_c",
            "abundance": "mean distinct molecules of each species in the first shell / shell total",
            "structure_frames": ("every frame" if not s.structure_max_frames else
                                 f"every k-th frame, k = ceil(frames / {s.structure_max_frames}) (at most "
                                 f"{s.structure_max_frames} frames; consecutive frames 1 ps apart are strongly "
                                 "correlated for first-shell contacts); blocks and guard as for every analysis"),
        },
        "analysis_contacts_clusters": {
            "contact_cutoffs_nm": s.contact_cutoffs_nm, "contact_sites": s.contact_channels,
            "other_anions": "all sites of the anion; cutoff = first minimum of the cation-site g(r), else "
                            f"{s.fixed_cn_cutoff_nm} nm",
            "classes": "per anion, distinct cations in contact: 0 free_or_SSIP, 1 CIP, >=2 AGG",
            "clusters": "connected components of the cation-anion contact graph; size in ions",
        },
    }


def _fitting_definitions(s: AnalysisSettings) -> dict[str, dict[str, Any]]:
    """Fitting rules of the transport estimators (diffusion, Onsager, Yeh-Hummer, Green-Kubo)."""
    from mdbench.analysis.observables import VISCOSITY

    return {
        "analysis_fitting_rules": {
            "diffusion": {"beta_range": list(s.diffusion_beta_range), "min_window_decades": s.diffusion_min_decades,
                          "max_lag_fraction_of_block": s.diffusion_max_lag_fraction, "frame": "barycentric"},
            "onsager": {"fit_window_fraction_of_block": list(s.onsager_fit_window_fraction),
                        "beta_range": list(s.onsager_beta_range), "fit": "linear in time (cross terms may be <0)",
                        "frames": "barycentric and solvent (reference species named)",
                        "solvent_reference": s.solvent_reference or "most numerous neutral species",
                        "temperature_K": s.temperature_K if s.temperature_K is not None
                        else "mean edr Temperature over the analysed window"},
            "yeh_hummer": "D_YH = D_PBC + 2.837297 kB T / (6 pi eta L) with the case's own Green-Kubo eta and "
                          "mean box edge L (cubic box); reported beside the uncorrected D, uncertainty propagated; "
                          "not_estimable without a positive eta",
            VISCOSITY.name: {"method": "Green-Kubo, 5 traceless pressure components, plateau rule: first window of "
                                    f"width {s.viscosity_plateau_width_tau:g} tau_c (at least "
                                    f"{s.viscosity_plateau_min_width_fraction:g} of the longest lag), starting at "
                                    f">= {s.viscosity_plateau_start_tau:g} tau_c, where the running integral "
                                    f"changes by <= {s.viscosity_plateau_rel_tol:g} of its window mean",
                          "requires": "pressure output <= 0.5 ps and constant volume (no barostat)"},
        },
    }


def _shell_and_adequacy_definitions(s: AnalysisSettings) -> dict[str, dict[str, Any]]:
    """Shell dynamics, and the adequacy and stopping rules every state follows."""
    from mdbench.analysis.states import STATE_RULES

    adequacy = {k: getattr(s, k) for k in AnalysisSettings.sections()["adequacy"]}
    return {
        "analysis_shell_dynamics": {
            "pairs": "(centre, partner molecule) with any site of the channel within r_c: residence times use "
                     "each Li-O channel's coordination cutoff (first minimum, else the fixed cutoff); contact "
                     "lifetimes the registered cation-anion contact definition",
            "intermittent": "C_I(t) = (<h(0)h(t)> - <h>^2) / (<h> - <h>^2) over every centre x partner-molecule "
                            "pair and every time origin of the window (h = 1 in the shell)",
            "continuous": "C_C(t) = <h(0)H(t)> / <h>, H = 1 while the pair stays in the shell without an "
                          f"absence longer than {s.lifetime_tolerance_ps:g} ps (absences up to that are filled)",
            "tolerance_ps": s.lifetime_tolerance_ps,
            "lifetime": "tau = integral of C(t) dt (trapezoid) from 0 to its first zero, lags up to "
                        f"{s.lifetime_max_lag_fraction:g} of the block length",
            "time_resolution": "the structure frames (every k-th frame, see analysis_rdf_coordination): dt_s is "
                               "declared with each result; tau must span at least "
                               f"{s.lifetime_min_frames_per_tau:g} of them",
        },
        "analysis_adequacy_and_stopping": {
            "state_rules": STATE_RULES,
            "thresholds": adequacy,
            "precision_rule": "C needs the whole-interval 95 % half-width (block spread) <= the registered "
                              "relative bound x |value| (t+, ionicity, class fractions: <= the absolute bound; "
                              "CN: relative or absolute), else SI with the numbers",
            "trend_rule": "C needs no significant trend over the blocks: OLS slope of the block values "
                          f"against the block index with two-sided p >= {s.block_trend_alpha:g} "
                          "(Student t, n-2 dof), else SI",
            "not_estimable_rule": "a ratio whose defining denominator is zero within its 95 % interval and that "
                                  "interval is resolved (sigma for t+: |sigma| + half-width <= ionicity bound x "
                                  "sigma_NE; eta: a non-positive Green-Kubo plateau) is not_estimable: value "
                                  "withheld, reason stated; a denominator that is merely imprecise is SI",
            "stopping_rule": "the analysis never extends sampling; an observable failing a sampling check "
                             "is reported SI with the check named; extension is decided by the study "
                             "within the remaining budget",
        },
    }
