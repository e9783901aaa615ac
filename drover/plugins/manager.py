"""The plugin manager: built-in plugins, entry-point plugins, and handler collection."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import pluggy

from drover.coordinator.handlers import Handler
from drover.plugins import hookspecs
from drover.plugins.markers import PROJECT
from drover.plugins.registry import (
    BackendRegistry,
    HandlerRegistry,
    Observer,
    ObserverRegistry,
    RegisteredHandler,
    RuntimeContext,
)
from drover.plugins.validation import validate_handlers

__all__ = [
    "BUILTIN_PREFIX",
    "ENTRY_POINT_GROUP",
    "collect_backends",
    "collect_handlers",
    "collect_observers",
    "load_entry_points",
    "make_plugin_manager",
]

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
    from drover.backends import plugin as backends_plugin

    # The built-in backends are always available; blocking them is not supported.
    pm.register(backends_plugin, name="drover.backends")
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
    _call_register_hook(pm, "drover_register_handlers", registry)
    validate_handlers(registry.registered)
    handlers = {type(e.handler).name(): e.handler for e in registry.registered}
    return handlers, registry.registered


def _plugin_name(pm: pluggy.PluginManager, plugin: object) -> str:
    return pm.get_name(plugin) or repr(plugin)


def _call_register_hook(
    pm: pluggy.PluginManager,
    hook: str,
    registry: HandlerRegistry | BackendRegistry | ObserverRegistry,
) -> None:
    """Call each plugin's implementation of a register hook, one plugin at a time.

    Calling the implementations ourselves (not ``pm.hook.<name>(...)``) lets the
    registry attribute every registration to the plugin that made it, so load
    errors can name the plugin.
    """
    for impl in getattr(pm.hook, hook).get_hookimpls():
        impl.function(registry.for_plugin(_plugin_name(pm, impl.plugin)))


def collect_backends(pm: pluggy.PluginManager) -> BackendRegistry:
    """Call every ``drover_register_backends``; return the registry of backend factories."""
    registry = BackendRegistry()
    _call_register_hook(pm, "drover_register_backends", registry)
    return registry


def collect_observers(pm: pluggy.PluginManager) -> list[tuple[str, Observer]]:
    """Call every ``drover_register_observers``; return ``(plugin name, observer)`` pairs."""
    registry = ObserverRegistry()
    _call_register_hook(pm, "drover_register_observers", registry)
    return registry.observers


def load_entry_points(
    pm: pluggy.PluginManager, allow: Iterable[str] | None, block: Iterable[str]
) -> list[str]:
    """Register installed plugins (group ``drover``), honouring an allowlist and a blocklist.

    ``allow=None`` loads every installed plugin; an empty allowlist loads none.
    Returns the names loaded. Ends with ``pm.check_pending()``, so a misspelled
    hook name is an error.
    """
    from importlib import metadata

    allowed = None if allow is None else set(allow)
    blocked = set(block)
    loaded: list[str] = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if allowed is not None and ep.name not in allowed:
            continue
        if ep.name in blocked or pm.is_blocked(ep.name) or pm.has_plugin(ep.name):
            continue
        pm.register(ep.load(), name=ep.name)
        loaded.append(ep.name)
    pm.check_pending()
    return loaded
