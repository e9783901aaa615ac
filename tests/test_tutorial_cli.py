"""What the plugin tutorial (docs/plugins/tutorial.md) says is what drover does."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from drover.cli.group import main

TUTORIAL = Path(__file__).parent.parent / "docs" / "plugins" / "tutorial.md"


def _cli(tmp_path: Path, *args: str):
    env = {
        "DROVER_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/drover.db",
        "DROVER_LOAD_PLUGINS": "max-duration",  # the tutorial's plugin, installed by make venv
        "DROVER_CONFIG": None,
    }
    return CliRunner().invoke(main, list(args), env=env)


def test_plugins_prints_each_hook_by_its_full_name(tmp_path, monkeypatch):
    """``drover plugins`` names the hook ``drover_register_handlers``, as the tutorial does."""
    monkeypatch.chdir(tmp_path)
    result = _cli(tmp_path, "plugins")
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("max-duration")]
    assert "\tdrover_register_handlers\t" in line
    assert "- the hook it implements, `drover_register_handlers`;" in TUTORIAL.read_text()


def test_a_bad_plugin_setting_stops_the_daemon_in_one_line(tmp_path, monkeypatch):
    """``grace = "soon"`` is one error line naming the plugin and the key, no traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "drover.toml").write_text(
        '[handlers.enforce-max-duration.settings]\ngrace = "soon"\n'
    )
    result = _cli(tmp_path, "run", "--backend", "simulated")
    assert result.exit_code == 1
    lines = [x for x in result.output.splitlines() if x.startswith("Error")]
    expected = (
        "Error: plugin 'max-duration' could not register (drover_register_handlers): "
        "ValueError: enforce-max-duration setting grace must be a number of seconds, not 'soon'"
    )
    assert lines == [expected]
    assert "Traceback" not in result.output
    assert expected in " ".join(TUTORIAL.read_text().split())


def test_step_8_waits_as_long_as_step_7_configures():
    """Step 8's wait is the session's max_duration plus step 7's grace, and no stray text."""
    text = TUTORIAL.read_text()
    step7 = text.split("## 7.")[1].split("## 8.")[0]
    step8 = text.split("## 8.")[1].split("## Where to go next")[0]
    grace = int(re.search(r"^\s*grace = (\d+)", step7, re.M).group(1))
    limit = int(re.search(r"^max_duration = (\d+)", step8, re.M).group(1))
    assert f"its `max_duration` of {limit}\nseconds, plus the `grace` of {grace} seconds" in step8
    assert "About a minute after" in step8
    assert limit + grace == 60
    assert not re.search(r"^ \w", text, re.M), "a line starts with a stray space"
    # drover show prints each kernel's pid and stdout; it does not print the whole runtime.
    assert "`drover show SESSION_ID` lists each kernel's\n`runtime`" not in text
