#!/bin/bash
# Harbor verifier entry point. Deterministic checks (verify.py) write reward.json {"correctness": k/n}
# and reward-details.json to /logs/verifier; process criteria (process.toml) are added as "process"
# when a judge command (ARENA_JUDGE_CMD) or an expert score file (ARENA_PROCESS_SCORES) is configured.
set -u
PY="${MDBENCH_PYTHON:-python3}"
TESTS="${ARENA_TESTS_DIR:-/tests}"
mkdir -p "${ARENA_VERIFIER_DIR:-/logs/verifier}"
"$PY" "$TESTS/verify.py"
