"""The deployment and route handlers' plugins (imports the handlers: loaded with them)."""

from __future__ import annotations

from drover.kinds.deployments import deployments, routes

__all__ = ["HANDLER_PLUGINS"]

#: ``(plugin name, plugin)`` of the deployment handlers and of the route handlers.
HANDLER_PLUGINS: list[tuple[str, object]] = [
    ("drover.kinds.deployments.deployments", deployments),
    ("drover.kinds.deployments.routes", routes),
]
