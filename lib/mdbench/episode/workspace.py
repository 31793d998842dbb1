"""Prepare an episode folder and check, after the run, that the agent left its inputs alone.

:func:`prepare_episode` writes ``EP/`` (layout in :mod:`mdbench.episode`) from a preset's bundle. The output
depends only on the preset, the committed inputs, the configuration, the limits and the installed software:
no timestamps, no absolute paths, sorted keys — two preparations are byte-identical (and so are the file
modes). :func:`check_integrity` compares ``workspace/agent_input/`` with the evaluator's pristine checksum
list after the run and keeps the evidence of every difference.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import stat
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mdbench.errors import InputError

EPISODE_SCHEMA = "mdbench-episode/1"
EPISODE_JSON = "episode.json"
RESULT_JSON = "result.json"
WORKSPACE = "workspace"
AGENT_INPUT = "agent_input"
PROMPT = "PROMPT.md"
BUNDLE = "bundle"
CHECKSUMS = "bundle_checksums.sha256"
#: Wall-clock limit of an agent [min] where its preset gives no ``episode_timeout_min``.
FALLBACK_TIMEOUT_MIN = 120.0


def default_timeout_min(preset: str) -> float:
    """The default wall-clock limit of an agent [min] on ``preset``: its ``episode_timeout_min``
    (:func:`mdbench.inputs.cases.load_preset`), else :data:`FALLBACK_TIMEOUT_MIN`."""
    from mdbench.inputs.cases import load_preset  # noqa: PLC0415

    timeout = load_preset(preset).episode_timeout_min
    return FALLBACK_TIMEOUT_MIN if timeout is None else timeout


#: Configuration keys every episode has (more may be given).
CONFIG_KEYS = ("harness", "model", "repeat")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
#: Largest file kept as evidence of an input change [bytes].
EVIDENCE_MAX_BYTES = 5_000_000


@dataclass(frozen=True)
class Limits:
    """The seed's limits on one episode (section A.1.2, Budget and resources), plus the wall-clock guard.

    Attributes
    ----------
    md_budget_ns_per_case, md_budget_ns_total : float
        Cumulative MD trajectory budget [ns] (100 per case, 300 in total).
    cpu_threads_max : int
        Logical CPU threads all the candidate's processes may use together (16).
    concurrent_gpu_jobs_max : int
        GPU MD jobs at any time (1; the agent's duty, recorded by the episode).
    timeout_min : float
        Wall-clock limit of the whole process tree [min].
    grace_s : float
        Between SIGTERM and SIGKILL of every remaining process at the timeout [s].
    """

    md_budget_ns_per_case: float = 100.0
    md_budget_ns_total: float = 300.0
    cpu_threads_max: int = 16
    concurrent_gpu_jobs_max: int = 1
    timeout_min: float = 120.0
    grace_s: float = 10.0


@dataclass
class Episode:
    """A prepared episode folder (``episode.json`` read back)."""

    root: Path
    episode_id: str
    preset: str
    bundle_sha256: str
    configuration: dict[str, Any]
    limits: Limits
    software: dict[str, str] = field(default_factory=dict)

    @property
    def workspace(self) -> Path:
        return self.root / WORKSPACE

    @property
    def agent_input(self) -> Path:
        return self.root / WORKSPACE / AGENT_INPUT

    @property
    def prompt(self) -> Path:
        return self.root / WORKSPACE / PROMPT

    @property
    def bundle(self) -> Path:
        return self.root / BUNDLE

    @property
    def label(self) -> str:
        """``harness / model`` (the configuration a figure groups by)."""
        return f"{self.configuration.get('harness', '?')} / {self.configuration.get('model', '?')}"


def parse_config(pairs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``("harness=codex", "model=gpt-5 repeat=2")`` → ``{"harness": "codex", "model": "gpt-5", "repeat": 2}``.

    Raises
    ------
    InputError
        A pair without ``=``, an empty key, or a repeat that is not a positive integer.
    """
    config: dict[str, Any] = {}
    for chunk in pairs:
        for pair in str(chunk).split():
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise InputError(f"--config expects KEY=VALUE pairs (harness=NAME model=NAME repeat=K), got {pair!r}")
            config[key.strip()] = value.strip()
    config.setdefault("harness", "unspecified")
    config.setdefault("model", "unspecified")
    try:
        config["repeat"] = int(config.get("repeat", 1))
    except ValueError:
        raise InputError(f"repeat must be a positive integer, got {config['repeat']!r}") from None
    if config["repeat"] < 1:
        raise InputError(f"repeat must be a positive integer, got {config['repeat']}")
    return config


def software_versions() -> dict[str, str]:
    """mdbench, Python, GROMACS and packmol versions (``"not found"`` for a missing tool)."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        mdb = version("mdbench")
    except PackageNotFoundError:
        mdb = "unknown"
    out = {"mdbench": mdb, "python": platform.python_version()}
    gmx = shutil.which("gmx") or shutil.which("gmx_mpi")
    out["gromacs"] = "not found"
    if gmx:
        try:
            text = subprocess.run([gmx, "--version"], capture_output=True, text=True, timeout=60).stdout
            m = re.search(r"GROMACS version:\s*(\S+)", text)
            out["gromacs"] = m.group(1) if m else "unknown"
        except (OSError, subprocess.TimeoutExpired):
            out["gromacs"] = "unknown"
    packmol = shutil.which("packmol")
    out["packmol"] = "not found"
    if packmol:
        try:
            text = subprocess.run([packmol], input="", capture_output=True, text=True, timeout=30).stdout
            m = re.search(r"Version\s+(\S+)", text)
            out["packmol"] = m.group(1) if m else "unknown"
        except (OSError, subprocess.TimeoutExpired):
            out["packmol"] = "unknown"
    return out


def episode_id(preset: str, bundle_sha256: str, config: dict[str, Any]) -> str:
    """``<harness>__<model>__r<repeat>__<preset>-<8 hex>``: readable, unique per configuration and bundle."""
    digest = hashlib.sha256(json.dumps({"preset": preset, "bundle": bundle_sha256, "config": config},
                                       sort_keys=True).encode()).hexdigest()[:8]
    parts = [_SAFE.sub("-", str(config["harness"])), _SAFE.sub("-", str(config["model"])), f"r{config['repeat']}"]
    return "__".join(parts) + f"__{preset}-{digest}"


def write_readonly_tree(files: dict[str, bytes], dest: Path) -> None:
    """Write ``files`` under ``dest``; then files 0444 and folders 0555 (deepest first)."""
    for rel in sorted(files):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(files[rel])
    for folder, dirs, names in os.walk(dest, topdown=False):
        for n in names:
            os.chmod(Path(folder) / n, 0o444)
        os.chmod(folder, 0o555)


def bundle_tree(preset: str | None = None, bundle_dir: str | Path | None = None) -> dict[str, bytes]:
    """Every file of a bundle (checksum list included): built from ``preset``, or read from ``bundle_dir``
    after verifying it."""
    from mdbench.inputs.bundle import bundle_files, checksum_text, verify_bundle  # noqa: PLC0415

    if bundle_dir is not None:
        root = Path(bundle_dir)
        findings = verify_bundle(root)
        if findings:
            raise InputError(f"bundle verification failed: {findings[0]} ({len(findings)} finding(s))", str(root))
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    files = bundle_files(preset)
    files[CHECKSUMS] = checksum_text(files).encode()
    return files


def prepare_episode(preset: str, out: str | Path, config: dict[str, Any] | None = None, *,
                    limits: Limits | None = None, bundle_dir: str | Path | None = None) -> Episode:
    """Write the episode folder ``out`` (see :mod:`mdbench.episode`).

    Parameters
    ----------
    preset : str
        Size preset of the bundle (``micro`` … ``paper``); with ``bundle_dir`` it must match the bundle's.
    out : path
        New (or empty) folder.
    config : dict, optional
        ``harness``, ``model``, ``repeat`` and any other labels (:func:`parse_config`).
    limits : Limits, optional
        Default: the seed's limits and :func:`default_timeout_min` of the preset.
    bundle_dir : path, optional
        An existing bundle to use instead of building it (verified against its checksums first).

    Raises
    ------
    InputError
        ``out`` exists and is not empty, the preset is unknown, or the bundle fails verification.
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError("episode folder exists and is not empty; choose a new folder", str(out))
    config = parse_config([f"{k}={v}" for k, v in (config or {}).items()])
    files = bundle_tree(preset, bundle_dir)
    preset_of_bundle = bundle_preset(files)
    if preset_of_bundle != preset:
        raise InputError(f"the bundle was built for preset {preset_of_bundle!r}, not {preset!r}", str(bundle_dir))
    sha = hashlib.sha256(files[CHECKSUMS]).hexdigest()
    limits = limits or Limits(timeout_min=default_timeout_min(preset))
    ep_id = episode_id(preset, sha, config)
    doc = {
        "schema": EPISODE_SCHEMA, "episode_id": ep_id, "preset": preset,
        "bundle": {"sha256": sha, "files": len(files), "checksums": f"{BUNDLE}/{CHECKSUMS}"},
        "configuration": config, "limits": asdict(limits), "software": software_versions(),
        "layout": {"workspace": WORKSPACE, "agent_input": f"{WORKSPACE}/{AGENT_INPUT}", "prompt": f"{WORKSPACE}/{PROMPT}",
                   "bundle": BUNDLE, "agent_logs": "agent", "audit": "audit", "result": RESULT_JSON},
    }
    out.mkdir(parents=True, exist_ok=True)
    write_readonly_tree(files, out / BUNDLE)
    (out / WORKSPACE).mkdir()
    write_readonly_tree(files, out / WORKSPACE / AGENT_INPUT)
    prompt = out / WORKSPACE / PROMPT
    prompt.write_bytes(files["PROMPT_TEMPLATE.md"])
    os.chmod(prompt, 0o444)
    (out / EPISODE_JSON).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return load_episode(out)


def fresh_workspace(ep: Episode) -> None:
    """A new ``EP/workspace/`` from the evaluator's pristine ``bundle/`` (verified first): ``agent_input/``
    read-only and ``PROMPT.md``, nothing else. The caller has moved any earlier workspace away.

    Raises
    ------
    InputError
        ``workspace/`` still exists, or the pristine bundle fails verification.
    """
    if os.path.lexists(ep.workspace):
        raise InputError("the workspace still exists; move it away first", str(ep.workspace))
    files = bundle_tree(bundle_dir=ep.bundle)
    ep.workspace.mkdir()
    write_readonly_tree(files, ep.agent_input)
    ep.prompt.write_bytes(files["PROMPT_TEMPLATE.md"])
    os.chmod(ep.prompt, 0o444)


def bundle_preset(files: dict[str, bytes]) -> str | None:
    import yaml  # noqa: PLC0415

    try:
        return str(yaml.safe_load(files["cases/DE.yaml"])["preset"])
    except (KeyError, TypeError, yaml.YAMLError):
        return None


def load_episode(path: str | Path) -> Episode:
    """Read ``EP/episode.json``.

    Raises
    ------
    InputError
        No or malformed ``episode.json`` (the message says to run ``mdbench episode prepare``).
    """
    root = Path(path)
    f = root / EPISODE_JSON
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
        if doc.get("schema") != EPISODE_SCHEMA:
            raise ValueError(f"schema {doc.get('schema')!r}")
        return Episode(root=root, episode_id=doc["episode_id"], preset=doc["preset"],
                       bundle_sha256=doc["bundle"]["sha256"], configuration=dict(doc["configuration"]),
                       limits=Limits(**doc["limits"]), software=dict(doc.get("software") or {}))
    except FileNotFoundError:
        raise InputError("not an episode folder (no episode.json); create it with `mdbench episode prepare`",
                         str(f)) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"episode.json is malformed ({exc}); prepare the episode again", str(f)) from None


