"""Every built-in handler plugin (importing this module imports every handler)."""

from __future__ import annotations

from drover.kinds.deployments.plugins import HANDLER_PLUGINS as _DEPLOYMENT_PLUGINS
from drover.kinds.sessions.plugins import HANDLER_PLUGINS as _SESSION_PLUGINS

__all__ = ["BUILTIN_PLUGINS"]

#: ``(plugin name, plugin)`` of every built-in handler plugin, in lifecycle order.
#: A plugin manager loads them unless told not to (``include_builtins=False``),
#: and any one can be blocked by its full name or its :func:`drover.kinds.short_name`.
BUILTIN_PLUGINS: list[tuple[str, object]] = [*_SESSION_PLUGINS, *_DEPLOYMENT_PLUGINS]
