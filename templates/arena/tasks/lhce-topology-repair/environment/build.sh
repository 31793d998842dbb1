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
DEST="$APP/system"
# the micro LHCE box of this project's own pipeline (mdbench.build: packmol, topology, setup audits)
"$PY" -m mdbench.arena.inputs box "$DEST" em_audit.mdp
mv "$DEST/em_audit.mdp" "$DEST/em.mdp"
# the hand edits: DMC and TTE swapped in [ molecules ], one FSI too many
"$PY" - "$DEST/topol.top" <<'PY'
import sys
from pathlib import Path
p = Path(sys.argv[1])
head, mols = p.read_text().split("[ molecules ]")
lines = [l for l in mols.strip().splitlines() if l.strip() and not l.startswith(";")]
counts = dict(l.split() for l in lines)
counts["FSI"] = str(int(counts["FSI"]) + 1)
order = ["LI", "FSI", "TTE", "DMC"]
p.write_text(head + "[ molecules ]\n; name  count\n" + "".join(f"{k:<6}{counts[k]}\n" for k in order))
PY
