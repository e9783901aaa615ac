"""The session handlers' plugins (imports every handler: loaded when a manager loads them)."""

from __future__ import annotations

from drover.kinds.sessions import prepare, schedule, start, terminate
from drover.kinds.sessions.promotions import PROMOTION_PLUGINS

__all__ = ["HANDLER_PLUGINS"]

#: ``(plugin name, plugin)`` of each session handler, in lifecycle order.
HANDLER_PLUGINS: list[tuple[str, object]] = [
    ("drover.kinds.sessions.schedule-sessions", schedule),
    ("drover.kinds.sessions.prepare-sessions", prepare),
    ("drover.kinds.sessions.start-sessions", start),
    ("drover.kinds.sessions.terminate-sessions", terminate),
    *PROMOTION_PLUGINS,
]
