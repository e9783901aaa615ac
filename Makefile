# The README's commands: `make run` (the coordinator daemon on the embedded
# SQLite default), `make test`, and `make demo` (a guided tour with real processes).
# `make slurm-up` starts a one-machine Slurm cluster (docs/slurm.md) and
# `make slurm-demo` runs the tour on it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run

.PHONY: venv run-deps system-deps run demo test bench chaos replicas clean slurm-up slurm-demo \
	podman-up container-demo

# Debian packages drover needs beyond Python. The daemon needs graphviz (`dot`
# lays out the dashboard's state graph); the tests need chromium too (the
# dashboard's browser tests). The check makes each target a no-op once its
# tools are on PATH; the lock timeout lets it wait for another apt-get instead
# of failing.
RUN_TOOLS := dot
RUN_PACKAGES := graphviz
TEST_TOOLS := chromium dot
TEST_PACKAGES := chromium graphviz
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# $(call apt_install,TOOLS,PACKAGES): install PACKAGES unless every one of TOOLS is on PATH.
define apt_install
	@missing=; for tool in $(1); do command -v $$tool >/dev/null 2>&1 || missing=1; done; \
	if [ -n "$$missing" ]; then \
	    echo "installing $(2) (Debian packages)"; \
	    $(SUDO) $(APT_GET) update -qq \
	    && $(SUDO) $(APT_GET) install -y -qq $(2) >/dev/null \
	    || { echo "could not install $(2): run as root, or install them by hand" >&2; exit 1; }; \
	fi
endef

# What the daemon needs: drover and its runtime dependencies, nothing else.
# `drover` was this project's distribution name before `drover-coordinator`:
# a venv made then has it, and two distributions of one import package clash.
$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip uninstall --quiet -y drover >/dev/null 2>&1 || true
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

# What the tests need on top: the dev extras (pytest, hypothesis, ruff, mypy,
# playwright) and the example plugin (`make test` runs its tests, and the
# end-to-end test in tests/ needs its entry point).
$(STAMP): $(RUN_STAMP) examples/drover-max-duration/pyproject.toml \
		examples/drover-experimaestro/pyproject.toml examples/drover-dstack/pyproject.toml \
		examples/drover-lpipes/pyproject.toml examples/drover-iris/pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet -e ./examples/drover-max-duration \
		-e ./examples/drover-experimaestro -e ./examples/drover-dstack -e ./examples/drover-lpipes \
		-e ./examples/drover-iris
	touch $(STAMP)

venv: $(STAMP)

## The Debian packages the daemon needs (graphviz), unless already there (needs root or sudo).
run-deps:
	$(call apt_install,$(RUN_TOOLS),$(RUN_PACKAGES))

## The Debian packages the tests need (chromium, graphviz), unless already there.
system-deps:
	$(call apt_install,$(TEST_TOOLS),$(TEST_PACKAGES))

## The main job: the coordinator daemon on ./drover.db with the local backend (Ctrl-C stops it).
run: $(RUN_STAMP) run-deps
	$(BIN)/drover run

## Start the daemon, submit real sessions, wait, print what happened, stop it.
demo: $(RUN_STAMP)
	$(BIN)/python -m drover.demo --dir demo-data

## Install Debian's Slurm if missing and start a two-node cluster on this machine
## (idempotent; needs root). The slurm backend's tests run on it.
slurm-up:
	bash scripts/slurm-up.sh

## The demo's sessions as Slurm jobs (backend.name = "slurm"); files in demo-data-slurm/.
slurm-demo: $(RUN_STAMP) slurm-up
	$(BIN)/python -m drover.demo --dir demo-data-slurm --backend slurm

## Install Debian's podman, runc and busybox-static if missing, start Podman's
## Docker-compatible API on /tmp/drover-podman/podman.sock and build the test image
## (idempotent; needs root; docs/containers.md). The container backend's tests start
## their own service the same way, under the test run's temporary directory.
podman-up:
	bash scripts/podman-up.sh

## The demo's sessions and a small service as containers (backend.name = "container")
## on the Podman of `make podman-up`; files in demo-data-container/.
container-demo: $(RUN_STAMP) podman-up
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
	$(BIN)/python bench/cli_startup.py

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
