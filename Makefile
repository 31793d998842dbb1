# mdbench — the two commands are `make demo` and `make test`; both run `make setup` first.
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

.PHONY: setup tools venv demo test test-slow test-seeds lab clean-outputs

setup: tools venv  ## idempotent: GROMACS + packmol, .venv with the project, the 'mdbench' Jupyter kernel

tools:
	@bash scripts/ensure_tools.sh

venv: $(STAMP) $(KERNEL)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] >= (3, 11), "mdbench needs Python >= 3.11 (found %s)" % sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

$(KERNEL): $(STAMP)
	$(BIN)/python -m ipykernel install --sys-prefix --name mdbench --display-name "Python (mdbench)" >/dev/null
	@echo "registered Jupyter kernel 'mdbench' in $(VENV)"

demo: setup  ## the tiny study of DE, HCE, LHCE, its SAEO audit and the HTML report
	$(BIN)/python scripts/demo.py --preset $(PRESET) --run $(RUN)

test: setup  ## the whole default test suite (pytest exit 5, "no tests collected", fails)
	@$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests — failing on purpose" >&2; exit 1; fi; \
	exit $$rc

test-slow: setup  ## opt-in long physics tests
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

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
