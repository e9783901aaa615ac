"""The built-in handlers: nine plugins registered through ``drover_register_handlers``.

The eight of the Sokovan proposal, plus ``detect-start-failure`` so that a
session whose kernels end before it runs cannot wait forever.
"""

from __future__ import annotations

from drover.handlers import prepare, schedule, start, terminate
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
]
