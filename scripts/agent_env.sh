#!/usr/bin/env bash
# The agent toolchain's Python: a virtual environment WITHOUT this project, for evaluated agents.
#
#   bash scripts/agent_env.sh [DEST]        (make agent-env; DEST defaults to .agent-env in the checkout)
#
# Idempotent: a stamp holding this script's sha256 skips the build when nothing changed. Agents see it
# read-only (mdbench.episode.toolchain); its base interpreter is exposed read-only with its own
# site-packages hidden. GROMACS, packmol and node come from the system (scripts/ensure_tools.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-${MDBENCH_AGENT_ENV:-.agent-env}}"
STAMP="$DEST/.mdbench-agent-env"
# The scientific stack of the seed's agent, pinned (results must not move with a new release).
PACKAGES=(
  "numpy==2.4.6" "scipy" "pandas" "matplotlib" "seaborn" "MDAnalysis==2.11.0" "mdtraj==1.11.1.post2"
  "pyedr" "networkx" "pyyaml" "scikit-learn" "statsmodels" "tqdm"
)
want="$(sha256sum "$0" | cut -d' ' -f1)"
# one builder at a time (make agent-env and the tests' session fixture may start together): the others wait,
# then find the stamp
mkdir -p "$(dirname "$DEST")"
exec 9>"$DEST.lock"
flock 9
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$DEST/bin/python" ]; then
  echo "agent env: $DEST is up to date"
  exit 0
fi
# a CPython that is not this project's .venv: the one the project venv was made from, else python3.11/3.12
PY=""
if [ -f .venv/pyvenv.cfg ]; then
  home="$(sed -n 's/^home *= *//p' .venv/pyvenv.cfg)"
  for c in "$home"/python3.1[1-9] "$home"/python3; do [ -x "$c" ] && { PY="$c"; break; }; done
fi
[ -n "$PY" ] || PY="$(command -v python3.11 || command -v python3.12 || command -v python3 || true)"
if [ -z "$PY" ]; then
  echo "agent env: no Python 3 found; install python3.11 and run: bash scripts/agent_env.sh" >&2
  exit 1
fi
# uv on PATH, else the one scripts/setup_venv.sh put into .venv (make setup), else the interpreter's venv + pip
UV="$(command -v uv 2>/dev/null || true)"
if [ -z "$UV" ] && [ -x .venv/bin/uv ] && .venv/bin/uv --version >/dev/null 2>&1; then UV="$PWD/.venv/bin/uv"; fi
rm -rf "$DEST"
if [ -n "$UV" ]; then
  "$UV" venv -q "$DEST" --python "$PY"
  "$UV" pip install -q --python "$DEST/bin/python" "${PACKAGES[@]}"
else
  "$PY" -m venv "$DEST"
  "$DEST/bin/python" -m pip install -q --disable-pip-version-check "${PACKAGES[@]}"
  "$DEST/bin/python" -m pip uninstall -q -y pip setuptools >/dev/null 2>&1 || true  # the agent installs nothing
fi
# never the project: no mdbench package, no .pth pointing here, no entry points
if (cd / && "$DEST/bin/python" -c 'import mdbench') 2>/dev/null; then
  echo "agent env: mdbench is importable from $DEST — refusing; remove it and run again" >&2
  rm -rf "$DEST"
  exit 1
fi
# no bytecode writes later (the agent sees it read-only): compile now, quietly
"$DEST/bin/python" -m compileall -q "$DEST/lib" >/dev/null 2>&1 || true
chmod -R a+rX "$DEST"
[ -x "$DEST/bin/python" ] || { echo "agent env: the build left no $DEST/bin/python" >&2; exit 1; }
echo "$want" > "$STAMP"
echo "agent env: $DEST ($("$DEST/bin/python" --version), $(ls -d "$DEST"/lib/python3*/site-packages/*.dist-info | wc -l) packages)"
