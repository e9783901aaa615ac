"""The built-in entity kinds, ``session`` and ``kernel`` (its child), registered as a plugin.

They are registered through ``drover_register_kinds`` like a plugin's own
kinds; the plugin manager always loads this plugin.
"""

from __future__ import annotations

from drover.model.kinds import KERNEL, SESSION
from drover.plugins.markers import hookimpl
from drover.plugins.registry import KindRegistry

__all__ = ["drover_register_kinds"]


@hookimpl
def drover_register_kinds(register: KindRegistry) -> None:
    """Register ``session`` and ``kernel``."""
    register(SESSION, KERNEL)
