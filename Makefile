# The course's verbs. Every target builds .venv on first use, so on a fresh
# machine `make lab` and `make test` are the only two commands anyone needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Torch goes in first, on its own line, so you can pick the build for your machine:
#   make test TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed
# Extra flags for `python -m grader lab`, e.g. LAB_FLAGS="--port 9999 --no-browser".
LAB_FLAGS ?=
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: lab lab-stop lab-instructor demo present present-stop test release run grade doctor clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

## make lab: open the course in JupyterLab, in your own copy of the notebooks (my-work/).
## It prints the URL to open last; the server's log goes to my-work/.jupyter-server.log.
lab: $(STAMP)
	$(BIN)/python -m grader lab my-work $(LAB_FLAGS)

## make lab-stop: stop the course server a closed terminal left running (make lab reuses it otherwise)
lab-stop: $(STAMP)
	$(BIN)/python -m grader lab my-work --stop

## make lab-instructor: JupyterLab at the course root with nbgrader's instructor menus and formgrader
lab-instructor: $(STAMP)
	$(BIN)/python -m grader lab --instructor $(LAB_FLAGS)

## make demo: presenter copies in runs/presenter/ (solutions run with demo=True, shown as learners see them)
demo: $(STAMP)
	$(BIN)/python -m grader run --demo

## make present: serve runs/presenter/, run each deck in the kernel it is shown with, print each deck's slides URL
## (one deck: make present LAB_FLAGS="--deck 01_crossover")
present: $(STAMP)
	$(BIN)/python -m grader lab --presenter $(LAB_FLAGS)

## make present-stop: stop the presenter's server (a closed terminal leaves it running; make present reuses it)
present-stop: $(STAMP)
	$(BIN)/python -m grader lab --presenter --stop

## make test: the whole test suite (CPU only; no GPU needed)
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadgroup --durations=20

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
