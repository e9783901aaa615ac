"""The plugin manager: built-in plugins, entry-point plugins, and what their hooks register."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Sequence

import attrs
import pluggy

# By its full name: ``from drover.plugins import hookspecs`` would import the package,
# which imports this module (an import circle).
import drover.plugins.hookspecs as hookspecs
from drover._lazy import moved_attributes
from drover.coordinator.handlers import Handler, handler_name, with_kind
from drover.coordinator.observers import Observer
from drover.model.errors import DroverError, InvalidHandlerError
from drover.model.kinds import EntityKind, Kinds
from drover.plugins.markers import PROJECT
from drover.plugins.registry import (
    BackendFactory,
    RegisteredHandler,
    Registry,
    RuntimeContext,
    WebRegistry,
    accept_backend,
    accept_handlers,
    accept_kinds,
    accept_observers,
)
from drover.plugins.validation import validate_handlers

__all__ = [
    "BUILTIN_PREFIX",
    "ENTRY_POINT_GROUP",
    "TRACE_ENV",
    "Backends",
    "PluginLoadError",
    "build_plugin_manager",
    "collect_backends",
    "collect_handlers",
    "collect_kinds",
    "collect_observers",
    "collect_web",
    "load_entry_points",
]

log = logging.getLogger("drover.plugins")

#: Entry-point group external plugins are loaded from.
ENTRY_POINT_GROUP = "drover"
#: Name prefix of the built-in handler and kind plugins (those of :mod:`drover.kinds`).
BUILTIN_PREFIX = "drover.kinds."
#: Set to 1 to print every hook call pluggy makes (and what it returned) to stderr.
TRACE_ENV = "DROVER_TRACE_PLUGINS"


class PluginLoadError(DroverError):
    """An installed plugin could not be loaded; the message names it and the cause."""


def build_plugin_manager(
    builtins: Sequence[tuple[str, object]] = (),
    *,
    plugins: Sequence[object] = (),
    load_entrypoints: bool = False,
    block: Iterable[str] = (),
) -> pluggy.PluginManager:
    """A plugin manager with drover's hookspecs and the plugins it is handed.

    ``builtins`` are ``(name, plugin)`` pairs registered first, in order,
    whatever ``block`` says: the caller leaves out those it blocks (drover's
    own are chosen by :func:`drover.builtin_plugins.make_plugin_manager`;
    this module knows no lifecycle). Every other name in ``block`` is never
    registered (an entry point, say). Then the installed plugins
    (``load_entrypoints``) and ``plugins``. With ``DROVER_TRACE_PLUGINS=1``
    pluggy's hook-call tracing goes to stderr.
    """
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    if os.environ.get(TRACE_ENV) == "1":
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    for name, plugin in builtins:
        pm.register(plugin, name=name)
    for name in set(block) - {name for name, _plugin in builtins}:
        pm.set_blocked(name)
    if load_entrypoints:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for plugin in plugins:
        pm.register(plugin)
    pm.check_pending()
    return pm


def collect_kinds(pm: pluggy.PluginManager) -> Kinds:
    """Call ``drover_register_kinds``; a name registered by two plugins is an error naming both.

    drover's own kinds come the same way, from the plugins of :mod:`drover.kinds`.
    """
    owners: dict[str, str] = {}
    kinds: list[EntityKind] = []
    for entry in Registry(pm, "drover_register_kinds", accept_kinds).call_hook():
        kind = entry.item
        if kind.name in owners:
            raise InvalidHandlerError(
                f"duplicate kind name {kind.name!r}: registered by plugin {owners[kind.name]!r} "
                f"and by plugin {entry.plugin!r}"
            )
        owners[kind.name] = entry.plugin
        kinds.append(kind)
    return Kinds(kinds)


def collect_handlers(
    pm: pluggy.PluginManager, context: RuntimeContext, kinds: Kinds
) -> tuple[dict[str, Handler], list[RegisteredHandler]]:
    """Call ``drover_register_handlers`` and validate what the plugins registered.

    Promotions come back as :class:`~drover.model.promotion.PromotionRule`\\ s
    whichever way they were spelled. Each handler is checked against its kind.
    """
    registry = Registry(pm, "drover_register_handlers", accept_handlers, context).call_hook()
    # A handler that names no kind acts on the default one (drover's sessions).
    registered = [
        attrs.evolve(entry.item, handler=with_kind(entry.item.handler, kinds)) for entry in registry
    ]
    validate_handlers(registered, kinds)
    handlers = {handler_name(e.handler): e.handler for e in registered}
    return handlers, registered


@attrs.frozen
class Backends:
    """Registered backend factories by name, and the plugin that registered each."""

    factories: dict[str, BackendFactory]
    owners: dict[str, str]


def collect_backends(pm: pluggy.PluginManager) -> Backends:
    """Call ``drover_register_backends``; a name registered twice is an error naming both."""
    factories: dict[str, BackendFactory] = {}
    owners: dict[str, str] = {}
    for entry in Registry(pm, "drover_register_backends", accept_backend).call_hook():
        name, factory = entry.item
        if name in factories:
            raise ValueError(
                f"duplicate backend name {name!r}: registered by plugin {owners[name]!r} "
                f"and by plugin {entry.plugin!r}"
            )
        factories[name] = factory
        owners[name] = entry.plugin
    return Backends(factories, owners)


def collect_observers(pm: pluggy.PluginManager) -> list[tuple[str, Observer]]:
    """Call ``drover_register_observers``; return ``(plugin name, observer)`` pairs."""
    registry = Registry(pm, "drover_register_observers", accept_observers).call_hook()
    return [(entry.plugin, entry.item) for entry in registry]


def collect_web(pm: pluggy.PluginManager) -> WebRegistry:
    """Call ``drover_register_web``: the plugins' dashboard routes and template directories.

    A path registered by two plugins is an error naming both.
    """
    registry = WebRegistry(pm)
    registry.call_hook()
    owners: dict[str, str] = {}
    for entry in registry.routes:
        path = entry.item.path
        if path in owners:
            raise InvalidHandlerError(
                f"duplicate dashboard path {path!r}: registered by plugin {owners[path]!r} "
                f"and by plugin {entry.plugin!r}"
            )
        owners[path] = entry.plugin
    return registry


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
        try:
            plugin = ep.load()
        except Exception as error:  # whatever the plugin's import raises
            raise PluginLoadError(
                f"plugin {ep.name!r} ({ep.value}) failed to import: "
                f"{type(error).__name__}: {error}; fix or uninstall it, or leave it out with "
                f"plugins.block / DROVER_DISABLE_PLUGINS={ep.name}"
            ) from error
        try:
            pm.register(plugin, name=ep.name)
        except (ValueError, pluggy.PluginValidationError) as error:
            raise PluginLoadError(f"plugin {ep.name!r} ({ep.value}): {error}") from error
        loaded.append(ep.name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as error:
        raise PluginLoadError(f"plugin {error.plugin!r}: {error}") from error
    return loaded


# Deprecated: the plugin manager with drover's own plugins is drover.builtin_plugins' (this
# package knows no lifecycle); imported on use only, so nothing here imports one.
__getattr__ = moved_attributes(__name__, {"make_plugin_manager": "drover.make_plugin_manager"})
