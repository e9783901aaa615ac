"""Plugins: hookspecs, the plugin manager, entry-point loading and validation.

This package knows no lifecycle: the plugin manager is handed drover's own
plugins (:func:`drover.make_plugin_manager`, :mod:`drover.builtin_plugins`).
"""

from drover._lazy import moved_attributes
from drover.plugins.manager import ENTRY_POINT_GROUP, build_plugin_manager, collect_handlers
from drover.plugins.markers import hookimpl
from drover.plugins.registry import HandlerRegistry, RegisteredHandler, Registry, RuntimeContext

__all__ = [
    "ENTRY_POINT_GROUP",
    "HandlerRegistry",
    "RegisteredHandler",
    "Registry",
    "RuntimeContext",
    "build_plugin_manager",
    "collect_handlers",
    "hookimpl",
]

# Deprecated: it moved to drover.builtin_plugins (drover.make_plugin_manager).
__getattr__ = moved_attributes(__name__, {"make_plugin_manager": "drover.make_plugin_manager"})
