"""Build one case box: pack, assemble the topology, audit; all-or-nothing into ``out_dir``."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mdbench.build import audits as _audits
from mdbench.build import packing, topology
from mdbench.errors import InputError
from mdbench.inputs import cases, forcefield, units
from mdbench.inputs.bundle import load_bundle_inputs

log = logging.getLogger(__name__)


@dataclass
class BuildResult:
    """What :func:`build_system` produced.

    Attributes
    ----------
    gro_path, top_path : Path
        Coordinates and topology in ``out_dir``.
    n_atoms : int
        Atoms in the box.
    box_nm : tuple[float, float, float]
        Box edges [nm].
    counts : dict[str, int]
        Molecules per species (order Li, FSI, DMC, TTE).
    seed : int
        packmol seed.
    density_g_cm3 : float
        Packing density [g/cm^3].
    audits : list[Audit]
        Named setup checks.
    passed : bool
        All audits passed.
    inputs : dict
        Where counts and force field came from: ``{"params": ...}`` or ``{"bundle": ..., "bundle_sha256": ...}``.
    """

    case: str
    preset: str
    gro_path: Path
    top_path: Path
    n_atoms: int
    box_nm: tuple[float, float, float]
    counts: dict[str, int]
    seed: int
    density_g_cm3: float
    cutoff_nm: float
    forcefield_sha256: str
    audits: list[_audits.Audit] = field(default_factory=list)
    passed: bool = False
    inputs: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["gro_path"], d["top_path"] = str(self.gro_path), str(self.top_path)
        d["box_nm"] = list(self.box_nm)
        return d


def build_system(case: str, preset: str, out_dir: Path, seed: int = 2026, density_g_cm3: float | None = None,
                 *, overwrite: bool = False, bundle: str | Path | None = None) -> BuildResult:
    """Pack ``case`` at the ``preset`` size into ``out_dir`` and run the setup audits.

    Parameters
    ----------
    case : str
        ``DE``, ``HCE`` or ``LHCE``.
    preset : str
        A preset of ``params/presets/<name>.yaml`` (:func:`mdbench.choices.preset_names`).
    out_dir : Path
        Destination folder (e.g. ``RUN_DIR/cases/<CASE>/setup``); written only when everything
        succeeded (the work happens in a temporary sibling folder that is renamed at the end).
    seed : int
        packmol random seed.
    density_g_cm3 : float, optional
        Packing density [g/cm^3]; default the case's ``initial_density_g_cm3``. The cubic box edge is
        :math:`L = (M / (N_A \\rho))^{1/3}`.
    overwrite : bool
        Replace an existing non-empty ``out_dir``.
    bundle : path, optional
        An agent input bundle (verified first): molecule counts, force field and geometries come from it
        instead of ``params/presets`` and the package data; ``preset`` then only sets the cut-off checks.

    Returns
    -------
    BuildResult
        Also written as ``build.json`` in ``out_dir``. ``passed`` is False when an audit fails (the
        files are still written: they are the evidence).

    Raises
    ------
    InputError
        Unknown case/preset, non-positive density, or ``out_dir`` not empty.
    packing.PackingError
        The density is too high to pack (nothing is written).
    """
    c = cases.load_case(case)
    p = cases.load_preset(preset)
    inputs = load_bundle_inputs(bundle) if bundle else None
    ff_dir = inputs.forcefield_dir if inputs else forcefield.FORCEFIELD_DIR
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise InputError("output folder is not empty; choose another folder or pass overwrite=True", str(out_dir))
    rho = float(density_g_cm3 if density_g_cm3 is not None else c.initial_density_g_cm3)
    if not rho > 0:
        raise InputError(f"density must be positive, got {rho} g/cm^3", c.path)
    counts = inputs.counts[case] if inputs else p.counts[case]
    n_atoms = inputs.atoms[case] if inputs else p.atoms[case]
    box = units.cubic_box_nm(cases.case_mass_u(counts), rho)
    title = f"{case} preset={preset} seed={seed} density={rho:g} g/cm^3 (mdbench)"
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        gro, top = f"{case}.gro", "topol.top"
        xyz, checks = _pack_and_audit(tmp, gro, top, title=title, counts=counts, n_atoms=n_atoms, box=box,
                                      seed=seed, rho=rho, inputs=inputs, ff_dir=ff_dir, preset=p)
        result = BuildResult(case=case, preset=preset, gro_path=out_dir / gro, top_path=out_dir / top,
                             n_atoms=len(xyz), box_nm=(box, box, box), counts=dict(counts), seed=seed,
                             density_g_cm3=rho, cutoff_nm=p.cutoff_nm,
                             forcefield_sha256=forcefield.forcefield_checksum(ff_dir), audits=checks,
                             passed=all(a.passed for a in checks),
                             inputs={"bundle": str(inputs.root), "bundle_sha256": inputs.sha256} if inputs
                             else {"params": f"params/presets/{preset}.yaml"})
        (tmp / "build.json").write_text(json.dumps(result.to_dict(), indent=1, sort_keys=True) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for a in checks:
        log.info("audit %-28s %s  %s", a.name, "pass" if a.passed else "FAIL", a.value)
    return result


def _pack_and_audit(tmp: Path, gro: str, top: str, *, title: str, counts: dict, n_atoms: int, box: float,
                    seed: int, rho: float, inputs, ff_dir: Path, preset) -> tuple:
    """Pack with packmol into ``tmp``, write the coordinates, force field and topology there and run the setup
    audits; returns (packed coordinates [nm], audits). packmol's per-molecule PDBs are removed."""
    xyz = packing.read_packed_pdb(packing.run_packmol(tmp, counts, box, seed, rho,
                                                      geometry_dir=inputs.geometry_dir if inputs else None))
    topology.write_gro(tmp / gro, title, counts, xyz, box)
    topology.copy_forcefield(tmp, ff_dir)
    (tmp / top).write_text(topology.topology_text(title, counts))
    checks = [_audits.audit_forcefield(tmp, ff_dir), *_audits.audit_counts(tmp / gro, counts, n_atoms),
              *_audits.audit_charges(tmp, counts),
              *_audits.audit_geometry(tmp / gro, counts, preset.cutoff_nm, preset.box_margin_nm),
              _audits.audit_grompp(tmp, gro, top, preset.cutoff_nm)]
    for name in os.listdir(tmp):
        if name.endswith(".pdb") and name != "packed.pdb":
            os.remove(tmp / name)
    return xyz, checks