# ----------------------------------------------------------------------------- integrity after the run
def _expected(pristine: Path) -> dict[str, str]:
    """Relative path → sha256 of every bundle file, the checksum list included (from the pristine copy)."""
    listing = (pristine / CHECKSUMS).read_bytes()
    expected = {}
    for line in listing.decode().splitlines():
        digest, _, rel = line.partition("  ")
        expected[rel] = digest
    expected[CHECKSUMS] = hashlib.sha256(listing).hexdigest()
    return expected


def _tree(root: Path) -> dict[str, os.stat_result]:
    """Relative path → lstat of every entry below ``root`` (symlinks not followed; depth and count capped by
    :func:`mdbench.untrusted.walk`, so a 1,100-level tree planted with ``--as-caller`` is listed, not recursed)."""
    from mdbench import untrusted  # noqa: PLC0415

    out: dict[str, os.stat_result] = {}
    if not root.is_dir() or root.is_symlink():
        return out
    try:
        listing = untrusted.walk(root, max_depth=32, max_entries=20_000)
    except untrusted.Refused:
        return out
    for e in listing.entries:
        try:
            out[e.relpath] = os.lstat(root / e.relpath)
        except OSError:
            continue
    return out


def _sha256_regular(path: Path) -> str | None:
    """sha256 of a regular file (:func:`mdbench.untrusted.open_regular`: no link followed, no FIFO opened
    blocking); None for anything else."""
    from mdbench import untrusted  # noqa: PLC0415

    try:
        fd = untrusted.open_regular(path)
    except untrusted.Refused:
        return None
    with os.fdopen(fd, "rb") as fh:
        digest = hashlib.sha256()
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
        return digest.hexdigest()


