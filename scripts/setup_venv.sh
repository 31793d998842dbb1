#!/usr/bin/env bash
# Create (or refresh) a project virtualenv: scripts/setup_venv.sh VENV PYTHON EXTRAS STAMP
# uv when it is on PATH or installable from PyPI (an order of magnitude faster than pip), pip otherwise;
# the same pyproject pins either way. Writes STAMP when done, so a ready environment is not rebuilt.
set -euo pipefail
venv=$1 python=$2 extras=$3 stamp=$4
cd "$(dirname "$0")/.."
uv_bin=""
if command -v uv >/dev/null 2>&1 && uv --version >/dev/null 2>&1; then uv_bin=$(command -v uv); fi
rm -rf "$venv"
if [ -n "$uv_bin" ]; then
  "$uv_bin" venv -q "$venv" --python "$python"
else
  "$python" -m venv "$venv"
  # uv from PyPI into the venv itself (a single wheel); pip stays the fallback if that fails (no network)
  if "$venv/bin/python" -m pip install --quiet --disable-pip-version-check uv >/dev/null 2>&1 \
      && "$venv/bin/uv" --version >/dev/null 2>&1; then
    uv_bin=$venv/bin/uv
  fi
fi
if [ -n "$uv_bin" ]; then
  "$uv_bin" pip install -q --python "$venv/bin/python" -e ".[$extras]"
  echo "uv" > "$venv/.mdbench-installer"
else
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
  echo "pip" > "$venv/.mdbench-installer"
fi
touch "$stamp"
