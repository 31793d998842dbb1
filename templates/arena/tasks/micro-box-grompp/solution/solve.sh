#!/bin/bash
# Reference solution: gmx solvate + grompp + genion, all single-threaded.
set -euo pipefail
OUT="${ARENA_APP_DIR:-/app}/output"
mkdir -p "$OUT"; cd "$OUT"
cat > em.mdp <<'EOF'
integrator    = steep
nsteps        = 50
emtol         = 1000
cutoff-scheme = Verlet
coulombtype   = PME
rcoulomb      = 1.0
rvdw          = 1.0
EOF
gmx -quiet solvate -cs spc216.gro -box 2.5 2.5 2.5 -o water.gro > solvate.log 2>&1
NSOL=$(grep -c "OW" water.gro)
cat > topol.top <<EOF
#include "oplsaa.ff/forcefield.itp"
#include "oplsaa.ff/spce.itp"
#include "oplsaa.ff/ions.itp"

[ system ]
LiCl in SPC/E water, micro

[ molecules ]
SOL  $NSOL
EOF
gmx -quiet grompp -f em.mdp -c water.gro -p topol.top -o ions.tpr -maxwarn 0 > grompp1.log 2>&1
echo SOL | gmx -quiet genion -s ions.tpr -o conf.gro -p topol.top -pname LI -nname CL -np 3 -nn 3 -seed 1 > genion.log 2>&1
rm -f ions.tpr mdout.mdp water.gro \#*
