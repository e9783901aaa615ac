"""``drover new-plugin``: the scaffold's files, its errors, and a generated package that works."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from drover.cli import main

NAME = "scaffold-probe"
FILES = {
    "pyproject.toml",
    "README.md",
    "src/drover_scaffold_probe/__init__.py",
    "tests/test_plugin.py",
}


def scaffold(*args: str):
    """Run `drover new-plugin ARGS` in-process."""
    return CliRunner().invoke(main, ["new-plugin", *args], catch_exceptions=False)


def files_under(path):
    """Every file under ``path``, as POSIX paths relative to it."""
    return {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}


def test_the_scaffold_writes_a_package(tmp_path):
    """The four files, with the entry point, a handler module, and tests on drover_harness."""
    result = scaffold(NAME, "--dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    target = tmp_path / f"drover-{NAME}"
    assert files_under(target) == FILES

    project = tomllib.loads((target / "pyproject.toml").read_text())
    assert project["project"]["name"] == "drover-scaffold-probe"
    assert project["project"]["version"] == "0.1.0"
    assert project["project"]["requires-python"] == ">=3.11"
    assert project["project"]["dependencies"] == ["drover-coordinator>=0.1"]
    assert project["project"]["optional-dependencies"]["test"] == ["pytest", "pytest-asyncio"]
    assert project["project"]["entry-points"]["drover"] == {NAME: "drover_scaffold_probe"}
    assert project["tool"]["setuptools"]["packages"]["find"]["where"] == ["src"]
    assert project["tool"]["pytest"]["ini_options"]["asyncio_mode"] == "auto"

    module = (target / "src/drover_scaffold_probe/__init__.py").read_text()
    ast.parse(module)
    assert "class ScaffoldProbe(LifecycleHandler):" in module
    assert 'return "scaffold-probe"' in module
    assert "def drover_register_handlers(register: HandlerRegistry) -> None:" in module
    tests = (target / "tests/test_plugin.py").read_text()
    ast.parse(tests)
    assert "pytest.mark.drover(plugins=[drover_scaffold_probe], entrypoints=False)" in tests
    assert "$" not in module + tests, "an unsubstituted template variable"
    readme = (target / "README.md").read_text()
    for needle in ("pip install -e", "python -m pytest", "[handlers.scaffold-probe]", "block = ["):
        assert needle in readme

    # What was created, and what to run next.
    for path in FILES:
        assert path in result.output
    assert "pip install -e '.[test]'" in result.output
    assert "\n  python -m pytest\n" in result.output


def test_the_generated_code_is_lint_clean(tmp_path):
    """The scaffold passes ruff's checks and formatting at ruff's own defaults."""
    assert scaffold(NAME, "--dir", str(tmp_path)).exit_code == 0
    package = tmp_path / f"drover-{NAME}"
    for args in (
        ["check", "--isolated", "--no-cache", "--select", "E,F,W,I,B,UP", "."],
        ["format", "--isolated", "--no-cache", "--check", "."],
    ):
        run = subprocess.run(
            [sys.executable, "-m", "ruff", *args],
            cwd=package,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 0, run.stdout + run.stderr


def test_the_default_directory_is_the_current_one(tmp_path, monkeypatch):
    """Without --dir the package lands in the working directory."""
    monkeypatch.chdir(tmp_path)
    result = scaffold("x1")
    assert result.exit_code == 0, result.output
    assert files_under(tmp_path / "drover-x1") == {f.replace("scaffold_probe", "x1") for f in FILES}


def test_an_existing_empty_directory_is_used(tmp_path):
    """An empty drover-NAME/ is filled in."""
    (tmp_path / f"drover-{NAME}").mkdir()
    assert scaffold(NAME, "--dir", str(tmp_path)).exit_code == 0
    assert files_under(tmp_path / f"drover-{NAME}") == FILES


def test_help_has_an_example():
    """--help says what it makes and shows an example."""
    result = scaffold("--help")
    assert result.exit_code == 0
    assert "Example: drover new-plugin max-duration" in result.output
    assert "--dir" in result.output


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("Max-Duration", "kebab-case"),
        ("max_duration", "kebab-case"),
        ("max--duration", "kebab-case"),
        ("-max", "kebab-case"),
        ("max-", "kebab-case"),
        ("1max", "kebab-case"),
        ("max duration", "kebab-case"),
        ("drover-max", "leave out the 'drover-' prefix"),
        ("detect-termination", "a built-in handler has that name"),
    ],
)
def test_bad_names_are_refused_and_nothing_is_written(tmp_path, name, rule):
    """One clear line naming the rule, exit status 1, and an untouched directory."""
    result = CliRunner().invoke(main, ["new-plugin", "--dir", str(tmp_path), "--", name])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"Error: invalid NAME {name!r}")
    assert rule in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_a_non_empty_target_is_refused_and_left_alone(tmp_path):
    """An existing drover-NAME/ with anything in it is not touched."""
    target = tmp_path / f"drover-{NAME}"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    result = scaffold(NAME, "--dir", str(tmp_path))
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"Error: {target} already exists and is not empty; nothing was written "
        "(choose another NAME or --dir, or remove it)"
    )
    assert files_under(target) == {"notes.txt"}
    assert (target / "notes.txt").read_text() == "mine"


def test_a_file_in_the_way_is_refused(tmp_path):
    """drover-NAME existing as a file is an error too."""
    (tmp_path / f"drover-{NAME}").write_text("")
    result = scaffold(NAME, "--dir", str(tmp_path))
    assert result.exit_code == 1
    assert "exists and is not a directory; nothing was written" in result.output
    assert files_under(tmp_path) == {f"drover-{NAME}"}


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_the_generated_package_installs_and_its_own_tests_pass(tmp_path):
    """pip install -e the scaffold into this venv; its unmodified tests pass; then uninstall.

    The uninstall matters: an installed plugin's entry point would load into
    other tests' daemons and harnesses.
    """
    distribution = f"drover-{NAME}"
    if _installed(distribution):  # left behind by an interrupted run
        _pip("uninstall", "-y", distribution)
    assert scaffold(NAME, "--dir", str(tmp_path)).exit_code == 0
    package = tmp_path / distribution
    try:
        # With its dependencies: drover-coordinator is this drover, already installed
        # (PyPI's `drover`, an unrelated project, would be downloaded instead).
        install = _pip("install", "-e", str(package))
        assert install.returncode == 0, install.stdout + install.stderr
        run = subprocess.run(
            [sys.executable, "-m", "pytest", str(package / "tests"), "-p", "no:cacheprovider"],
            cwd=package,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        output = run.stdout + run.stderr
        assert run.returncode == 0, output
        assert "3 passed" in output, output
    finally:
        uninstall = _pip("uninstall", "-y", distribution)
    assert uninstall.returncode == 0, uninstall.stdout + uninstall.stderr
    assert not _installed(distribution)


def test_the_testing_docs_examples_pass(tmp_path):
    """Every Python example in docs/plugins/testing.md runs, against a fresh `my-handler` scaffold.

    Each example is a whole test module whose first line names its file.
    """
    text = (Path(__file__).parent.parent / "docs/plugins/testing.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 5
    assert scaffold("my-handler", "--dir", str(tmp_path)).exit_code == 0
    package = tmp_path / "drover-my-handler"
    names = set()
    for block in blocks:
        first = block.splitlines()[0]
        assert re.fullmatch(r"# test_\w+\.py", first), f"an example without a file name: {first}"
        names.add(first[2:])
        (package / "tests" / first[2:]).write_text(block)
    assert len(names) == len(blocks), "two examples with the same file name"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider", "-q"],
        cwd=package,
        env={**os.environ, "PYTHONPATH": str(package / "src")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert re.search(r"\b\d+ passed", output), output
    assert not re.search(r"\b\d+ (failed|errors?|skipped|xfailed)\b", output), output
