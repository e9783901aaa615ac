"""Which handlers are failing: shared by ``drover status``, ``/healthz`` and the dashboard."""

from __future__ import annotations

from drover.storage.queries import HandlerErrors, Queries

__all__ = ["ERROR_WINDOW", "recent_handler_errors"]

#: Seconds into the past a handler error makes a handler count as failing.
ERROR_WINDOW = 600.0


async def recent_handler_errors(repo: Queries, now: float) -> list[HandlerErrors]:
    """Handlers whose ``execute`` raised within :data:`ERROR_WINDOW`, most errors first."""
    return await repo.handler_errors(now - ERROR_WINDOW)
