"""The package as pip and make see it: its name, licence, dependencies and install targets."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import drover
from drover.cli.new_plugin import render_plugin

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_distribution_name_is_not_the_unrelated_pypi_drover():
    """PyPI's drover is another project: this one installs as drover-coordinator."""
    assert PYPROJECT["project"]["name"] == drover.DISTRIBUTION_NAME == "drover-coordinator"
    assert importlib.metadata.packages_distributions()["drover"][0] == "drover-coordinator"
    assert importlib.metadata.version("drover-coordinator") == drover.__version__


def test_plugins_depend_on_the_distribution_drover_is_installed_as():
    """The scaffold's and the example's dependency resolves to this drover, never PyPI's
    drover; the scaffold's asks for this drover's plugin API (its minor, or this development
    release), the example's for 0.1's, which it was written against."""
    scaffold = tomllib.loads(render_plugin("probe")["pyproject.toml"])
    example = tomllib.loads((ROOT / "examples/drover-max-duration/pyproject.toml").read_text())
    for project in (scaffold, example):
        (requirement,) = project["project"]["dependencies"]
        parsed = Requirement(requirement)
        assert parsed.name == "drover-coordinator", requirement
        # As pip judges the drover already installed: a development release counts.
        assert parsed.specifier.contains(drover.__version__, prereleases=True), requirement
    (requirement,) = example["project"]["dependencies"]
    assert re.fullmatch(r"drover-coordinator>=0\.1", requirement), requirement
    (requirement,) = scaffold["project"]["dependencies"]
    major, minor = (int(part) for part in drover.__version__.split(".")[:2])
    if minor:
        earlier = f"{major}.{minor - 1}.99"
        assert not Requirement(requirement).specifier.contains(earlier), requirement


def test_the_licence_is_an_spdx_string_with_its_file():
    """A TOML table licence is deprecated by setuptools (builds stop in 2027)."""
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]


def test_no_runtime_dependency_is_pinned_exactly():
    """A library pinning `==` makes every application that installs it unresolvable."""
    pinned = [d for d in PYPROJECT["project"]["dependencies"] if "==" in d]
    assert pinned == []


@pytest.mark.parametrize(
    "path", ["drover-data/kernels/x.log", "drover.db.coordinator.lock", "drover.db"]
)
def test_what_make_run_leaves_behind_is_ignored_by_git(path):
    """`make run` writes the database, its coordinator lock and drover-data/ in the checkout."""
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, check=False, timeout=30
    )
    assert done.returncode == 0, f"{path} would show in git status"


def _make_dry_run(target: str) -> str:
    """What `make TARGET` would run on a fresh machine (-B: as if nothing were built)."""
    done = subprocess.run(
        ["make", "-n", "-B", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def test_make_run_installs_only_what_the_daemon_needs():
    """No dev extras (pytest, mypy, playwright…) and no chromium just to run the daemon."""
    commands = _make_dry_run("run")
    assert "pip install --quiet -e .\n" in commands
    assert "[dev]" not in commands
    assert "chromium" not in commands
    assert "graphviz" in commands  # the dashboard's state graph
    assert "drover run" in commands


def test_make_test_installs_what_the_tests_need():
    """The dev extras, the example plugin, chromium and graphviz."""
    commands = _make_dry_run("test")
    for needed in ("-e '.[dev]'", "examples/drover-max-duration", "chromium graphviz", "pytest"):
        assert needed in commands
