# Base image of every arena task (tasks say `FROM mdbench-arena-base:0.2`): Python 3.11 with the
# mdbench package and its dependencies, GROMACS 2022.5 and packmol 20.14 from Debian 12, and the
# unprivileged user `agent` that the tasks' [agent] user names. Build it from the repository root:
#   docker build -t mdbench-arena-base:0.2 -f templates/arena/base.Dockerfile .
# Versions are pinned (push it and run `mdbench arena pin-base REGISTRY/mdbench-arena-base:0.2@sha256:<digest>`
# to pin the tasks' FROM too); the Harbor host environment (mdbench.arena.harbor_env) stands in for this
# image with the machine's own mdbench, gmx and packmol.
# Python 3.11.13 on Debian 12, pinned to the digest of its published image index.
FROM python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1
RUN apt-get update \
 && apt-get install -y --no-install-recommends gromacs=2022.5-2 packmol=1:20.14.0-1 bash \
 && rm -rf /var/lib/apt/lists/*
# Only what installing the package needs, plus params/ (presets and systems mdbench.build reads):
# task folders (solutions, tests) never enter the image (.dockerignore keeps them out of the build context).
# Every Python dependency at the exact version the project is tested with (templates/arena/constraints.txt).
COPY pyproject.toml README.md /opt/mdbench/
COPY templates/arena/constraints.txt /opt/mdbench/constraints.txt
COPY lib /opt/mdbench/lib
COPY params /opt/mdbench/params
RUN pip install --no-cache-dir -c /opt/mdbench/constraints.txt /opt/mdbench \
 && rm -rf /opt/mdbench/lib /opt/mdbench/pyproject.toml
ENV MDBENCH_PYTHON=python3 MDBENCH_ROOT=/opt/mdbench
RUN useradd --create-home --uid 1000 --shell /bin/bash agent \
 && mkdir -p /app /logs/verifier /logs/agent
WORKDIR /app
