#!/usr/bin/env bash
# The GPU measurement docs/performance.md still lacks: the production stage vs bare mdrun at paper size on a GPU.
#
#   bash scripts/gpu_benchmark.sh [OUTDIR]      # on a GPU machine, from the repository root, after `make setup`
#
# Needs a CUDA build of GROMACS on PATH (conda env update -n mdbench -f environment-cuda.yml) and nvidia-smi.
# About 5-10 minutes on one current GPU: paper HCE (49,980 atoms) packed, minimised (-nb gpu), equilibrated
# 10 ps NVT + 20 ps NPT with the relaxed benchmark gate, then 1 + 2 x 2 productions of 100 ps (stage and
# bare mdrun alternated). MDBENCH_GPU=on turns a missing GPU into an error instead of a CPU run.
set -euo pipefail
out="${1:-${OUT:-/tmp}/mdbench-gpu-benchmark}"
mkdir -p "$out"
{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
    gmx --version | grep -E "GROMACS version|Precision|GPU support|CUDA (driver|runtime)"
} | tee "$out/machine.txt"
gmx --version | grep -qE "GPU support: +(CUDA|SYCL)" \
    || { echo "gpu_benchmark: gmx is not a CUDA/SYCL build; see README (Which GROMACS where)" >&2; exit 2; }
threads="$(( $(nproc) < 16 ? $(nproc) : 16 ))"
MDBENCH_GPU=on MDBENCH_LOCK_DIR="$out/locks" .venv/bin/python benchmarks/engine_overhead.py \
    --preset paper --system HCE --threads "$threads" --equilibration-ps 10 20 --relaxed-gate \
    --production-ps 100 --repeats 2 --workdir "$out/work" 2>&1 | tee "$out/engine_overhead.txt"
# what the ledger says about the GPU use of the last production attempt
.venv/bin/python - "$out/work" <<'PY' | tee "$out/gpu_use.json"
import json, sys
from pathlib import Path
rows = [json.loads(l) for p in sorted(Path(sys.argv[1]).glob("stage_*/run_record/attempts.jsonl"))
        for l in p.read_text().splitlines() if l.strip()]
done = [r for r in rows if r.get("status") == "completed" and r.get("kind") == "production"]
print(json.dumps(done[-1].get("resources") if done else None, indent=2))
PY
