#!/bin/bash
# Generates this task's input files in /app at image build time (the local runner runs it too).
set -euo pipefail
PY="${MDBENCH_PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "${ARENA_APP_DIR:-/app}"
cd "${ARENA_APP_DIR:-/app}"
"$PY" "$HERE/make_inputs.py"
