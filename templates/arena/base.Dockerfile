# Base image of every arena task (tasks say `FROM mdbench-arena-base:0.1`).
# Build it from the repository root:
#   docker build -t mdbench-arena-base:0.1 -f templates/arena/base.Dockerfile .
FROM python:3.11-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends gromacs packmol bash \
 && rm -rf /var/lib/apt/lists/*
COPY . /opt/mdbench
RUN pip install --no-cache-dir /opt/mdbench
ENV MDBENCH_PYTHON=python3
RUN mkdir -p /app /logs/verifier /logs/agent
WORKDIR /app
