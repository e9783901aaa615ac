"""The built-in handlers, registered as plugins through ``drover_register_handlers``.

Sessions: the eight of the Sokovan proposal, plus ``detect-start-failure`` so
that a session whose kernels end before it runs cannot wait forever.
Deployments (five) and routes (five): the seed's other two lifecycles, two
plugins (``drover.handlers.deployments``, ``drover.handlers.routes``).
"""

from __future__ import annotations

from drover.handlers import deployments, prepare, routes, schedule, start, terminate
from drover.handlers.prepare import PrepareSessions
from drover.handlers.promotions import (
    PROMOTION_PLUGINS,
    DetectStartFailure,
    DetectTermination,
    PromoteToPrepared,
    PromoteToRunning,
    PromoteToTerminated,
)
from drover.handlers.schedule import ScheduleSessions
from drover.handlers.start import StartSessions
from drover.handlers.terminate import TerminateSessions

__all__ = [
    "BUILTIN_PLUGINS",
    "DetectStartFailure",
    "DetectTermination",
    "PrepareSessions",
    "PromoteToPrepared",
    "PromoteToRunning",
    "PromoteToTerminated",
    "ScheduleSessions",
    "StartSessions",
    "TerminateSessions",
]

#: ``(plugin name, plugin)`` of every built-in plugin, in lifecycle order.
BUILTIN_PLUGINS: list[tuple[str, object]] = [
    ("drover.handlers.schedule-sessions", schedule),
    ("drover.handlers.prepare-sessions", prepare),
    ("drover.handlers.start-sessions", start),
    ("drover.handlers.terminate-sessions", terminate),
    *PROMOTION_PLUGINS,
    ("drover.handlers.deployments", deployments),
    ("drover.handlers.routes", routes),
]
