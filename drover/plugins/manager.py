"""The plugin manager: built-in plugins, entry-point plugins, and handler collection."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import pluggy

from drover.coordinator.interfaces import Handler
from drover.plugins import hookspecs
from drover.plugins.markers import PROJECT
from drover.plugins.registry import HandlerRegistry, RegisteredHandler, RuntimeContext
from drover.plugins.validation import validate_handlers

__all__ = ["ENTRY_POINT_GROUP", "collect_handlers", "make_plugin_manager"]

log = logging.getLogger("drover.plugins")

#: Entry-point group external plugins are loaded from.
ENTRY_POINT_GROUP = "drover"
#: Name prefix of the built-in plugins.
BUILTIN_PREFIX = "drover.handlers."


def make_plugin_manager(
    *,
    plugins: Sequence[object] = (),
    include_builtins: bool = True,
    load_entrypoints: bool = False,
    block: Iterable[str] = (),
) -> pluggy.PluginManager:
    """Build a plugin manager with drover's hookspecs and the requested plugins.

    ``block`` lists plugin names that must not load (built-in or external). A
    built-in may be named in full (``drover.handlers.prepare-sessions``) or by
    its handler name (``prepare-sessions``).
    """
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in block:
        pm.set_blocked(name)
        if not name.startswith(BUILTIN_PREFIX):
            pm.set_blocked(BUILTIN_PREFIX + name)
    if include_builtins:
        from drover.handlers import BUILTIN_PLUGINS

        for name, plugin in BUILTIN_PLUGINS:
            if not pm.is_blocked(name):
                pm.register(plugin, name=name)
    if load_entrypoints:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for plugin in plugins:
        pm.register(plugin)
    pm.check_pending()
    return pm


def collect_handlers(
    pm: pluggy.PluginManager, context: RuntimeContext
) -> tuple[dict[str, Handler], list[RegisteredHandler]]:
    """Call every plugin's ``drover_register_handlers`` and validate what they register."""
    registry = HandlerRegistry(context)
    for impl in pm.hook.drover_register_handlers.get_hookimpls():
        plugin_name = pm.get_name(impl.plugin) or repr(impl.plugin)
        impl.function(registry.for_plugin(plugin_name))
    validate_handlers(registry.registered)
    handlers = {type(e.handler).name(): e.handler for e in registry.registered}
    return handlers, registry.registered
