# mdbench — the two commands are `make demo` and `make test`; both run `make setup` first.
# The CLI afterwards: ./mdbench, or export PATH="$PWD/.venv/bin:$PATH".
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.mdbench-installed
KERNEL := $(VENV)/share/jupyter/kernels/mdbench/kernel.json
RUN ?= outputs/runs/demo
PRESET ?= tiny
PYTEST_ARGS ?=
TEST_SEEDS ?= 1 2
LAB_IP ?= 127.0.0.1
LAB_PORT ?= 8888
LAB_ARGS ?=

.PHONY: setup tools venv demo test test-slow test-seeds lab clean-outputs harbor-env arena-harbor agent-env agent-harnesses test-tools

# One line per step with its time (scripts/setup.sh); uv for the virtualenv where it is present or
# installable from PyPI, pip otherwise. Harbor's .venv-harbor is NOT part of setup (make harbor-env).
setup:  ## idempotent: GROMACS + packmol, .venv with the project, the 'mdbench' Jupyter kernel
	@PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup.sh

tools:
	@bash scripts/ensure_tools.sh

venv: setup

# what `make test` adds to setup: headless Chromium (report / SDL leaderboard rendering tests)
test-tools:
	@PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup.sh chromium

# `make test` builds .venv-harbor only where its Harbor tests run: in CI (CI=true) or when PYTEST_ARGS name
# them; otherwise they skip, naming `make harbor-env`.
TEST_NEEDS_HARBOR := $(if $(filter true 1,$(CI)),harbor-env,$(if $(findstring harbor,$(PYTEST_ARGS)),harbor-env,))

demo: setup  ## the tiny study of DE, HCE, LHCE, its SAEO audit and the HTML report
	$(BIN)/python scripts/demo.py --preset $(PRESET) --run $(RUN)

# the Codex / OpenCode CLIs (npm) likewise: in CI, or when PYTEST_ARGS name the llm/harness tests; otherwise
# those tests skip, naming `make agent-harnesses`.
TEST_NEEDS_HARNESSES := $(if $(filter true 1,$(CI)),agent-harnesses,$(if $(findstring llm,$(PYTEST_ARGS)),agent-harnesses,))

test: test-tools agent-env $(TEST_NEEDS_HARBOR) $(TEST_NEEDS_HARNESSES)  ## the whole default test suite (pytest exit 5, "no tests collected", fails)
	@$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests — failing on purpose" >&2; exit 1; fi; \
	exit $$rc

test-slow: setup  ## opt-in long physics tests
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

.PHONY: test-slurm
test-slurm: setup  ## opt-in: a micro study through a real single-node Slurm (slurm-wlm + munge on 127.0.0.1) vs local
	@bash scripts/slurm_localhost.sh ensure
	@d=$$(mktemp -d /tmp/mdbench-slurm-XXXXXX); trap 'bash scripts/slurm_localhost.sh stop '"$$d" EXIT; \
	MDBENCH_SLURM_PYTHON=$(abspath $(BIN))/python bash scripts/slurm_localhost.sh start $$d && \
	SLURM_CONF=$$d/slurm.conf MDBENCH_SLURM_PROFILE=$$d/profile.yaml \
	$(BIN)/python -m pytest tests/execute/test_slurm.py -rs --basetemp=$$d/pytest $(PYTEST_ARGS)

test-seeds: setup  ## the GROMACS-backed tests (marker gromacs) once per MDBENCH_TEST_SEED in TEST_SEEDS
	@rc=0; for s in $(TEST_SEEDS); do \
	  echo "make test-seeds: MDBENCH_TEST_SEED=$$s"; \
	  MDBENCH_TEST_SEED=$$s $(BIN)/python -m pytest -m "gromacs and not slow" $(PYTEST_ARGS) || rc=1; \
	done; exit $$rc

lab: setup  ## JupyterLab with the 'mdbench' kernel on LAB_IP:LAB_PORT (127.0.0.1:8888); --allow-root as root
	@if [ "$$(id -u)" = 0 ]; then root=--allow-root; \
	  echo "make lab: running as root, so JupyterLab is started with --allow-root"; fi; \
	exec $(BIN)/jupyter lab --notebook-dir=. --ip=$(LAB_IP) --port=$(LAB_PORT) --no-browser $$root $(LAB_ARGS)

clean-outputs:
	rm -rf outputs/runs outputs/audits outputs/reports

# --- Harbor (arena room): a Python 3.12 environment with the pinned harbor release and this project ------
# The pin lives in pyproject's `harbor` extra; tests/arena/test_harbor_pin.py keeps these three in step.
HARBOR_VERSION := 0.26.0
HARBOR_VENV := .venv-harbor
# the first candidate that really runs Python 3.12 (a pyenv shim may exist without a selected version)
HARBOR_PYTHON ?= $(shell for p in $$(command -v python3.12) $$HOME/.pyenv/versions/3.12*/bin/python3.12 /root/.pyenv/versions/3.12*/bin/python3.12; do \
	$$p -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null && { echo $$p; break; }; done)
HARBOR_STAMP := $(HARBOR_VENV)/.mdbench-harbor-$(HARBOR_VERSION)

harbor-env: $(HARBOR_STAMP)  ## .venv-harbor: Python 3.12, harbor==$(HARBOR_VERSION), this project (editable)

$(HARBOR_STAMP): pyproject.toml
	@test -n "$(HARBOR_PYTHON)" || { echo "harbor-env: no python3.12 found; install Python 3.12 or pass HARBOR_PYTHON=/path/to/python3.12" >&2; exit 1; }
	@$(HARBOR_PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 12), "harbor-env needs Python 3.12 (found %s)" % sys.version.split()[0]'
	@t0=$$(date +%s); bash scripts/setup_venv.sh $(HARBOR_VENV) $(HARBOR_PYTHON) harbor $(HARBOR_VENV)/.mdbench-harbor-$(HARBOR_VERSION) && \
	echo "harbor-env: created $(HARBOR_VENV) with harbor $(HARBOR_VERSION) with $$(cat $(HARBOR_VENV)/.mdbench-installer) in $$(( $$(date +%s) - t0 )) s"

arena-harbor: setup harbor-env  ## opt-in: `harbor run` (host plug-in) with the oracle and the null agent over EVERY arena task
	MDBENCH_HARBOR_FULL=1 $(BIN)/python -m pytest tests/arena/test_harbor.py $(PYTEST_ARGS)

# --- agent harness environments (episode / harness rooms); never part of `make setup` ----------------
agent-env: setup  ## the agent toolchain's Python (.agent-env: numpy, scipy, pandas, MDAnalysis, mdtraj, ... — without this project)
	@bash scripts/agent_env.sh

agent-harnesses:  ## pinned Codex + OpenCode CLIs in .agent-harnesses/ for `episode run --harness` (npm)
	@bash scripts/agent_harnesses.sh
