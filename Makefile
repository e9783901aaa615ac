# The README's commands: `make run` (the coordinator daemon on the embedded
# SQLite default), `make test`, and `make demo` (a guided tour with real processes).
# `make slurm-up` starts a one-machine Slurm cluster (docs/slurm.md) and
# `make slurm-demo` runs the tour on it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run demo test bench clean slurm-up slurm-demo

# The example plugin is installed too: `make test` runs its tests, and the
# end-to-end test in tests/ needs its entry point.
$(STAMP): pyproject.toml examples/drover-max-duration/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet -e ./examples/drover-max-duration
	touch $(STAMP)

venv: $(STAMP)

## The main job: the coordinator daemon on ./drover.db with the local backend (Ctrl-C stops it).
run: $(STAMP)
	$(BIN)/drover run

## Start the daemon, submit real sessions, wait, print what happened, stop it.
demo: $(STAMP)
	$(BIN)/python -m drover.demo --dir demo-data

## Install Debian's Slurm if missing and start a two-node cluster on this machine
## (idempotent; needs root). The slurm backend's tests run on it.
slurm-up:
	bash scripts/slurm-up.sh

## The demo's sessions as Slurm jobs (backend.name = "slurm"); files in demo-data-slurm/.
slurm-demo: $(STAMP) slurm-up
	$(BIN)/python -m drover.demo --dir demo-data-slurm --backend slurm

## ruff, mypy --strict and pytest. Starts the Slurm test cluster first when it is
## not running: the slurm tests fail, never skip, without it.
test: $(STAMP) slurm-up
	$(BIN)/ruff check drover tests bench examples
	$(BIN)/ruff format --check drover tests bench examples
	$(BIN)/mypy --strict drover
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/lifecycle.py

clean:
	rm -rf $(VENV) demo-data demo-data-slurm
