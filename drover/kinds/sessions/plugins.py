"""The session handlers' plugins (imports every handler: loaded when a manager loads them)."""

from __future__ import annotations

# Each module by its full name: ``from drover.kinds.sessions import …`` would import the
# package, whose type-checking imports name this module (an import circle).
import drover.kinds.sessions.prepare as prepare
import drover.kinds.sessions.schedule as schedule
import drover.kinds.sessions.start as start
import drover.kinds.sessions.terminate as terminate
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
