"""docs/plugins/hooks.md documents every hookspec with its exact signature."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from drover.plugins import hookspecs

HOOKS_MD = Path(__file__).parent.parent / "docs" / "plugins" / "hooks.md"


def _hookspecs() -> dict[str, str]:
    found = {}
    for name, function in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("drover_"):
            params = ", ".join(inspect.signature(function).parameters)
            found[name] = f"{name}({params})"
    return found


def test_every_hookspec_is_documented_with_its_signature():
    """Each hookspec has a `## `name(args)`` heading in hooks.md, and nothing else does."""
    documented = set(re.findall(r"^## `(drover_\w+\([^)]*\))`", HOOKS_MD.read_text(), re.M))
    assert documented == set(_hookspecs().values())


def test_there_are_six_register_callback_hooks():
    """The four hooks of the plugin issue, the kinds issue's one and the dashboard's."""
    assert set(_hookspecs()) == {
        "drover_register_handlers",
        "drover_register_kinds",
        "drover_register_backends",
        "drover_register_commands",
        "drover_register_observers",
        "drover_register_web",
    }


HANDLERS_MD = HOOKS_MD.with_name("handlers.md")
TUTORIAL_MD = HOOKS_MD.with_name("tutorial.md")


def _runtime_keys_documented() -> dict[str, str]:
    """``key -> backends`` of the KernelInfo.runtime table in handlers.md."""
    section = HANDLERS_MD.read_text().split("## KernelInfo.runtime", 1)[1].split("\n## ", 1)[0]
    found = {}
    for cells in re.findall(r"^\| (`[^|]+`) \| ([a-z, ]+) \|", section, re.M):
        for key in re.findall(r"`(\w+)`", cells[0]):
            found[key] = cells[1]
    return found


def test_kernel_runtime_keys_are_documented(tmp_path):
    """Every key the local backend records in a kernel's runtime is in handlers.md's table."""
    from drover.backends.local._outcome import kernel_end
    from drover.backends.local._watch import PORT_FILE, runtime_of

    documented = _runtime_keys_documented()
    assert {"stdout", "stderr", "pid", "port", "workdir"} <= set(documented)
    (tmp_path / PORT_FILE).write_text("8123")
    state = {
        "pid": 42,
        "identity": "x",
        "supervisor_pid": 41,
        "supervisor_identity": "y",
        "token": "t",
    }
    runtime = runtime_of(tmp_path, state, "kernel")
    report = kernel_end("k1", {"signal": 9}, destroying=False, runtime=runtime)
    written = set(runtime) | set(report.runtime or {})
    assert written - set(documented) == set(), "runtime keys the docs do not list"
    assert all("local" in documented[key] for key in written)


def test_the_tutorial_shows_the_pyproject_the_scaffold_writes():
    """Step 1's pyproject.toml is the scaffold's, byte for byte (with drover-coordinator)."""
    from drover.cli.new_plugin import render_plugin

    blocks = re.findall(r"```toml\n(.*?)```", TUTORIAL_MD.read_text(), re.S)
    assert render_plugin("max-duration")["pyproject.toml"] in blocks


def test_the_tutorial_uses_public_names_and_python_m_pytest():
    """Code imports from ``drover`` (drover.Clock), and tests run with ``python -m pytest``."""
    text = TUTORIAL_MD.read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    assert "from drover import (" in code
    assert not re.search(r"^from drover\.\w", code, re.M), "a non-public import in the tutorial"
    commands = "\n".join(re.findall(r"```sh\n(.*?)```", text, re.S))
    assert "python -m pytest" in commands
    assert not re.search(r"^pytest\b", commands, re.M), "a bare pytest command"
    assert "pip install /path/to/drover" in commands  # how drover gets into the environment
    for needed in ("settings_for(", "status_info_meanings", "handler_settings", "#a-fake-service"):
        assert needed in text
