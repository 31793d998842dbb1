#!/bin/bash
# Reference solution (Harbor's oracle agent runs this in /app).
set -euo pipefail
PY="${MDBENCH_PYTHON:-python3}"
"$PY" "${ARENA_SOLUTION_DIR:-/solution}/solve.py"
