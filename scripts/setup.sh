#!/usr/bin/env bash
# `make setup`: what `make demo` and the CLI need, one line per step with its time. Idempotent: a ready
# checkout takes a second. Harbor's environment is NOT built here (`make harbor-env`, see the Makefile).
#   scripts/setup.sh [chromium]   — also the headless browser the report tests render in (make test)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python3.11 2>/dev/null || command -v python3)}
VENV=${VENV:-.venv}
STAMP=$VENV/.mdbench-installed
KERNEL=$VENV/share/jupyter/kernels/mdbench/kernel.json
total0=$(date +%s.%N)

secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
step() {  # step NAME CMD...: run CMD, print "setup: NAME ... N.N s" (or its failure) on one line
  local name=$1; shift
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  "$@" || rc=$?
  t1=$(date +%s.%N)
  if [ $rc -ne 0 ]; then
    printf 'setup: %-34s FAILED after %s s (exit %d)\n' "$name" "$(secs "$t0" "$t1")" $rc >&2
    exit $rc
  fi
  printf 'setup: %-34s %6s s\n' "$name" "$(secs "$t0" "$t1")"
}
skip() { printf 'setup: %-34s  ready\n' "$1"; }

check_python() {
  "$PYTHON" -c 'import sys; assert sys.version_info[:2] >= (3, 11), "mdbench needs Python >= 3.11 (found %s)" % sys.version.split()[0]'
}

register_kernel() {
  "$VENV/bin/python" -m ipykernel install --sys-prefix --name mdbench --display-name "Python (mdbench)" >/dev/null
  # the kernel's own start-up log (e.g. "Kernel is running over TCP without encryption" on 127.0.0.1) is
  # noise in every papermill run: only its errors reach the terminal
  "$VENV/bin/python" - "$KERNEL" <<'PY'
import json, sys
path = sys.argv[1]
spec = json.load(open(path))
if "--IPKernelApp.log_level=ERROR" not in spec["argv"]:
    spec["argv"].append("--IPKernelApp.log_level=ERROR")
json.dump(spec, open(path, "w"), indent=1)
PY
}

step "tools (gmx, packmol${1:+, $*})" bash scripts/ensure_tools.sh "$@"
if [ -f "$STAMP" ] && [ "$STAMP" -nt pyproject.toml ]; then
  skip "$VENV (project + dev extras)"
else
  check_python
  step "$VENV (project + dev extras)" bash scripts/setup_venv.sh "$VENV" "$PYTHON" dev "$STAMP"
fi
if [ -f "$KERNEL" ] && [ "$KERNEL" -nt "$STAMP" ] && grep -q IPKernelApp.log_level "$KERNEL"; then
  skip "Jupyter kernel 'mdbench'"
else
  step "Jupyter kernel 'mdbench'" register_kernel
fi
printf 'setup: %-34s %6s s\n' "done" "$(secs "$total0" "$(date +%s.%N)")"
echo "setup: the CLI is ./mdbench, or put it on your PATH:  export PATH=\"$PWD/$VENV/bin:\$PATH\""
