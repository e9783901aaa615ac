"""A handler's own settings: ``[handlers.<name>.settings]`` reaches its plugin (issue 22)."""

from __future__ import annotations

from click.testing import CliRunner

from drover.app import App
from drover.cli import main
from drover.config import load_config


def test_settings_from_the_file_reach_the_plugin_and_config_show(tmp_path, monkeypatch):
    """The example plugin reads grace from its table; drover passes it on untouched."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "drover.toml"
    config.write_text(
        f'database_url = "sqlite+aiosqlite:///{tmp_path}/d.db"\n'
        '[plugins]\nload = ["max-duration"]\n'
        "[handlers.enforce-max-duration.settings]\ngrace = 30\n"
    )
    loaded = load_config(str(config), environ={})
    assert loaded.config.handlers["enforce-max-duration"].settings == {"grace": 30}
    app = App(loaded)
    handler = app.load_handlers().handlers["enforce-max-duration"]
    assert handler.grace == 30.0  # type: ignore[union-attr]
    shown = CliRunner().invoke(main, ["--config", str(config), "config", "show"])
    assert "handlers.enforce-max-duration.settings.grace\t30\tfile " in shown.output


def test_a_handler_without_settings_gets_an_empty_mapping(tmp_path, monkeypatch):
    """settings_for() of a handler nobody configured is {} (a plugin reads defaults)."""
    monkeypatch.chdir(tmp_path)
    loaded = load_config(
        None, environ={}, flags={"database_url": f"sqlite+aiosqlite:///{tmp_path}/d.db"}
    )
    app = App(loaded)
    app.load_handlers()
    assert app.load_handlers().handlers["enforce-max-duration"].grace == 0.0  # type: ignore[union-attr]
