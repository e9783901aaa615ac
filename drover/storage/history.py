"""History: what handlers concluded (``scheduling_history``) and every other status change."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from drover.model.status import SchedulingResult
from drover.model.values import HistoryRecord, KernelHistoryRecord
from drover.storage._db import Database
from drover.storage.rows import history_from_row, kernel_history_from_row, moved_from_change
from drover.storage.statements.history import (
    change_rows,
    change_search,
    count_rows,
    delete_rows,
    history_rows,
    history_search,
    own_changes,
    prune_targets,
    row_ids,
)

__all__ = [
    "history",
    "kernel_history",
    "prune_history",
    "search_history",
    "search_kernel_history",
]


async def _history_rows(db: Database, query: sa.Select[Any]) -> list[HistoryRecord]:
    def work(conn: sa.Connection) -> list[HistoryRecord]:
        return [history_from_row(r, db.kinds) for r in conn.execute(query)]

    return await db.read(work)


async def _change_rows(db: Database, query: sa.Select[Any]) -> list[KernelHistoryRecord]:
    def work(conn: sa.Connection) -> list[KernelHistoryRecord]:
        return [kernel_history_from_row(r, db.kinds) for r in conn.execute(query)]

    return await db.read(work)


async def history(
    db: Database,
    session_id: str | None = None,
    *,
    limit: int | None = None,
    kind: str | None = None,
) -> list[HistoryRecord]:
    """Scheduling history rows, oldest first (of one entity, or of all of ``kind``, or all).

    One entity's history also has a row (result ``MOVED``, the mover as handler)
    for each status change recorded only in ``status_changes``: a child moved
    by its parent's transition (the parent's handler), ended with its parent
    (down the tree), or moved by a report. The apply writes such a move once,
    so moving a session's kernels costs no extra row.
    """
    if session_id is None:
        return await _history_rows(db, history_rows(kind, session_id, limit))
    own_query, moves_query = history_rows(kind, session_id, None), own_changes(session_id)

    def work(conn: sa.Connection) -> list[HistoryRecord]:
        own = [history_from_row(r, db.kinds) for r in conn.execute(own_query)]
        moves = [moved_from_change(r, db.kinds) for r in conn.execute(moves_query)]
        if kind is not None:
            moves = [m for m in moves if m.kind == kind]
        # Each list keeps the order it was written in (rows of several writers
        # can carry clocks that disagree); the merge interleaves them by time,
        # the entity's own row first at one instant.
        merged = list(heapq.merge(own, moves, key=lambda r: r.created_at))
        return merged if limit is None else merged[:limit]

    return await db.read(work)


async def kernel_history(
    db: Database, *, kernel_id: str | None = None, session_id: str | None = None
) -> list[KernelHistoryRecord]:
    """Status changes of a child or of an entity's children (a session's kernels), oldest first.

    With neither id given: every recorded change.
    """
    return await _change_rows(db, change_rows(kernel_id, session_id))


async def search_history(
    db: Database,
    *,
    session_id: str | None = None,
    handler: str | None = None,
    result: SchedulingResult | str | None = None,
    since: float | None = None,
    until: float | None = None,
    after_id: int | None = None,
    limit: int = 100,
    newest_first: bool = True,
    kind: str | None = None,
) -> list[HistoryRecord]:
    """History rows matching every filter given; times compare with ``updated_at``."""
    query = history_search(
        kind=kind,
        entity_id=session_id,
        handler=handler,
        result=None if result is None else str(result),
        since=since,
        until=until,
        after_id=after_id,
        limit=limit,
        newest_first=newest_first,
    )
    return await _history_rows(db, query)


async def search_kernel_history(
    db: Database,
    *,
    kernel_id: str,
    since: float | None = None,
    until: float | None = None,
    limit: int = 100,
) -> list[KernelHistoryRecord]:
    """One kernel's status changes, newest first."""
    return await _change_rows(db, change_search(kernel_id, since, until, limit))


async def prune_history(
    db: Database,
    *,
    older_than: float | None,
    ticks_older_than: float | None = None,
    dry_run: bool = False,
    batch: int = 5000,
    on_batch: Callable[[str, int], None] | None = None,
) -> dict[str, int]:
    """Delete history older than ``older_than`` of entities whose top-level entity ended.

    Rows of live sessions are never touched (so their latest row survives),
    nor rows updated after the cutoff. Tick summaries go when they started
    before ``ticks_older_than``. A cutoff of ``None`` leaves its tables alone.
    Deletes in batches, each its own transaction, calling ``on_batch(table,
    deleted so far)`` after each; ``dry_run`` only counts.
    """
    targets = prune_targets(db.kinds.values(), older_than, ticks_older_than)
    report: dict[str, int] = {}
    for name, (table, condition) in targets.items():
        if dry_run:

            def count(conn: sa.Connection, t: Any = table, w: Any = condition) -> int:
                return int((conn.execute(count_rows(t, w))).scalar() or 0)

            report[name] = await db.read(count)
            continue
        total = 0
        while True:

            def delete(conn: sa.Connection, t: Any = table, w: Any = condition) -> int:
                ids = [r[0] for r in conn.execute(row_ids(t, w, batch))]
                if ids:
                    conn.execute(delete_rows(t), {"ids": ids})
                return len(ids)

            deleted = await db.write(delete)
            total += deleted
            if on_batch is not None and deleted:
                on_batch(name, total)
            if deleted < batch:
                break
        report[name] = total
    return report
