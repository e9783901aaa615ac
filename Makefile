# The README's commands: `make run` (the coordinator daemon on the embedded
# SQLite default), `make test`, and `make demo` (a guided tour with real processes).
# `make slurm-up` starts a one-machine Slurm cluster (docs/slurm.md) and
# `make slurm-demo` runs the tour on it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv system-deps run demo test bench chaos replicas clean slurm-up slurm-demo \
	podman-up container-demo

# Debian packages drover needs beyond Python: chromium for the dashboard's
# browser tests, graphviz (`dot`) to lay out the dashboard's state graph. The
# check makes the target a no-op once both are on PATH; the lock timeout lets
# it wait for another apt-get instead of failing.
SYSTEM_TOOLS := chromium dot
SYSTEM_PACKAGES := chromium graphviz
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# The example plugin is installed too: `make test` runs its tests, and the
# end-to-end test in tests/ needs its entry point.
$(STAMP): pyproject.toml examples/drover-max-duration/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet -e ./examples/drover-max-duration
	touch $(STAMP)

venv: $(STAMP)

## Install the Debian packages above (needs root or sudo) unless they are already there.
system-deps:
	@if command -v $(firstword $(SYSTEM_TOOLS)) >/dev/null 2>&1 \
	    && command -v $(lastword $(SYSTEM_TOOLS)) >/dev/null 2>&1; then :; else \
	    echo "installing $(SYSTEM_PACKAGES) (Debian packages)"; \
	    $(SUDO) $(APT_GET) update -qq \
	    && $(SUDO) $(APT_GET) install -y -qq $(SYSTEM_PACKAGES) >/dev/null \
	    || { echo "could not install $(SYSTEM_PACKAGES): run as root, or install them by hand" >&2; exit 1; }; \
	fi

## The main job: the coordinator daemon on ./drover.db with the local backend (Ctrl-C stops it).
run: $(STAMP) system-deps
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

## Install Debian's podman, runc and busybox-static if missing, start Podman's
## Docker-compatible API on /tmp/drover-podman/podman.sock and build the test image
## (idempotent; needs root; docs/containers.md). The container backend's tests start
## their own service the same way, under the test run's temporary directory.
podman-up:
	bash scripts/podman-up.sh

## The demo's sessions and a small service as containers (backend.name = "container")
## on the Podman of `make podman-up`; files in demo-data-container/.
container-demo: $(STAMP) podman-up
	$(BIN)/python -m drover.demo --dir demo-data-container --backend container

## ruff, mypy --strict and pytest. Installs the system packages and starts the Slurm
## test cluster and Podman first when missing (their tests fail, never skip, without them).
## pytest includes the CI-sized kill campaign (`make chaos`, tests/test_chaos.py).
test: $(STAMP) system-deps slurm-up podman-up
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
	rm -rf $(VENV) demo-data demo-data-slurm demo-data-container
