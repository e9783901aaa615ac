"""Plugins: hookspecs, the plugin manager, entry-point loading and validation."""

from drover.plugins.manager import ENTRY_POINT_GROUP, collect_handlers, make_plugin_manager
from drover.plugins.markers import hookimpl
from drover.plugins.registry import HandlerRegistry, RegisteredHandler, Registry, RuntimeContext

__all__ = [
    "ENTRY_POINT_GROUP",
    "HandlerRegistry",
    "RegisteredHandler",
    "Registry",
    "RuntimeContext",
    "collect_handlers",
    "hookimpl",
    "make_plugin_manager",
]
