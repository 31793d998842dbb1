#!/usr/bin/env bash
# Make sure GROMACS (gmx) and packmol are on PATH. Installs Debian's packages when run as root with
# apt-get; otherwise prints the exact instruction and fails. Idempotent: a ready machine returns at once.
set -euo pipefail
missing=()
command -v gmx >/dev/null 2>&1 || missing+=(gromacs)
command -v packmol >/dev/null 2>&1 || missing+=(packmol)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "mdbench setup: installing ${missing[*]} from the Debian archive" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  command -v gmx >/dev/null && command -v packmol >/dev/null && exit 0
  echo "mdbench setup: apt-get finished but gmx/packmol are still missing" >&2
  exit 1
fi
cat >&2 <<MSG
mdbench setup: missing ${missing[*]}.
Install them, then rerun 'make setup':
  Debian/Ubuntu:  sudo apt-get install -y gromacs packmol
  conda:          conda env create -f environment.yml && conda activate mdbench
MSG
exit 1
