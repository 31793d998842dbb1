#!/bin/bash
# Writes this task's inputs into /app (Docker image build; the local runner and the host environment
# replay the Dockerfile the same way). Files under environment/app/ are copied as they are.
set -euo pipefail
PY="${MDBENCH_PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
APP="${ARENA_APP_DIR:-/app}"
mkdir -p "$APP"
if [ -d "$HERE/app" ]; then cp -r "$HERE/app/." "$APP/"; fi
cd "$APP"
