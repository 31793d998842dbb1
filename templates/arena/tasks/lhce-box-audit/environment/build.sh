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
DEST="$APP/box"
"$PY" - <<'PY'
# the micro LHCE box of this project's own pipeline (packmol + topology + setup audits)
from mdbench.build import build_system
res = build_system("LHCE", "micro", "box_build", seed=2026)
assert res.passed, [a.name for a in res.audits if not a.passed]
PY
mkdir -p "$DEST"
cp box_build/LHCE.gro box_build/topol.top box_build/forcefield.itp box_build/LI.itp box_build/FSI.itp \
   box_build/DMC.itp box_build/TTE.itp "$DEST/"
# the build's own title line states its target density: not part of the inputs
sed -i 's/^LHCE preset=.*/LHCE micro box (mdbench)/' "$DEST/topol.top"
rm -rf box_build
