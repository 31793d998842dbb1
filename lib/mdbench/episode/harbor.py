"""The episode as a Harbor task, so that any Harbor agent (Codex, OpenCode, Claude Code, …) can be run on it
with ``harbor run -p DIR -a AGENT -m MODEL``.

Layout written by :func:`write_harbor_task` (Harbor's task format, ``task.toml`` schema 1.3)::

    task.toml             cpus, memory, GPUs, agent and verifier timeouts, metadata (preset, bundle sha256, limits);
                          the verifier runs in a fresh container (``environment_mode = "separate"``) into which
                          Harbor copies the agent's ``/app`` (``artifacts = ["/app"]``), so nothing the agent left
                          running or installed can touch the scoring; the agent has no network
                          (``network_mode = "no-network"``)
    instruction.md        the bundle's prompt
    environment/          the AGENT's image: the agent toolchain only, never mdbench
      Dockerfile          pinned base image (digest), GROMACS and packmol at Debian 12's versions, the scientific
                          Python of ``scripts/agent_env.sh`` at exact versions; /app/agent_input/ baked read-only
                          (root-owned, 0444/0555); the agent runs as the unprivileged user ``agent`` in /app
      agent-requirements.txt   the agent toolchain's Python packages, every one ``==``-pinned
      agent_input/        the bundle
      PROMPT.md
    tests/                the VERIFIER's image (Harbor builds ``tests/Dockerfile`` for the separate verifier)
      Dockerfile          the same pinned base, GROMACS, packmol and mdbench (constraints: exact versions)
      mdbench/            the project's source (lib/, params/, templates/, pyproject.toml, constraints.txt)
      test.sh             ``python3 -m mdbench.episode.harbor verify`` → /logs/verifier/reward.json
      bundle/             the pristine bundle (the agent never sees tests/)
    solution/             Harbor's oracle (``harbor run -a oracle``), uploaded only for the oracle
      solve.sh            ``mdbench-oracle``: under Docker installed from ``solution/mdbench`` and the wheels in
                          ``solution/wheels`` (``oracle_wheels=``; the agent image has no network and no mdbench)
      mdbench/

``reward.json`` is ``{"reward": score/100, "simulation": S, "analysis": A, "evidence": E, "outcome": O}``
(dimension means in [0, 1]; always finite numbers, as Harbor requires), beside the audit's ``saeo.json`` and
``findings.md``. A verifier that cannot finish writes reward 0 and exits non-zero. The verifier compares the
agent's ``agent_input/`` with the bundle by content, file set and file type; permission bits are not compared
there, since Harbor's artifact transfer (a tar ``data`` filter) resets them (``integrity.modes_not_checked``).

With ``base_image="mdbench-arena-base:0.2"`` (``--base-image``) the task runs under ``harbor run`` with the mdbench
host plug-in (``-e mdbench.arena.harbor_env:HostEnvironment``): the environment holds only the bundle and the
prompt (no project source, no tests/Dockerfile), the agent runs confined with the agent toolchain, and the oracle
and the verifier use this machine's mdbench. ``harbor lint --select ALL`` passes with the default base image
(:data:`DEFAULT_BASE_IMAGE`, pinned to a digest); the host variant's local base image has no registry digest and
leaves exactly one finding there (``unpinned-image``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from mdbench import untrusted
from mdbench.episode.workspace import (AGENT_INPUT, CHECKSUMS, PROMPT, Limits, bundle_preset, bundle_tree,
                                       compare_inputs, default_timeout_min, write_readonly_tree)
from mdbench.errors import InputError
from mdbench.paths import PROJECT_ROOT

#: The agent's working directory in the image: the run directory it must write, collected for the verifier.
WORKDIR = "/app"
#: Keys of reward.json (Harbor requires every value to be a finite number).
REWARD_KEYS = ("reward", "simulation", "analysis", "evidence", "outcome")
#: The project files the verifier's image (and the Docker oracle) install mdbench from.
SOURCE_ENTRIES = ("lib", "params", "templates", "pyproject.toml", "README.md")
#: Default FROM of both images: Python 3.11.13 on Debian 12, pinned to the digest of its published image index.
DEFAULT_BASE_IMAGE = ("python:3.11.13-slim-bookworm@sha256:"
                      "86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1")
#: Exact versions of the agent toolchain's Python packages (the list of scripts/agent_env.sh, frozen).
AGENT_REQUIREMENTS = PROJECT_ROOT / "templates" / "arena" / "agent-requirements.txt"
#: Exact versions of every Python package of mdbench (the verifier's image).
CONSTRAINTS = PROJECT_ROOT / "templates" / "arena" / "constraints.txt"
_SKIP = ("__pycache__", ".egg-info", ".pyc", ".pytest_cache")

#: Image repository of the arena's base image: a task built FROM it also runs under the mdbench host plug-in
#: (``harbor run -e mdbench.arena.harbor_env:HostEnvironment``), which provides GROMACS, packmol and Python.
HOST_BASE_REPO = "mdbench-arena-base"

#: The agent's image: the agent toolchain only (no mdbench, no project source, no oracle on its PATH).
DOCKERFILE = """\
# ElectrolyteMD-Bench episode ({preset} preset): the AGENT's image, written by `mdbench episode harbor-task`.
# The agent toolchain only: GROMACS, packmol and the scientific Python of scripts/agent_env.sh, every version
# pinned. The verifier's image is tests/Dockerfile (Harbor builds it for the separate verifier).
FROM {base_image}
RUN apt-get update \\
 && apt-get install -y --no-install-recommends gromacs=2022.5-2 packmol=1:20.14.0-1 bash \\
 && rm -rf /var/lib/apt/lists/*
COPY agent-requirements.txt /tmp/agent-requirements.txt
RUN pip install --no-cache-dir -r /tmp/agent-requirements.txt && rm /tmp/agent-requirements.txt \\
 && mkdir -p /logs/agent
# The agent works in /app as an unprivileged user; the frozen inputs belong to root and are read-only.
RUN useradd --create-home --uid 1000 --shell /bin/bash agent
WORKDIR /app
COPY agent_input/ /app/agent_input/
COPY PROMPT.md /app/PROMPT.md
RUN chown -R root:root /app/agent_input /app/PROMPT.md \\
 && find /app/agent_input -type d -exec chmod 0555 {{}} + \\
 && find /app/agent_input -type f -exec chmod 0444 {{}} + \\
 && chmod 0444 /app/PROMPT.md && chown agent:agent /app
ENV MDBENCH_PROMPT=/app/PROMPT.md MDBENCH_AGENT_INPUT=/app/agent_input MDBENCH_THREADS={cpus} \\
    MDBENCH_THREAD_CAP={cap} OMP_NUM_THREADS={cpus} MPLBACKEND=Agg
"""

#: The separate verifier's image (``tests/Dockerfile``; build context ``tests/``): mdbench and its dependencies.
VERIFIER_DOCKERFILE = """\
# ElectrolyteMD-Bench episode ({preset} preset): the VERIFIER's image, written by `mdbench episode harbor-task`.
# Harbor builds it for the separate verifier (never for the agent): mdbench at exact versions, GROMACS, packmol.
FROM {base_image}
RUN apt-get update \\
 && apt-get install -y --no-install-recommends gromacs=2022.5-2 packmol=1:20.14.0-1 bash \\
 && rm -rf /var/lib/apt/lists/*
COPY mdbench/ /opt/mdbench/
RUN pip install --no-cache-dir -c /opt/mdbench/constraints.txt /opt/mdbench \\
 && mkdir -p /logs/verifier /app
WORKDIR /app
ENV MDBENCH_ROOT=/opt/mdbench MPLBACKEND=Agg
"""

HOST_DOCKERFILE = """\
# ElectrolyteMD-Bench episode ({preset} preset) as a Harbor task environment, written by mdbench episode harbor-task.
# FROM the arena base image: under `harbor run -e mdbench.arena.harbor_env:HostEnvironment` this machine provides
# GROMACS, packmol and Python; the agent runs confined with the agent toolchain only (no mdbench, no project
# checkout), the verifier in a fresh workspace with the project's interpreter. /app is the run directory (sticky:
# the agent adds files, the root-owned inputs stay).
FROM {base_image}
WORKDIR /app
COPY agent_input/ /app/agent_input/
COPY PROMPT.md /app/PROMPT.md
RUN find /app/agent_input -type d -exec chmod 0555 {{}} + \\
 && find /app/agent_input -type f -exec chmod 0444 {{}} + \\
 && chmod 0444 /app/PROMPT.md && chmod 1777 /app
ENV MDBENCH_PROMPT=/app/PROMPT.md MDBENCH_AGENT_INPUT=/app/agent_input MDBENCH_THREADS={cpus} \\
    MDBENCH_THREAD_CAP={cap} OMP_NUM_THREADS={cpus} MPLBACKEND=Agg
"""

TEST_SH = """\
#!/bin/bash
# Harbor verifier: input integrity of /app/agent_input, then the SAEO audit of the run directory /app against the
# pristine bundle in /tests/bundle (never visible to the agent) -> /logs/verifier/reward.json. The verifier runs in
# a fresh container (verifier.environment_mode = "separate"); Harbor copies the agent's /app into it as an
# artifact. Every path rewrites reward.json: a verifier that cannot finish scores 0 and exits non-zero.
set -u
OUT="${{MDBENCH_VERIFIER_DIR:-${{ARENA_VERIFIER_DIR:-/logs/verifier}}}}"
mkdir -p "$OUT"
rm -f "$OUT/reward.json" "$OUT/reward.txt"
if ! "${{MDBENCH_PYTHON:-python3}}" -m mdbench.episode.harbor verify \\
  --workspace "${{MDBENCH_WORKSPACE:-${{ARENA_APP_DIR:-/app}}}}" \\
  --bundle "${{MDBENCH_TESTS_DIR:-${{ARENA_TESTS_DIR:-/tests}}}}/bundle" --out "$OUT"; then
  echo "mdbench verifier failed; reward 0 written to $OUT/reward.json" >&2
  echo '{zero}' > "$OUT/reward.json"
  exit 1
fi
"""

SOLVE_SH = """\
#!/bin/bash
# Reference solution: mdbench's own pipeline as the agent (reads only agent_input/, writes the run directory).
set -eu
cd /app
mdbench-oracle
"""

#: The oracle under Docker: the agent image holds neither mdbench nor a network, so the oracle brings both the
#: project (solution/mdbench) and its wheels (solution/wheels) and installs them into a private environment.
DOCKER_SOLVE_SH = """\
#!/bin/bash
# Reference solution: mdbench's own pipeline as the agent (reads only agent_input/, writes the run directory).
# The agent's image has no mdbench and no network: the oracle installs the project from /solution/mdbench and
# the wheels in /solution/wheels (write the task with oracle_wheels=DIR: `pip wheel -w DIR -c
# templates/arena/constraints.txt .`) into its own environment, outside /app.
set -eu
cd /app
if ! ls /solution/wheels/*.whl >/dev/null 2>&1; then
  echo "mdbench oracle: no wheels in /solution/wheels; write the task with oracle_wheels=DIR (pip wheel -w DIR" \\
       "-c templates/arena/constraints.txt .) or run it with the mdbench host plug-in" >&2
  exit 2
fi
python3 -m venv --system-site-packages /tmp/mdbench-oracle
/tmp/mdbench-oracle/bin/pip install -q --no-index --find-links /solution/wheels \\
  -c /solution/mdbench/constraints.txt /solution/mdbench
MDBENCH_ROOT=/solution/mdbench /tmp/mdbench-oracle/bin/mdbench-oracle
"""


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(str(v), ensure_ascii=False)


def task_toml(preset: str, bundle_sha256: str, limits: Limits, *, cpus: int, memory_mb: int, gpus: int) -> str:
    """The ``task.toml`` text (keys Harbor's ``TaskConfig`` reads; ``[metadata]`` carries the episode facts)."""
    sections: list[tuple[str, dict[str, Any]]] = [
        ("task", {"name": f"mdbench/electrolyte-study-{preset}",
                  "description": "End-to-end MD study of LiFSI/DMC/TTE DE, HCE and LHCE at 298.15 K and 1 bar "
                                 "(ElectrolyteMD-Bench), scored by the SAEO audit.",
                  "authors": [{"name": "mdbench episode room"}],
                  "keywords": ["molecular-dynamics", "gromacs", "electrolyte", "ElectrolyteMD-Bench", "SAEO"]}),
        ("metadata", {"difficulty": "hard", "category": "electrolyte-md-study", "system": "LiFSI/DMC/TTE",
                      "packages": ["gromacs", "packmol", "mdbench"], "preset": preset,
                      "bundle_sha256": bundle_sha256, "md_budget_ns_per_case": limits.md_budget_ns_per_case,
                      "md_budget_ns_total": limits.md_budget_ns_total, "cpu_threads_max": limits.cpu_threads_max,
                      "concurrent_gpu_jobs_max": limits.concurrent_gpu_jobs_max,
                      "reward_keys": list(REWARD_KEYS)}),
        ("verifier", {"timeout_sec": 3600.0, "user": "root", "environment_mode": "separate"}),
        ("agent", {"timeout_sec": float(limits.timeout_min * 60.0), "user": "agent"}),
        ("environment", {"build_timeout_sec": 1800.0, "cpus": cpus, "memory_mb": memory_mb, "storage_mb": 20480,
                         "gpus": gpus, "workdir": WORKDIR, "network_mode": "no-network"}),
    ]
    # /app (the run directory) is collected after the agent and re-materialised in the verifier's container
    lines = ['schema_version = "1.3"', f"artifacts = {_toml_value([WORKDIR])}", ""]
    for name, table in sections:
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
        lines.append("")
    return "\n".join(lines)


def _copy_source(dest: Path) -> None:
    """The project's source (:data:`SOURCE_ENTRIES`) and its exact dependency versions into ``dest``."""
    for entry in SOURCE_ENTRIES:
        src = PROJECT_ROOT / entry
        if src.is_file():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / entry)
        elif src.is_dir():
            shutil.copytree(src, dest / entry, ignore=lambda _d, names: [n for n in names if n.endswith(_SKIP)],
                            dirs_exist_ok=True)
    shutil.copy2(CONSTRAINTS, dest / "constraints.txt")


def _check_args(out: Path, cpus: int, memory_mb: int, gpus: int, base_image: str,
                oracle_wheels: Path | None) -> None:
    if out.exists() and any(out.iterdir()):
        raise InputError("task folder exists and is not empty; choose a new folder", str(out))
    if cpus < 1 or memory_mb < 1 or gpus < 0:
        raise InputError(f"resources must be positive (cpus {cpus}, memory {memory_mb} MB, gpus {gpus})")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*", base_image):
        raise InputError(f"not a container image reference: {base_image!r} (e.g. python:3.11-slim@sha256:<digest>)")
    if oracle_wheels is not None and not any(Path(oracle_wheels).glob("*.whl")):
        raise InputError("no wheels (*.whl) in the oracle's wheel folder; build them with: pip wheel -w DIR -c "
                         "templates/arena/constraints.txt .", str(oracle_wheels))


def _write_scripts(out: Path, *, docker: bool) -> None:
    test_sh = TEST_SH.format(zero=json.dumps(dict.fromkeys(REWARD_KEYS, 0.0)))
    for rel, text in (("tests/test.sh", test_sh), ("solution/solve.sh", DOCKER_SOLVE_SH if docker else SOLVE_SH)):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
        os.chmod(out / rel, 0o755)


def write_harbor_task(preset: str, out: str | Path, *, timeout_min: float | None = None, cpus: int = 16,
                      memory_mb: int = 32768, gpus: int = 0, base_image: str = DEFAULT_BASE_IMAGE,
                      oracle_wheels: str | Path | None = None) -> Path:
    """Write the Harbor task folder ``out`` for ``preset`` (layout in the module docstring).

    Parameters
    ----------
    base_image : str
        FROM of the agent's and the verifier's images (default :data:`DEFAULT_BASE_IMAGE`, digest-pinned);
        ``mdbench-arena-base:<tag>`` writes the host plug-in's variant (no project source in the task).
    oracle_wheels : path, optional
        Folder of wheels (mdbench and its dependencies) copied to ``solution/wheels`` so that Harbor's oracle
        can install the project offline in the agent's image (Docker variant only).

    Raises
    ------
    InputError
        ``out`` exists and is not empty, unknown preset, resources out of range, a bad image reference, or an
        oracle wheel folder without wheels.
    """
    import hashlib  # noqa: PLC0415

    out = Path(out)
    _check_args(out, cpus, memory_mb, gpus, base_image, Path(oracle_wheels) if oracle_wheels else None)
    files = bundle_tree(preset)
    if bundle_preset(files) != preset:
        raise InputError(f"the bundle was not built for preset {preset!r}")
    limits = Limits(timeout_min=timeout_min or default_timeout_min(preset))
    sha = hashlib.sha256(files[CHECKSUMS]).hexdigest()
    env = out / "environment"
    env.mkdir(parents=True)
    (out / "task.toml").write_text(task_toml(preset, sha, limits, cpus=cpus, memory_mb=memory_mb, gpus=gpus))
    (out / "instruction.md").write_bytes(files["PROMPT_TEMPLATE.md"])
    host = base_image.split("@")[0].split(":")[0].split("/")[-1] == HOST_BASE_REPO
    fmt = {"preset": preset, "base_image": base_image, "cpus": min(cpus, limits.cpu_threads_max),
           "cap": limits.cpu_threads_max}
    (env / "Dockerfile").write_text((HOST_DOCKERFILE if host else DOCKERFILE).format(**fmt))
    for rel, content in files.items():
        (env / AGENT_INPUT / rel).parent.mkdir(parents=True, exist_ok=True)
        (env / AGENT_INPUT / rel).write_bytes(content)
    (env / PROMPT).write_bytes(files["PROMPT_TEMPLATE.md"])
    _write_scripts(out, docker=not host)
    if not host:     # the host plug-in's verifier and oracle use this machine's mdbench: no project in the task
        shutil.copy2(AGENT_REQUIREMENTS, env / "agent-requirements.txt")
        (out / "tests" / "Dockerfile").write_text(VERIFIER_DOCKERFILE.format(**fmt))
        _copy_source(out / "tests" / "mdbench")
        _copy_source(out / "solution" / "mdbench")
        for wheel in sorted(Path(oracle_wheels).glob("*.whl")) if oracle_wheels else ():
            (out / "solution" / "wheels").mkdir(parents=True, exist_ok=True)
            shutil.copy2(wheel, out / "solution" / "wheels" / wheel.name)
    write_readonly_tree(files, out / "tests" / "bundle")
    return out


def _finite(x: Any) -> float:
    """A reward value Harbor accepts: a finite float (a missing or non-finite score counts 0)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


#: Why the verifier does not compare permission bits of ``agent_input/`` (recorded in ``integrity``).
MODES_NOT_CHECKED = ("Harbor's artifact transfer (tar 'data' filter) resets permission bits; agent_input/ is "
                     "root-owned and read-only in the agent's image, so content, file set and file types are "
                     "compared")


def transported_integrity(integrity: dict[str, Any]) -> dict[str, Any]:
    """:func:`compare_inputs`'s verdict on a copy that came through Harbor's artifact transfer: ``mode:``
    findings (permission bits, which the transfer resets) are set aside under ``modes_ignored``; content,
    missing, extra and not-a-file findings still decide ``intact``."""
    findings = list(integrity.get("findings") or [])
    modes = [f for f in findings if f.startswith("mode: ")]
    kept = [f for f in findings if not f.startswith("mode: ")]
    return {**integrity, "findings": kept, "intact": not kept, "modes_ignored": modes,
            "modes_not_checked": MODES_NOT_CHECKED}


def verify(workspace: Path, bundle: Path, out: Path, reanalysis: bool = True,
           transported: bool = True) -> dict[str, Any]:
    """Harbor verifier: input integrity, SAEO audit, ``reward.json`` (and ``episode_verifier.json``) in ``out``.

    ``transported``: ``workspace`` is Harbor's copy of the agent's ``/app`` (permission bits not compared,
    :func:`transported_integrity`).
    """
    from mdbench.episode.runner import audit_workspace  # noqa: PLC0415

    if not (bundle / CHECKSUMS).is_file():
        raise InputError("no pristine bundle to verify against (the task's tests/bundle/ is missing)", str(bundle))
    if not workspace.is_dir():
        raise InputError("the agent's run directory is missing", str(workspace))
    out.mkdir(parents=True, exist_ok=True)
    integrity = compare_inputs(workspace / AGENT_INPUT, bundle, workspace / PROMPT, out / "integrity")
    if transported:
        integrity = transported_integrity(integrity)
    audit = audit_workspace(workspace, bundle, out / "audit", integrity, reanalysis=reanalysis,
                            work_dir=out / "integrity")
    dims = audit.get("dimensions") or {}
    reward = {"reward": round(_finite(audit.get("composite")) / 100.0, 6)}
    reward |= {key: _finite(dims.get(dim)) for key, dim in zip(REWARD_KEYS[1:], "SAEO")}
    # created fresh (whatever stood at these names is removed first, never written through)
    untrusted.write_new(out / "reward.json", json.dumps(reward, indent=1) + "\n")
    untrusted.write_new(out / "episode_verifier.json", json.dumps({"integrity": integrity, "audit": audit},
                                                                  indent=1, default=str) + "\n")
    return reward


def main(argv: list[str] | None = None) -> int:
    """``python -m mdbench.episode.harbor verify --workspace /app --bundle /tests/bundle --out /logs/verifier``."""
    p = argparse.ArgumentParser(prog="python -m mdbench.episode.harbor")
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify", help="audit the agent's run directory and write reward.json")
    v.add_argument("--workspace", type=Path, default=Path("/app"))
    v.add_argument("--bundle", type=Path, default=Path("/tests/bundle"))
    v.add_argument("--out", type=Path, default=Path("/logs/verifier"))
    v.add_argument("--no-reanalysis", action="store_true")
    v.add_argument("--check-modes", action="store_true",
                   help="also compare agent_input/ permission bits (a workspace that did not come through Harbor)")
    args = p.parse_args(argv)
    try:
        reward = verify(args.workspace, args.bundle, args.out, reanalysis=not args.no_reanalysis,
                        transported=not args.check_modes)
    except (InputError, OSError) as exc:
        print(f"mdbench verifier: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(reward))
    return 0


if __name__ == "__main__":
    sys.exit(main())
