"""The frozen agent-input bundle as the audit sees it: case definitions, force-field files, checksums.

The bundle layout is read tolerantly: a case definition is any YAML/JSON file named after the case
(``cases/DE.yaml``, ``case_definitions/de.json``, ``DE.yaml`` …) with a ``molecules`` mapping
(name → count, in topology order) or list of ``{name, count}``; optional ``charges`` (molecule →
net charge [e]), ``target_temperature_K`` and ``required_targets`` (observable group → targets).
Force-field files are every ``*.itp``/``*.top``/``*.ff`` file of the bundle; ``bundle_checksums.sha256``
lines are ``<sha256>  <relative path>``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mdbench.audit.model import Finding
from mdbench.audit.safeio import sha256_file
from mdbench.yamlio import safe_load

log = logging.getLogger(__name__)


@dataclass
class CaseDefinition:
    """Expected composition of one case."""

    name: str
    molecules: list[tuple[str, int]]
    charges: dict[str, float] = field(default_factory=dict)
    target_temperature_K: float = 298.15
    required_targets: dict[str, list[str]] | None = None
    source: str | None = None


@dataclass
class Bundle:
    """Parsed bundle: case definitions, force-field checksums by file name, checksum-file findings."""

    root: Path | None
    cases: dict[str, CaseDefinition]
    ff_sha256: dict[str, str]
    checksum_findings: list[Finding]
    checksums_verified: int = 0


def _molecules(obj: Any) -> list[tuple[str, int]] | None:
    """(topology molecule name, count) in topology order from a case definition, or None."""
    mols = None
    if isinstance(obj, dict):
        for k in ("molecules", "composition", "counts", "molecule_counts"):
            if k in obj:
                mols = obj[k]
                break
    if isinstance(mols, dict):
        order = obj.get("molecule_order") if isinstance(obj.get("molecule_order"), list) else list(mols)
        out = []
        for k in order:
            v = mols.get(k)
            if isinstance(v, dict) and isinstance(v.get("count"), int):
                out.append((str(v.get("molecule_type", k)), int(v["count"])))
            elif isinstance(v, int) and not isinstance(v, bool):
                out.append((str(k), int(v)))
        return out or None
    if isinstance(mols, list):
        out = []
        for m in mols:
            if isinstance(m, dict) and "count" in m and ("name" in m or "molecule" in m):
                out.append((str(m.get("name", m.get("molecule"))), int(m["count"])))
        return out or None
    return None


def itp_net_charges(path: Path) -> dict[str, float]:
    """Net charge [e] of each ``[ moleculetype ]`` in an .itp file (sum of the ``[ atoms ]`` charge column)."""
    out: dict[str, float] = {}
    section, name = None, None
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.split(";", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            section = line.strip("[] ").lower()
            continue
        parts = line.split()
        if section == "moleculetype":
            name = parts[0]
            out[name] = 0.0
        elif section == "atoms" and name is not None and len(parts) >= 7:
            try:
                out[name] += float(parts[6])
            except ValueError:
                pass
    return out


def _load(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if path.suffix == ".json" else safe_load(text)
    except (OSError, ValueError, yaml.YAMLError, UnicodeDecodeError):
        return None


def load_bundle(root: str | Path | None, max_files: int = 5000) -> Bundle:
    """Read a bundle directory; a missing or unreadable bundle gives an empty :class:`Bundle`."""
    if root is None or not Path(root).is_dir():
        return Bundle(None, {}, {}, [Finding("bundle_missing", f"agent input bundle not found: {root}",
                                             str(root), item="Sim1")])
    root = Path(root)
    cases: dict[str, CaseDefinition] = {}
    ff: dict[str, str] = {}
    files = [p for p in sorted(root.rglob("*")) if p.is_file()][:max_files]
    for p in files:
        if p.suffix in (".itp", ".top") or p.suffix == ".ff":
            ff.setdefault(p.name, sha256_file(p))
        if p.suffix in (".yaml", ".yml", ".json") and p.stat().st_size < 1_000_000:
            data = _load(p)
            mols = _molecules(data)
            if mols is None:
                continue
            name = str(data.get("case", data.get("name", p.stem))) if isinstance(data, dict) else p.stem
            charges = dict(data.get("charges")) if isinstance(data.get("charges"), dict) else {}
            if isinstance(data.get("molecules"), dict):
                for v in data["molecules"].values():
                    itp = root / str(v.get("itp", "")) if isinstance(v, dict) and v.get("itp") else None
                    if itp is not None and itp.is_file() and root.resolve() in itp.resolve().parents:
                        for mol, q in itp_net_charges(itp).items():
                            charges.setdefault(mol, round(q, 6))
            temp = data.get("target_temperature_K", data.get("temperature_K", 298.15))
            req = data.get("required_targets") if isinstance(data.get("required_targets"), dict) else None
            cases[name] = CaseDefinition(
                name=name, molecules=mols,
                charges={str(k): float(v) for k, v in charges.items() if isinstance(v, (int, float))},
                target_temperature_K=float(temp) if isinstance(temp, (int, float)) else 298.15,
                required_targets={str(k): [str(t) for t in v] for k, v in req.items() if isinstance(v, list)}
                if req else None,
                source=p.relative_to(root).as_posix())
    findings: list[Finding] = []
    verified = 0
    ck = root / "bundle_checksums.sha256"
    if ck.is_file():
        for n, line in enumerate(ck.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            parts = line.split()
            if len(parts) < 2:
                continue
            digest, rel = parts[0], parts[-1].lstrip("*")
            target = (root / rel).resolve()
            if root.resolve() not in target.parents or not target.is_file():
                findings.append(Finding("bundle_checksum", f"listed file missing: {rel}", "bundle_checksums.sha256",
                                        n, item="E2"))
            elif sha256_file(target) != digest:
                findings.append(Finding("bundle_checksum", f"checksum mismatch: {rel}", "bundle_checksums.sha256",
                                        n, item="E2"))
            else:
                verified += 1
    return Bundle(root, cases, ff, findings, verified)
