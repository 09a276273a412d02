# The course's verbs. Every target builds .venv on first use, so on a fresh
# machine `make lab` and `make test` are the only two commands anyone needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Torch goes in first, on its own line, so you can pick the build for your machine:
#   make test TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed
# JupyterLab refuses to start as root (containers, cloud notebooks) unless told it may.
LAB_FLAGS ?= $(if $(filter 0,$(shell id -u)),--allow-root,)
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: lab test release run grade doctor clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

## make lab: open the course in JupyterLab, in your own copy of the notebooks (my-work/)
lab: $(STAMP)
	$(BIN)/python -m grader workspace my-work
	$(BIN)/jupyter lab $(LAB_FLAGS) my-work/

## make test: the whole test suite (CPU only; no GPU needed)
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadgroup

## make release: regenerate notebooks/ from solutions/ with nbgrader
release: $(STAMP)
	$(BIN)/python -m grader release

## make run: execute every solution notebook with papermill into runs/
run: $(STAMP)
	$(BIN)/python -m grader run

## make grade SUBMISSIONS=folder: autograde a class into grades/
grade: $(STAMP)
	$(BIN)/python -m grader autograde $(SUBMISSIONS) --out grades

## make doctor: what the course will use on this machine
doctor: $(STAMP)
	$(BIN)/python -m grader doctor

clean:
	rm -rf runs grades course .pytest_cache
