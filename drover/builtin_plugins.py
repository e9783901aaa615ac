"""drover's own plugins, and the plugin manager that is handed them.

:mod:`drover.plugins` knows no lifecycle: its plugin manager is given the
plugins to load. drover's own are the built-in backends (``drover.backends``),
each kind package's plugin (:data:`drover.kinds.KIND_PLUGINS`: kinds,
commands, dashboard pages) and the built-in handlers' plugins
(:data:`drover.kinds.BUILTIN_PLUGINS`). :class:`~drover.app.App`, the command
line and the test harness build their plugin manager here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pluggy

import drover.kinds as kinds
from drover.backends import plugin as backends_plugin
from drover.plugins.manager import build_plugin_manager

__all__ = ["make_plugin_manager"]


def make_plugin_manager(
    *,
    plugins: Sequence[object] = (),
    include_builtins: bool = True,
    load_entrypoints: bool = False,
    block: Iterable[str] = (),
) -> pluggy.PluginManager:
    """A plugin manager with drover's hookspecs, drover's own plugins and the requested ones.

    The built-in backends and the built-in kinds' plugins are always loaded;
    the built-in handlers' plugins with ``include_builtins``. ``block`` lists
    plugin names that must not load (built-in handlers or external). A
    built-in handler's plugin may be named in full
    (``drover.kinds.sessions.prepare-sessions``) or by its handler name
    (``prepare-sessions``). ``load_entrypoints`` also loads the installed
    plugins (entry-point group ``drover``), ``plugins`` are registered last.
    With ``DROVER_TRACE_PLUGINS=1`` pluggy's hook-call tracing goes to stderr.
    """
    blocked = set(block)
    builtins: list[tuple[str, object]] = [("drover.backends", backends_plugin), *kinds.KIND_PLUGINS]
    if include_builtins:
        # Read only here: the handlers import SQLAlchemy, which ``drover --help`` never needs.
        builtins += [
            (name, plugin)
            for name, plugin in kinds.BUILTIN_PLUGINS
            if name not in blocked and kinds.short_name(name) not in blocked
        ]
    return build_plugin_manager(
        builtins, plugins=plugins, load_entrypoints=load_entrypoints, block=blocked
    )
