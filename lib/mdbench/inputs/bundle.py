"""The agent input bundle (seed 000, Appendix A.1): what an evaluated agent receives, read-only.

Layout::

    BENCHMARK_CONTRACT.md  PUBLIC_LOGGING_CONTRACT.md  PROMPT_TEMPLATE.md
    schemas/*.schema.json          (run-record JSON Schemas, schema version 1.2)
    cases/{DE,HCE,LHCE}.yaml       (ratios, target state, molecule and atom counts of the preset)
    forcefield/                    (forcefield.itp, one itp per species, manifest.json)
    geometries/                    (one PDB per species, atom order equal to the itp)
    references/ESTIMATORS.md       (estimator definitions)
    bundle_checksums.sha256        (``sha256sum``-format lines for every other file, sorted by path)

The output depends only on the preset and the committed inputs: no timestamps, sorted keys, ``\\n``
line ends, so two builds are byte-identical.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from mdbench.errors import InputError
from mdbench.inputs import cases, forcefield

BUNDLE_DATA = forcefield.DATA_DIR / "bundle"
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "record" / "schemas"
CHECKSUMS = "bundle_checksums.sha256"
SCHEMA_VERSION = "1.2"


def frozen_forcefield_checksum() -> str:
    """sha256 of the frozen force field (see :func:`mdbench.inputs.forcefield.forcefield_checksum`)."""
    return forcefield.forcefield_checksum()


def _case_yaml(case: cases.Case, preset: cases.Preset) -> str:
    counts = preset.counts[case.name]
    data = {
        "name": case.name, "description": case.description, "preset": preset.name,
        "ratio_Li_FSI_DMC_TTE": [case.ratio[s] for s in cases.SPECIES],
        "temperature_K": case.temperature_K, "pressure_bar": case.pressure_bar,
        "molecule_order": list(cases.SPECIES),
        "molecules": {s: {"count": counts[s], "molecule_type": forcefield.MOLNAME[s],
                          "atoms_per_molecule": forcefield.n_atoms(s),
                          "itp": f"forcefield/{forcefield.MOLNAME[s]}.itp",
                          "geometry": f"geometries/{forcefield.MOLNAME[s]}.pdb"} for s in cases.SPECIES},
        "total_atoms": preset.atoms[case.name],
        "total_charge_e": 0.0,
    }
    return f"# Case {case.name} (frozen; preset {preset.name}).\n" + yaml.safe_dump(data, sort_keys=False)


def _composition_table(preset: cases.Preset) -> str:
    rows = ["| case | Li+ | FSI- | DMC | TTE | atoms |", "|---|---|---|---|---|---|"]
    for c in cases.CASES:
        n = preset.counts[c]
        rows.append(f"| {c} | {n['Li']:,} | {n['FSI']:,} | {n['DMC']:,} | {n['TTE']:,} | {preset.atoms[c]:,} |")
    return "\n".join(rows)


def bundle_files(preset_name: str) -> dict[str, bytes]:
    """Relative path -> content of every bundle file except the checksum list."""
    preset = cases.load_preset(preset_name)
    ff_sha = frozen_forcefield_checksum()
    files: dict[str, bytes] = {}
    contract = (BUNDLE_DATA / "BENCHMARK_CONTRACT.md").read_text()
    files["BENCHMARK_CONTRACT.md"] = contract.format(preset=preset.name, ff_sha256=ff_sha,
                                                     model_version=forcefield.MODEL_VERSION,
                                                     composition_table=_composition_table(preset)).encode()
    for name in ("PUBLIC_LOGGING_CONTRACT.md", "PROMPT_TEMPLATE.md", "references/ESTIMATORS.md"):
        files[name] = (BUNDLE_DATA / name).read_bytes()
    schemas = sorted(SCHEMA_DIR.glob("*.json"))
    if not schemas:
        raise InputError("no run-record JSON Schemas found; the record room must provide them", str(SCHEMA_DIR))
    for path in schemas:
        files[f"schemas/{path.name}"] = path.read_bytes()
    for c in cases.CASES:
        files[f"cases/{c}.yaml"] = _case_yaml(cases.load_case(c), preset).encode()
    for path in sorted(forcefield.FORCEFIELD_DIR.rglob("*")):
        if path.is_file():
            rel = path.relative_to(forcefield.FORCEFIELD_DIR).as_posix()
            dest = rel if rel.startswith("geometries/") else f"forcefield/{rel}"
            files[dest] = path.read_bytes()
    return files


def checksum_text(files: dict[str, bytes]) -> str:
    """``sha256sum``-format lines (``<hex>  <path>``) sorted by path."""
    return "".join(f"{hashlib.sha256(files[p]).hexdigest()}  {p}\n" for p in sorted(files))


def build_bundle(preset: str, out_dir: str | Path, *, overwrite: bool = False) -> Path:
    """Write the input bundle for ``preset`` into ``out_dir`` (byte-identical for identical inputs).

    Raises
    ------
    InputError
        ``out_dir`` exists and is not empty (unless ``overwrite``), or the preset is invalid.
    """
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise InputError("bundle folder is not empty; choose a new folder or pass --overwrite", str(out))
        shutil.rmtree(out)
    files = bundle_files(preset)
    for rel, content in files.items():
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(content)
    (out / CHECKSUMS).write_text(checksum_text(files))
    return out


def verify_bundle(bundle_dir: str | Path) -> list[str]:
    """Compare a bundle with its ``bundle_checksums.sha256``.

    Returns
    -------
    list[str]
        Findings, one per file: ``changed: <path>``, ``missing: <path>``, ``extra: <path>``, or
        ``malformed: <checksum file line>``; empty when the bundle is intact.
    """
    root = Path(bundle_dir)
    listing = root / CHECKSUMS
    if not listing.is_file():
        return [f"missing: {CHECKSUMS}"]
    expected: dict[str, str] = {}
    findings: list[str] = []
    for n, line in enumerate(listing.read_text(errors="replace").splitlines(), 1):
        parts = line.split("  ", 1)
        if len(parts) != 2 or len(parts[0]) != 64 or parts[1].startswith("/") or ".." in parts[1].split("/"):
            findings.append(f"malformed: {CHECKSUMS} line {n}")
            continue
        expected[parts[1]] = parts[0]
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}
    present.discard(CHECKSUMS)
    for rel in sorted(expected):
        path = root / rel
        if rel not in present:
            findings.append(f"missing: {rel}")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != expected[rel]:
            findings.append(f"changed: {rel}")
    findings += [f"extra: {rel}" for rel in sorted(present - set(expected))]
    return findings


@dataclass(frozen=True)
class BundleInputs:
    """What the study pipeline takes from an agent input bundle instead of ``params/`` and package data.

    Attributes
    ----------
    root : Path
        The bundle folder (e.g. an episode's read-only ``agent_input/``).
    preset : str
        The size preset the bundle was built for (its case files say it); the pipeline's own protocol
        lengths for that size come from ``params/presets/<preset>.yaml``.
    counts : dict[str, dict[str, int]]
        case -> species -> number of molecules (order Li, FSI, DMC, TTE).
    atoms : dict[str, int]
        case -> total number of atoms.
    temperature_K, pressure_bar : dict[str, float]
        case -> target state.
    sha256 : str
        sha256 of ``bundle_checksums.sha256`` (binds a run to the exact bundle).
    """

    root: Path
    preset: str
    counts: dict[str, dict[str, int]]
    atoms: dict[str, int]
    temperature_K: dict[str, float]
    pressure_bar: dict[str, float]
    sha256: str

    @property
    def forcefield_dir(self) -> Path:
        """``forcefield/`` of the bundle (itp files, manifest)."""
        return self.root / "forcefield"

    @property
    def geometry_dir(self) -> Path:
        """``geometries/`` of the bundle (one PDB per species)."""
        return self.root / "geometries"


def load_bundle_inputs(bundle_dir: str | Path) -> BundleInputs:
    """Verify a bundle against its checksums and read its case definitions.

    Raises
    ------
    InputError
        The bundle fails verification (naming the first changed/missing/extra file), or a case file is
        missing or malformed, or the case files name different presets.
    """
    root = Path(bundle_dir).resolve()
    if not root.is_dir():
        raise InputError("bundle folder not found; pass the agent_input/ folder (mdbench bundle build)", str(root))
    findings = verify_bundle(root)
    if findings:
        raise InputError(f"bundle verification failed ({len(findings)} finding(s), first: {findings[0]}); "
                         "use an intact bundle — the inputs are frozen", str(root / CHECKSUMS))
    counts: dict[str, dict[str, int]] = {}
    atoms: dict[str, int] = {}
    temps: dict[str, float] = {}
    press: dict[str, float] = {}
    presets: set[str] = set()
    for c in cases.CASES:
        path = root / "cases" / f"{c}.yaml"
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            mols = doc["molecules"]
            counts[c] = {s: int(mols[s]["count"]) for s in cases.SPECIES}
            atoms[c] = int(doc["total_atoms"])
            temps[c], press[c] = float(doc["temperature_K"]), float(doc["pressure_bar"])
            presets.add(str(doc["preset"]))
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
            raise InputError(f"case definition unreadable ({type(exc).__name__}: {exc}); expected the layout "
                             "mdbench bundle build writes", str(path)) from None
        if cases.case_atoms(counts[c]) != atoms[c]:
            raise InputError(f"total_atoms {atoms[c]} disagrees with the molecule counts "
                             f"({cases.case_atoms(counts[c])} atoms)", str(path))
    if len(presets) != 1:
        raise InputError(f"the case files name different presets {sorted(presets)}", str(root / "cases"))
    digest = hashlib.sha256((root / CHECKSUMS).read_bytes()).hexdigest()
    return BundleInputs(root=root, preset=presets.pop(), counts=counts, atoms=atoms, temperature_K=temps,
                        pressure_bar=press, sha256=digest)
