"""The docs stay true to the code."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import tomllib
from pathlib import Path

import attrs
import pytest

from drover.config import (
    BackendConfig,
    Config,
    HandlerConfig,
    HistoryConfig,
    LimitsConfig,
    PluginsConfig,
    load_config,
)

DOCS = Path(__file__).parent.parent / "docs"


def test_every_configuration_key_is_documented():
    """Each field of the configuration classes has a row in docs/configuration.md."""
    text = (DOCS / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_.<>]+)` \|", text, re.MULTILINE))
    tables = {"handlers", "plugins", "backend", "history", "budgets", "pools", "limits"}
    keys = {f.name for f in attrs.fields(Config) if f.name not in tables}
    keys |= {f"history.{f.name}" for f in attrs.fields(HistoryConfig)}
    keys |= {f"handlers.<name>.{f.name}" for f in attrs.fields(HandlerConfig)}
    keys |= {f"plugins.{f.name}" for f in attrs.fields(PluginsConfig)}
    keys |= {f"backend.{f.name}" for f in attrs.fields(BackendConfig)}
    keys |= {f"limits.{f.name}" for f in attrs.fields(LimitsConfig)}
    keys |= {"budgets.<kind>.<budget>", "pools.<pool>"}
    assert keys - documented == set(), "undocumented configuration keys"
    assert documented - keys == set(), "documented keys that do not exist"


def test_the_example_configuration_file_loads(tmp_path):
    """The example drover.toml in docs/configuration.md is valid."""
    text = (DOCS / "configuration.md").read_text()
    (example,) = re.findall(r"```toml\n(# drover.toml\n.*?)```", text, re.DOTALL)
    path = tmp_path / "drover.toml"
    path.write_text(example)
    loaded = load_config(path, environ={})
    assert loaded.config.handlers["prepare-sessions"].timeout == 1800
    assert [a.id for a in loaded.config.backend.agents] == ["node-a", "node-b"]
    assert loaded.config.backend.agents[0].capacity()["gpu"] == 4


def test_the_session_file_example_in_daemon_md_is_valid():
    """The session.toml example parses and has the keys `drover submit --file` accepts."""
    text = (DOCS / "daemon.md").read_text()
    (example,) = re.findall(r"A session file:\n\n```toml\n(.*?)```", text, re.DOTALL)
    data = tomllib.loads(example)
    assert set(data) <= {"name", "priority", "kernels", "options", "spec"}
    assert all(isinstance(k["command"], list) for k in data["kernels"])


ROOT = DOCS.parent


def _make_dry_run(target: str) -> str:
    """What ``make -n TARGET`` would run (nothing is run; the venv stamp is taken as fresh)."""
    out = subprocess.run(
        ["make", "-n", "-o", ".venv/.installed", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


@pytest.mark.parametrize(
    ("target", "packages"), [("test", "chromium graphviz"), ("run", "graphviz")]
)
def test_make_test_and_run_install_the_system_packages_first(target, packages):
    """The README's commands do all the set-up: the Debian packages come before pytest or run.

    `make run` needs graphviz only (the dashboard's state graph), `make test` chromium too.
    """
    plan = _make_dry_run(target)
    check = plan.index("command -v $tool")
    assert f"install -y -qq {packages} " in plan
    assert "DEBIAN_FRONTEND=noninteractive" in plan
    last = "python -m pytest" if target == "test" else "drover run"
    assert check < plan.index(last)


def test_system_deps_is_a_fast_no_op_once_installed():
    """With chromium and dot on the PATH, `make system-deps` runs no apt-get and returns at once."""
    if not (shutil.which("chromium") and shutil.which("dot")):
        pytest.fail("chromium and dot must be installed (make system-deps) for this test")
    started = time.monotonic()
    out = subprocess.run(
        ["make", "--no-print-directory", "system-deps"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert time.monotonic() - started < 5
    assert out.stdout == ""


def test_ci_runs_the_readme_test_command_alone():
    """.ci/run installs nothing itself: besides settings it runs `make test`, once."""
    script = (ROOT / ".ci" / "run").read_text()
    commands = [
        line.strip()
        for line in script.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    setup = ("set ", "cd ", "export ", "unset ")
    assert [c for c in commands if not c.startswith(setup)] == ["make test"]
    assert "apt-get" not in script
