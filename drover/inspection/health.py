"""Which handlers are failing: shared by ``drover status``, ``/healthz`` and the dashboard."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from drover.storage.repository import Repository
from drover.storage.ticks import HandlerErrors

__all__ = ["ERROR_WINDOW", "handler_errors_json", "recent_handler_errors"]

#: Seconds into the past a handler error makes a handler count as failing.
ERROR_WINDOW = 600.0


async def recent_handler_errors(repo: Repository, now: float) -> list[HandlerErrors]:
    """Handlers whose ``execute`` raised within :data:`ERROR_WINDOW`, most errors first."""
    return await repo.handler_errors(now - ERROR_WINDOW)


def handler_errors_json(errors: list[HandlerErrors]) -> list[dict[str, Any]]:
    """Stable JSON for failing handlers."""
    return [
        {
            "handler": e.handler,
            "errors": e.count,
            "last_at": datetime.fromtimestamp(e.last_at, UTC).isoformat(timespec="milliseconds"),
            "last_error": e.last_error,
        }
        for e in errors
    ]
