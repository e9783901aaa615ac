"""The deployment and route handlers' plugins (imports the handlers: loaded with them)."""

from __future__ import annotations

# Each module by its full name: ``from drover.kinds.deployments import …`` would import the
# package, whose type-checking imports name this module (an import circle).
import drover.kinds.deployments.deployments as deployments
import drover.kinds.deployments.routes as routes

__all__ = ["HANDLER_PLUGINS"]

#: ``(plugin name, plugin)`` of the deployment handlers and of the route handlers.
HANDLER_PLUGINS: list[tuple[str, object]] = [
    ("drover.kinds.deployments.deployments", deployments),
    ("drover.kinds.deployments.routes", routes),
]
