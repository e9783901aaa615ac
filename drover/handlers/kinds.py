"""The built-in entity kinds, registered as a plugin.

``session`` with its child ``kernel``, and ``deployment`` with its child
``route`` (each route runs one session, its replica).

They are registered through ``drover_register_kinds`` like a plugin's own
kinds; the plugin manager always loads this plugin.
"""

from __future__ import annotations

from drover.model.kinds import DEPLOYMENT, KERNEL, ROUTE, SESSION
from drover.plugins.markers import hookimpl
from drover.plugins.registry import KindRegistry

__all__ = ["drover_register_kinds"]


@hookimpl
def drover_register_kinds(register: KindRegistry) -> None:
    """Register ``session``, ``kernel``, ``deployment`` and ``route``."""
    register(SESSION, KERNEL, DEPLOYMENT, ROUTE)