def compare_inputs(agent_input: Path, pristine: Path, prompt: Path | None = None,
                   evidence_dir: Path | None = None) -> dict[str, Any]:
    """Compare an agent's ``agent_input/`` (and ``PROMPT.md``) with the pristine bundle's checksum list.

    Returns
    -------
    dict
        ``intact`` (bool), ``findings`` (``changed|missing|extra|not_a_file|mode: <path>``),
        ``checked_files`` and, when not intact and ``evidence_dir`` is given, ``evidence``: the path of
        ``findings.json`` in ``evidence_dir`` beside a copy of each changed or extra file (up to
        :data:`EVIDENCE_MAX_BYTES`; symlinks recorded by their target, never followed).
    """
    expected = _expected(pristine)
    findings: list[str] = []
    evidence_files: dict[str, str] = {}
    present: dict[str, os.stat_result] = {}
    if agent_input.is_symlink() or not agent_input.is_dir():
        findings.append(f"missing: {AGENT_INPUT}/ (replaced or removed)")
    else:
        present = _tree(agent_input)
        mode = stat.S_IMODE(os.lstat(agent_input).st_mode)
        if mode != 0o555:
            findings.append(f"mode: {AGENT_INPUT}/ is {oct(mode)}, expected 0o555")
    for rel, digest in sorted(expected.items()):
        st = present.get(rel)
        if st is None:
            findings.append(f"missing: {rel}")
        elif not stat.S_ISREG(st.st_mode):
            findings.append(f"not_a_file: {rel}")
            evidence_files[rel] = "symlink" if stat.S_ISLNK(st.st_mode) else "special"
        elif _sha256_regular(agent_input / rel) != digest:
            findings.append(f"changed: {rel}")
            evidence_files[rel] = "changed"
        elif stat.S_IMODE(st.st_mode) != 0o444:
            findings.append(f"mode: {rel} is {oct(stat.S_IMODE(st.st_mode))}, expected 0o444")
    parents = {Path(r).parent.as_posix() for r in expected}
    for rel, st in sorted(present.items()):
        if rel in expected or (stat.S_ISDIR(st.st_mode) and any(d == rel or d.startswith(rel + "/")
                                                                 for d in parents)):
            continue
        findings.append(f"extra: {rel}")
        evidence_files[rel] = "extra"
    checked = len(expected)
    if prompt is not None:
        checked += 1
        prompt_sha = _sha256_regular(prompt)
        if prompt_sha != expected.get("PROMPT_TEMPLATE.md"):
            findings.append(f"changed: ../{PROMPT}" if prompt_sha else f"missing: ../{PROMPT}")
    out: dict[str, Any] = {"intact": not findings, "findings": findings, "checked_files": checked}
    if findings and evidence_dir is not None:
        out["evidence"] = _keep_evidence(agent_input, evidence_dir, findings, evidence_files)
    return out


