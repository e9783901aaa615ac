# The README's two commands: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

## Run the built-in lifecycle on the simulated backend, on an SQLite file, and print the outcome.
demo: $(STAMP)
	$(BIN)/python -m drover.demo --database sqlite+aiosqlite:///./demo.db

## ruff, mypy --strict and pytest.
test: $(STAMP)
	$(BIN)/ruff check drover tests bench
	$(BIN)/ruff format --check drover tests bench
	$(BIN)/mypy --strict drover
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/lifecycle.py

clean:
	rm -rf $(VENV) demo.db demo.db-wal demo.db-shm
