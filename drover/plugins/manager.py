"""The plugin manager: built-in plugins, entry-point plugins, and what their hooks register."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Sequence

import attrs
import pluggy

from drover.coordinator.handlers import Handler, handler_name, with_kind
from drover.coordinator.observers import Observer
from drover.model.errors import DroverError, InvalidHandlerError
from drover.model.kinds import EntityKind, Kinds
from drover.plugins import hookspecs
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
    "collect_backends",
    "collect_handlers",
    "collect_kinds",
    "collect_observers",
    "collect_web",
    "load_entry_points",
    "make_plugin_manager",
]

log = logging.getLogger("drover.plugins")

#: Entry-point group external plugins are loaded from.
ENTRY_POINT_GROUP = "drover"
#: Name prefix of the built-in plugins (those of :mod:`drover.kinds`).
BUILTIN_PREFIX = "drover.kinds."
#: Set to 1 to print every hook call pluggy makes (and what it returned) to stderr.
TRACE_ENV = "DROVER_TRACE_PLUGINS"


class PluginLoadError(DroverError):
    """An installed plugin could not be loaded; the message names it and the cause."""


def make_plugin_manager(
    *,
    plugins: Sequence[object] = (),
    include_builtins: bool = True,
    load_entrypoints: bool = False,
    block: Iterable[str] = (),
) -> pluggy.PluginManager:
    """Build a plugin manager with drover's hookspecs and the requested plugins.

    The built-in backends (``drover.backends``) and the built-in kinds'
    plugins (:data:`drover.kinds.KIND_PLUGINS`) are always loaded; the
    built-in handlers' plugins (:data:`drover.kinds.BUILTIN_PLUGINS`) with
    ``include_builtins``. ``block`` lists plugin names that must not load
    (built-in handlers or external). A built-in may be named in full
    (``drover.kinds.sessions.prepare-sessions``) or by its handler name
    (``prepare-sessions``). With ``DROVER_TRACE_PLUGINS=1`` pluggy's
    hook-call tracing goes to stderr.
    """
    # Imported here: drover.kinds imports drover.plugins (hookimpl, the registries).
    from drover.backends import plugin as backends_plugin
    from drover.kinds import KIND_PLUGINS, short_name

    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    if os.environ.get(TRACE_ENV) == "1":
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    # The built-in backends and kinds are always available; blocking them is not supported.
    always = [("drover.backends", backends_plugin), *KIND_PLUGINS]
    for name, plugin in always:
        pm.register(plugin, name=name)
    blocked = set(block)
    for name in blocked - {name for name, _plugin in always}:
        pm.set_blocked(name)
    if include_builtins:
        # Imported only here: the handlers import SQLAlchemy, which ``drover --help`` never needs.
        from drover.kinds import BUILTIN_PLUGINS

        for name, plugin in BUILTIN_PLUGINS:
            if name not in blocked and short_name(name) not in blocked:
                pm.register(plugin, name=name)
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
