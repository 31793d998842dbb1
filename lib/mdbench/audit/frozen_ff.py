"""The production as simulated against the frozen force field of the bundle (Sim1: force field as frozen).

The production run input (``.tpr``, read by ``gmx dump``: a reader, nothing of the run is executed) is
compared with the force-field files the bundle froze, not with the run's own equilibration input (an agent
that changes both would pass that comparison):

* every atom type the bundle defines in an ``[ atomtypes ]`` section: its Lennard-Jones self-interaction
  :math:`C_6 = 4\\varepsilon\\sigma^6`, :math:`C_{12} = 4\\varepsilon\\sigma^{12}` (combination rules 2 and 3;
  rule 1 lists C6/C12 directly) against the diagonal of the run input's LJ matrix, relative tolerance
  :data:`LJ_REL_TOL`;
* every molecule type the bundle defines in a ``[ moleculetype ]``/``[ atoms ]`` section: its atom types
  and charges [e] against the run input's, atom by atom (tolerance :data:`CHARGE_TOL_E`).

A difference is ``production_force_field_not_bundle`` (Sim1 = 0, both numbers). Atom types defined twice in
the bundle with different values (``#ifdef`` branches) and molecule types of other names are not compared.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from mdbench.audit.gmx_dump import _dump
from mdbench.audit.runread import RunData

#: Relative tolerance of a C6/C12 comparison (``gmx dump`` prints 9 significant digits, itp files fewer).
LJ_REL_TOL = 2e-3
#: Largest per-atom charge difference accepted [e].
CHARGE_TOL_E = 1e-4
#: Largest bundle force-field file read [bytes] and number of files.
MAX_ITP_BYTES = 16 << 20
MAX_ITP_FILES = 200

_SECTION = re.compile(r"^\s*\[\s*([A-Za-z_]+)\s*\]")
_PTYPES = {"A", "S", "V", "D"}


def _float(s: str) -> float | None:
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def parse_itp(text: str, comb_rule: int | None = None) -> tuple[dict[str, tuple[float, float]],
                                                                dict[str, list[tuple[str, float]]], int | None]:
    """(atom type → (C6, C12) [kJ mol⁻¹ nm⁶, kJ mol⁻¹ nm¹²], molecule type → [(atom type, charge [e])],
    combination rule) of one topology file's text. Preprocessor lines are skipped (both branches read)."""
    types: dict[str, tuple[float, float]] = {}
    mols: dict[str, list[tuple[str, float]]] = {}
    section, mol = "", None
    raw_types: list[tuple[str, float, float]] = []
    for line in text.splitlines():
        line = line.split(";", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        m = _SECTION.match(line)
        if m:
            section = m.group(1).lower()
            continue
        f = line.split()
        if section == "defaults" and len(f) >= 2 and f[1].isdigit():
            comb_rule = int(f[1])
        elif section == "atomtypes":
            k = next((i for i, x in enumerate(f) if x in _PTYPES and i >= 2), None)
            if k is not None and len(f) >= k + 3:
                a, b = _float(f[k + 1]), _float(f[k + 2])
                if a is not None and b is not None:
                    raw_types.append((f[0], a, b))
        elif section == "moleculetype":
            mol = f[0]
            mols.setdefault(mol, [])
        elif section == "atoms" and mol is not None and len(f) >= 7:
            q = _float(f[6])
            if q is not None:
                mols[mol].append((f[1], q))
    for name, a, b in raw_types:
        c6, c12 = (a, b) if comb_rule == 1 else (4.0 * b * a ** 6, 4.0 * b * a ** 12)
        if name in types and types[name] != (c6, c12):
            types[name] = (math.nan, math.nan)  # defined twice with different values: ambiguous, not compared
        else:
            types[name] = (c6, c12)
    return types, mols, comb_rule


def bundle_force_field(root: str | Path | None) -> tuple[dict[str, tuple[float, float]],
                                                         dict[str, list[tuple[str, float]]]]:
    """Atom types and molecule types of every ``.itp``/``.top`` file of the bundle (regular files only)."""
    types: dict[str, tuple[float, float]] = {}
    mols: dict[str, list[tuple[str, float]]] = {}
    if root is None or not Path(root).is_dir():
        return types, mols
    files = sorted(p for p in Path(root).rglob("*") if p.suffix in (".itp", ".top")
                   and not p.is_symlink() and p.is_file())[:MAX_ITP_FILES]
    texts = []
    comb = None
    for p in files:
        try:
            if p.stat().st_size > MAX_ITP_BYTES:
                continue
            t = p.read_text(errors="replace")
        except OSError:
            continue
        texts.append(t)
        comb = parse_itp(t)[2] or comb
    for t in texts:
        ty, mo, _ = parse_itp(t, comb)
        for k, v in ty.items():
            if k in types and types[k] != v:
                types[k] = (math.nan, math.nan)
            else:
                types.setdefault(k, v)
        for k, v in mo.items():
            mols.setdefault(k, v)
    return types, mols


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def _sigma_eps(c6: float, c12: float) -> str:
    if c6 > 0 and c12 > 0:
        return f"σ = {(c12 / c6) ** (1 / 6):.5g} nm, ε = {c6 * c6 / (4 * c12):.5g} kJ/mol"
    return f"C6 = {c6:.4g}, C12 = {c12:.4g}"


def differences(ff: dict[str, Any] | None, bundle_types: dict[str, tuple[float, float]],
                bundle_mols: dict[str, list[tuple[str, float]]]) -> list[str]:
    """Why a run input's force field (:func:`parse_dump_topology`) differs from the bundle's, with both
    numbers; empty when it does not (or nothing could be compared)."""
    if not ff:
        return []
    out: list[str] = []
    for name, (c6, c12) in sorted(ff["lj"].items()):
        want = bundle_types.get(name)
        if want is None or not all(math.isfinite(x) for x in want):
            continue
        if _rel(c6, want[0]) > LJ_REL_TOL or _rel(c12, want[1]) > LJ_REL_TOL:
            out.append(f"atom type {name}: the production run input has {_sigma_eps(c6, c12)}, the bundle "
                       f"{_sigma_eps(*want)}")
    for mol, atoms in sorted(ff["molecules"].items()):
        want_atoms = bundle_mols.get(mol)
        if not want_atoms:
            continue
        if len(want_atoms) != len(atoms):
            out.append(f"molecule type {mol}: {len(atoms)} atoms in the production run input, {len(want_atoms)} in "
                       "the bundle")
            continue
        for i, ((t, q), (tw, qw)) in enumerate(zip(atoms, want_atoms)):
            if t != tw or abs(q - qw) > CHARGE_TOL_E:
                out.append(f"molecule type {mol}, atom {i + 1}: the production run input has type {t}, charge "
                           f"{q:+.5g} e; the bundle type {tw}, charge {qw:+.5g} e")
                break
    return out[:10]


def production_vs_bundle(run: RunData, bundle: Any, case: str, pf: Any) -> str | None:
    """Sim1: why the production run input's force field is not the bundle's (None when it is, or when GROMACS,
    the run input or the bundle's force-field files are unavailable)."""
    if pf is None or getattr(pf, "tpr", None) is None or bundle is None or getattr(bundle, "root", None) is None:
        return None
    got = _dump(run, pf.tpr)
    ff = got[2] if len(got) > 2 else None
    if not ff:
        return None
    cache = run.fs.__dict__.setdefault("_bundle_ff", {})
    if "ff" not in cache:
        cache["ff"] = bundle_force_field(bundle.root)
    diffs = differences(ff, *cache["ff"])
    if not diffs:
        return None
    return f"the production run input {pf.tpr} is not the bundle's force field: " + "; ".join(diffs)
