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
mkdir -p "$APP/md"; cd "$APP/md"
cat > md.mdp <<'EOF'
; NVT, SPC/E water, energies every 10 steps (20 fs)
integrator    = md
dt            = 0.002
nsteps        = 1000
nstcalcenergy = 10
nstenergy     = 10
nstlog        = 1000
cutoff-scheme = Verlet
coulombtype   = PME
rcoulomb      = 0.9
rvdw          = 0.9
tcoupl        = V-rescale
tc-grps       = System
tau-t         = 0.1
ref-t         = 298.15
pcoupl        = no
gen-vel       = yes
gen-temp      = 298.15
gen-seed      = 2026
EOF
gmx -quiet solvate -cs spc216.gro -box 1.9 1.9 1.9 -o conf.gro > /dev/null 2>&1
N=$(grep -c OW conf.gro)
printf '#include "oplsaa.ff/forcefield.itp"\n#include "oplsaa.ff/spce.itp"\n\n[ system ]\nSPC/E water\n\n[ molecules ]\nSOL %s\n' "$N" > topol.top
gmx -quiet grompp -f md.mdp -c conf.gro -p topol.top -o md.tpr -maxwarn 0 > /dev/null 2>&1
gmx -quiet mdrun -nt 1 -deffnm md > /dev/null 2>&1
mv md.edr ener.edr
rm -f md.cpt md.tpr md.log md.gro mdout.mdp \#*
