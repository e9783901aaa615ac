"""drover's own lifecycles, each a package that registers itself as a plugin would.

* :mod:`drover.kinds.sessions`: the ``session`` kind and its child ``kernel``,
  and the session handlers (the Sokovan proposal's eight, plus
  ``detect-start-failure``);
* :mod:`drover.kinds.deployments`: the ``deployment`` kind and its child
  ``route`` (each route runs one session), their ten handlers, their JSON
  shapes, the ``drover deploy / deployments / scale / destroy / routes``
  commands and the dashboard's deployment pages.

Nothing below ``drover.model``, ``drover.coordinator`` or ``drover.storage``
knows these kinds: they arrive through the hooks (``drover_register_kinds``,
``drover_register_handlers``, ``drover_register_commands``,
``drover_register_web``), and
:class:`drover.app.App` collects them from a plugin manager that is handed
the plugins listed here (:func:`drover.make_plugin_manager`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drover._lazy import lazy_attributes
from drover.kinds.deployments import kinds as deployment_kinds
from drover.kinds.deployments.kinds import DEPLOYMENT, ROUTE
from drover.kinds.sessions import kinds as session_kinds
from drover.kinds.sessions.kinds import KERNEL, SESSION
from drover.model.kinds import EntityKind

if TYPE_CHECKING:
    from drover.kinds._plugins import BUILTIN_PLUGINS

__all__ = ["BUILTIN_KINDS", "BUILTIN_PLUGINS", "KIND_PLUGINS", "short_name"]

# BUILTIN_PLUGINS (every built-in handler plugin, in lifecycle order) imports
# every handler, and so SQLAlchemy: it is read on first use, which the command
# line's ``--help`` never makes.
__getattr__ = lazy_attributes(__name__, {"BUILTIN_PLUGINS": "drover.kinds._plugins"})

#: ``(plugin name, plugin)`` of the plugins every plugin manager loads, whatever
#: it is told (they cannot be blocked): each package's kinds
#: (``drover_register_kinds``), their commands (``drover_register_commands``)
#: and the deployments' dashboard pages (``drover_register_web``).
KIND_PLUGINS: list[tuple[str, object]] = [
    ("drover.kinds.sessions", session_kinds),
    ("drover.kinds.deployments", deployment_kinds),
]

#: drover's own kinds, in the order their plugins register them.
BUILTIN_KINDS: tuple[EntityKind, ...] = (SESSION, KERNEL, DEPLOYMENT, ROUTE)


def short_name(plugin_name: str) -> str:
    """A built-in plugin's name without its package: ``prepare-sessions``, ``routes``."""
    return plugin_name.rpartition(".")[2]
