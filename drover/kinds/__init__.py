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

if TYPE_CHECKING:
    from drover.kinds._plugins import BUILTIN_PLUGINS
    from drover.kinds.builtin import BUILTIN_KINDS, KIND_PLUGINS

__all__ = ["BUILTIN_KINDS", "BUILTIN_PLUGINS", "KIND_PLUGINS", "short_name"]

# Read on first use: importing one kind's vocabulary (a backend importing
# drover.kinds.sessions.values) loads no other kind, and BUILTIN_PLUGINS imports
# every handler, and so SQLAlchemy, which the command line's ``--help`` never needs.
__getattr__ = lazy_attributes(
    __name__,
    {
        "BUILTIN_PLUGINS": "drover.kinds._plugins",
        "BUILTIN_KINDS": "drover.kinds.builtin",
        "KIND_PLUGINS": "drover.kinds.builtin",
    },
)


def short_name(plugin_name: str) -> str:
    """A built-in plugin's name without its package: ``prepare-sessions``, ``routes``."""
    return plugin_name.rpartition(".")[2]
