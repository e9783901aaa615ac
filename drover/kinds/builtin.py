"""drover's own kinds and the plugins that register them (imported on first use by
:mod:`drover.kinds`, so that importing one kind's vocabulary loads nothing else)."""

from __future__ import annotations

from drover.kinds.deployments import kinds as deployment_kinds
from drover.kinds.deployments.kinds import DEPLOYMENT, ROUTE
from drover.kinds.sessions import kinds as session_kinds
from drover.kinds.sessions.kinds import KERNEL, SESSION
from drover.model.kinds import EntityKind

__all__ = ["BUILTIN_KINDS", "KIND_PLUGINS"]

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
