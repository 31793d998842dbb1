#!/usr/bin/env bash
# Install the pinned coding-agent CLIs the seed evaluates (Codex, OpenCode) into .agent-harnesses/ (no global
# install, no sudo). `mdbench episode run --harness codex|opencode` finds them there (or under
# $MDBENCH_AGENT_HARNESSES) and refuses a missing or different version with this command in the message.
# Usage: scripts/agent_harnesses.sh [PREFIX]
set -euo pipefail
CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
OPENCODE_VERSION="${OPENCODE_VERSION:-1.18.33}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${1:-${MDBENCH_AGENT_HARNESSES:-$ROOT/.agent-harnesses}}"
command -v npm >/dev/null || { echo "agent_harnesses.sh: npm not found; install Node.js >= 18 (e.g. apt-get install nodejs npm)" >&2; exit 2; }
have() {  # the installed version of an npm package under PREFIX (empty when missing)
  sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$PREFIX/node_modules/$1/package.json" 2>/dev/null | head -1
}
if [ "$(have @openai/codex)" = "$CODEX_VERSION" ] && [ "$(have opencode-ai)" = "$OPENCODE_VERSION" ] \
   && "$PREFIX/node_modules/.bin/codex" --version >/dev/null 2>&1 && "$PREFIX/node_modules/.bin/opencode" --version >/dev/null 2>&1; then
  echo "agent harnesses: codex $CODEX_VERSION and opencode $OPENCODE_VERSION already in $PREFIX"
  exit 0
fi
mkdir -p "$PREFIX"
# --include=optional: both packages ship their native binary as an optional platform package
npm install --prefix "$PREFIX" --no-audit --no-fund --include=optional \
    "@openai/codex@${CODEX_VERSION}" "opencode-ai@${OPENCODE_VERSION}"
"$PREFIX/node_modules/.bin/codex" --version
"$PREFIX/node_modules/.bin/opencode" --version
echo "agent harnesses installed in $PREFIX"
