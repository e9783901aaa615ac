# The README's commands: `make run` (the coordinator daemon on the embedded
# SQLite default), `make test`, and `make demo` (a guided tour with real processes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run demo test bench chaos replicas clean

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

## ruff, mypy --strict and pytest. (The kill campaign, `make chaos`, is not part of it yet: see docs/scaling.md.)
test: $(STAMP)
	$(BIN)/ruff check drover tests bench examples
	$(BIN)/ruff format --check drover tests bench examples
	$(BIN)/mypy --strict drover
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/lifecycle.py

## Kill campaign, CI-sized (about a minute, >= 10 kill -9): several coordinators on
## PostgreSQL and one on SQLite, invariants checked in SQL. The long run:
## $(BIN)/python bench/chaos.py --pg-duration 600 --sqlite-duration 120
chaos: $(STAMP)
	$(BIN)/python bench/chaos.py --quick

## Scale-out: 1 against 3 coordinators on PostgreSQL, handlers waiting 100 ms per call.
replicas: $(STAMP)
	$(BIN)/python bench/replicas.py

clean:
	rm -rf $(VENV) demo-data
