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
