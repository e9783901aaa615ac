"""History: what handlers concluded (``scheduling_history``) and every other status change."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from drover.model.status import SchedulingResult
from drover.model.values import HistoryRecord, KernelHistoryRecord
from drover.storage._db import Database
from drover.storage.rows import history_from_row, kernel_history_from_row
from drover.storage.schema import entities, handler_ticks, scheduling_history, status_changes

__all__ = [
    "history",
    "kernel_history",
    "prune_history",
    "search_history",
    "search_kernel_history",
]

h = scheduling_history
c = status_changes


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
    """Scheduling history rows, oldest first (of one entity, or of all of ``kind``, or all)."""
    query = sa.select(h).order_by(h.c.id)
    if kind is not None:
        query = query.where(h.c.kind == kind)
    if session_id is not None:
        query = query.where(h.c.entity_id == session_id)
    if limit is not None:
        query = query.limit(limit)
    return await _history_rows(db, query)


async def kernel_history(
    db: Database, *, kernel_id: str | None = None, session_id: str | None = None
) -> list[KernelHistoryRecord]:
    """Status changes of a child or of an entity's children (a session's kernels), oldest first.

    With neither id given: every recorded change.
    """
    query = sa.select(c).order_by(c.c.id)
    if kernel_id is not None:
        query = query.where(c.c.entity_id == kernel_id)
    if session_id is not None:
        query = query.where(c.c.parent_id == session_id)
    return await _change_rows(db, query)


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
    query = sa.select(h)
    if kind is not None:
        query = query.where(h.c.kind == kind)
    if session_id is not None:
        query = query.where(h.c.entity_id == session_id)
    if handler is not None:
        query = query.where(h.c.handler == handler)
    if result is not None:
        query = query.where(h.c.result == str(result))
    if since is not None:
        query = query.where(h.c.updated_at >= since)
    if until is not None:
        query = query.where(h.c.created_at <= until)
    if after_id is not None:
        query = query.where(h.c.id > after_id)
    query = query.order_by(h.c.id.desc() if newest_first else h.c.id).limit(limit)
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
    query = sa.select(c).where(c.c.entity_id == kernel_id)
    if since is not None:
        query = query.where(c.c.created_at >= since)
    if until is not None:
        query = query.where(c.c.created_at <= until)
    query = query.order_by(c.c.id.desc()).limit(limit)
    return await _change_rows(db, query)


async def prune_history(
    db: Database, *, older_than: float, dry_run: bool = False, batch: int = 5000
) -> dict[str, int]:
    """Delete history older than ``older_than`` of entities whose top-level entity ended.

    Rows of live sessions are never touched (so their latest row survives),
    nor rows updated after the cutoff. Deletes in batches, each its own
    transaction; ``dry_run`` only counts. Old tick summaries go too.
    """
    e = entities
    ended = sa.select(e.c.id).where(
        sa.or_(
            *(
                sa.and_(e.c.kind == kind.name, e.c.status.in_(sorted(kind.terminal)))
                for kind in db.kinds.values()
                if kind.parent is None
            )
        )
    )
    targets = {
        "scheduling_history": (h, sa.and_(h.c.updated_at < older_than, h.c.entity_id.in_(ended))),
        "status_changes": (c, sa.and_(c.c.created_at < older_than, c.c.parent_id.in_(ended))),
        "handler_ticks": (handler_ticks, handler_ticks.c.started_at < older_than),
    }
    report: dict[str, int] = {}
    for name, (table, condition) in targets.items():
        if dry_run:

            def count(conn: sa.Connection, t: Any = table, w: Any = condition) -> int:
                query = sa.select(sa.func.count()).select_from(t).where(w)
                return int((conn.execute(query)).scalar() or 0)

            report[name] = await db.read(count)
            continue
        total = 0
        while True:

            def delete(conn: sa.Connection, t: Any = table, w: Any = condition) -> int:
                ids = [r[0] for r in conn.execute(sa.select(t.c.id).where(w).limit(batch))]
                if ids:
                    conn.execute(sa.delete(t).where(t.c.id.in_(ids)))
                return len(ids)

            deleted = await db.write(delete)
            total += deleted
            if deleted < batch:
                break
        report[name] = total
    return report
