#!/usr/bin/env bash
# Make sure GROMACS (gmx) and packmol are on PATH — and, when asked (`ensure_tools.sh chromium`, what
# `make test` does), a headless Chromium for the report/leaderboard rendering tests. Installs Debian's
# packages when run as root with apt-get; otherwise prints the exact instruction and fails (chromium: a
# warning only, those tests then skip). Idempotent: a ready machine returns at once.
set -euo pipefail
want_chromium=0
for arg in "$@"; do
  case $arg in
    chromium) want_chromium=1 ;;
    *) echo "ensure_tools.sh: unknown tool '$arg' (known: chromium)" >&2; exit 2 ;;
  esac
done
have_chromium() {
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
    || command -v google-chrome >/dev/null 2>&1
}
missing=()
command -v gmx >/dev/null 2>&1 || missing+=(gromacs)
command -v packmol >/dev/null 2>&1 || missing+=(packmol)
if [ $want_chromium = 1 ] && ! have_chromium; then missing+=(chromium); fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "mdbench setup: installing ${missing[*]} from the Debian archive" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  ok=1
  command -v gmx >/dev/null && command -v packmol >/dev/null || ok=0
  if [ $want_chromium = 1 ] && ! have_chromium; then ok=0; fi
  [ $ok = 1 ] && exit 0
  echo "mdbench setup: apt-get finished but some of ${missing[*]} are still missing" >&2
  exit 1
fi
core=()
for m in "${missing[@]}"; do [ "$m" = chromium ] || core+=("$m"); done
if [ ${#core[@]} -eq 0 ]; then
  echo "mdbench setup: no chromium (the report-rendering tests will skip); install it with: sudo apt-get install -y chromium" >&2
  exit 0
fi
cat >&2 <<MSG
mdbench setup: missing ${missing[*]}.
Install them, then rerun 'make setup':
  Debian/Ubuntu:  sudo apt-get install -y ${missing[*]}
  conda:          conda env create -f environment.yml && conda activate mdbench
MSG
exit 1