def check_integrity(ep: Episode, keep_evidence: bool = True) -> dict[str, Any]:
    """:func:`compare_inputs` of an episode's workspace against its pristine ``bundle/``; evidence goes to
    ``EP/integrity/`` (paths in the result relative to ``EP``)."""
    out = compare_inputs(ep.agent_input, ep.bundle, ep.prompt, ep.root / "integrity" if keep_evidence else None)
    if "evidence" in out:
        out["evidence"] = Path(out["evidence"]).relative_to(ep.root).as_posix()
    return out


def _keep_evidence(root: Path, dest: Path, findings: list[str], files: dict[str, str]) -> str:
    copies = dest / "agent_input_after_run"
    kept: dict[str, Any] = {}
    for rel, why in sorted(files.items()):
        src = root / rel
        try:
            st = os.lstat(src)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            kept[rel] = {"kind": "symlink", "target": os.readlink(src)[:500]}
        elif stat.S_ISREG(st.st_mode) and st.st_size <= EVIDENCE_MAX_BYTES:
            target = copies / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            from mdbench import untrusted  # noqa: PLC0415

            try:
                target.write_bytes(untrusted.read_bytes(src, max_bytes=EVIDENCE_MAX_BYTES))
            except untrusted.Refused:
                continue
            kept[rel] = {"kind": why, "copy": f"{dest.name}/agent_input_after_run/{rel}", "bytes": st.st_size}
        else:
            kept[rel] = {"kind": why, "bytes": st.st_size, "copy": None}
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "findings.json").write_text(json.dumps({"findings": findings, "files": kept}, indent=1, sort_keys=True)
                                        + "\n", encoding="utf-8")
    return str(dest / "findings.json")
