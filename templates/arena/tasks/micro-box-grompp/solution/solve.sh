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
# the reference solution's own trajectory (ATIF): the commands it ran and what grompp said
gmx -quiet grompp -f em.mdp -c conf.gro -p topol.top -o check.tpr -po check.mdp -maxwarn 0 > grompp_check.log 2>&1
rm -f check.tpr check.mdp
"${MDBENCH_PYTHON:-python3}" - <<'PY'
from pathlib import Path
from mdbench.arena.atif import Recorder
from mdbench.arena.grading import app_dir
out = app_dir() / "output"
rec = Recorder("oracle")
rec.step("Filled a 2.5 nm cubic box with SPC/E water using GROMACS tools, not coordinates written by hand.",
         call=("bash", {"command": "gmx solvate -cs spc216.gro -box 2.5 2.5 2.5"}), result=(out / "solvate.log").read_text()[-1500:])
rec.step("Replaced 6 water molecules by 3 LI and 3 CL with gmx genion.",
         call=("bash", {"command": "gmx genion -pname LI -nname CL -np 3 -nn 3"}), result=(out / "genion.log").read_text()[-1500:])
log = (out / "grompp_check.log").read_text()
rec.step("Ran gmx grompp -maxwarn 0 on the final files and read its output for warnings and notes: "
         + ("none." if "WARNING" not in log else "warnings present."),
         call=("bash", {"command": "gmx grompp -f em.mdp -c conf.gro -p topol.top -maxwarn 0"}), result=log[-2000:])
rec.save()
PY
rm -f grompp_check.log solvate.log genion.log grompp1.log
