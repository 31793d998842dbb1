"""The episode as a Harbor task, so that any Harbor agent (Codex, OpenCode, Claude Code, …) can be run on it
with ``harbor run -p DIR -a AGENT -m MODEL``.

Layout written by :func:`write_harbor_task` (Harbor's task format, ``task.toml`` schema 1.3)::

    task.toml             cpus, memory, GPUs, agent and verifier timeouts, metadata (preset, bundle sha256, limits);
                          the verifier runs in a fresh container (``environment_mode = "separate"``) into which
                          Harbor copies the agent's ``/app`` (``artifacts = ["/app"]``), so nothing the agent left
                          running or installed can touch the scoring
    instruction.md        the bundle's prompt
    environment/
      Dockerfile          Python 3.11, GROMACS, packmol, mdbench; /app/agent_input/ baked read-only (root-owned,
                          0444/0555), the agent runs as the unprivileged user ``agent`` in /app
      agent_input/        the bundle
      PROMPT.md
      mdbench/            the project's source (lib/, params/, templates/, pyproject.toml), installed in the image
    solution/solve.sh     the oracle (``mdbench-oracle``), for ``harbor run -a oracle``
    tests/test.sh         the verifier: ``python3 -m mdbench.episode.harbor verify`` → /logs/verifier/reward.json
    tests/bundle/         the pristine bundle (copied in by Harbor only for verification: the agent never sees it)

``reward.json`` is ``{"reward": score/100, "simulation": S, "analysis": A, "evidence": E, "outcome": O}``
(dimension means in [0, 1]; always finite numbers, as Harbor requires), beside the audit's ``saeo.json`` and
``findings.md``. A verifier that cannot finish writes reward 0 and exits non-zero. The agent has no network
(``network_mode = "no-network"``); GROMACS and packmol are pinned to Debian 12's versions. With
``base_image="mdbench-arena-base:0.2"`` (``--base-image``) the task runs under ``harbor run`` with the mdbench host
plug-in: the environment holds only the bundle and the prompt (no project source), the agent runs confined with
the agent toolchain, and the oracle and the verifier use this machine's mdbench. ``harbor lint`` passes with its
default rules; ``--select ALL`` also asks for the base image pinned to a digest: pass ``base_image=
"python:3.11-slim@sha256:<digest>"`` (``--base-image``) with the digest of the day of the build.
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

from mdbench.episode.workspace import (AGENT_INPUT, CHECKSUMS, DEFAULT_TIMEOUT_MIN, PROMPT, Limits, bundle_preset,
                                       write_readonly_tree, bundle_tree, compare_inputs)
from mdbench.errors import InputError
from mdbench.paths import PROJECT_ROOT

#: The agent's working directory in the image: the run directory it must write, collected for the verifier.
WORKDIR = "/app"
#: Keys of reward.json (Harbor requires every value to be a finite number).
REWARD_KEYS = ("reward", "simulation", "analysis", "evidence", "outcome")
#: The project files the image installs mdbench from.
SOURCE_ENTRIES = ("lib", "params", "templates", "pyproject.toml", "README.md")
_SKIP = ("__pycache__", ".egg-info", ".pyc", ".pytest_cache")

#: Image repository of the arena's base image: a task built FROM it also runs under the mdbench host plug-in
#: (``harbor run -e mdbench.arena.harbor_env:HostEnvironment``), which provides GROMACS, packmol and Python.
HOST_BASE_REPO = "mdbench-arena-base"

DOCKERFILE = """\
# ElectrolyteMD-Bench episode ({preset} preset) as a Harbor task environment, written by mdbench episode harbor-task.
FROM {base_image}
RUN apt-get update \\
 && apt-get install -y --no-install-recommends gromacs=2022.5-2 packmol=1:20.14.0-1 bash \\
 && rm -rf /var/lib/apt/lists/*
COPY mdbench/ /opt/mdbench/
RUN pip install --no-cache-dir /opt/mdbench && python -m ipykernel install --sys-prefix --name mdbench \\
 && mkdir -p /logs/verifier /logs/agent
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
    MDBENCH_THREAD_CAP={cap} OMP_NUM_THREADS={cpus} MPLBACKEND=Agg MDBENCH_ROOT=/opt/mdbench
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
    for entry in SOURCE_ENTRIES:
        src = PROJECT_ROOT / entry
        if src.is_file():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / entry)
        elif src.is_dir():
            shutil.copytree(src, dest / entry, ignore=lambda _d, names: [n for n in names if n.endswith(_SKIP)],
                            dirs_exist_ok=True)


def write_harbor_task(preset: str, out: str | Path, *, timeout_min: float | None = None, cpus: int = 16,
                      memory_mb: int = 32768, gpus: int = 0, base_image: str = "python:3.11-slim") -> Path:
    """Write the Harbor task folder ``out`` for ``preset`` (layout in the module docstring).

    Raises
    ------
    InputError
        ``out`` exists and is not empty, unknown preset, or resources out of range.
    """
    import hashlib  # noqa: PLC0415

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise InputError("task folder exists and is not empty; choose a new folder", str(out))
    if cpus < 1 or memory_mb < 1 or gpus < 0:
        raise InputError(f"resources must be positive (cpus {cpus}, memory {memory_mb} MB, gpus {gpus})")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*", base_image):
        raise InputError(f"not a container image reference: {base_image!r} (e.g. python:3.11-slim@sha256:<digest>)")
    files = bundle_tree(preset)
    if bundle_preset(files) != preset:
        raise InputError(f"the bundle was not built for preset {preset!r}")
    limits = Limits(timeout_min=timeout_min or DEFAULT_TIMEOUT_MIN.get(preset, 120.0))
    sha = hashlib.sha256(files[CHECKSUMS]).hexdigest()
    env = out / "environment"
    env.mkdir(parents=True)
    (out / "task.toml").write_text(task_toml(preset, sha, limits, cpus=cpus, memory_mb=memory_mb, gpus=gpus))
    (out / "instruction.md").write_bytes(files["PROMPT_TEMPLATE.md"])
    host = base_image.split("@")[0].split(":")[0].split("/")[-1] == HOST_BASE_REPO
    template = HOST_DOCKERFILE if host else DOCKERFILE
    (env / "Dockerfile").write_text(template.format(preset=preset, base_image=base_image,
                                                    cpus=min(cpus, limits.cpu_threads_max),
                                                    cap=limits.cpu_threads_max))
    for rel, content in files.items():
        (env / AGENT_INPUT / rel).parent.mkdir(parents=True, exist_ok=True)
        (env / AGENT_INPUT / rel).write_bytes(content)
    (env / PROMPT).write_bytes(files["PROMPT_TEMPLATE.md"])
    if not host:     # the host plug-in's verifier uses this machine's mdbench; nothing of the project in the task
        _copy_source(env / "mdbench")
    test_sh = TEST_SH.format(zero=json.dumps(dict.fromkeys(REWARD_KEYS, 0.0)))
    for rel, text in (("tests/test.sh", test_sh), ("solution/solve.sh", SOLVE_SH)):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
        os.chmod(out / rel, 0o755)
    write_readonly_tree(files, out / "tests" / "bundle")
    return out


def _finite(x: Any) -> float:
    """A reward value Harbor accepts: a finite float (a missing or non-finite score counts 0)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def verify(workspace: Path, bundle: Path, out: Path, reanalysis: bool = True) -> dict[str, Any]:
    """Harbor verifier: input integrity, SAEO audit, ``reward.json`` (and ``episode_verifier.json``) in ``out``."""
    from mdbench.episode.runner import audit_workspace  # noqa: PLC0415

    if not (bundle / CHECKSUMS).is_file():
        raise InputError("no pristine bundle to verify against (the task's tests/bundle/ is missing)", str(bundle))
    if not workspace.is_dir():
        raise InputError("the agent's run directory is missing", str(workspace))
    out.mkdir(parents=True, exist_ok=True)
    integrity = compare_inputs(workspace / AGENT_INPUT, bundle, workspace / PROMPT, out / "integrity")
    audit = audit_workspace(workspace, bundle, out / "audit", integrity, reanalysis=reanalysis,
                            work_dir=out / "integrity")
    dims = audit.get("dimensions") or {}
    reward = {"reward": round(_finite(audit.get("composite")) / 100.0, 6)}
    reward |= {key: _finite(dims.get(dim)) for key, dim in zip(REWARD_KEYS[1:], "SAEO")}
    (out / "reward.json").write_text(json.dumps(reward, indent=1) + "\n")
    (out / "episode_verifier.json").write_text(json.dumps({"integrity": integrity, "audit": audit}, indent=1,
                                                          default=str) + "\n")
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
    args = p.parse_args(argv)
    try:
        reward = verify(args.workspace, args.bundle, args.out, reanalysis=not args.no_reanalysis)
    except (InputError, OSError) as exc:
        print(f"mdbench verifier: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(reward))
    return 0


if __name__ == "__main__":
    sys.exit(main())
