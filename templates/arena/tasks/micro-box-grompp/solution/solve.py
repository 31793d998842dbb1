# the reference solution of this task is solve.sh (GROMACS command line)
