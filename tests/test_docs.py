"""The docs stay true to the code."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import attrs

from drover.config import (
    BackendConfig,
    Config,
    HandlerConfig,
    HistoryConfig,
    PluginsConfig,
    load_config,
)

DOCS = Path(__file__).parent.parent / "docs"


def test_every_configuration_key_is_documented():
    """Each field of the configuration classes has a row in docs/configuration.md."""
    text = (DOCS / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_.<>]+)` \|", text, re.MULTILINE))
    tables = {"handlers", "plugins", "backend", "history", "budgets"}
    keys = {f.name for f in attrs.fields(Config) if f.name not in tables}
    keys |= {f"history.{f.name}" for f in attrs.fields(HistoryConfig)}
    keys |= {f"handlers.<name>.{f.name}" for f in attrs.fields(HandlerConfig)}
    keys |= {f"plugins.{f.name}" for f in attrs.fields(PluginsConfig)}
    keys |= {f"backend.{f.name}" for f in attrs.fields(BackendConfig)}
    keys |= {"budgets.<kind>.<budget>"}
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
