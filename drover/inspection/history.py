"""History search and the per-session timeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drover.kinds.sessions.values import KERNEL_KIND
from drover.model.status import SchedulingResult
from drover.model.values import HistoryRecord
from drover.serialization import history_json, kernel_history_json
from drover.storage.queries import Queries

__all__ = ["search_history", "timeline"]


async def search_history(
    repo: Queries,
    *,
    session_id: str | None = None,
    kernel_id: str | None = None,
    handler: str | None = None,
    result: SchedulingResult | str | None = None,
    since: float | None = None,
    until: float | None = None,
    limit: int = 100,
    kind: str | None = None,
) -> list[HistoryRecord]:
    """Scheduling history rows matching the filters, newest first.

    ``kernel_id`` restricts to the history of that kernel's session.
    """
    if kernel_id is not None:
        kernel = await repo.read_one(KERNEL_KIND, kernel_id)
        session_id = kernel.session_id
    return await repo.search_history(
        kind=kind,
        session_id=session_id,
        handler=handler,
        result=result,
        since=since,
        until=until,
        limit=limit,
    )


async def timeline(
    repo: Queries, session_id: str, *, history: Sequence[HistoryRecord] | None = None
) -> list[dict[str, Any]]:
    """Session and kernel history interleaved, oldest first (``kind``: session|kernel).

    ``history``: the session's history rows, if the caller already read them.
    """
    items: list[tuple[float, int, dict[str, Any]]] = []
    if history is None:
        history = await repo.history(session_id)
    for row in history:
        items.append(
            (
                row.created_at.timestamp(),
                0,
                {"kind": "session", "at": history_json(row)["created_at"], **history_json(row)},
            )
        )
    for krow in await repo.changes(parent_id=session_id):
        data = kernel_history_json(krow)
        items.append(
            (krow.created_at.timestamp(), 1, {"kind": "kernel", "at": data["created_at"], **data})
        )
    items.sort(key=lambda item: (item[0], item[1], item[2]["id"]))
    return [item[2] for item in items]
